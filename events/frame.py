"""Frame family: encoded stage frames on the 25 fps show clock."""

from __future__ import annotations

from dataclasses import dataclass

from events.base import Event, registry


@dataclass(frozen=True, slots=True)
class SpeakingMark:
    """Which role's mouth a frame shows, for which danmaku chain, with which viseme."""

    role: str
    correlation: str
    viseme: str


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class FrameRendered(Event):
    """One JPEG stage frame; ``n`` is the frame number on the show clock."""

    type = "frame.rendered"
    blob = "jpeg"
    n: int
    width: int
    height: int
    resolution: str
    speaking: tuple[SpeakingMark, ...] = ()
    late_ms: float = 0.0
    track: str | None = None  # the viseme track shown (mouth or subtitle): what re-execution redraws
    encoder: str | None = None  # None: libjpeg-turbo on the CPU (reproducible); else e.g. "torchvision-cuda"
    jpeg: bytes = b""
