"""QoS family: observations of the show and the decisions taken on them."""

from __future__ import annotations

from dataclasses import dataclass

from events.base import Event, registry


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class QosObserved(Event):
    """A measured value (queue depth, hop latency, frame lateness, buffer fill)."""

    type = "qos.observed"
    measured = ("value",)
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
    lateness_p99_ms: float = 0.0
    loss: float = 0.0


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class ThrottleChanged(Event):
    """The LLM→TTS text window changes size."""

    type = "qos.throttle_changed"
    window_tokens: int
    reason: str
    buffer_fill: float = 0.0


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class FramesObserved(Event):
    """One window of stage frames as the renderer drew them (the resolution ladder's input)."""

    type = "qos.frames_observed"
    measured = ("cost_p99_ms",)
    window_end_ms: int
    frames: int
    lateness_p99_ms: float
    loss: float
    resolution: str
    cost_p99_ms: float = 0.0  # drawing and encoding one frame


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyAnomaly(Event):
    """A hop's latency went far above its recent p99."""

    type = "qos.anomaly"
    hop: str
    sample_ms: float
    baseline_p99_ms: float
    factor: float
