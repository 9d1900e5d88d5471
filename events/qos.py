"""QoS family: observations of the show and the decisions taken on them."""

from __future__ import annotations

from dataclasses import dataclass

from events.base import Event, registry


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class QosObserved(Event):
    """A measured value (queue depth, hop latency, frame lateness, buffer fill)."""

    type = "qos.observed"
    metric: str
    value: float
    source: str


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class ResolutionChanged(Event):
    """The stage resolution changes, with the reason and the numbers behind it."""

    type = "qos.resolution_changed"
    before: str
    after: str
    reason: str


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class ThrottleChanged(Event):
    """The LLM→TTS text window changes size."""

    type = "qos.throttle_changed"
    window_tokens: int
    reason: str
