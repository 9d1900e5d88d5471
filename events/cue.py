"""Cue family: the director asks a role to speak."""

from __future__ import annotations

from dataclasses import dataclass

from events.base import Event, registry


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class CueIssued(Event):
    """Role ``role`` is to answer ``text`` (one or several merged danmaku)."""

    type = "cue.issued"
    personal = ("text", "user", "viewer", "facts", "opener")
    seq: int
    user: str
    text: str
    danmaku: tuple[str, ...]
    routed_by: str
    priority: float = 1.0
    deadline_ms: int = 0      # show time by which the reply's speech must have started
    max_sentences: int = 0    # the longest reply the stage has room for (0: the LLM's own limit)
    heard_ms: int = 0         # show time the director took the danmaku in (it may wait for the floor)
    # Why the show speaks when no viewer asked (empty for a reply to the chat): "line" (a
    # segment's verbatim line), "brief" (a point on the segment's brief), "follow_up" (answering
    # another role), "invitation" (to the chat), "say" (an operator's line, verbatim).
    reason: str = ""
    segment: str = ""         # the segment's title
    follows: str = ""         # the utterance (cue id) a follow-up answers
    addressee: str = ""       # the role a follow-up speaks to
    verbatim: bool = False    # ``text`` is spoken word for word
    turn: int = 0             # the role's self-driven turns so far (writers vary their lines by it)
    # The short line the reply begins with, said at once while a model writes the rest: the
    # director sends it to TTS as the reply's chunk 0 with the cue ("" for none: an instant
    # writer, a line of the show's own, openers off); the writer goes on from it.
    opener: str = ""
    gift: bool = False        # the viewer sent a gift (``text`` is its message): the reply thanks them
    point: int = -1           # a point on the brief: the segment's points in the role's language said before it
    # Show time the stage plans the reply's speech to begin (0: not planned).  A reply asked for
    # on deck, while another is spoken, has until then to be written.
    begins_ms: int = 0
    # The viewer as the stage tells them apart (their platform id; "" for a bare name), and what
    # the stage remembered of them (``danmaku.recalled``, named by ``recalled``): ``returning``,
    # their first comment in this show after earlier shows (the reply greets them back);
    # ``regular``, a viewer of earlier shows or gifts (a gift is thanked as a regular's);
    # ``facts``, what they stated before, those this comment bears on first and counted in ``bears``
    # (each "kind|detail|value": the reply may refer to them).
    viewer: str = ""
    recalled: str = ""
    returning: bool = False
    regular: bool = False
    facts: tuple[str, ...] = ()
    bears: int = 0

    @property
    def self_driven(self) -> bool:
        return bool(self.reason)


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class CueMerged(Event):
    """A danmaku nearly identical to a recent one is answered by that one's cue."""

    type = "cue.merged"
    personal = ("text", "user")
    cue: str
    user: str
    text: str
    heard_ms: int = 0


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentStarted(Event):
    """The rundown moves on: segment ``title`` (``index`` in the show file) starts at ``t_ms``,
    planned for ``planned_ms``; ``reason``: "start", "planned" (the previous one ran its length),
    "lines" (it ran over to say its verbatim lines), "operator"."""

    type = "cue.segment"
    title: str
    index: int
    planned_ms: int
    length_ms: int
    reason: str


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class ControlApplied(Event):
    """What the director did with an operator's control (``danmaku.control``)."""

    type = "cue.control"
    action: str
    detail: str
    user: str = ""


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class StagePaced(Event):
    """The director plans the floor from the roles' measured pace (``danmaku.pace``): how early a
    reply is asked for before the floor frees, the speech it expects of a sentence, of a line of
    the show's own and of an opener, and the longest reply per role (a slow writer gets shorter
    replies).  ``heard_ms``: when it took the measurement in."""

    type = "cue.paced"
    lead_ms: int
    sentence_ms: int
    own_line_ms: int
    opener_ms: int
    max_sentences: dict[str, int]
    reason: str
    heard_ms: int = 0


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class FloorFollowed(Event):
    """The director took in where a reply's speech was placed (``danmaku.placed``): the floor is
    now planned to free at ``free_ms`` (the speech placed, the natural pause after it, and
    estimates only for what is not placed yet), and the next reply is asked for ``ahead_ms``
    before that.  ``heard_ms``: when it took the placement in (re-execution hands it over then)."""

    type = "cue.floor"
    utterance: str
    start_ms: int
    end_ms: int
    done: bool
    free_ms: int
    ahead_ms: int
    heard_ms: int = 0
