"""What the stage remembers of its viewers, as events: a fact a viewer stated about themselves,
and what the stage recalled of a viewer when their comment came.

Both travel in the danmaku stream (``troupe.<run>.danmaku.noted``, ``...danmaku.recalled``), so
the director takes a recall in one order with the comments, and re-execution hands it over from
the store: ``replay --verify`` needs no read model.  The read model itself (``store.viewers``) is
a projection of the store, rebuilt from these events and the comments.

Only a viewer with a stable identity is remembered (``remembered``): a platform-namespaced id
(``twitch:<user-id>``, ``bili:<uid>``), never a bare name (anyone may type one), an anonymous or
masked viewer (the bridges give them no ``viewer``), or a uid 0.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from events.base import Event, registry

# Ids a platform gives to nobody in particular: never remembered.
_NOBODY = frozenset({"0", "anonymous", "anon", "guest", "unknown", "none", "null"})


def remembered(viewer: str) -> bool:
    """Whether the stage may remember a viewer: a ``<platform>:<id>`` whose id names somebody."""
    platform, sep, ident = viewer.partition(":")
    return bool(sep and platform and ident) and ident.strip("0") != "" and ident.casefold() not in _NOBODY


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class ViewerNoted(Event):
    """A fact a viewer stated about themselves, extracted from their comment (``causation``):
    ``kind``/``value``/``detail`` as ``schedulers.memory.Fact``, ``said`` the words it was read from, ``extractor``
    what read it (``rules``, or a model's name)."""

    type = "danmaku.noted"
    personal = ("viewer", "value", "detail", "said")
    viewer: str
    kind: str
    value: str
    detail: str = ""
    language: str = "en"
    said: str = ""
    extractor: str = "rules"


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class ViewerRecalled(Event):
    """What the stage knew of a viewer when their comment (``danmaku``, also the causation) came,
    read from the read model: ``known`` whether it had seen them before; ``shows`` the earlier
    shows they came to (this one not counted), ``comments`` and ``gifts`` their totals before
    this comment, ``last_seen_at_ms`` when they were last seen (wall clock); ``facts`` what they
    stated, as "kind|detail|value", newest first, ``bears`` those this comment bears on (a
    question about where they live, for a viewer who said where they are from), ``topics`` the
    last things they talked about, and ``roles`` the roles that answered them most.

    The director reads it as it takes the comment in and records it before what it decides (the
    read's outcome is an input from outside the run: re-execution takes it from the record), hands
    it to the writer with the cue (``CueIssued.recalled`` names it), and ``inspect
    --correlation`` lists it.  ``known`` False: a first-time viewer, or the read model not read in
    time (``reason`` says so).  ``forget``: the viewer asked to be forgotten (the recall then
    carries nothing of them)."""

    type = "danmaku.recalled"
    personal = ("viewer", "facts", "bears", "topics")
    viewer: str
    danmaku: str
    known: bool = False
    shows: int = 0
    comments: int = 0
    gifts: int = 0
    gift_value: float = 0.0
    last_seen_at_ms: int = 0
    facts: tuple[str, ...] = ()
    bears: tuple[str, ...] = ()
    topics: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    reason: str = ""          # why nothing is known where the read model could not be read
    # The comment is the viewer's ``!forget``: the projector forgets them when it comes to this
    # event (``store.forget``), and the director answers on stage without their name.
    forget: bool = False
    answers = False  # not the comment's answer: its cue, skip or merge comes from the director



def redact(event: Event) -> Event:
    """The event with its personal fields (``Event.personal``) blanked: strings, bytes and tuples
    emptied; everything else (ids, causation, times, the audio) kept, so the store's structure
    and the causal chains stay whole.  ``troupe viewers forget`` writes this in place of each
    event of a forgotten viewer's chains."""
    blank: dict[str, object] = {}
    for name in event.personal:
        value = getattr(event, name)
        if value not in ("", b"", ()):
            blank[name] = "" if isinstance(value, str) else b"" if isinstance(value, bytes) else ()
    return dataclasses.replace(event, **blank) if blank else event  # type: ignore[arg-type]
