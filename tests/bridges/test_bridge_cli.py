"""``troupe bridge`` as a user runs it: a dry run against the loopback Bilibili server prints
what the room sends, a bridge into a run publishes a Twitch channel's chat and ends with its
summary on a signal, and what cannot work is one line and exit 2."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.js import JetStreamContext

from bench.peers.bilibili import BilibiliPeer
from bench.peers.twitch import TwitchPeer
from events import codec
from events.danmaku import DanmakuReceived
from events.subjects import stream_name
from infra.bus import publish_events, read_stream
from infra.natsserver import EmbeddedNats
from tests.conftest import end_run, wait_for
from tests.showkit import demo_run

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"


class Troupe:
    """``python -m app.cli ...`` as a process: its lines read as they come."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc, self.out, self.err = proc, [], []  # type: ignore[var-annotated]
        self._readers = [asyncio.create_task(self._read(proc.stdout, self.out)),  # type: ignore[arg-type]
                         asyncio.create_task(self._read(proc.stderr, self.err))]  # type: ignore[arg-type]

    @staticmethod
    async def _read(stream: asyncio.StreamReader, into: list[str]) -> None:
        async for line in stream:
            into.append(line.decode().rstrip("\n"))

    async def wait(self, timeout_s: float = 60) -> int:
        code = await asyncio.wait_for(self.proc.wait(), timeout_s)
        await asyncio.gather(*self._readers)
        return code


async def troupe(*args: str, env: dict[str, str] | None = None) -> Troupe:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TROUPE_")}
    environ.update({"PYTHONPATH": str(ROOT), "TROUPE_METRICS_PORT": "-1", **(env or {})})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", *args, env=environ,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    return Troupe(proc)


@pytest.fixture
async def bilibili() -> AsyncIterator[BilibiliPeer]:
    async with BilibiliPeer() as peer:
        yield peer


async def test_a_dry_run_prints_what_the_room_sends(bilibili: BilibiliPeer) -> None:
    run = await troupe("bridge", "bilibili", "--room", "1", "--server", bilibili.api_base, "--dry-run", "--count", "2")
    await wait_for(lambda: any("connected" in line for line in run.err), timeout_s=60, what="the bridge connected")
    danmu = json.loads((DATA / "bilibili" / "danmu_msg.json").read_text())
    gift = json.loads((DATA / "bilibili" / "send_gift.json").read_text())
    await bilibili.send([danmu, gift])
    assert await run.wait() == 0, run.err
    printed = [json.loads(line) for line in run.out]
    first, second = (p for p in printed if "notice" not in p)  # and the room's heartbeat replies, counted
    assert all(set(p) <= {"notice", "detail"} for p in printed if "notice" in p)
    assert first["platform"] == "bilibili" and first["kind"] == "comment" and first["viewer"].startswith("bili:")
    assert second["kind"] == "gift" and second["currency"] in ("CNY", "silver")


async def test_a_bridge_publishes_a_channels_chat_into_the_run_and_sums_up_on_a_signal(
        js: JetStreamContext, nats_server: EmbeddedNats) -> None:
    run_id = "bridge-cli"
    await publish_events(js, [dataclasses.replace(demo_run(run_id), started_at_ms=int(time.time() * 1000))])
    lines = [line for line in (DATA / "twitch.irc").read_text().splitlines() if " PRIVMSG #" in line][:3]
    async with TwitchPeer() as peer:
        run = await troupe("bridge", "twitch", "--channel", "ronni", "--server", f"irc://127.0.0.1:{peer.port}",
                           "--run", run_id, "--nats", nats_server.url)
        try:
            await wait_for(lambda: peer.joined == 1, timeout_s=60, what="the bridge joined the channel")
            await peer.send(*lines)
            await wait_for(lambda: _received(js, run_id, 3), timeout_s=30, what="three danmaku in the run")
        finally:
            run.proc.send_signal(signal.SIGINT)
            code = await run.wait()
            await end_run(js, run_id)
    assert code == 0, run.err
    assert any("3 published" in line for line in run.err), run.err
    events = [codec.decode(m.data) for m in await read_stream(js, stream_name("danmaku"), [f"troupe.{run_id}.>"])]
    received = [e for e in events if isinstance(e, DanmakuReceived)]
    assert [(e.platform, e.viewer[:7]) for e in received] == [("twitch", "twitch:")] * 3
    assert received[1].kind == "gift" and received[1].currency == "bits" and received[1].value == 100


@pytest.mark.parametrize(("args", "env", "words"), [
    (["youtube", "--video", "abc"], {}, "needs TROUPE_YOUTUBE_API_KEY"),
    (["bilibili", "--channel", "x"], {}, "--channel is not for bilibili"),
    (["bilibili", "--room", "not-a-number"], {}, "is not a room number"),
    (["twitch", "--channel", "ronni", "--server", "http://x"], {}, "is not irc://host:port"),
    (["twitch", "--channel", "ronni", "--run", "a run"], {}, "--run must be"),
])
async def test_what_cannot_work_is_one_line_and_exit_2(args: list[str], env: dict[str, str], words: str) -> None:
    run = await troupe("bridge", *args, "--dry-run", env=env)
    assert await run.wait() == 2
    assert len(run.err) == 1 and run.err[0].startswith("troupe: error: ") and words in run.err[0], run.err


async def test_an_unknown_room_is_one_line_and_exit_2(bilibili: BilibiliPeer) -> None:
    run = await troupe("bridge", "bilibili", "--room", "999", "--server", bilibili.api_base, "--dry-run")
    assert await run.wait() == 2
    assert len(run.err) == 1 and "999" in run.err[0], run.err


async def _received(js: JetStreamContext, run: str, n: int) -> bool:
    msgs = await read_stream(js, stream_name("danmaku"), [f"troupe.{run}.danmaku.received"])
    return len(msgs) >= n
