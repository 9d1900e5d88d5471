"""Role-priority scheduling in the runtime, on a real nats-server."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from actors.base import Context, Input, ScheduledActor, Work
from actors.runtime import ActorRuntime
from events import codec
from events.base import Event
from events.cue import CueIssued
from events.run import RunStarted
from events.subjects import subject_for
from events.utterance import UtteranceCompleted, UtteranceDropped
from infra.metrics import Metrics
from infra.settings import Settings
from tests.conftest import end_run, wait_for
from tests.integration.test_runtime import collect, count
from tests.showkit import demo_run

WEIGHTS = {"a": 4.0, "b": 2.0, "c": 1.0}


class Worker(ScheduledActor):
    name = "schedtest"
    blocking = True
    max_batch = 4

    def __init__(self, run: str) -> None:
        self.inputs = (Input("cue", (f"troupe.{run}.cue.issued.>",)),)  # type: ignore[misc]
        self.batches: list[list[str]] = []
        self.gate = threading.Event()

    def work(self, event: Event, ctx: Context) -> Work | None:
        assert isinstance(event, CueIssued) and event.role
        return Work(event.role, tokens=1, weight=WEIGHTS[event.role], deadline_ms=event.deadline_ms)

    def handle_batch(self, events: Sequence[Event], ctx: Context) -> list[Sequence[Event]]:
        self.gate.wait(10)  # the first batch holds the worker until every cue is queued
        self.batches.append([e.role or "" for e in events])
        return [[UtteranceCompleted(id=e.derive("done"), run=e.run, role=e.role, causation=e.id, t_ms=ctx.now_ms,
                                    utterance=e.id, text="", chunks=0, backend="test")] for e in events]

    def expired(self, event: Event, ctx: Context) -> Sequence[Event]:
        return [UtteranceDropped(id=event.derive("dropped"), run=event.run, role=event.role, causation=event.id,
                                 t_ms=ctx.now_ms, utterance=event.id, reason="deadline passed")]


async def start_run(js, run: str) -> RunStarted:  # type: ignore[no-untyped-def]
    start = demo_run(run)
    start = RunStarted(id=start.id, run=run, show=start.show, seed=1, started_at_ms=int(time.time() * 1000))
    await js.publish(subject_for(start), codec.encode(start), headers={"Nats-Msg-Id": start.id})
    return start


async def test_batches_hold_one_role_and_the_heaviest_role_goes_first(js, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    run = "sched1"
    await start_run(js, run)
    worker = Worker(run)
    order = ["c", "b", "a"] * 4  # the lightest role's cues arrive first
    async with ActorRuntime(worker, js, settings, Metrics()) as rt:
        for i, role in enumerate(order):
            cue = CueIssued(id=f"{run}-{i}", run=run, role=role, seq=i, user="u", text="t", danmaku=(), routed_by="t")
            await js.publish(subject_for(cue), codec.encode(cue), headers={"Nats-Msg-Id": cue.id})
            if i == 0:  # the first one keeps the worker busy while the rest queue up
                await wait_for(lambda: rt.working == 1, what="the first cue in the worker")
        await wait_for(lambda: rt.waiting >= len(order), what="cues queued")
        worker.gate.set()
        await wait_for(lambda: sum(map(len, worker.batches)) == len(order), what="all served")
    await end_run(js, run)
    first, *rest = worker.batches
    assert first == ["c"]
    assert all(len(set(b)) == 1 and len(b) <= 4 for b in worker.batches)
    assert [b[0] for b in rest] == ["a", "b", "c"]  # after the batch that was running: by weight
    assert sorted(r for b in worker.batches for r in b) == sorted(order)


async def test_work_past_its_deadline_is_dropped_with_an_event(js, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    run = "sched2"
    start = await start_run(js, run)
    worker = Worker(run)
    async with ActorRuntime(worker, js, settings, Metrics()) as rt:
        now = int(time.time() * 1000) - start.started_at_ms
        cues = [
            CueIssued(id=f"{run}-{i}", run=run, role=role, seq=i, user="u", text="t", danmaku=(), routed_by="t",
                      deadline_ms=now + (200 if i == 1 else 60000))
            for i, role in enumerate("acb")
        ]
        await js.publish(subject_for(cues[0]), codec.encode(cues[0]), headers={"Nats-Msg-Id": cues[0].id})
        await wait_for(lambda: rt.working == 1, what="the first cue in the worker")
        for cue in cues[1:]:
            await js.publish(subject_for(cue), codec.encode(cue), headers={"Nats-Msg-Id": cue.id})
        await wait_for(lambda: rt.waiting >= 3, what="cues queued")
        # The worker is held: the second cue's deadline passes while it waits.
        await wait_for(lambda: time.time() * 1000 - start.started_at_ms > cues[1].deadline_ms + 60, what="deadline")
        worker.gate.set()
        await wait_for(lambda: _count_is(js, "utterance", run, 3), what="three outcomes")
    await end_run(js, run)
    outcomes = {e.causation: e.type for e in await collect(js, "utterance", run)}
    assert outcomes == {f"{run}-0": "utterance.completed", f"{run}-1": "utterance.dropped",
                        f"{run}-2": "utterance.completed"}


async def _count_is(js, family: str, run: str, n: int) -> bool:  # type: ignore[no-untyped-def]
    return await count(js, family, run) == n
