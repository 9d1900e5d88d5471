"""Hostile bytes on every family's subjects, mid-show, on a real nats-server: no actor loop dies,
the show goes on to its full length, and every undecodable message is dead-lettered with its
bytes (by each actor that consumes its subject)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import av
import orjson
import pytest

from actors.runtime import RunDirectory
from app.shows import load_show
from app.supervisor import Stage, new_run_id, run_show
from events import codec
from events.base import registry
from events.errors import DecodeError
from events.subjects import FAMILIES
from infra.natsserver import EmbeddedNats
from infra.settings import load_settings
from store.recorder import read_events
from tests.conftest import wait_for
from tests.showkit import demo_run

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def undecodable(rng: random.Random, type_: str, run: str, i: int) -> bytes:
    """One malformed message claiming to be a ``type_`` of ``run``: random bytes, a broken frame,
    JSON that is not an event, a field of the wrong kind, a truncated real event."""
    real = codec.encode(demo_run(run))
    kind = i % 8
    if kind == 0:
        return rng.randbytes(rng.randint(0, 2000))
    if kind == 1:
        return codec.MAGIC + rng.randbytes(rng.randint(0, 3))
    if kind == 2:
        return codec.MAGIC + (10_000_000).to_bytes(4, "big") + b"{}"
    if kind == 3:
        return orjson.dumps(rng.choice([[1, 2], "text", 42, None, {"payload": []}]))
    if kind == 4:
        return orjson.dumps({"type": type_, "id": rng.randint(0, 9), "run": run, "payload": {}})
    if kind == 5:
        return orjson.dumps({"type": type_, "id": f"x{i}", "run": run, "v": 1, "payload": "not a mapping"})
    if kind == 6:
        return real[: rng.randint(1, len(real) - 1)]
    return b"\xff\xfe" + rng.randbytes(rng.randint(1, 64)) + b"{"


async def test_hostile_bytes_on_every_family_are_dead_lettered_and_the_show_goes_on(tmp_path: Path) -> None:
    """Malformed messages on the run's own lifecycle subjects (run.started, run.ended) too: they
    neither end the run nor hide it from an actor that looks it up."""
    async with EmbeddedNats(tmp_path / "nats") as server:  # its own: the forged messages stay here
        await _hostile_show(server, tmp_path)


async def _hostile_show(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    settings = load_settings(environ={}, nats_url=nats_server.url, state_dir=tmp_path / "state",
                             out_dir=tmp_path / "out", metrics_port=-1, resolution="360p")
    rng = random.Random(2026)
    run = new_run_id()
    types = [t for t in registry.types() if t.split(".")[0] in FAMILIES]
    sent: list[tuple[str, bytes]] = []
    for i in range(400):
        type_ = types[i % len(types)]
        data = undecodable(rng, type_, run, i)
        with pytest.raises(DecodeError):  # each one is malformed (else it would be acted on)
            codec.decode(data)
        sent.append((f"troupe.{run}.{type_}", data))
    async with Stage(settings) as stage:
        show = asyncio.create_task(run_show(stage, load_show(), 16.0, run_id=run, drain_timeout_s=120))
        try:
            async def started() -> bool:
                return stage.runs.known(run) is not None
            await wait_for(started, 60, "the run to start")
            for subject, data in sent:
                await stage.js.publish(subject, data)
            result = await show
        finally:
            show.cancel()
        assert all(rt.healthy for rt in stage.runtimes), [rt.actor.name for rt in stage.runtimes if not rt.healthy]
        # A process that looks the run up now (a worker joining late) finds its real start and end.
        lookup = RunDirectory(stage.js)
        found = await lookup.get(run)
        assert found is not None and found.id == f"{run}-start"
        ended = await lookup.ended_at(run)
        assert ended is not None and ended // 1000 >= result.started_at_ms + 16_000 - 1000
    letters = read_events(stage.engine, run, ["error.dead_lettered"])
    lettered = {bytes(e.raw) for e in letters}  # type: ignore[attr-defined]
    missing = [(s, d[:40]) for s, d in sent if d not in lettered]
    assert not missing, missing[:5]
    assert all(e.reason for e in letters)  # type: ignore[attr-defined]
    assert result.mp4 is not None
    with av.open(str(result.mp4)) as container:
        assert container.streams.video[0].frames == 16 * 25
    stage.engine.dispose()
