"""Cue family: the director asks a role to speak."""

from __future__ import annotations

from dataclasses import dataclass

from events.base import Event, registry


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class CueIssued(Event):
    """Role ``role`` is to answer ``text`` (one or several merged danmaku)."""

    type = "cue.issued"
    seq: int
    user: str
    text: str
    danmaku: tuple[str, ...]
    routed_by: str
    priority: float = 1.0
    deadline_ms: int = 0      # show time by which the reply's speech must have started
    max_sentences: int = 0    # the longest reply the stage has room for (0: the LLM's own limit)
    heard_ms: int = 0         # show time the director took the danmaku in (it may wait for the floor)


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class CueMerged(Event):
    """A danmaku nearly identical to a recent one is answered by that one's cue."""

    type = "cue.merged"
    cue: str
    user: str
    text: str
    heard_ms: int = 0
