"""The recorder process killed with SIGKILL mid-batch, on SQLite and PostgreSQL: every event exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from events import codec
from events.qos import QosObserved
from events.subjects import subject_for
from infra.natsserver import EmbeddedNats
from store.database import open_engine
from store.schema import consumers, events
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(240)
N = 3000


async def start_recorder(env: dict[str, str]) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "actor", "recorder", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    line = await asyncio.wait_for(proc.stderr.readline(), 60)
    assert b"running" in line, line
    return proc


async def test_kill_9_of_the_recorder_mid_batch_stores_every_event_exactly_once(
    nats_server: EmbeddedNats, js, store_url: str, tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    run = f"rk{os.getpid()}{store_url[:4]}"
    env = {
        **os.environ, "TROUPE_NATS_URL": nats_server.url, "TROUPE_STORE_URL": store_url,
        "TROUPE_STATE_DIR": str(tmp_path), "TROUPE_METRICS_PORT": "-1", "TROUPE_ACK_WAIT_S": "2",
        "TROUPE_FETCH_BATCH": "64",
    }
    engine = open_engine(store_url)

    def stored() -> int:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(events).where(events.c.run == run)).scalar_one())

    observations = [
        QosObserved(id=f"{run}-obs{i}", run=run, t_ms=i, metric="queue_depth", value=float(i), source="test")
        for i in range(N)
    ]
    last_seq = 0

    async def publish() -> None:
        nonlocal last_seq
        for k in range(0, N, 50):
            acks = [
                await js.publish_async(subject_for(e), codec.encode(e), headers={"Nats-Msg-Id": e.id})
                for e in observations[k:k + 50]
            ]
            for ack in await asyncio.gather(*acks):
                last_seq = max(last_seq, ack.seq)
            await asyncio.sleep(0)

    recorder = await start_recorder(env)
    publisher = asyncio.create_task(publish())
    try:
        for target in (N // 6, N // 3, N // 2):
            await wait_for(lambda t=target: stored() >= t, timeout_s=60, what=f"{target} events stored")
            recorder.send_signal(signal.SIGKILL)
            assert await recorder.wait() == -signal.SIGKILL
            recorder = await start_recorder(env)
        await publisher
        await wait_for(lambda: stored() >= N, timeout_s=90, what="every event stored")
    finally:
        recorder.terminate()
        await recorder.wait()
    with engine.connect() as conn:
        ids = conn.execute(select(events.c.id).where(events.c.run == run)).scalars().all()
        seqs = conn.execute(select(events.c.seq).where(events.c.run == run)).scalars().all()
        position = conn.execute(select(consumers.c.last_stream_seq).where(consumers.c.name == "recorder_qos")).scalar_one()
    assert len(ids) == N and set(ids) == {e.id for e in observations}
    assert sorted(seqs) == list(range(N))  # one run sequence, no gap left by the killed batches
    assert position >= last_seq
    engine.dispose()
