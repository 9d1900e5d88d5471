"""What an actor is: declared inputs and a pure handler; the runtime does all I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from events.base import Event
from events.run import RunStarted


@dataclass(frozen=True, slots=True)
class Input:
    """One family an actor consumes (optionally narrowed by subject filters)."""

    family: str
    filters: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Context:
    """What a handler may know besides its input: the run and the show time."""

    run: RunStarted | None
    now_ms: int
    # The input came from outside the run's causal chains (no causation) and was published
    # after the run's run.ended: a late input (the director rejects a late danmaku).
    ended: bool = False

    @property
    def run_id(self) -> str:
        return self.run.run if self.run is not None else ""

    def joinable(self, window_s: float) -> bool:
        """True when the run started at most ``window_s`` ago: live, not found late in a stream."""
        return self.now_ms <= window_s * 1000


class Actor:
    """Base class of actors: override ``handle`` (and ``tick`` for clocked actors)."""

    name: ClassVar[str] = ""
    inputs: ClassVar[tuple[Input, ...]] = ()
    # Run handlers in a worker thread (CPU-heavy work that releases the GIL).
    blocking: ClassVar[bool] = False
    # Run ticks in a worker thread (handlers may still run on the event loop).
    blocking_tick: ClassVar[bool] = False
    # Deliver events of runs without a run.started event (ctx.run is None) instead of failing.
    accepts_unknown_runs: ClassVar[bool] = False
    # Handle the events of a playback (a run re-published from the store, ``replay_of`` set).
    # Other actors leave playbacks alone: the recorded outputs are replayed with the inputs.
    plays_replays: ClassVar[bool] = False
    # Publish per-run observations (hop latency, handler time, queues) for the QoS actor.
    observed: ClassVar[bool] = True

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        """Turn one input event into output events (no I/O, no wall clock)."""
        raise NotImplementedError

    def undecodable(self, key: str, raw: bytes, reason: str, ctx: Context) -> Sequence[Event]:
        """Events to emit for an input that could not be decoded (besides the dead letter).

        ``key`` identifies the message (stream and sequence) for deterministic ids.
        """
        return ()

    def next_tick(self, run: str) -> int | None:
        """Show time (ms) at which ``tick`` is next due for a run, or None."""
        return None

    def active_runs(self) -> Sequence[RunStarted]:
        """Runs this actor is clocking."""
        return ()

    def tick(self, ctx: Context) -> Sequence[Event]:
        """Events due at ``ctx.now_ms`` of ``ctx.run``."""
        return ()

    def close(self) -> None:
        """Release resources (files, models) at shutdown."""


class HandlerError(Exception):
    """A handler failed permanently on an input: dead-letter it at once, no retry."""


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
    handled at once (control events).
    """

    max_batch: ClassVar[int] = 8
    token_budget: ClassVar[int] = 512

    def work(self, event: Event, ctx: Context) -> Work | None:
        raise NotImplementedError

    def handle_batch(self, events: Sequence[Event], ctx: Context) -> list[Sequence[Event]]:
        """The outputs of each input of a batch (one role, one run), in order."""
        return [self.handle(e, ctx) for e in events]

    def expired(self, event: Event, ctx: Context) -> Sequence[Event]:
        """Events saying that ``event`` was dropped because its deadline passed."""
        return ()
