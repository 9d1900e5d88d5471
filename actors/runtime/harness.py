"""An actor run in memory, on a clock the caller moves: the runtime's admission, scheduling and
clock rules (``admission``, ``scheduled``, ``clock``) without NATS, for tests and benchmarks of one actor."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from actors.base import Actor, ClockedActor, Context, ScheduledActor
from actors.runtime.admission import admit
from actors.runtime.clock import next_due
from actors.runtime.scheduled import WorkQueue
from events.base import Event
from events.run import RunStarted


@dataclass(slots=True)
class Emitted:
    at_ms: int       # show time it was emitted at
    event: Event


@dataclass(slots=True)
class Harness:
    """Feeds one run's events to an actor at show times and collects what it emits, in order.

    A scheduled actor's inputs wait in the same queue the runtime uses and leave in its
    batches as the clock moves (a batch takes no time here); a clocked actor is ticked
    at the show times it asks for."""

    actor: Actor
    run: RunStarted
    now_ms: int = 0
    out: list[Emitted] = field(default_factory=list)
    queue: WorkQueue[Event] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.actor, ScheduledActor):
            self.queue = WorkQueue(self.actor)

    def ctx(self) -> Context:
        return Context(self.run, self.now_ms)

    def feed(self, *events: Event, at_ms: int | None = None) -> list[Event]:
        """Move the clock to ``at_ms`` (running what falls due on the way), then take the events
        (arriving together: a scheduled actor's queue orders them); what they caused at once."""
        if at_ms is not None:
            self.advance(at_ms)
        start = len(self.out)
        actor = self.actor
        for event in events:
            if not admit(actor, event, self.run).handled:  # the runtime's rules: e.g. a playback's inputs
                continue
            work = actor.work(event, self.ctx()) if isinstance(actor, ScheduledActor) else None
            if work is not None and self.queue is not None:
                self.queue.add(id(event), event, work, self.ctx(), self.run.run, self.run.started_at_ms + self.now_ms)
            else:
                self._emit(actor.handle(event, self.ctx()))
        self._drain()
        return [e.event for e in self.out[start:]]

    def advance(self, to_ms: int) -> list[Event]:
        """Run the clock forward to ``to_ms``: every tick due on the way, at its show time."""
        start = len(self.out)
        while isinstance(self.actor, ClockedActor):
            due = next_due(self.actor)
            if due is None:
                break
            at_ms = round(due[0] * 1000) - self.run.started_at_ms  # the float wall time rounds back
            if at_ms > to_ms:
                break
            self.now_ms = max(self.now_ms, at_ms)
            self._emit(self.actor.tick(self.ctx()))
            self._drain()
        self.now_ms = max(self.now_ms, to_ms)
        self._drain()
        return [e.event for e in self.out[start:]]

    def _drain(self) -> None:
        """Handle the queued work of a scheduled actor, batch by batch, best priority first."""
        actor, queue = self.actor, self.queue
        if queue is None or not isinstance(actor, ScheduledActor):
            return
        wall_ms = self.run.started_at_ms + self.now_ms
        for event in queue.expired(wall_ms):
            self._emit(actor.expired(event, self.ctx()))
        while (ready := queue.next_batch(wall_ms)) is not None:
            role, events = ready
            for outputs in actor.handle_batch(events, self.ctx()):
                self._emit(outputs)
            queue.served(role, wall_ms)

    def _emit(self, outputs: Iterable[Event]) -> None:
        for event in outputs:
            self.out.append(Emitted(self.now_ms, event))
