"""Whole fetched batches for a ``BatchActor`` (the recorder): each event with its run, and for a
producer's event whether its run existed and had not ended when it was published."""

from __future__ import annotations

from actors.base import Arrival, BatchActor, Context
from actors.runtime.delivery import Delivery
from actors.runtime.runs import RunDirectory
from events.run import RunEnded, RunStarted
from infra.bus import ConsumerSpec


async def arrivals(runs: RunDirectory, actor: BatchActor, batch: list[Delivery], spec: ConsumerSpec) -> list[Arrival]:
    """The batch with each event's run; a producer event also learns whether its run existed and
    had not ended when it was published (one lookup per run and batch at most, never trusting
    a cached "not there" for a message newer than the lookup: what the director answers
    "late" must never be stored)."""
    newest: dict[str, int] = {}
    for d in batch:
        assert d.event is not None and d.meta is not None
        if isinstance(d.event, RunStarted):
            runs.remember(d.event)
        elif isinstance(d.event, RunEnded):
            runs.remember_end(d.event.run, d.meta.timestamp_ns // 1000)
        elif d.event.type in actor.producer_types:
            newest[d.event.run] = max(newest.get(d.event.run, 0), d.meta.timestamp_ns // 1000)
    lifecycle: dict[str, tuple[RunStarted | None, int | None]] = {}
    for run, published_us in newest.items():  # a failed lookup fails the batch: it is retried
        started = await runs.get(run, published_us, precise=True)
        # A playback re-publishes what its run's recorder already judged, in store order.
        judged = started is not None and started.replay_of is None
        ended = await runs.ended_at(run, published_us, precise=True) if judged else None
        lifecycle[run] = (started, ended)
    out = []
    for d in batch:
        assert d.event is not None and d.meta is not None
        run = d.event.run
        if run in lifecycle and d.event.type in actor.producer_types:
            started, ended = lifecycle[run]
            late = ended is not None and d.meta.timestamp_ns // 1000 > ended
            ctx = Context(started, 0, ended=late)
        else:
            ctx = Context(runs.known(run), 0)
        out.append(Arrival(
            d.event, d.msg.data, d.msg.subject, d.msg.headers, spec.stream, spec.durable, d.meta.stream_seq, ctx,
        ))
    return out
