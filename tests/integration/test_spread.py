"""Runs spread over the processes of a stateful kind (``TROUPE_SPREAD=on``): each run held by one,
a new run placed on the least loaded, a dead holder's runs taken over, a stopped one's handed
over, a joining process given the next runs; every change a ``run.owned`` event.  Two and three
directors, each a Stage with its own NATS connection, against a real nats-server."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator

import pytest

from actors.runtime.core import ActorRuntime
from app.supervisor import Stage
from events import codec
from events.base import Event
from events.danmaku import DanmakuReceived
from events.run import RunOwned, RunStarted
from events.subjects import PREFIX, stream_name
from infra.bus import publish_events, read_stream
from infra.lease import Lease, lease_bucket, on_air_key
from infra.natsserver import EmbeddedNats
from infra.settings import Settings, run_config
from tests.conftest import wait_for
from tests.showkit import demo_run

pytestmark = pytest.mark.timeout(240)
TTL_S = 1.2  # renewed every 0.4 s: the least loaded director's round may come 0.8 s late (a loaded machine) before the other takes its run


@contextlib.asynccontextmanager
async def director(settings: Settings, kind: str = "director") -> AsyncIterator[tuple[Stage, ActorRuntime]]:
    stage = Stage(settings)
    await stage.__aenter__()
    try:
        [rt] = await stage.start_actors([kind])
        assert rt.owners is not None
        yield stage, rt
    finally:
        await stage.__aexit__(None, None, None)


async def stop(stage: Stage, rt: ActorRuntime) -> None:
    """The runtime stopped as on SIGTERM (its stage will not stop it again)."""
    stage.runtimes.remove(rt)
    await rt.stop()


async def crash(stage: Stage, rt: ActorRuntime) -> None:
    """As ``kill -9`` leaves it: the keys stop being renewed, nothing is handed over."""
    owners = rt.owners
    assert owners is not None
    for lease in owners.leases.values():
        lease.abandon()
    rt.owners = None  # stop() then hands nothing over and deletes no key
    await stop(stage, rt)


class Shows:
    """Runs on air as a show process makes them: run.started published, the on-air key held."""

    def __init__(self, stage: Stage, settings: Settings) -> None:
        self.stage, self.settings = stage, settings
        self.leases: list[Lease] = []

    async def start(self, run_id: str) -> RunStarted:
        run = dataclasses.replace(demo_run(run_id), started_at_ms=int(time.time() * 1000), duration_ms=300_000,
                                  config=run_config(self.settings))
        kv = await lease_bucket(self.stage.js, TTL_S)
        lease = Lease(kv, on_air_key(run_id), ttl_s=TTL_S, renew_s=TTL_S / 3)
        await lease.acquire()
        self.leases.append(lease)
        await publish_events(self.stage.js, [run])
        return run

    async def close(self) -> None:
        for lease in self.leases:
            await lease.release()


def held(*rts: ActorRuntime) -> list[list[str]]:
    return [rt.owners.held if rt.owners is not None else [] for rt in rts]


async def owned(stage: Stage, run: str) -> list[RunOwned]:
    msgs = await read_stream(stage.js, stream_name("run"), [f"{PREFIX}.{run}.run.owned"])
    return [e for e in (codec.decode(m.data) for m in msgs) if isinstance(e, RunOwned)]


async def answered(stage: Stage, run: str, danmaku: str) -> bool:
    """Whether the director gave the comment its outcome (a cue, a merge, a skip or a rejection)."""
    for family in ("cue", "danmaku"):
        for m in await read_stream(stage.js, stream_name(family), [f"{PREFIX}.{run}.>"]):
            e: Event = codec.decode(m.data)
            if e.causation == danmaku and e.type != "danmaku.received" and e.answers:  # waiting is no outcome
                return True
    return False


async def comment(stage: Stage, run: str, n: int) -> str:
    d = DanmakuReceived(id=f"{run}-c{n}", run=run, text=f"hello @rex, question {n}?", user=f"viewer{n}")
    await publish_events(stage.js, [d])
    return d.id


async def test_runs_are_placed_taken_over_handed_over_and_given_to_a_joiner(
    nats_server: EmbeddedNats, settings: Settings
) -> None:
    s = settings.replace(spread="on", lease_ttl_s=TTL_S)
    async with director(s) as (stage, a), director(s) as (stage_b, b):
        shows = Shows(stage, s)
        try:
            runs = [f"spread{i}" for i in range(4)]
            # One after the other, each held before the next goes on air: where four came at once, a
            # loaded machine could hold up the least loaded one's round past the other's patience
            # (two rounds), and the other took a run too many: a race of the test's making.
            for k, run in enumerate(runs, 1):
                await shows.start(run)
                await wait_for(lambda k=k: len(held(a, b)[0] + held(a, b)[1]) == k, 30, f"{k} runs held ({held(a, b)})")
            # Placed: each run held by exactly one, two each (the least loaded goes first).
            assert sorted(held(a, b)[0] + held(a, b)[1]) == runs
            assert sorted(map(len, held(a, b))) == [2, 2], held(a, b)
            assert not set(held(a, b)[0]) & set(held(a, b)[1])
            for run in runs:
                d = await comment(stage, run, 1)
                await wait_for(lambda r=run, d=d: answered(stage, r, d), 30, f"the comment on {run} answered")

            # Killed: the other takes its runs (after the key's lease time), rebuilt, answering.
            lost = held(a, b)[0]
            await crash(stage, a)
            await wait_for(lambda: sorted(held(b)[0]) == runs, 30, f"b holds every run ({held(b)})")
            for run in lost:
                d = await comment(stage, run, 2)
                await wait_for(lambda r=run, d=d: answered(stage, r, d), 30, f"the comment on {run} answered again")
                reasons = [o.reason for o in await owned(stage, run)]
                assert any(r.startswith("taken over") for r in reasons), reasons

            # Joined: the new process, holding nothing, gets the next new run.
            async with director(s) as (_, c):
                await shows.start("spread4")
                await wait_for(lambda: "spread4" in held(c)[0] or "spread4" in held(b)[0], 30, "spread4 held")
                assert held(c)[0] == ["spread4"], held(b, c)

                # Stopped (SIGTERM): b hands its runs over, and c takes them at once.
                began = time.monotonic()
                await stop(stage_b, b)
                await wait_for(lambda: len(held(c)[0]) == 5, 30, f"c holds every run ({held(c)})")
                assert time.monotonic() - began < 10
                for run in runs:
                    reasons = [o.reason for o in await owned(stage, run)]
                    assert any(r.startswith("handed over") for r in reasons), reasons
                    d = await comment(stage, run, 3)
                    await wait_for(lambda r=run, d=d: answered(stage, r, d), 30, f"{run} answered by c")
        finally:
            await shows.close()


async def test_a_renderer_builds_ahead_the_runs_another_holds_and_takes_one_over_with_it(
    nats_server: EmbeddedNats, settings: Settings
) -> None:
    """Sprites take a few hundred ms to build: a renderer builds them for the runs on air that
    another holds, so that taking one over draws at once; they go when it takes the run."""
    s = settings.replace(spread="on", lease_ttl_s=TTL_S)
    async with director(s, "render") as (stage, a), director(s, "render") as (stage_b, b):
        shows = Shows(stage, s)
        try:
            run = await shows.start("spares0")
            # (runs of the tests before may still be listed on air a moment: held too, by either)
            await wait_for(lambda: [run.run in h for h in held(a, b)].count(True) == 1, 30, f"the run held ({held(a, b)})")
            holder, spare = (a, b) if run.run in held(a)[0] else (b, a)
            await wait_for(lambda: run.run in spare.spares, 30, "its sprites built by the other renderer")
            assert spare.kernel.prepared.get(run.id) is not None and run.run not in holder.spares
            await crash(stage if holder is a else stage_b, holder)
            await wait_for(lambda: run.run in held(spare)[0], 30, "the run taken over")
            # Its key held, the run is taken once its state is rebuilt: drawing, with what was built ahead.
            await wait_for(lambda: getattr(spare.kernel.state(run.run), "renderer", None) is not None, 30,
                           "the run drawn by the renderer that took it over")
            assert run.run not in spare.spares and run.id not in spare.kernel.prepared  # taken with its start
        finally:
            await shows.close()
