"""Danmaku family: viewers' comments in, and the ones turned away.

Producers publish ``danmaku.received`` JSON on ``troupe.<run>.danmaku.received``;
only ``type`` and ``payload.text`` are required (see README).
"""

from __future__ import annotations

from dataclasses import dataclass

from events.base import Event, registry


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class DanmakuReceived(Event):
    """A viewer's comment; ``to`` optionally addresses one role."""

    type = "danmaku.received"
    text: str
    user: str = ""
    to: str | None = None
    kind: str = "comment"


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class DanmakuRejected(Event):
    """A comment the director turned away, with a machine reason and a human detail."""

    type = "danmaku.rejected"
    reason: str
    detail: str
    user: str = ""
    text: str = ""


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class DanmakuSkipped(Event):
    """A valid comment the director chose not to answer (the stage is busy, the viewer spoke
    recently, the show is ending), with a machine reason and a human detail."""

    type = "danmaku.skipped"
    reason: str
    detail: str
    user: str = ""
    text: str = ""
    heard_ms: int = 0
