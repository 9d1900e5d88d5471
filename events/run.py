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
    # The settings the deterministic actors follow in this run (see infra.settings.RUN_SETTINGS),
    # so that every process and every re-execution decides alike.
    config: dict[str, Any] = field(default_factory=dict)
    duration_ms: int = 0  # the show's planned length (0: open-ended): nothing is placed after it


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class RunEnded(Event):
    """A run ended (duration reached, stopped by a user, or failed)."""

    type = "run.ended"
    reason: str
    duration_ms: int
