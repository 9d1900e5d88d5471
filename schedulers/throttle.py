"""LLM -> TTS throttle: how much text may be released ahead of speech.

The window is ``max_tokens`` while the TTS buffer is at most ``shrink_above`` full,
and shrinks linearly to ``min_tokens`` as the buffer fills up completely.
``TextWindow`` applies it: text is released while the tokens released and not yet
spoken stay within the window (the first piece of a reply always goes).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ThrottlePolicy:
    min_tokens: int = 4
    max_tokens: int = 16
    shrink_above: float = 0.7

    def __post_init__(self) -> None:
        if not 1 <= self.min_tokens <= self.max_tokens:
            raise ValueError("need 1 <= min_tokens <= max_tokens")
        if not 0 <= self.shrink_above < 1:
            raise ValueError("shrink_above must be in [0, 1)")

    def window(self, fill: float) -> int:
        """Tokens allowed ahead of speech when the TTS buffer is ``fill`` full (0..1)."""
        if fill <= self.shrink_above:
            return self.max_tokens
        frac = min(1.0, (fill - self.shrink_above) / (1.0 - self.shrink_above))
        return max(self.min_tokens, round(self.max_tokens - frac * (self.max_tokens - self.min_tokens)))


def releasable(ahead_tokens: int, window_tokens: int, next_tokens: int) -> bool:
    """Whether a piece of ``next_tokens`` may go when ``ahead_tokens`` are released but unspoken."""
    return ahead_tokens == 0 or ahead_tokens + next_tokens <= window_tokens
