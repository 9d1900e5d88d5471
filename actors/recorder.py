"""Recorder actor: every event of every run into the store, acked only after commit."""

from __future__ import annotations

import time
from collections.abc import Sequence

from nats.aio.msg import Msg

from actors.base import Actor, Input
from events.base import Event
from events.subjects import FAMILIES
from infra.metrics import Metrics
from store.recorder import EventWriter, Recorded


class RecorderActor(Actor):
    """Consumes every family and appends each fetched batch to the store in one transaction."""

    name = "recorder"
    inputs = tuple(Input(f) for f in FAMILIES)
    accepts_unknown_runs = True
    observed = False  # it watches everything; its own latency is the recorder lag metric

    def __init__(self, writer: EventWriter, metrics: Metrics | None = None) -> None:
        self.writer = writer
        self.metrics = metrics

    def consume_batch(self, items: Sequence[tuple[Event, Msg]]) -> None:
        """Write one fetched batch; the runtime acks it after this returns."""
        recorded = []
        for event, msg in items:
            meta = msg.metadata
            recorded.append(Recorded(
                event, msg.data, msg.subject, meta.sequence.stream, msg.headers or None,
                meta.stream, meta.consumer,
            ))
        self.writer.append(recorded)
        newest = max((e.at_ms for e, _ in items), default=0)
        if self.metrics is not None and newest > 0:  # at_ms 0: a producer that did not stamp it
            self.metrics.recorder_lag.set(max(0.0, time.time() - newest / 1000))
