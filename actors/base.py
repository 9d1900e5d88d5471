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
