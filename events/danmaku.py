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


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class RolePaceMeasured(Event):
    """How fast a role's replies come, as its llm worker measured them on its writer and voice:
    the writer's time to its first sentence and between two more (wall-clock ms, the model's own
    pace), and the speech of a sentence and of an opener (show ms, as lipsync placed them); each
    the upper quartile (the median for ``sentence_write_ms``) of the role's last replies.

    Published by the llm worker on ``troupe.<run>.danmaku.pace.<role>``: in the danmaku stream,
    so that the director plans the floor from it in one order with the chat, which
    re-execution reproduces."""

    type = "danmaku.pace"
    backend: str
    first_sentence_ms: int
    sentence_write_ms: int = 0
    speech_ms: int = 0           # 0: no sentence spoken yet
    opener_ms: int = 0           # 0: no opener (an instant writer, or openers off)
    replies: int = 0             # how many replies the numbers come from
