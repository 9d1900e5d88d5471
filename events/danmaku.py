"""Danmaku family: viewers' comments in, and the ones turned away.

Producers publish ``danmaku.received`` JSON on ``troupe.<run>.danmaku.received``;
only ``type`` and ``payload.text`` are required (see README).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from events.base import Event, registry

MAX_VIEWER_CHARS = 160
# "<platform>:<its id>": a lower-case namespace, then the platform's id (no spaces or controls)
_VIEWER = re.compile(r"[a-z][a-z0-9_-]{0,15}:[^\s\x00-\x1f\x7f]+")
_PLATFORM = re.compile(r"[a-z][a-z0-9_-]{0,15}")


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class DanmakuReceived(Event):
    """A viewer's comment; ``to`` optionally addresses one role.

    ``user`` is the name shown for the viewer.  Where a platform identifies them, ``viewer`` is
    their platform-namespaced id (``twitch:<user-id>``, ``bili:<uid>``, ``yt:<channel id>``), the
    one the stage knows them by across renames, and ``platform`` names where the comment came
    from; a gift carries its ``value`` in ``currency`` as the platform counts it, and ``badges``
    what the platform says the viewer is (``moderator``, ``subscriber``, ``member``...).
    """

    type = "danmaku.received"
    personal = ("text", "user", "viewer", "source_id")
    text: str
    user: str = ""
    to: str | None = None
    kind: str = "comment"
    viewer: str = ""
    platform: str = ""
    value: float = 0.0
    currency: str = ""
    badges: tuple[str, ...] = ()
    source_id: str = ""  # the platform's own id of the message ("twitch:<id>"), where it came from one

    @property
    def who(self) -> str:
        """The viewer as the stage tells them apart: their platform id, else the name given."""
        return self.viewer or self.user


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class DanmakuRejected(Event):
    """A comment the director turned away, with a machine reason and a human detail."""

    type = "danmaku.rejected"
    personal = ("text", "user")
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
    personal = ("text", "user")
    reason: str
    detail: str
    user: str = ""
    text: str = ""
    heard_ms: int = 0


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class DanmakuWaiting(Event):
    """A valid comment the director took in at ``heard_ms`` and let wait for the floor: not an
    outcome (its cue, merge or skip comes when the floor frees or it goes stale), the record of
    when it was taken in, so that a standby taking the director over and re-execution hand it
    over at that show time.  ``cls`` is its class as the stage plan ranks it (``addressed``
    before ``comment``), ``form`` what it asks (``question``, ``remark``, ``greeting``),
    ``waits_for`` the role it is for where that is known before it is answered (addressed, or
    naming a role's keywords; "": whichever role is least busy then), ``ahead`` how many waiting
    comments the floor would go to before it, ``waiting`` how many wait (it included),
    ``free_ms`` when the floor is planned to free and ``until_ms`` the latest its reply may begin
    (later, it is let go: ``stale``).  A near-duplicate of a waiting comment is answered with it:
    ``joined`` names that comment, and the rest describes that comment's wait."""

    type = "danmaku.waiting"
    personal = ("text", "user")
    heard_ms: int
    cls: str
    form: str = ""
    waits_for: str = ""
    ahead: int = 0
    waiting: int = 0
    free_ms: int = 0
    until_ms: int = 0
    joined: str = ""
    user: str = ""
    text: str = ""
    answers = False  # not an outcome: the comment's answer is still to come


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class DanmakuGap(Event):
    """A platform bridge's connection was down: from when until when (wall-clock ms), why, and
    what the platform says was missed meanwhile (``missed`` -1: it does not say)."""

    type = "danmaku.gap"
    platform: str
    source: str
    from_ms: int
    until_ms: int
    reason: str
    missed: int = -1
    detail: str = ""


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


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class SpeechPlaced(Event):
    """Where a reply's speech is on the show timeline, as lipsync placed it: told when its first
    sentence is placed (``start_ms``) and when nothing more of it will be (``done``: its last
    sentence placed, or the rest dropped or cut; ``start_ms`` -1 when none of it was spoken).
    ``end_ms`` is where its speech placed so far ends, ``floor_ms`` where all speech placed so far
    ends: the floor is free from then on.

    Published by lipsync on ``troupe.<run>.danmaku.placed[.<role>]``: in the danmaku stream, so that
    the director plans the floor from the speech actually placed, in one order with the chat,
    which re-execution reproduces."""

    type = "danmaku.placed"
    utterance: str
    start_ms: int = -1
    end_ms: int = 0
    done: bool = False
    floor_ms: int = 0


def viewer_problem(event: DanmakuReceived) -> str | None:
    """What is wrong with a danmaku's viewer fields (one line), or None."""
    if event.viewer and (len(event.viewer) > MAX_VIEWER_CHARS or not _VIEWER.fullmatch(event.viewer)):
        return f"viewer {event.viewer[:40]!r} is not <platform>:<id> (at most {MAX_VIEWER_CHARS} characters)"
    if event.platform and not _PLATFORM.fullmatch(event.platform):
        return f"platform {event.platform[:40]!r} is not a lower-case name"
    if not math.isfinite(event.value) or event.value < 0:
        return f"value {event.value} is not a finite amount of 0 or more"
    if len(event.currency) > 16 or any(c.isspace() or not c.isprintable() for c in event.currency):
        return f"currency {event.currency[:40]!r} is not a short code"
    if len(event.badges) > 16 or any(len(b) > 32 or not _PLATFORM.fullmatch(b) for b in event.badges):
        return "badges must be at most 16 lower-case names"
    return None
