"""Viseme family: timed mouth shapes on the show timeline.

The set has 15 visemes: sil PP FF TH DD kk CH SS nn RR aa E ih oh ou.
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
