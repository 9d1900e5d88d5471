"""Role priority: a role's weight, a continuity bonus, and aging that bounds every wait.

The score of waiting work is additive::

    score = weight(role) + bonus (if the same role spoke within the window) + waited_ms / aging_ms

Weights are clamped to ``[min_weight, max_weight]``.  Because every waiting item
gains one point per ``aging_ms`` whatever its role, work that arrives more than

    D = aging_ms * (max_weight + continuity_bonus - min_weight)

after an item can never be served before it (``overtake_bound_ms``).  So an item
waits at most for the work that was already waiting or arrives within D after it:
with defaults (weights 0.25-4, bonus 0.5, aging 1 s) D is 4.25 s of show time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PriorityPolicy:
    continuity_window_ms: int = 300
    continuity_bonus: float = 0.5
    aging_ms: float = 1000.0
    min_weight: float = 0.25
    max_weight: float = 4.0

    def __post_init__(self) -> None:
        if self.aging_ms <= 0:
            raise ValueError("aging_ms must be positive")
        if not 0 < self.min_weight <= self.max_weight:
            raise ValueError("need 0 < min_weight <= max_weight")

    def weight(self, base: float, factor: float = 1.0) -> float:
        """A role's effective weight: its base weight times the QoS factor, clamped."""
        return min(self.max_weight, max(self.min_weight, base * factor))

    def continuing(self, role: str, last_role: str | None, last_end_ms: int | None, now_ms: int) -> bool:
        """Whether ``role`` would go on from the role that spoke last, within the window."""
        return (
            role == last_role and last_end_ms is not None
            and now_ms - last_end_ms <= self.continuity_window_ms
        )

    def score(self, weight: float, waited_ms: float, continuing: bool) -> float:
        """Higher is served first; ``weight`` should come from ``weight()``."""
        return weight + (self.continuity_bonus if continuing else 0.0) + max(0.0, waited_ms) / self.aging_ms

    @property
    def overtake_bound_ms(self) -> float:
        """Work that arrives more than this after an item is never served before it."""
        return self.aging_ms * (self.max_weight + self.continuity_bonus - self.min_weight)
