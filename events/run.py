"""Run family: a show run starts and ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from events.base import Event, registry


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(Event):
    """A run began: its show (roles, settings) and the seed everything derives from."""

    type = "run.started"
    show: dict[str, Any]
    seed: int
    fps: int = 25
    resolution: str = "720p"
    started_at_ms: int = 0
    replay_of: str | None = None  # set on a playback of a recorded run: workers leave it alone
    # The run's settings (every one not marked the process's own: infra.settings.run_config),
    # followed by every process and every re-execution, so that they decide alike.
    config: dict[str, Any] = field(default_factory=dict)
    duration_ms: int = 0  # the show's planned length (0: open-ended): nothing is placed after it


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class RunEnded(Event):
    """A run ended (duration reached, stopped by a user, or failed)."""

    type = "run.ended"
    reason: str
    duration_ms: int


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class RunOwned(Event):
    """A process of a stateful actor kind (director, lipsync, render, sink) took a run's state, or
    let it go: which process holds each run's actors, from when, and why."""

    type = "run.owned"
    kind: str                     # the actor kind
    holder: str                   # the process that holds it now ("" when let go)
    previous: str = ""            # the process that held it before ("" for a new run)
    reason: str = ""              # why: placed (least loaded), taken over, handed over, released
    runs_held: int = 0            # the runs the holder holds now, this one included
    # Its state rebuilt from the streams (another process had read the run): re-execution rebuilds
    # it there too, the holder going on from its last stored output (``resumed``: its id) where its
    # kind does (the renderer, from the frame after it).  Its time is when the rebuild began.
    rebuilt: bool = False
    resumed: str = ""
