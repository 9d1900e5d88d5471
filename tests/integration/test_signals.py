"""`troupe up` in a real subprocess, stopped by a signal: the run ends cleanly (run.ended with its
reason, the video closed with what was shown, the summary printed) and no process is left behind;
killed outright, its embedded nats-server goes with it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import av
import pytest
from sqlalchemy import select

from infra.bus import connect
from infra.natsserver import announcement_path
from store.database import default_url, open_engine
from store.schema import runs
from tests.conftest import wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by init) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def processes_under(folder: Path) -> list[int]:
    """Processes whose command line names this folder (the show's nats-server, any worker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


async def start_up(tmp: Path, duration_s: float) -> tuple[asyncio.subprocess.Process, dict[str, object], str]:
    """``troupe up`` with its own embedded NATS; returns once its run has drawn a few seconds of frames."""
    env = {**os.environ, "TROUPE_METRICS_PORT": "-1"}
    env.pop("TROUPE_NATS_URL", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "--state-dir", str(tmp / "state"), "up", "--duration", str(duration_s),
        "--resolution", "360p", "--out", str(tmp / "out"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    assert proc.stderr is not None
    run = ""
    while not run:
        line = (await asyncio.wait_for(proc.stderr.readline(), 120)).decode()
        assert line, "troupe up ended before its run started"
        if line.startswith("troupe: run "):
            run = line.split()[2]
    announced = json.loads(announcement_path(tmp / "state").read_text())
    nc = await connect(str(announced["url"]), "test")
    js = nc.jetstream()

    async def frames() -> int:
        info = await js.stream_info("TROUPE_FRAME", subjects_filter=f"troupe.{run}.>")
        return sum((info.state.subjects or {}).values()) if info.state.subjects else 0

    async def drawn() -> bool:
        return await frames() >= 100

    await wait_for(drawn, 90, "four seconds of frames")
    await nc.close()
    return proc, announced, run


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_ends_the_run_cleanly_and_leaves_nothing_behind(tmp_path: Path, sig: signal.Signals) -> None:
    proc, announced, run = await start_up(tmp_path, 60.0)
    proc.send_signal(sig)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    text, errors = out.decode(), err.decode()
    assert proc.returncode == 0, errors
    assert f"troupe: {sig.name}: the run ended at" in errors, errors
    assert "Traceback" not in errors, errors
    assert f"run {run}: video" in text and "frames:" in text and "danmaku:" in text, text  # the summary
    engine = open_engine(default_url(tmp_path / "state"))
    with engine.connect() as conn:
        row = conn.execute(select(runs.c.status, runs.c.end_reason, runs.c.duration_ms).where(runs.c.id == run)).one()
    engine.dispose()
    assert row.status == "ended" and row.end_reason == f"stopped ({sig.name})", row
    assert 3000 <= row.duration_ms < 60000, row
    # The video holds what was shown: as long as the run, to a frame.
    with av.open(str(tmp_path / "out" / f"{run}.mp4")) as container:
        video = container.streams.video[0]
        assert abs(video.frames - -(-row.duration_ms * 25 // 1000)) <= 1, (video.frames, row.duration_ms)
    assert not alive(int(announced["server_pid"])), "the embedded nats-server outlived its show"
    assert not processes_under(tmp_path), processes_under(tmp_path)
    assert not announcement_path(tmp_path / "state").exists()


async def test_killed_outright_its_nats_server_goes_too(tmp_path: Path) -> None:
    proc, announced, _ = await start_up(tmp_path, 60.0)
    proc.kill()
    await proc.wait()
    server = int(announced["server_pid"])
    await wait_for(lambda: not alive(server), 15, "the nats-server to stop")
    await wait_for(lambda: not processes_under(tmp_path), 15, "no process left")
