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


@dataclass(frozen=True, slots=True)
class FaceMark:
    """A role's face as a frame drew it (``viseme.face`` at the frame's time, in the steps it is
    drawn in): the expression, the one it eases from and how far (sixteenths), where it looks
    (gaze steps, negative: left) and a nod (eighths).  Redrawing a frame draws these."""

    role: str
    expression: str
    previous: str
    blend: int
    gaze: int
    nod: int


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
    faces: tuple[FaceMark, ...] = ()  # the faces drawn (none recorded: every face neutral)
    background: str = ""  # the back wall drawn ("": the default; "#rrggbb"; an image file)
    encoder: str | None = None  # None: libjpeg-turbo on the CPU (reproducible); else e.g. "torchvision-cuda"
    jpeg: bytes = b""
