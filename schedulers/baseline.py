"""Latency baselines: a sliding-window p99 per hop, and anomalies against it.

A sample is an anomaly when the hop has at least ``min_samples`` samples and the
sample exceeds both ``factor`` x the baseline p99 and the absolute ``floor_ms``
(short hops jitter by a few ms without anything being wrong).  Anomalous samples
still join the window, so a lasting shift becomes the new baseline.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank percentile ``q`` (0..100) of values already sorted (not empty)."""
    return ordered[max(0, math.ceil(q * len(ordered) / 100) - 1)]


@dataclass(frozen=True, slots=True)
class Anomaly:
    hop: str
    sample_ms: float
    baseline_p99_ms: float
    factor: float


@dataclass(slots=True)
class _Hop:
    recent: deque[float]
    ordered: list[float] = field(default_factory=list)


class LatencyBaselines:
    def __init__(self, window: int = 200, factor: float = 1.8, floor_ms: float = 50.0, min_samples: int = 20) -> None:
        if window < 1 or factor <= 1 or min_samples < 1:
            raise ValueError("need window >= 1, factor > 1, min_samples >= 1")
        self.window, self.factor, self.floor_ms, self.min_samples = window, factor, floor_ms, min_samples
        self._hops: dict[str, _Hop] = {}

    def p99(self, hop: str) -> float | None:
        h = self._hops.get(hop)
        if h is None or not h.ordered:
            return None
        return nearest_rank(h.ordered, 99)

    def observe(self, hop: str, sample_ms: float) -> Anomaly | None:
        h = self._hops.get(hop)
        if h is None:
            h = self._hops[hop] = _Hop(deque())
        anomaly = None
        baseline = self.p99(hop)
        if (baseline is not None and len(h.ordered) >= self.min_samples
                and sample_ms > baseline * self.factor and sample_ms > self.floor_ms):
            anomaly = Anomaly(hop, sample_ms, baseline, self.factor)
        h.recent.append(sample_ms)
        bisect.insort(h.ordered, sample_ms)
        if len(h.recent) > self.window:
            old = h.recent.popleft()
            del h.ordered[bisect.bisect_left(h.ordered, old)]
        return anomaly
