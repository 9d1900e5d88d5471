"""The resolution ladder: 1080p -> 720p -> 480p -> 360p, with hysteresis.

Each window of frames (by default one second of show time) is good or bad: bad
when its frame lateness p99 is over the budget (one frame interval by default) or
more than ``loss`` of its frames were lost.  After ``bad_windows`` bad windows in a
row the resolution goes one step down; after ``stable_ms`` of good windows it goes
one step up (never above the show's resolution) - and only when the frames' cost,
scaled to the bigger picture by its pixel count, would still fit within
``headroom`` of the budget (going up into a picture the renderer cannot draw in
time would only come back down); never two changes within ``min_gap_ms``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Window:
    """One window of frames: when it ended (show ms), its lateness p99 and the share lost."""

    end_ms: int
    lateness_p99_ms: float
    loss: float
    frames: int = 0
    cost_p99_ms: float = 0.0  # the time to draw and encode a frame (0: unknown)


@dataclass(frozen=True, slots=True)
class Change:
    at_ms: int
    before: str
    after: str
    reason: str
    lateness_p99_ms: float
    loss: float


@dataclass(frozen=True, slots=True)
class LadderPolicy:
    bad_windows: int = 3
    budget_ms: float = 40.0
    loss: float = 0.03
    stable_ms: int = 15000
    min_gap_ms: int = 10000
    headroom: float = 0.8

    def fits(self, w: Window, scale: float) -> bool:
        """Whether frames as costly as this window's, scaled by ``scale`` (the bigger picture's
        pixels over the current one's), fit the budget."""
        return w.cost_p99_ms * scale <= self.headroom * self.budget_ms

    def bad(self, w: Window) -> bool:
        return w.lateness_p99_ms > self.budget_ms or w.loss > self.loss


class ResolutionLadder:
    """The rungs are the resolutions by name with their (width, height), largest first."""

    def __init__(self, rungs: Mapping[str, tuple[int, int]], top: str, policy: LadderPolicy | None = None) -> None:
        if top not in rungs:
            raise ValueError(f"unknown resolution {top!r}")
        self.rungs = tuple(rungs)
        self.pixels = {name: w * h for name, (w, h) in rungs.items()}
        self.policy = policy or LadderPolicy()
        self.top = top
        self.current = top
        self.bad_run = 0
        self.good_since: int | None = None
        self.last_change_ms: int | None = None

    def observe(self, w: Window) -> Change | None:
        """Take one window; the change it causes, if any (already applied to ``current``)."""
        p = self.policy
        gap_ok = self.last_change_ms is None or w.end_ms - self.last_change_ms >= p.min_gap_ms
        if p.bad(w):
            self.bad_run += 1
            self.good_since = None
            i = self.rungs.index(self.current)
            if self.bad_run >= p.bad_windows and gap_ok and i + 1 < len(self.rungs):
                return self._change(w, self.rungs[i + 1], (
                    f"{self.bad_run} bad windows in a row: lateness p99 {w.lateness_p99_ms:.0f} ms "
                    f"(budget {p.budget_ms:.0f}), loss {w.loss:.1%} (limit {p.loss:.0%})"
                ))
            return None
        self.bad_run = 0
        if self.good_since is None:
            self.good_since = w.end_ms
        i = self.rungs.index(self.current)
        stable = w.end_ms - self.good_since >= p.stable_ms
        scale = self.pixels[self.rungs[i - 1]] / self.pixels[self.current] if i > 0 else 1.0
        if stable and gap_ok and self.current != self.top and p.fits(w, scale):
            return self._change(w, self.rungs[i - 1], (
                f"stable for {(w.end_ms - self.good_since) / 1000:.0f} s: lateness p99 "
                f"{w.lateness_p99_ms:.0f} ms, loss {w.loss:.1%}, frame cost {w.cost_p99_ms:.0f} ms "
                f"(~{w.cost_p99_ms * scale:.0f} ms at {self.rungs[i - 1]})"
            ))
        return None

    def _change(self, w: Window, after: str, reason: str) -> Change:
        change = Change(w.end_ms, self.current, after, reason, w.lateness_p99_ms, w.loss)
        self.current = after
        self.last_change_ms = w.end_ms
        self.bad_run = 0
        self.good_since = None
        return change
