"""The store going away mid-show: a PostgreSQL server stopped for 30 s, a SQLite file locked by
another process.  The recorder holds what it could not write and tries again; the show goes on;
afterwards the store holds every event of the run exactly once."""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.shows import load_show
from app.supervisor import Stage, run_show
from infra.natsserver import EmbeddedNats
from infra.settings import Settings, load_settings
from tests.conftest import wait_for
from tests.showkit import assert_stored_once, stream_counts

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


class Postgres:
    """A PostgreSQL server of the test's own: initdb'ed in a temporary folder, on a free port."""

    def __init__(self, root: Path) -> None:
        initdb = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))[-1:]), None)
        if initdb is None:
            pytest.skip("PostgreSQL's initdb is not installed (scripts/test.sh installs it when root)")
        self.bin = Path(initdb).parent
        self.root = root
        self.data = root / "data"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.as_user: list[str] = []
        if os.getuid() == 0:  # initdb and postgres refuse to run as root
            shutil.chown(root, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.as_user, str(self.bin / tool), *args], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "-o",
                  f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


@pytest.fixture
def postgres() -> Iterator[Postgres]:
    root = Path(tempfile.mkdtemp(prefix="troupe-pg-"))
    os.chmod(root, 0o755)
    server = Postgres(root)
    server.start()
    try:
        yield server
    finally:
        subprocess.run([*server.as_user, str(server.bin / "pg_ctl"), "-D", str(server.data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def outage_settings(nats_server: EmbeddedNats, tmp: Path, store_url: str | None) -> Settings:
    return load_settings(
        environ={}, nats_url=nats_server.url, state_dir=tmp / "state", out_dir=tmp / "out", metrics_port=-1,
        store_url=store_url, resolution="360p",
    )


async def show_through_outage(settings: Settings, duration_s: float, away: tuple[float, float],
                              go: object, back: object) -> tuple[str, list[float], Stage, dict[str, int]]:
    """Run a show; ``go()`` at ``away[0]`` s into it takes the store away, ``back()`` at ``away[1]``
    brings it back.  Returns the run, the recorder lag sampled every 0.5 s, the stage and the
    number of the run's messages on each stream."""
    lags: list[float] = []
    async with Stage(settings) as stage:
        async def outage() -> None:
            t0 = time.monotonic()
            await asyncio.sleep(away[0])
            await asyncio.to_thread(go)  # type: ignore[arg-type]
            await asyncio.sleep(max(0.0, away[1] - (time.monotonic() - t0)))
            await asyncio.to_thread(back)  # type: ignore[arg-type]

        async def sample() -> None:
            while True:
                lags.append(stage.metrics.registry.get_sample_value("troupe_recorder_lag_seconds") or 0.0)
                await asyncio.sleep(0.5)

        sampler = asyncio.create_task(sample())
        fault = asyncio.create_task(outage())
        try:
            result = await run_show(stage, load_show(), duration_s, drain_timeout_s=120)
            await fault
        finally:
            sampler.cancel()
            fault.cancel()
        counts = await stream_counts(stage.js, result.run)
        # Lag after the drain: the recorder has caught up.
        lags.append(stage.metrics.registry.get_sample_value("troupe_recorder_lag_seconds") or 0.0)
        retries = stage.metrics.registry.get_sample_value("troupe_outage_retries_total", {"actor": "recorder"}) or 0
        assert retries > 0, "the recorder never met the outage"
        assert result.mp4 is not None and result.mp4.exists()  # the show went on to its end
        return result.run, lags, stage, counts


async def test_postgres_stopped_for_30_s_mid_show_loses_nothing(nats_server: EmbeddedNats, postgres: Postgres,
                                                                tmp_path: Path) -> None:
    settings = outage_settings(nats_server, tmp_path, postgres.url)
    run, lags, stage, counts = await show_through_outage(settings, 42.0, (6.0, 36.0), postgres.stop, postgres.start)
    assert_stored_once(stage.engine, run, counts)
    # The lag shows the outage (the oldest held event grew to most of its 30 s), then falls back.
    assert max(lags) > 20, lags
    assert lags[-1] < 5, lags
    stage.engine.dispose()


async def test_a_sqlite_store_locked_by_another_process_loses_nothing(nats_server: EmbeddedNats,
                                                                     tmp_path: Path) -> None:
    settings = outage_settings(nats_server, tmp_path, None)
    db = tmp_path / "state" / "troupe.db"
    Stage(settings).engine.dispose()  # create and migrate the file before the show
    holder: list[subprocess.Popen[bytes]] = []

    def lock() -> None:  # another process takes the write lock and keeps it
        proc = subprocess.Popen(
            [sys.executable, "-c", (
                "import sqlite3, sys, time\n"
                f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
                "c.execute('BEGIN EXCLUSIVE')\n"
                "print('locked', flush=True)\n"
                "sys.stdin.read()\n"
                "c.execute('ROLLBACK')\n"
            )], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"locked"
        holder.append(proc)

    def unlock() -> None:
        proc = holder.pop()
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()

    run, lags, stage, counts = await show_through_outage(settings, 30.0, (5.0, 25.0), lock, unlock)
    assert_stored_once(stage.engine, run, counts)
    assert max(lags) > 12, lags
    assert lags[-1] < 5, lags
    await wait_for(lambda: not holder, 1, "the lock released")
    stage.engine.dispose()
