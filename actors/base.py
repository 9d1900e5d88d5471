"""What an actor is: the events it consumes and emits, and pure handlers; the runtime does all I/O.

An actor is one of four kinds, each a class here, and the runtime runs each kind
its own way:

- ``Actor``: each input is handled on its own (``handle``);
- ``ClockedActor``: also called at show times it asks for (``tick``): the director,
  render, sink;
- ``ScheduledActor``: inputs wait in a role-aware scheduler and are handled in
  batches of one role (``handle_batch``): llm, tts;
- ``BatchActor``: takes each fetched batch whole (``consume_batch``): the recorder.

A handler returns any iterable of events; a generator streams them: the runtime
publishes each as soon as it is yielded and acks the input after the last is stored.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from events.base import Event
from events.errors import HandlerError
from events.run import RunStarted
from events.subjects import PREFIX, family_of
from infra.settings import Settings, run_settings

__all__ = [
    "DROPPED", "Actor", "Arrival", "BatchActor", "Cancel", "ClockedActor", "Context", "Handled", "HandlerError",
    "Input", "ScheduledActor", "StartTimer", "Work", "inputs_for", "start_timer",
]
Handled = Iterable[Event]  # what a handler returns: a list, or a generator that streams
# Starts a timer: ``fn`` is called once after ``seconds`` (on another thread) unless the function
# returned is called first.
StartTimer = Callable[[float, Callable[[], object]], Callable[[], None]]
DROPPED = "dropped"  # the reason an input's Cancel gets when another input drops it whole (``cancels``)
log = logging.getLogger(__name__)


def start_timer(seconds: float, fn: Callable[[], object]) -> Callable[[], None]:
    """The default ``StartTimer``: a daemon ``threading.Timer``."""
    timer = threading.Timer(seconds, fn)
    timer.daemon = True
    timer.start()
    return timer.cancel


def _nothing() -> None:
    return None


class Cancel:
    """Whether the handling of an input is to stop, and why: the kernel cancels it (an urgent
    input the handling gives way to, the input dropped whole), a timer may (``after``), and a
    handler reads it (``reason``) or is told at once (``on_cancel``).  Thread-safe: it is cancelled
    on the event loop's or a timer's thread while the handler runs on the actor's worker thread."""

    __slots__ = ("_callbacks", "_children", "_leave", "_lock", "_reason", "_timer", "_timers")

    def __init__(self, timer: StartTimer | None = None) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._callbacks: dict[object, Callable[[], None]] = {}
        self._children: dict[int, Cancel] = {}
        self._timers: dict[object, Callable[[], None]] = {}  # armed -> what stops its timer
        self._leave: Callable[[], None] = _nothing  # a scope: leaves its parent
        self._timer = timer or start_timer

    @property
    def reason(self) -> str | None:
        """Why it was cancelled (the first reason given), None while it is not."""
        return self._reason

    @property
    def cancelled(self) -> bool:
        return self._reason is not None

    def cancel(self, reason: str) -> bool:
        """Cancel it (and its scopes) for ``reason``; False when it already was (its reason stays)."""
        return self._cancel(reason, None)

    def _cancel(self, reason: str, armed: object) -> bool:
        with self._lock:
            if self._reason is not None or (armed is not None and armed not in self._timers):
                return False  # already cancelled, or (a timer's) disarmed before it fired
            self._reason = reason
            callbacks, self._callbacks = list(self._callbacks.values()), {}
            children, self._children = list(self._children.values()), {}
            timers, self._timers = [stop for key, stop in self._timers.items() if key is not armed], {}
        for stop in timers:
            stop()
        for fn in callbacks:
            _call(fn)
        for child in children:
            child.cancel(reason)
        return True

    def on_cancel(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn`` once when it is cancelled (at once when it already is, on the canceller's
        thread); what is returned unregisters it."""
        key = object()
        with self._lock:
            if self._reason is None:
                self._callbacks[key] = fn
                return lambda: self._unregister(key)
        _call(fn)
        return _nothing

    def _unregister(self, key: object) -> None:
        with self._lock:
            self._callbacks.pop(key, None)

    def scope(self) -> Cancel:
        """A token cancelled with this one (for its reason) and cancellable on its own (one attempt
        of a handling, with a budget of its own: ``after``); ``close`` it when done (``with``)."""
        child = Cancel(self._timer)
        with self._lock:
            if self._reason is None:
                self._children[id(child)] = child
                child._leave = functools.partial(self._forget_child, id(child))
                return child
            reason = self._reason
        child.cancel(reason)
        return child

    def after(self, ms: int, reason: str) -> Callable[[], None]:
        """Cancel it for ``reason`` ``ms`` from now (a timer), unless what is returned is called
        first: once that returns, the timer has either fired (``reason`` says so) or never will."""
        armed = object()
        with self._lock:
            if self._reason is not None:
                return _nothing
            self._timers[armed] = _nothing
        stop = self._timer(ms / 1000, functools.partial(self._cancel, reason, armed))
        with self._lock:
            gone = armed not in self._timers  # fired, or cancelled (or closed) meanwhile
            if not gone:
                self._timers[armed] = stop
        if gone:
            stop()
            return _nothing
        return lambda: self._disarm(armed)

    def _disarm(self, armed: object) -> None:
        with self._lock:
            stop = self._timers.pop(armed, None)
        if stop is not None:
            stop()

    def _forget_child(self, key: int) -> None:
        with self._lock:
            self._children.pop(key, None)

    def close(self) -> None:
        """Done with it: its timers stop, its callbacks are dropped, and a scope leaves its parent
        (the parent's cancel no longer reaches it)."""
        with self._lock:
            timers, self._timers = list(self._timers.values()), {}
            self._callbacks = {}
            leave, self._leave = self._leave, _nothing
        for stop in timers:
            stop()
        leave()

    def __enter__(self) -> Cancel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Cancel({self._reason!r})"


def _call(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - one failing callback does not keep the cancel from the others
        log.exception("a cancel callback failed")


@dataclass(frozen=True, slots=True)
class Input:
    """One family an actor consumes (optionally narrowed by subject filters)."""

    family: str
    filters: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Context:
    """What a handler may know besides its input: the run, the show time (``now_ms`` when it was
    called, ``now()`` as it goes on), the run's settings and state, and whether to stop
    (``cancel_of``)."""

    run: RunStarted | None
    now_ms: int
    # The input came from outside the run's causal chains (no causation) and was published
    # after the run's run.ended: a late input (the director rejects a late danmaku).
    ended: bool = False
    # The run's settings (the kernel's: the process's with the run's recorded ones applied).
    settings: Settings | None = None
    # What the actor keeps for this run (``Actor.open_run``), held by the kernel; None when the
    # actor keeps nothing, or for a run the kernel does not hold (unknown, or an input after its end).
    state: Any = None
    # What ``Actor.prepare`` built ahead for this input (None: nothing).
    prepared: Any = None
    # A scheduled actor's batch: each input's Cancel, by input id (``cancel_of``).
    cancels: Mapping[str, Cancel] = field(default_factory=dict)
    # The ms passed since the handling began, as the feed's clock says (None: none pass, the
    # list and store feeds: a handler's outputs are the same however long it takes).
    elapsed: Callable[[], int] | None = None
    # The run's recorded outputs of the types that record what ``prepare`` read from outside the
    # run (``Actor.reads_recorded``), by id: handed over by re-execution and a takeover's rebuild,
    # so that the handler takes what was read then instead of what a read would find now.  Empty
    # live.
    recorded: Mapping[str, Event] = field(default_factory=dict)

    def now(self) -> int:
        """The show time now: ``now_ms`` when the handling began, plus the time it has taken so far
        (the runtime's), or not (the list and store feeds: deterministic)."""
        return self.now_ms + (self.elapsed() if self.elapsed is not None else 0)

    def cancel_of(self, input_id: str) -> Cancel:
        """The Cancel of an input of the batch being handled (a fresh one for any other input)."""
        token = self.cancels.get(input_id)
        return token if token is not None else Cancel()

    def settings_over(self, own: Settings) -> Settings:
        """The settings a handler follows: the run's as the kernel gave them, else (a context made
        by hand) ``own`` with the run's recorded ones applied."""
        if self.settings is not None:
            return self.settings
        return run_settings(own, self.run.config) if self.run is not None else own

    @property
    def run_id(self) -> str:
        return self.run.run if self.run is not None else ""

    def joinable(self, window_s: float) -> bool:
        """True when the run started at most ``window_s`` ago: live, not found late in a stream."""
        return self.now_ms <= window_s * 1000


def inputs_for(consumes: Iterable[type[Event]]) -> tuple[Input, ...]:
    """The consumers for these event types: one per family, filtered to the types (with or
    without a role token after the type)."""
    families: dict[str, list[str]] = {}
    for cls in consumes:
        family = family_of(cls.type)
        families.setdefault(family, []).extend((f"{PREFIX}.*.{cls.type}", f"{PREFIX}.*.{cls.type}.>"))
    return tuple(Input(family, tuple(filters)) for family, filters in families.items())


class Actor:
    """Base class of actors: declare ``consumes`` and ``emits``, override ``handle``."""

    name: ClassVar[str] = ""
    # The event types the actor takes in and the ones it may publish: its consumers' subject
    # filters are derived from ``consumes`` (``inputs``), and both say what it may touch.
    consumes: ClassVar[tuple[type[Event], ...]] = ()
    emits: ClassVar[tuple[type[Event], ...]] = ()
    inputs: ClassVar[tuple[Input, ...]] = ()
    # Run handlers in a worker thread (CPU-heavy work that releases the GIL).
    blocking: ClassVar[bool] = False
    # The most inputs fetched at once (0: TROUPE_FETCH_BATCH): an actor whose inputs take seconds
    # each (a model reading in ``prepare``) keeps a batch well within the ack wait.
    fetch_most: ClassVar[int] = 0
    # That worker thread's niceness above the process's (Linux: per thread): work that may fall
    # behind a little (the sink's encoding) gives the cores to work with a deadline (frames).
    nice: int = 0
    # Deliver events of runs without a run.started event (ctx.run is None) instead of failing.
    accepts_unknown_runs: ClassVar[bool] = False
    # Handle the events of a playback (a run re-published from the store, ``replay_of`` set).
    # Other actors leave playbacks alone: the recorded outputs are replayed with the inputs.
    plays_replays: ClassVar[bool] = False
    # Publish per-run observations (hop latency, handler time, queues) for the QoS actor.
    observed: ClassVar[bool] = True
    # One per deployment, its state the whole of each run's (the director, lipsync, render): it
    # runs under a lease (a standby waits for it), and a process that starts it while shows are
    # on air rebuilds their state from the streams first (``actors.runtime.takeover``).
    takes_over: ClassVar[bool] = False
    # Input families a takeover does not read back (the sink's frames: it goes on from the next).
    rebuild_skips: ClassVar[frozenset[str]] = frozenset()
    # Outputs that record what ``prepare`` read from outside the run (the director's recall of a
    # viewer, read from the read model): re-execution and a takeover hand the recorded ones to the
    # handlers (``Context.recorded``), which take them instead of reading again.
    reads_recorded: ClassVar[tuple[type[Event], ...]] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "consumes" in cls.__dict__ and "inputs" not in cls.__dict__:
            cls.inputs = inputs_for(cls.consumes)

    def handle(self, event: Event, ctx: Context) -> Handled:
        """Turn one input event into output events (no I/O, no wall clock)."""
        raise NotImplementedError

    def prepare(self, event: Event, ctx: Context) -> Any:
        """Build, ahead of ``handle`` and on a thread of its own, what handling an input will need
        and that takes long (the render's sprites for a run.started): the actor's other work (the
        frames of the shows already on air) goes on meanwhile.  ``ctx.state`` is the run's state
        (None: not held yet, as for its start), to be read only; ``ctx.now_ms`` is 0.  What it
        returns (None: nothing) is handed to that input's handler as ``Context.prepared``."""
        return None

    def prepares(self, event: Event) -> bool:
        """Whether ``prepare`` may build anything for this input: the runtime hands only those to a
        thread of their own (the director prepares a remembered viewer's comment, not every input)."""
        return True

    def undecodable(self, key: str, raw: bytes, reason: str, ctx: Context) -> Sequence[Event]:
        """Events to emit for an input that could not be decoded (besides the dead letter).

        ``key`` identifies the message (stream and sequence) for deterministic ids.
        """
        return ()

    def open_run(self, run: RunStarted, settings: Settings) -> Any:
        """What the actor keeps for one run (None: nothing).  The kernel makes it when it opens the
        run (for an actor that consumes ``run.started``: the start of a run it joins, or a run
        handed over to it; for one that does not: the run's first input), hands
        it to every handler of the run as ``Context.state`` and drops it when the run is released
        (ended a grace period ago, idle too long, or handed to another process): an actor keeps no
        run-keyed bookkeeping of its own, and a long-lived worker does not grow with every run."""
        return None

    def close_run(self, state: Any) -> None:
        """A run's state is being dropped: release what it holds outside Python (files, encoders)."""

    def taking_over(self, state: Any) -> None:
        """A process taking over (``takes_over``) is about to handle the run's past inputs again."""

    def close(self) -> None:
        """Release resources (files, models) at shutdown."""


class ClockedActor(Actor):
    """An actor that is also called at show times it asks for (frames, deadlines, the floor)."""

    # Run ticks in a worker thread (handlers may still run on the event loop).
    blocking_tick: ClassVar[bool] = False
    # Outputs only this actor publishes, whose show times say how far its clock has run: taken
    # over, its clock is run up to the last of them (its decisions are its state).
    clock_marks: ClassVar[tuple[type[Event], ...]] = ()
    # Taken over, the last output of this type of each run is handed to ``resume`` (the renderer
    # goes on from the frame after the last one stored).
    resumes_from: ClassVar[type[Event] | None] = None

    def resume(self, state: Any, last: Event) -> None:
        """Taken over mid-run: ``last`` is the run's last stored output of type ``resumes_from``."""

    def next_tick(self, state: Any) -> int | None:
        """Show time (ms) at which ``tick`` is next due for the run whose state this is, or None."""
        return None

    def tick(self, ctx: Context) -> Handled:
        """Events due at ``ctx.now_ms`` of ``ctx.run`` (its state: ``ctx.state``)."""
        return ()


@dataclass(frozen=True, slots=True)
class Work:
    """How a scheduled actor describes one input to its scheduler."""

    role: str
    tokens: int = 1
    weight: float = 1.0          # the role's base weight (times its QoS factor)
    deadline_ms: int = 0         # show time after which the input is dropped; 0: none
    batch_key: object = None     # what may share a batch besides the role (e.g. the voice)


class ScheduledActor(Actor):
    """An actor whose inputs wait in a role-aware scheduler (schedulers.batching).

    The runtime queues each input ``work()`` describes, then hands the actor
    batches of one role, best priority first, through ``handle_batch``; an input
    whose deadline passes while it waits goes to ``expired`` instead, which returns
    the events that say it was dropped.  Inputs ``work()`` returns None for are
    handled at once (control events).  Each input of a batch has a Cancel token
    (``Context.cancel_of``) the kernel cancels as ``urgent``, ``gives_way`` and
    ``cancels`` say.
    """

    max_batch: ClassVar[int] = 8
    token_budget: ClassVar[int] = 512

    def work(self, event: Event, ctx: Context) -> Work | None:
        raise NotImplementedError

    def handle_batch(self, events: Sequence[Event], ctx: Context) -> list[Handled]:
        """The outputs of each input of a batch (one role, one run), in order.  An actor whose
        backend takes a batch in one call overrides this; by default each input on its own."""
        return [self.handle(e, ctx) for e in events]

    def expired(self, event: Event, ctx: Context) -> Sequence[Event]:
        """Events saying that ``event`` was dropped because its deadline passed."""
        return ()

    # What gives way to what: the kernel asks as each input arrives (before it is admitted, even
    # while a handler runs on the worker thread) and as a batch is handed out, and cancels the
    # inputs' Cancel tokens (``Context.cancel_of``) accordingly.  Each must be quick and pure.

    def urgent(self, event: Event, ctx: Context) -> bool:
        """Whether ``event`` is urgent: until it is taken up (batched, or expired), the inputs that
        give way to it (``gives_way``) are cancelled, those being handled and those handed out.
        An urgent input gives way to none.  ``ctx`` has the run's settings (``now_ms`` 0)."""
        return False

    def gives_way(self, working: Event, urgent: Event) -> str | None:
        """Why ``working`` gives way to the ``urgent`` input (the reason its Cancel gets), or None."""
        return None

    def cancels(self, event: Event) -> str | None:
        """The id of the input ``event`` drops whole (its Cancel gets ``DROPPED``, whether it is
        being handled or is handed out later), or None."""
        return None


@dataclass(frozen=True, slots=True)
class Arrival:
    """One decoded message of a batch handed whole to a ``BatchActor``."""

    event: Event
    raw: bytes
    subject: str
    headers: dict[str, str] | None
    stream: str
    consumer: str
    stream_seq: int
    # The run (None: unknown) and, for a producer event, whether it came after the run ended.
    ctx: Context


class BatchActor(Actor):
    """An actor that takes each fetched batch whole, in one call (the recorder)."""

    # Event types that producers outside Troupe publish (the danmaku).  The actor whose input
    # they are (the director) validates them and dead-letters the undecodable ones; a batch
    # actor leaves those to it (one dead letter per bad message) and gets, for each producer
    # event, whether its run existed and had not ended when it was published.
    producer_types: ClassVar[frozenset[str]] = frozenset()

    def consume_batch(self, items: Sequence[Arrival]) -> None:
        """Take one fetched batch; the runtime acks it after this returns."""
        raise NotImplementedError

    def outage(self, exc: BaseException) -> bool:
        """Whether a failed batch failed because something the actor needs is away (the store
        down or locked): then the runtime holds the batch, keeps its messages from being
        redelivered, and tries it again until it goes through, never dead-letters it."""
        return False
