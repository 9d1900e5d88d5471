"""The kernel: the one driver of actor semantics, with no transport and no wall clock.

Every way an actor is run goes through a ``Kernel``; only where its inputs come from
differs (the feed):

- JetStream (``actors.runtime.core``): fetch, ack, publish, retry, dead-letter;
- the store (``replay``): re-execution, a takeover's rebuild, export;
- a plain list (``ListFeed``): tests and benchmarks.

The kernel owns, for all of them:

- admission (``admit``): unknown, joined, ended, late and replayed runs;
- the runs it holds, and the actor's state for each (``Actor.open_run``, handed to every
  handler as ``Context.state``), dropped by ``release``: an actor that takes runs' starts holds
  the runs it joined (opened by their ``run.started``, or handed over: ``taking_over``); one that
  does not (llm, tts, lipsync, QoS: their replicas share the work) holds a run from its first
  admitted input;
- the run's settings: a handler's ``Context.settings`` are the ones recorded in the run
  (``infra.settings.run_settings``), never the process's own;
- the dispatch of each kind: an input on its own (``take``), a scheduled actor's queue with
  its expiry and one-role batches (``expired``, ``next_batch``, ``handle_batch``), a clocked
  actor's tick cadence (``next_tick``, ``tick``);
- cancellation: each input of a scheduled actor's batch gets a ``Cancel`` token, cancelled as
  inputs arrive (``notice``) when the actor says it gives way to an urgent one or is dropped
  whole (``ScheduledActor.urgent``, ``gives_way``, ``cancels``), with the bookkeeping, the
  locking and the timers (``Cancel.after``) here, not in the actor;
- a handler's clock: ``Context.now()``, the show time as the feed's clock says (``clock``: the
  runtime's; none for the list and store feeds, where no time passes inside a handler);
- the order a stateful actor took its inputs in: it reads several streams, whose messages reach
  it in an order none of them holds, so what its handlers emit is stamped with the stream
  positions it had taken in (``Event.seen``), and a recorded run's inputs are handed to it again
  in that order (``handling_order``), by re-execution and by a takeover alike.

The caller brings what needs a lookup or a clock (the run's start, whether the actor joins
it, whether an input came after the run's end, the time) and takes the outputs away.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from actors.base import (
    DROPPED,
    Actor,
    Cancel,
    ClockedActor,
    Context,
    Handled,
    ScheduledActor,
    StartTimer,
    Work,
    start_timer,
)
from events.base import Event
from events.run import RunEnded, RunStarted
from events.subjects import family_of
from infra.settings import Settings, load_settings, run_settings
from schedulers.batching import Job, RoleScheduler
from schedulers.priority import PriorityPolicy

__all__ = [
    "HANDLE", "QUEUED", "REFUSE", "SKIP", "Admission", "Batch", "Emitted", "Fed", "Kernel", "ListFeed", "Recorded",
    "Taken", "Tick", "admit", "handled_at", "handling_order", "heard_at", "replay",
]
HANDLE, SKIP, REFUSE, QUEUED = "handle", "skip", "refuse", "queued"
log = logging.getLogger(__name__)
P = TypeVar("P")
T = TypeVar("T")
DROPPED_KEPT = 4096  # the inputs dropped whole remembered (the oldest matter no more)


@dataclass(frozen=True, slots=True)
class Admission:
    """What to do with one input: ``handle`` it (``ended``: as a late input), ``skip`` it (ack it,
    not the actor's), or ``refuse`` it for good (``reason``)."""

    action: str
    ended: bool = False
    reason: str = ""

    @property
    def handled(self) -> bool:
        return self.action == HANDLE


def admit(actor: type[Actor] | Actor, event: Event, run: RunStarted | None, *, joins: bool = True,
          late: bool = False) -> Admission:
    """The decision for ``event`` given its run's start (None: unknown), whether the actor joins
    that run (asked for a run's start only) and whether the input came after the run's end.

    - an input of a run nobody started is refused for good, unless the actor takes those (the
      director answers a danmaku for an unknown run with a rejection);
    - a run's start is taken only by an actor that joins the run (not one already over, nor an
      earlier playback found in the stream);
    - an input from outside the run's causal chains (no causation) published after the run's
      end is a late one: handled with ``Context.ended`` (the director rejects a late danmaku);
    - a playback's inputs go only to the actors that play playbacks.
    """
    if isinstance(event, RunStarted):
        if not joins:
            return Admission(SKIP, reason="the actor does not join this run")
        run = event
    if run is None and not actor.accepts_unknown_runs:
        return Admission(REFUSE, reason=f"unknown run {event.run!r}")
    if run is not None and run.replay_of is not None and not actor.plays_replays:
        return Admission(SKIP, reason="a playback: its outputs are replayed with it")
    ended = run is not None and not isinstance(event, RunStarted | RunEnded) and event.causation is None and late
    return Admission(HANDLE, ended=ended)


class WorkQueue(Generic[T]):
    """A scheduled actor's queue: a ``RoleScheduler`` holding payloads, which leave in one-role
    batches, best priority first, with the count of those being worked on."""

    def __init__(self, actor: ScheduledActor, fifo: bool = False) -> None:
        self.sched = RoleScheduler(PriorityPolicy(), actor.max_batch, actor.token_budget, fifo=fifo)
        self.working = 0

    def __len__(self) -> int:
        return len(self.sched)

    @property
    def waiting(self) -> int:
        """Inputs queued or in the batch being handled."""
        return len(self.sched) + self.working

    def add(self, key: int, payload: T, work: Work, ctx: Context, run: str, now_ms: int) -> None:
        assert ctx.run is not None
        deadline = ctx.run.started_at_ms + work.deadline_ms if work.deadline_ms else 0
        self.sched.add(Job(
            key=key, role=work.role, arrival_ms=now_ms, tokens=work.tokens,
            weight=self.sched.policy.weight(work.weight), deadline_ms=deadline,
            batch_key=(run, work.role, work.batch_key), payload=payload,
        ))

    def expired(self, now_ms: int) -> list[T]:
        return [job.payload for job in self.sched.expired(now_ms)]

    def next_batch(self, now_ms: int) -> tuple[str, list[T]] | None:
        """The next batch (its role and payloads), or None when nothing is ready."""
        batch = self.sched.next_batch(now_ms)
        if not batch:
            return None
        return batch[0].role, [job.payload for job in batch]

    def served(self, role: str, now_ms: int) -> None:
        self.sched.served(role, now_ms)

    def jobs(self) -> Iterator[Job]:
        return iter(self.sched)


@dataclass(slots=True)
class Taken:
    """What the kernel decided for one input: refuse or skip it (``admission``), queue it (a
    scheduled actor's work: its outputs come with its batch), or handle it: ``handle()`` calls the
    handler (the feed chooses where: the runtime on the actor's worker thread, timed), and its
    outputs may be a generator that streams (the caller publishes each as it is yielded)."""

    admission: Admission
    ctx: Context | None = None
    queued: bool = False
    call: Callable[[], Handled] | None = None

    @property
    def handled(self) -> bool:
        return self.call is not None

    def handle(self) -> Handled:
        return self.call() if self.call is not None else ()


@dataclass(slots=True)
class Batch(Generic[P]):
    """A scheduled actor's batch: inputs of one role of one run, best priority first."""

    role: str
    run: RunStarted | None
    payloads: list[P]
    events: list[Event]
    cancels: dict[str, Cancel] = field(default_factory=dict)  # each input's, by its id


@dataclass(slots=True)
class _Working:
    """An input of a batch handed out and not yet served, with its Cancel."""

    event: Event
    cancel: Cancel
    urgent: bool  # an urgent input gives way to none


class Kernel(Generic[P]):
    """Drives one actor.  ``P`` is what the feed hands in with each input and gets back with its
    outputs (the runtime's delivery; the input itself for the list and store feeds).  ``clock``
    (seconds) is how time passes inside a handler (``Context.now``; None: it does not); ``timer``
    starts the timers of ``Cancel.after``."""

    def __init__(self, actor: Actor, *, fifo: bool = False, settings: Settings | None = None,
                 clock: Callable[[], float] | None = None, timer: StartTimer = start_timer) -> None:
        self.actor = actor
        self.clock = clock
        self.timer = timer
        self.settings = settings or getattr(actor, "settings", None) or load_settings(environ={})
        self.queue: WorkQueue[tuple[P, Event]] | None = (
            WorkQueue(actor, fifo=fifo) if isinstance(actor, ScheduledActor) else None)
        self.runs: dict[str, RunStarted] = {}          # the runs the actor holds state for
        self._settings: dict[str, Settings] = {}       # each held run's settings
        self.states: dict[str, Any] = {}               # each held run's state (``Actor.open_run``)
        self.prepared: dict[str, Any] = {}             # input id -> what prepare built for it, until taken
        self.recorded: dict[str, dict[str, Event]] = {}  # run -> its recorded reads (``record``), by id
        # An actor that takes runs' starts holds the runs it joined (their start, or a takeover);
        # one that does not holds a run from its first input.
        self._starts = RunStarted in actor.consumes
        # Cancellation (a scheduled actor's): ``notice`` runs on the feed's thread as inputs arrive
        # while a batch is handled on another, so the lock guards these.
        self._lock = threading.Lock()
        self._urgent: dict[str, Event] = {}    # urgent inputs noticed and not yet taken up
        self._dropped: dict[str, None] = {}    # inputs dropped whole, oldest first (bounded)
        self._working: dict[str, _Working] = {}  # the inputs of the batches handed out and not served
        # A stateful actor reading several streams stamps its handlers' outputs with what it had
        # taken in of each run: per family, the stream position of the last input (``Event.seen``).
        self.stamps = actor.takes_over and len({i.family for i in actor.inputs}) > 1
        self._seen: dict[str, dict[str, int]] = {}

    # -- runs --------------------------------------------------------------------

    def context(self, run: RunStarted | None, now_ms: int, ended: bool = False, prepared: Any = None,
                cancels: dict[str, Cancel] | None = None) -> Context:
        """The handler context of a run at show time ``now_ms``, with the run's settings and the
        actor's state for it (None for a run the kernel does not hold), and the clock from now."""
        state = self.states.get(run.run) if run is not None else None
        recorded = self.recorded.get(run.run, {}) if run is not None and self.recorded else {}
        return Context(run, now_ms, ended, self.run_settings(run), state, prepared,
                       cancels if cancels is not None else {}, self._elapsed(), recorded)

    def record(self, run: str, outputs: Iterable[Event]) -> None:
        """A recorded run's outputs of the actor (re-execution, a takeover's rebuild): those that
        record what it read from outside the run (``Actor.reads_recorded``) are handed to its
        handlers (``Context.recorded``) until the run is released."""
        kinds = self.actor.reads_recorded
        kept = {e.id: e for e in outputs if kinds and isinstance(e, kinds)}
        if kept:
            self.recorded.setdefault(run, {}).update(kept)

    def _elapsed(self) -> Callable[[], int] | None:
        """The ms passed from now on, as the kernel's clock says (None: no clock)."""
        clock = self.clock
        if clock is None:
            return None
        began = clock()
        return lambda: int((clock() - began) * 1000)

    def run_settings(self, run: RunStarted | None) -> Settings:
        """The settings a run's handlers see: the process's, with what the run recorded applied."""
        if run is None:
            return self.settings
        if self.runs.get(run.run) is run:  # a held run's, worked out when it was opened
            return self._settings[run.run]
        return run_settings(self.settings, run.config)

    def _open(self, run: RunStarted) -> None:
        """Hold a run: its settings worked out and the actor's state for it made (the same run's
        start again, a redelivery, keeps its state).  When either raises, nothing is held."""
        held = self.runs.get(run.run)
        if held is run:
            return
        settings = run_settings(self.settings, run.config)
        if held is None:
            self.states[run.run] = self.actor.open_run(run, settings)
        self.runs[run.run] = run
        self._settings[run.run] = settings

    def state(self, run: str) -> Any:
        """The actor's state for a held run (None: not held, or the actor keeps none)."""
        return self.states.get(run)

    def release(self, run: str) -> None:
        """Drop a run: the actor's state for it goes (``Actor.close_run`` first), and the kernel's."""
        self.runs.pop(run, None)
        self._settings.pop(run, None)
        self._seen.pop(run, None)
        self.recorded.pop(run, None)
        with self._lock:
            for key in [k for k, e in self._urgent.items() if e.run == run]:
                del self._urgent[key]
        if run in self.states:
            state = self.states.pop(run)
            if state is not None:
                self.actor.close_run(state)

    def close(self) -> None:
        """Release every run still held (the process stops): what their states hold outside
        Python is finished (a video still being written gets its index).  One that fails does not
        keep the others from closing."""
        for run in list(self.runs):  # a held run has its state too (``_open``, ``release``)
            try:
                self.release(run)
            except Exception:
                log.exception("%s: closing run %s failed", self.actor.name, run)

    def holds(self, run: str) -> bool:
        return run in self.runs

    def taking_over(self, run: RunStarted) -> None:
        """A process taking a run over is about to hand it the run's past inputs again."""
        self._open(run)
        self.actor.taking_over(self.states.get(run.run))

    def resume(self, run: RunStarted, last: Event) -> None:
        """Taken over mid-run, a clocked actor goes on from ``last``, the run's last stored output
        of its ``resumes_from`` type."""
        if isinstance(self.actor, ClockedActor):
            self.actor.resume(self.states.get(run.run), last)

    # -- one input ---------------------------------------------------------------

    def take(self, event: Event, run: RunStarted | None, now_ms: int, *, joins: bool = True, late: bool = False,
             payload: P | None = None, wall_ms: int | None = None, seq: int | None = None) -> Taken:
        """Admit one input and queue it (a scheduled actor's work) or make its handling, at show
        time ``now_ms``, ready to call (``Taken.handle``).  ``run`` is the run's start as the caller knows it (None: unknown); a run's
        start is its own.  ``wall_ms`` orders a queued input (default: the run's start plus
        ``now_ms``).  ``seq``: its stream position (JetStream's sequence; None where there is
        none), which the outputs of an actor that ``stamps`` record (``Event.seen``)."""
        actor = self.actor
        prepared = self.prepared.pop(event.id, None) if self.prepared else None
        if isinstance(event, RunStarted):
            run = event
        decision = admit(actor, event, run, joins=joins, late=late)
        if not decision.handled:
            self._taken_up([event])
            return Taken(decision)
        try:
            if run is not None and not decision.ended and (
                    isinstance(event, RunStarted) or not self._starts or run.run in self.runs):
                self._open(run)
            ctx = self.context(run, now_ms, decision.ended, prepared)
            work = None
            if self.queue is not None and isinstance(actor, ScheduledActor) and run is not None and not ctx.ended \
                    and not isinstance(event, RunStarted):
                work = actor.work(event, ctx)
        except Exception as exc:  # noqa: BLE001 - the input fails as its handler would (retried, dead-lettered)
            return Taken(decision, Context(run, now_ms, decision.ended), call=functools.partial(_raise, exc))
        if work is not None and self.queue is not None and run is not None:
            wall = run.started_at_ms + now_ms if wall_ms is None else wall_ms
            self.queue.add(id(event), (payload if payload is not None else event, event), work, ctx,  # type: ignore[arg-type]
                           event.run, wall)
            return Taken(decision, ctx, queued=True)
        self._taken_up([event])  # an urgent input handled at once (a late one): nothing gives way to it
        if self.stamps and run is not None and self.holds(run.run) and not decision.ended:
            seen = self._seen.setdefault(run.run, {})
            if seq is not None:
                family = family_of(event.type)
                seen[family] = max(seen.get(family, 0), seq)
            if seen:  # what it had taken in as this input was, handed to its outputs
                stamp, run_id = dict(seen), run.run
                return Taken(decision, ctx, call=lambda: _stamp(actor.handle(event, ctx), run_id, stamp))
        return Taken(decision, ctx, call=functools.partial(actor.handle, event, ctx))

    def prepare(self, event: Event) -> None:
        """Build ahead, on the caller's thread (the runtime: one beside the actor's worker), what
        handling ``event`` will take long to make (``Actor.prepare``); it is handed to the input's
        handler as ``Context.prepared`` when the kernel takes it."""
        if not self.actor.prepares(event):
            return
        ctx = self.context(self.runs.get(event.run), 0)
        made = self.actor.prepare(event, ctx)
        if made is not None:
            self.prepared[event.id] = made

    def notice(self, event: Event) -> None:
        """An input has arrived, before it is admitted (the runtime: as soon as it is decoded, on
        the event loop, while a handler may run on the worker thread).  For a scheduled actor: an
        urgent input is kept until it is taken up and cancels the inputs being handled that give
        way to it; an input that drops another whole cancels it, being handled or to come."""
        actor = self.actor
        if not isinstance(actor, ScheduledActor):
            return
        cancel: list[tuple[Cancel, str]] = []
        if actor.urgent(event, self.context(self.runs.get(event.run), 0)):
            with self._lock:
                self._urgent[event.id] = event
                working = list(self._working.values())
            for w in working:
                reason = None if w.urgent else actor.gives_way(w.event, event)
                if reason is not None:
                    cancel.append((w.cancel, reason))
        dropped = actor.cancels(event)
        if dropped is not None:
            with self._lock:
                self._dropped[dropped] = None
                while len(self._dropped) > DROPPED_KEPT:
                    del self._dropped[next(iter(self._dropped))]
                being = self._working.get(dropped)
            if being is not None:
                cancel.append((being.cancel, DROPPED))
        for token, reason in cancel:  # outside the lock: a token calls back (a writer stopped)
            token.cancel(reason)

    def _taken_up(self, events: Iterable[Event]) -> None:
        """Urgent inputs taken up (batched, expired, or not queued): nothing more gives way to them."""
        if self._urgent:
            with self._lock:
                for event in events:
                    self._urgent.pop(event.id, None)

    # -- a scheduled actor's queue -------------------------------------------------

    def expired(self, wall_ms: int) -> list[tuple[P, Sequence[Event]]]:
        """The queued inputs whose deadline passed, each with the events saying it was dropped."""
        if self.queue is None or not isinstance(self.actor, ScheduledActor):
            return []
        out = []
        for payload, event in self.queue.expired(wall_ms):
            self._taken_up([event])
            run = self.runs.get(event.run)
            out.append((payload, self.actor.expired(event, self.context(run, self._show_ms(run, wall_ms)))))
        return out

    def next_batch(self, wall_ms: int) -> Batch[P] | None:
        """The next batch to handle (None: nothing ready)."""
        if self.queue is None:
            return None
        ready = self.queue.next_batch(wall_ms)
        if ready is None:
            return None
        role, items = ready
        events = [e for _, e in items]
        run = self.runs.get(events[0].run)
        return Batch(role, run, [p for p, _ in items], events, self._hand_out(events, run))

    def _hand_out(self, events: list[Event], run: RunStarted | None) -> dict[str, Cancel]:
        """Each input's Cancel, cancelled already when it was dropped whole or gives way to an
        urgent input still to be taken up; the batch's own urgent inputs are taken up."""
        actor = self.actor
        assert isinstance(actor, ScheduledActor)
        ctx = self.context(run, 0)
        urgent = [actor.urgent(e, ctx) for e in events]
        self._taken_up(events)
        cancels: dict[str, Cancel] = {}
        with self._lock:
            pending = sorted(self._urgent.items())  # the first urgent input, by id, gives the reason
            for event, own in zip(events, urgent, strict=True):
                token = Cancel(self.timer)
                reason = DROPPED if event.id in self._dropped else None
                if reason is None and not own:
                    reason = next((r for _, u in pending if (r := actor.gives_way(event, u)) is not None), None)
                if reason is not None:
                    token.cancel(reason)  # nothing registered on it yet: no callback runs under the lock
                self._working[event.id] = _Working(event, token, own)
                cancels[event.id] = token
        return cancels

    def handle_batch(self, batch: Batch[P], now_ms: int) -> list[Handled]:
        """The outputs of each input of a batch, handled at show time ``now_ms``."""
        assert isinstance(self.actor, ScheduledActor)
        return self.actor.handle_batch(batch.events, self.context(batch.run, now_ms, cancels=batch.cancels))

    def served(self, batch: Batch[P], wall_ms: int) -> None:
        """The batch is done (its outputs all taken): its inputs' Cancels are let go."""
        with self._lock:
            for event_id, token in batch.cancels.items():
                working = self._working.get(event_id)
                if working is not None and working.cancel is token:
                    del self._working[event_id]
        for token in batch.cancels.values():
            token.close()
        if self.queue is not None:
            self.queue.served(batch.role, wall_ms)

    @property
    def waiting(self) -> int:
        """Inputs queued or in the batch being handled (0 for an actor without a queue)."""
        return self.queue.waiting if self.queue is not None else 0

    def queued(self) -> Iterator[P]:
        """The payloads waiting in the queue."""
        if self.queue is not None:
            for job in self.queue.jobs():
                yield job.payload[0]

    # -- a clocked actor's clock -----------------------------------------------------

    def next_tick(self) -> tuple[int, RunStarted] | None:
        """The wall time (ms) and run of the actor's next tick, or None when none is due."""
        actor = self.actor
        if not isinstance(actor, ClockedActor):
            return None
        best: tuple[int, RunStarted] | None = None
        for run in self.runs.values():
            show_ms = self._next_tick(run.run)
            if show_ms is None:
                continue
            wall = run.started_at_ms + show_ms
            if best is None or wall < best[0]:
                best = (wall, run)
        return best

    def _next_tick(self, run: str) -> int | None:
        assert isinstance(self.actor, ClockedActor)
        state = self.states.get(run)
        return None if state is None else self.actor.next_tick(state)

    def ticks_ahead(self, run: str) -> bool:
        """Whether the actor has a tick to come for a run."""
        return isinstance(self.actor, ClockedActor) and self._next_tick(run) is not None

    def tick(self, run: RunStarted, now_ms: int) -> Handled:
        """What is due at show time ``now_ms`` of a run (an actor that ``stamps``: stamped with what
        it had taken in and the tick's time, ``Event.ticked_ms``)."""
        assert isinstance(self.actor, ClockedActor)
        outputs = self.actor.tick(self.context(run, now_ms))
        seen = self._seen.get(run.run) if self.stamps else None
        return _stamp(outputs, run.run, dict(seen), now_ms) if seen else outputs

    @staticmethod
    def _show_ms(run: RunStarted | None, wall_ms: int) -> int:
        return wall_ms - run.started_at_ms if run is not None else 0


def _raise(exc: BaseException) -> Handled:
    raise exc


def _stamp(outputs: Handled, run: str, seen: dict[str, int], ticked_ms: int | None = None) -> Handled:
    """Outputs of a run stamped with what the actor had taken in of it, and the tick that made
    them (None: a handler); a generator's as they are yielded."""
    stamped = (dataclasses.replace(o, seen=seen, ticked_ms=ticked_ms) if o.run == run else o for o in outputs)
    return list(stamped) if isinstance(outputs, list | tuple) else stamped


# -- the list feed: tests and benchmarks ----------------------------------------------------


@dataclass(slots=True)
class Emitted:
    at_ms: int       # show time it was emitted at
    event: Event


@dataclass(slots=True)
class ListFeed:
    """Feeds events to an actor, through its kernel, at show times the caller moves the clock to,
    and collects what it emits, in order.  ``run`` is the feed's run; an event of another run
    belongs to that run once its ``run.started`` was fed, and is of an unknown run before.  A
    scheduled actor's inputs wait in the kernel's queue and leave in its batches as the clock
    moves (a batch takes no time here); a clocked actor is ticked at the show times it asks for.

    - ``feed``: move the clock (every tick due on the way), then take the events;
    - ``handle``: take the events at a show time without running the clock (a handler's own
      behaviour, as if the clock had not woken in between);
    - ``advance``: run the clock; ``tick``: tick one run at a show time, due or not.

    No time passes inside a handler (``Context.now`` is the show time it was called at) unless
    ``clock`` (seconds) says how it does: a test of a handler's own pace."""

    actor: Actor
    run: RunStarted
    now_ms: int = 0
    out: list[Emitted] = field(default_factory=list)
    clock: Callable[[], float] | None = None
    kernel: Kernel[Event] = field(init=False)
    started: dict[str, RunStarted] = field(init=False)

    def __post_init__(self) -> None:
        self.kernel = Kernel(self.actor, clock=self.clock)
        self.started = {self.run.run: self.run}

    def run_of(self, event: Event) -> RunStarted | None:
        if isinstance(event, RunStarted):
            self.started.setdefault(event.run, event)
            return event
        return self.started.get(event.run)

    def feed(self, *events: Event, at_ms: int | None = None, late: bool = False) -> list[Event]:
        """Move the clock to ``at_ms`` (running what falls due on the way), then take the events
        (arriving together: a scheduled actor's queue orders them); what they caused at once."""
        if at_ms is not None:
            self.advance(at_ms)
        return self.handle(*events, late=late)

    def handle(self, *events: Event, at_ms: int | None = None, late: bool = False) -> list[Event]:
        """Take the events at show time ``at_ms`` (default: now) without running the clock on the
        way; what they caused at once.  ``late``: they came after their run's end."""
        if at_ms is not None:
            self.now_ms = at_ms
        start = len(self.out)
        for event in events:  # noticed on arrival and prepared, before any is handled (as the runtime does)
            self.kernel.notice(event)
            self.kernel.prepare(event)
        for event in events:
            self._emit(self.kernel.take(event, self.run_of(event), self.now_ms, late=late).handle())
        self._drain()
        return [e.event for e in self.out[start:]]

    def advance(self, to_ms: int) -> list[Event]:
        """Run the clock forward to ``to_ms``: every tick due on the way, at its show time."""
        start = len(self.out)
        while (due := self.kernel.next_tick()) is not None:
            at_ms = due[0] - due[1].started_at_ms
            if at_ms > to_ms:
                break
            self.now_ms = max(self.now_ms, at_ms)
            self._emit(self.kernel.tick(due[1], self.now_ms))
            self._drain()
        self.now_ms = max(self.now_ms, to_ms)
        self._drain()
        return [e.event for e in self.out[start:]]

    def tick(self, at_ms: int | None = None, run: RunStarted | None = None) -> list[Event]:
        """Tick a run (default: the feed's) at show time ``at_ms`` (default: now), due or not."""
        if at_ms is not None:
            self.now_ms = at_ms
        start = len(self.out)
        self._emit(self.kernel.tick(run or self.run, self.now_ms))
        self._drain()
        return [e.event for e in self.out[start:]]

    def state(self, run: str | None = None) -> Any:
        """The actor's state for a run (default: the feed's), as the kernel holds it."""
        return self.kernel.state(run or self.run.run)

    def release(self, run: str | None = None) -> None:
        self.kernel.release(run or self.run.run)

    def _drain(self) -> None:
        """Handle the queued work of a scheduled actor, batch by batch, best priority first."""
        kernel = self.kernel
        wall_ms = self.run.started_at_ms + self.now_ms
        for _, dropped in kernel.expired(wall_ms):
            self._emit(dropped)
        while (batch := kernel.next_batch(wall_ms)) is not None:
            run = batch.run or self.run
            for outputs in kernel.handle_batch(batch, wall_ms - run.started_at_ms):
                self._emit(outputs)
            kernel.served(batch, wall_ms)

    def _emit(self, outputs: Iterable[Event]) -> None:
        for event in outputs:
            self.out.append(Emitted(self.now_ms, event))


# -- the store feed: re-execution, a takeover's rebuild, export ---------------------------------


class Fed(NamedTuple):
    """A recorded input handed to a kernel again: the show time it was handled at, the input, and
    its stream position (None: not known)."""

    at_ms: int
    event: Event
    seq: int | None = None


class Tick(NamedTuple):
    """A recorded tick of a clocked actor handed to a kernel again: its show time."""

    at_ms: int


class Recorded(NamedTuple):
    """A recorded input of an actor: the event, its stream position, and the show time the server
    stored it at (None: either not known)."""

    event: Event
    seq: int | None = None
    stored_ms: int | None = None


def heard_at(event: Event) -> int:
    """When the actor took in the input that caused ``event`` (a deferred decision says so)."""
    heard = getattr(event, "heard_ms", None)
    return event.t_ms if heard is None else int(heard)


def handled_at(event: Event, caused: Mapping[str, int], stored_ms: int | None = None) -> int:
    """The earliest show time an actor can have handled ``event`` at: when it handled it, where
    its outputs record it (``caused``); else when it was published: the server stored it at
    ``stored_ms`` (show time), and an input some actor emitted was emitted at its ``t_ms``.  One
    consumer hands its inputs over in stream order, so the caller takes the later of this and the
    input before it in the same stream: an input that caused nothing is taken as handled with
    the one before it, never before it existed (a dropped reply's rest, emitted long after the
    drop before it, is not handled before the reply's chunks)."""
    at = caused.get(event.id)
    if at is not None:
        return at
    own = event.t_ms if event.causation is not None else 0
    return max(own, stored_ms or 0)


def handling_order(inputs: Mapping[str, Sequence[Recorded]], outputs: Iterable[Event]) -> list[Fed | Tick]:
    """A recorded run's inputs to one actor (per family, each in its stream's order) in the order
    the actor took them in, each at the show time it was handled, with its clock's ticks among
    them, as its outputs (``outputs``: the actor's own, as recorded) say.

    - Order: what the actor emitted records the stream positions it had taken in (``Event.seen``):
      each such mark is a point in the handling order, and an input goes after the marks that had
      not taken it in and before the first that had, the input that caused the mark last.  A mark
      its clock made (``Event.ticked_ms``) is a tick there, after the handler marks that had taken
      in as much.  Between two marks (and where outputs carry none: recorded before they did, or
      an actor that reads one stream) inputs go by the time they can first have been handled, each
      never before the one before it in its stream, then by family and stream order.  The run's
      start goes first: it opens the run.
    - Time: an input that caused outputs was handled when they say (``heard_at``); one that caused
      nothing, with the input (or tick) before it, never before it existed (``handled_at``)."""
    outputs = list(outputs)
    caused: dict[str, int] = {}
    for out in outputs:
        if out.causation is not None and out.ticked_ms is None:
            at = heard_at(out)
            caused[out.causation] = min(at, caused.get(out.causation, at))
    families = list(inputs)
    marks: dict[tuple[tuple[int, ...], int | None], set[str]] = {}
    for out in outputs:
        if out.seen and set(out.seen) <= set(families):
            key = (tuple(out.seen.get(f, 0) for f in families), out.ticked_ms)
            causers = marks.setdefault(key, set())
            if out.ticked_ms is None:
                causers.add(out.causation or "")
    order = sorted(marks, key=lambda m: (sum(m[0]), m[1] is not None, m[1] or 0))
    columns = []
    for i in range(len(families)):  # never back: a mark has taken in all that the one before it had
        column, high = [], 0
        for vector, _ in order:
            high = max(high, vector[i])
            column.append(high)
        columns.append(column)
    # An input whose position is not known goes by time: before the first mark made after it.
    times, high = [], 0
    for mark in order:
        made = mark[1] if mark[1] is not None else min((caused[c] for c in marks[mark] if c in caused), default=high)
        high = max(high, made)
        times.append(high)
    keyed = []
    for i, family in enumerate(families):
        at = 0
        for k, rec in enumerate(inputs[family]):
            at = max(at, handled_at(rec.event, caused, rec.stored_ms))
            group = -1 if isinstance(rec.event, RunStarted) else bisect.bisect_left(  # a run's start opens it
                columns[i] if rec.seq is not None else times, rec.seq if rec.seq is not None else at)
            last = 0 <= group < len(order) and rec.event.id in marks[order[group]]
            keyed.append(((group, last, at, i, k), rec))
    keyed.sort(key=lambda item: item[0])
    schedule: list[Fed | Tick] = []
    now, g, at_end = 0, 0, len(order)
    for (group, *_), rec in keyed:
        while g < min(group, at_end):  # the ticks made before this input was taken in
            tick = order[g][1]
            if tick is not None:
                now = max(now, tick)
                schedule.append(Tick(tick))
            g += 1
        known = caused.get(rec.event.id)
        now = known if known is not None else max(now, handled_at(rec.event, {}, rec.stored_ms))
        schedule.append(Fed(now, rec.event, rec.seq))
    schedule += [Tick(tick) for _, tick in order[g:] if tick is not None]
    return schedule


def replay(kernel: Kernel[Event], run: RunStarted, inputs: Iterable[tuple[int, Event] | Fed | Tick],
           clock_to_ms: int | None = None) -> Iterator[tuple[Event | None, Handled]]:
    """Hand a recorded run's inputs to the kernel, each at the show time it was handled then
    (its outputs record it), with its stream position where known, and its clock's recorded
    ticks, in the order given (the order the actor took them in: ``handling_order``); then, for
    a clocked actor, run its clock up to ``clock_to_ms`` (its last recorded decision).  Yields
    each input handled with its outputs (``None`` for the clock's), as they are made."""
    clocked = isinstance(kernel.actor, ClockedActor)
    for item in inputs:
        if isinstance(item, Tick):
            if clocked and kernel.holds(run.run):
                yield None, kernel.tick(run, item.at_ms)
            continue
        at_ms, event = item[0], item[1]
        taken = kernel.take(event, run, at_ms, seq=item[2] if len(item) > 2 else None)  # type: ignore[misc]
        if taken.handled:
            yield event, taken.handle()
        yield from _drain(kernel, run, at_ms)
    if clock_to_ms is not None and isinstance(kernel.actor, ClockedActor) and kernel.ticks_ahead(run.run):
        yield None, kernel.tick(run, clock_to_ms)


def take_over(kernel: Kernel[Event], run: RunStarted, feed: Iterable[tuple[int, Event] | Fed | Tick],
              clock_to_ms: int | None,
              last: Event | None) -> list[Event]:
    """A run taken over mid-show, in a kernel that has not held it: the actor told it is taking the
    run over, the run's past inputs handed to it again (``replay``: its clock run up to
    ``clock_to_ms`` where its decisions come from it), and one that goes on from its last output
    (``resumes_from``) told what that was.  What the replay emitted: the last holder published it,
    or should have.  A takeover's rebuild and re-execution at a recorded takeover both come here."""
    kernel.taking_over(run)
    emitted = [e for _, outputs in replay(kernel, run, feed, clock_to_ms) for e in outputs]
    if last is not None:
        kernel.resume(run, last)
    return emitted


def _drain(kernel: Kernel[Event], run: RunStarted, at_ms: int) -> Iterator[tuple[Event | None, Handled]]:
    """A scheduled actor's queued work, handled at once (a batch takes no time here)."""
    wall_ms = run.started_at_ms + at_ms
    yield from kernel.expired(wall_ms)
    while (batch := kernel.next_batch(wall_ms)) is not None:
        yield from zip(batch.events, kernel.handle_batch(batch, at_ms), strict=True)
        kernel.served(batch, wall_ms)
