"""Viseme family: timed mouth shapes on the show timeline.

The set has 15 visemes: sil PP FF TH DD kk CH SS nn RR aa E ih oh ou.  Faces act on the same
timeline: ``viseme.face`` says from when a role shows an expression, where it looks, and a nod.
"""

from __future__ import annotations

from dataclasses import dataclass

from events.base import Event, registry


@dataclass(frozen=True, slots=True)
class VisemeMark:
    """A viseme held from ``start_ms`` to ``end_ms`` (show time)."""

    viseme: str
    start_ms: int
    end_ms: int


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class VisemeTrack(Event):
    """The visemes of one audio chunk, placed on the show timeline at ``start_ms``."""

    type = "viseme.track"
    personal = ("text",)
    utterance: str
    audio: str
    seq: int
    start_ms: int
    end_ms: int
    text: str
    visemes: tuple[VisemeMark, ...]
    last: bool = False
    chunk: int = 0              # the utterance chunk (sentence) the audio belongs to
    chunk_done: bool = True     # the chunk's last audio part


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class VisemeCut(Event):
    """An utterance was interrupted: its speech (mouths and audio) stops at ``at_ms``."""

    type = "viseme.cut"
    utterance: str
    at_ms: int
    by: str = ""                # the utterance that took the floor


EXPRESSIONS = ("neutral", "happy", "sad", "angry", "surprised", "thinking")
AUDIENCE = "audience"  # where a role looks when it looks at no other role


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class FaceChanged(Event):
    """Role ``role``'s face from ``start_ms`` (show time): it eases into ``expression`` over
    ``ease_ms``, turns to ``look`` (a role id, or ``audience``), or nods (``gesture``).  An empty
    field leaves that part as it was.  A change replaces what earlier changes of the same role
    planned for the same part from ``start_ms`` on (a role that speaks again keeps its face)."""

    type = "viseme.face"
    start_ms: int
    expression: str = ""
    look: str = ""
    gesture: str = ""
    ease_ms: int = 0
    reason: str = ""
    utterance: str = ""         # the speech it goes with
