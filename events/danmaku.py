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


CONTROLS = ("say", "segment", "hold", "resume")


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorControl(Event):
    """An operator steers the show (published on ``troupe.<run>.danmaku.control``, which only a
    moderator's credentials may publish on): ``say`` a line verbatim next (``role``, ``text``),
    go to a ``segment`` (``target``: "next" or a title), ``hold`` or ``resume`` the self-driven
    speech (``all``: chat too).  It travels in the danmaku stream, so the director takes controls
    and comments in one order, which re-execution reproduces."""

    type = "danmaku.control"
    action: str
    text: str = ""
    target: str = ""
    all: bool = False
    user: str = ""
