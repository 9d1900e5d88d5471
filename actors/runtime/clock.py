"""When a clocked actor is next due: the earliest ``next_tick`` of its runs, on the wall clock."""

from __future__ import annotations

from actors.base import ClockedActor
from events.run import RunStarted


def next_due(actor: ClockedActor) -> tuple[float, RunStarted] | None:
    """The wall time (s) and run of the actor's next tick, or None when none is due."""
    best: tuple[float, RunStarted] | None = None
    for run in actor.active_runs():
        show_ms = actor.next_tick(run.run)
        if show_ms is None:
            continue
        wall = (run.started_at_ms + show_ms) / 1000
        if best is None or wall < best[0]:
            best = (wall, run)
    return best
