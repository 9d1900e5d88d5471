"""A long-lived worker process: it releases each run's state, and it exits when a loop dies."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.js import JetStreamContext
from prometheus_client.parser import text_string_to_metric_families

from app.shows import load_show
from events.cue import CueIssued
from events.danmaku import DanmakuReceived
from events.role import RoleDeclared
from events.run import RunEnded, RunStarted
from events.subjects import stream_name
from infra.bus import connect, provision_streams, publish_events
from infra.natsserver import EmbeddedNats, free_port
from infra.settings import load_settings, run_config
from tests.conftest import wait_for

WORKER = ("director", "llm", "tts", "lipsync", "render", "qos")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def own_nats(tmp_path: Path) -> AsyncIterator[EmbeddedNats]:
    """A server of its own: the worker's durable consumers must not meet other tests' runs."""
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    yield server
    await server.stop()


def _worker(code: str, nats: EmbeddedNats, tmp: Path, **env: str) -> subprocess.Popen[str]:
    environ = {
        **os.environ, "TROUPE_NATS_URL": nats.url, "TROUPE_STATE_DIR": str(tmp / "state"),
        "TROUPE_OUT_DIR": str(tmp / "out"), "PYTHONPATH": str(ROOT), **env,
    }
    log = (tmp / "worker.log").open("w")  # a file, not a pipe: nothing blocks on a full pipe
    with log:
        return subprocess.Popen([sys.executable, "-c", code], env=environ, stderr=log, text=True)


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def _rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    assert match is not None
    return int(match.group(1)) * 1024


async def _pending(js: JetStreamContext) -> int:
    total = 0
    for name in WORKER:
        for family in ("danmaku", "cue", "role", "qos", "viseme", "utterance", "audio", "run"):
            try:
                info = await js.consumer_info(stream_name(family), f"{name}_{family}")
            except Exception:  # noqa: BLE001 - this actor has no consumer on that family
                continue
            total += int(info.num_pending or 0) + int(info.num_ack_pending or 0)
    return total


async def _held(port: int) -> float:
    return _sample(await asyncio.to_thread(_scrape, port), "troupe_runs_held")


async def test_one_worker_serves_500_short_runs_without_growing(own_nats: EmbeddedNats, tmp_path: Path) -> None:
    port = free_port()
    worker = _worker(f"import sys; from app.cli import main; sys.exit(main(['actor', {','.join(WORKER)!r}]))",
                     own_nats, tmp_path, TROUPE_METRICS_PORT=str(port), TROUPE_RUN_GRACE_S="1")
    nc = await connect(own_nats.url, "test-worker")
    js = nc.jetstream()
    await provision_streams(js)
    settings = load_settings(environ={})
    show = load_show()
    role = show.roles[0].id
    try:
        async def serve(first: int, count: int) -> None:
            for wave in range(first, first + count, 25):
                events, ends = [], []
                for k in range(wave, min(wave + 25, first + count)):
                    run = f"w{k}"
                    events += [
                        RunStarted(id=f"{run}-start", run=run, show=show.to_dict(), seed=k, fps=10, resolution="360p",
                                   started_at_ms=int(time.time() * 1000), config=run_config(settings), duration_ms=400),
                        *[RoleDeclared.of(run, r) for r in show.roles],
                        DanmakuReceived(id=f"{run}-d", run=run, user="v", text="hello there", t_ms=0),
                        CueIssued(id=f"{run}-c", run=run, role=role, correlation=f"{run}-c", user="v",
                                  text="what do you think of the weather?", seq=0, danmaku=(f"{run}-x",),
                                  routed_by="addressed", priority=1.0, max_sentences=1),
                    ]
                    ends.append(RunEnded(id=f"{run}-end", run=run, t_ms=400, reason="duration reached", duration_ms=400))
                await publish_events(js, events)
                begun = time.time()  # the runs' 400 ms of show time pass before they end
                await wait_for(lambda b=begun: time.time() > b + 0.5, what="the runs' show time to pass")
                # ... and their replies are spoken before they end (on a loaded machine the worker can
                # be behind: a reply reaching TTS after its run was released is not spoken)
                await wait_for(lambda: _no_pending(js), timeout_s=120, what=f"runs {wave}.. answered")
                await publish_events(js, ends)
                await wait_for(lambda: _no_pending(js), timeout_s=120, what=f"runs {wave}.. handled")
            await wait_for(lambda: _none_held(port), timeout_s=60, what="every run released")

        log = tmp_path / "worker.log"
        await wait_for(lambda: "running" in log.read_text(), timeout_s=60, what="the worker's actors started")
        await serve(0, 50)
        after_50 = _rss_bytes(worker.pid)
        await serve(50, 450)
        after_500 = _rss_bytes(worker.pid)
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        print(f"worker RSS after 50 runs {after_50 / 2**20:.0f} MiB, after 500 {after_500 / 2**20:.0f} MiB")
        assert after_500 <= after_50 * 1.10, (after_50, after_500)
        # Every run went through every actor (none of it was skipped).
        text = await asyncio.to_thread(_scrape, port)
        for actor in WORKER:
            assert _sample(text, "troupe_processed_total", actor=actor) >= 500, actor
        assert _sample(text, "troupe_published_total", actor="tts", type="audio.chunk") >= 500
        # 25 runs at once, 4 frames each: a renderer joins a run as its start arrives, so it draws the
        # frames of runs that ended while it built their sprites (late); 1808 of 2000 on a busy machine.
        assert _sample(text, "troupe_published_total", actor="render", type="frame.rendered") >= 1000
    finally:
        await nc.close()
        worker.terminate()
        worker.wait(30)


async def _no_pending(js: JetStreamContext) -> bool:
    return await _pending(js) == 0


async def _none_held(port: int) -> bool:
    return await _held(port) == 0


def _sample(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and labels.items() <= s.labels.items())


def test_an_actor_whose_loop_dies_exits_non_zero(own_nats: EmbeddedNats, tmp_path: Path) -> None:
    # A bug in the clock (the kernel's next_tick): the director's tick loop crashes each time it looks for work.
    code = (
        "import sys\n"
        "from actors.kernel import Kernel\n"
        "def broken(self): raise RuntimeError('a bug in the clock')\n"
        "Kernel.next_tick = broken\n"
        "from app.cli import main\n"
        "sys.exit(main(['actor', 'director']))\n"
    )
    worker = _worker(code, own_nats, tmp_path, TROUPE_METRICS_PORT="-1")
    try:
        worker.wait(timeout=120)
    finally:
        worker.kill()
    stderr = (tmp_path / "worker.log").read_text()
    assert worker.returncode == 1
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("troupe: actor director stopped: director:tick crashed 6 times within a minute"), stderr
    assert "a bug in the clock" in last
