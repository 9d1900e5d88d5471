"""Whether an actor is given an input, and as what: one pure decision, shared by the runtime (live
on NATS), the in-memory harness (tests, benchmarks) and re-execution, so a rule added here
holds everywhere.

The facts that need a lookup (the run's start, whether the actor joins it, whether the input
came after the run's end) are found by the caller and passed in; the rules are here:

- an input of a run nobody started is refused for good, unless the actor takes those
  (the director answers a danmaku for an unknown run with a rejection);
- a run's start is taken only by an actor that joins the run (not one already over, nor an
  earlier playback found in the stream);
- an input from outside the run's causal chains (no causation) published after the run's
  end is a late one: handled with ``Context.ended`` (the director rejects a late danmaku);
- a playback's inputs go only to the actors that play playbacks.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.base import Actor
from events.base import Event
from events.run import RunEnded, RunStarted

HANDLE, SKIP, REFUSE = "handle", "skip", "refuse"


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
    that run (asked for a run's start only) and whether the input came after the run's end."""
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
