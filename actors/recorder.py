"""Recorder actor: every event of every run into the store, acked only after commit.

A run holds what happened within it.  A producer's event (a danmaku) is stored only
when its run had started and had not yet ended when it was published; nothing it
caused is stored either (the director's answer - a rejection with reason
``run_ended`` or ``unknown_run`` - and whatever followed).  The producer still gets
that answer on NATS.  Events the run's own actors emit after its run.ended (replies
finishing, the last frames, their observations) are stored: they come from within.
So a run that ended takes no new inputs (``replay --verify`` re-executes exactly
what the live director answered within the run), and a run that never started gets
no row in the store.  Dead letters are always stored: nothing is dropped silently.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence

from actors.base import Arrival, BatchActor, Input
from events.danmaku import DanmakuRejected
from events.subjects import FAMILIES
from infra.metrics import Metrics
from store.recorder import EventWriter, Recorded, store_away

TURNED_AWAY_IDS = 100_000  # how many ids of events not stored are remembered (their effects are not stored)


class RecorderActor(BatchActor):
    """Consumes every family and appends each fetched batch to the store in one transaction."""

    name = "recorder"
    inputs = tuple(Input(f) for f in FAMILIES)
    accepts_unknown_runs = True
    observed = False  # it watches everything; its own latency is the recorder lag metric
    producer_types = frozenset({"danmaku.received", "danmaku.control"})

    def __init__(self, writer: EventWriter, metrics: Metrics | None = None) -> None:
        self.writer = writer
        self.metrics = metrics
        self._away: OrderedDict[str, None] = OrderedDict()
        # Batches being written (or held by a store outage, tried again until written): the
        # emission time of each one's oldest event.  The lag is read when scraped.
        self._unwritten: dict[int, int] = {}
        self._committed_lag = 0.0
        if metrics is not None:
            metrics.recorder_lag.set_function(self.lag_s)

    def lag_s(self) -> float:
        """How far the store is behind: the age of the oldest event not yet written, else the age
        of the newest event at the last commit."""
        oldest = min(self._unwritten.values(), default=0)
        if oldest > 0:
            return max(self._committed_lag, time.time() - oldest / 1000)
        return self._committed_lag

    def consume_batch(self, items: Sequence[Arrival]) -> None:
        """Write one fetched batch; the runtime acks it after this returns."""
        key = id(items)  # the runtime tries a batch held by an outage again with the same list
        self._unwritten.setdefault(key, min((i.event.at_ms for i in items if i.event.at_ms > 0), default=0))
        kept: list[Recorded] = []
        passed: list[Recorded] = []
        for item in items:
            recorded = Recorded(
                item.event, item.raw, item.subject, item.stream_seq, item.headers or None, item.stream, item.consumer,
            )
            (kept if self.belongs(item) else passed).append(recorded)
        try:
            self.writer.append(kept, passed=passed)
        except Exception as exc:
            if not store_away(exc):  # given up on (redelivered or dead-lettered): no longer waiting here
                self._unwritten.pop(key, None)
            raise
        self._unwritten.pop(key, None)
        newest = max((i.event.at_ms for i in items), default=0)
        if newest > 0:  # at_ms 0: a producer that did not stamp it
            self._committed_lag = max(0.0, time.time() - newest / 1000)

    def outage(self, exc: BaseException) -> bool:
        """The store down, unreachable or locked: the batch waits for it (never dead-lettered)."""
        return store_away(exc)

    def belongs(self, item: Arrival) -> bool:
        """Whether an event is stored in its run (see the module's docstring)."""
        event = item.event
        if event.type.startswith("error."):
            return True
        outsider = event.type in self.producer_types and (item.ctx.run is None or item.ctx.ended)
        answer = isinstance(event, DanmakuRejected) and (
            event.reason == "run_ended" or (event.reason == "unknown_run" and item.ctx.run is None)
        )
        if outsider or answer or (event.causation is not None and event.causation in self._away):
            self._away[event.id] = None
            if len(self._away) > TURNED_AWAY_IDS:
                self._away.popitem(last=False)
            return False
        return True
