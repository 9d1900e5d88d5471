"""Talking to a running show: `troupe publish` checks the run, sends, and prints what became of each danmaku."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from nats.js import JetStreamContext

from app.cli import main
from app.shows import load_show
from app.supervisor import Stage
from events.base import derive_id
from events.run import RunEnded, RunStarted
from infra.natsserver import EmbeddedNats, announcement_path, running_server
from infra.settings import Settings, load_settings, run_config

pytestmark = pytest.mark.timeout(60)


@dataclass
class LiveRun:
    stage: Stage
    run: str
    url: str


def started(run: str, settings: Settings) -> RunStarted:
    return RunStarted(id=f"{run}-start", run=run, show=load_show().to_dict(), seed=7,
                      started_at_ms=int(time.time() * 1000), config=run_config(settings))


@pytest.fixture
async def live(settings: Settings) -> AsyncIterator[LiveRun]:
    """A run that has started, with a director answering its danmaku."""
    run = f"pub{uuid.uuid4().hex[:8]}"
    async with Stage(settings) as stage:
        await stage.start_actors(["director"])
        await stage.publish([started(run, settings)])
        assert settings.nats_url is not None
        yield LiveRun(stage, run, settings.nats_url)


async def troupe(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in a thread (it has its own event loop); returns (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def count(js: JetStreamContext, family: str, run: str, subjects: str = ">") -> int:
    info = await js.stream_info(f"TROUPE_{family.upper()}", subjects_filter=f"troupe.{run}.{subjects}")
    return sum((info.state.subjects or {}).values()) if info.state.subjects else 0


async def test_a_danmaku_prints_its_id_and_the_cue_it_became(live: LiveRun, capsys) -> None:  # type: ignore[no-untyped-def]
    ident = f"{live.run}-alice-1"
    code, out, err = await troupe(capsys, "--nats", live.url, "publish", "--run", live.run, "hello @rex",
                                  "--user", "alice", "--id", ident, "--wait", "15")
    assert code == 0, err
    assert out.splitlines() == [f"sent {ident}", f"{ident}: cue {derive_id(ident, 'cue')} -> rex (mention)"]
    code, out, err = await troupe(capsys, "publish", "--run", live.run, "   ", "--id", f"{live.run}-blank",
                                  "--nats", live.url, "--wait", "15")
    assert code == 0, err
    assert out.splitlines()[-1] == f"{live.run}-blank: rejected (empty): the comment is empty"


async def test_a_file_sent_twice_keeps_its_ids_and_is_answered_once(live: LiveRun, capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lines = tmp_path / "chat.jsonl"
    lines.write_text('{"user": "ann", "text": "hello @rex"}\n\n'
                     '{"user": "bo", "text": "@xiaolu 晚上好", "kind": "gift"}\n')
    argv = ("--nats", live.url, "publish", "--run", live.run, "--file", str(lines), "--json", "--wait", "15")
    code, out, err = await troupe(capsys, *argv)
    assert code == 0, err
    first = [orjson.loads(line) for line in out.splitlines()]
    ids = [d["id"] for d in first]
    assert len(ids) == 2 and ids[0].endswith("-1") and ids[1].endswith("-3") and ids[0].startswith("f")
    assert first[0]["outcome"] == "cue" and first[0]["role"] == "rex"
    assert first[1]["outcome"] is not None, first  # every danmaku gets an answer or a reason
    assert await live.stage.drain(["director"], timeout_s=15)
    cues = await count(live.stage.js, "cue", live.run)

    code, out, err = await troupe(capsys, *argv)
    assert code == 0, err
    second = [orjson.loads(line) for line in out.splitlines()]
    assert [d["id"] for d in second] == ids
    assert all(d["outcome"] == "duplicate" for d in second), second
    assert await live.stage.drain(["director"], timeout_s=15)
    assert await count(live.stage.js, "danmaku", live.run, "danmaku.received") == 2
    assert await count(live.stage.js, "cue", live.run) == cues


async def test_an_unknown_run_is_one_line_and_nothing_is_sent(live: LiveRun, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, err = await troupe(capsys, "--nats", live.url, "publish", "--run", "nosuchrun", "hello")
    assert code == 1 and out == ""
    assert err.strip() == "troupe: error: no run nosuchrun on this NATS server"
    assert await count(live.stage.js, "danmaku", "nosuchrun") == 0


async def test_an_ended_run_is_one_line_and_nothing_is_sent(live: LiveRun, capsys) -> None:  # type: ignore[no-untyped-def]
    await live.stage.publish([RunEnded(id=f"{live.run}-end", run=live.run, t_ms=1000, reason="test", duration_ms=1000)])
    code, out, err = await troupe(capsys, "--nats", live.url, "publish", "--run", live.run, "hello")
    assert code == 1 and out == ""
    assert err.strip() == f"troupe: error: run {live.run} has ended"
    assert await count(live.stage.js, "danmaku", live.run) == 0


async def test_publish_finds_the_embedded_server_of_a_running_show(capsys, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("TROUPE_NATS_URL", raising=False)
    state = tmp_path / "state"
    settings = load_settings(environ={}, state_dir=state, out_dir=tmp_path / "out", metrics_port=-1)
    run = f"pub{uuid.uuid4().hex[:8]}"
    async with Stage(settings) as stage:
        assert stage.embedded is not None
        assert running_server(announcement_path(state)) == stage.embedded.url
        await stage.publish([started(run, settings)])
        code, out, err = await troupe(capsys, "publish", "--run", run, "hi", "--id", "hi-1", "--wait", "0",
                                      "--state-dir", str(state))
        assert code == 0, err
        assert out.splitlines() == ["sent hi-1"]
    assert not announcement_path(state).exists()
    code, out, err = await troupe(capsys, "--state-dir", str(state), "publish", "--run", run, "hi")
    assert code == 1
    assert err.strip() == (f"troupe: error: no running show found in {state} "
                           "(start one with troupe up, or give --nats URL)")


async def test_a_stale_announcement_is_ignored(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec("true")
    await process.wait()  # its pid belonged to a process that has ended
    path = announcement_path(tmp_path)
    path.write_text(orjson.dumps({"url": "nats://127.0.0.1:4222", "pid": process.pid}).decode())
    assert running_server(path) is None
    server = EmbeddedNats(tmp_path / "nats", announce=path)
    async with server:
        assert running_server(path) == server.url
    assert not path.exists()


async def test_the_operator_s_commands_steer_a_running_show(live: LiveRun, capsys: pytest.CaptureFixture[str]) -> None:
    """troupe say / segment / hold / resume, and a control as any NATS client sends it (bare JSON)."""
    base = ("--nats", live.url)
    code, out, _ = await troupe(capsys, *base, "say", "--run", live.run, "--role", "rex", "Back in a minute!", "--json")
    doc = orjson.loads(out)
    assert code == 0 and doc["outcome"] == "applied" and "rex says it next" in doc["detail"], out
    code, out, _ = await troupe(capsys, *base, "hold", "--run", live.run)
    assert code == 0 and "the show's own speech is held" in out, out
    code, out, _ = await troupe(capsys, *base, "segment", "--run", live.run, "Nope")
    assert code == 1 and "rejected (bad_control): segment: no segment 'Nope'" in out, out
    code, out, _ = await troupe(capsys, *base, "segment", "--run", live.run, "next")
    assert code == 0 and "segment 'Game night picks' starts now" in out, out
    # Another client, another language's: only the type and the action, the id from Nats-Msg-Id.
    ack = await live.stage.js.publish(f"troupe.{live.run}.danmaku.control", b'{"type": "danmaku.control", '
                                      b'"payload": {"action": "resume"}}', headers={"Nats-Msg-Id": "raw-resume-1"})
    assert ack.stream == "TROUPE_DANMAKU"
    code, out, _ = await troupe(capsys, *base, "resume", "--run", live.run, "--user", "ops")
    assert code == 0 and "the show speaks by itself again" in out, out
    assert await count(live.stage.js, "cue", live.run, "cue.control.>") + await count(
        live.stage.js, "cue", live.run, "cue.control") == 5
    code, _, err = await troupe(capsys, *base, "hold", "--run", "nosuchrun")
    assert code == 1 and "no run nosuchrun" in err
