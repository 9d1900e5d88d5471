"""Frame family: encoded stage frames on the 25 fps show clock."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

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
    v = 2
    # v1 had no track_end_ms: such a frame is redrawn with its track as the recorded cuts leave it.
    upcasters = MappingProxyType({1: lambda payload: payload})
    blob = "jpeg"
    n: int
    width: int
    height: int
    resolution: str
    speaking: tuple[SpeakingMark, ...] = ()
    late_ms: float = 0.0
    track: str | None = None  # the viseme track shown (mouth or subtitle): what re-execution redraws
    # Where that track ended as it was drawn: a track whose reply was cut before the frame was
    # drawn ends at the cut; a cut that came later is not in the frame (None: no track, or a
    # frame recorded before frames said so: drawn as the recorded cuts leave the track).
    track_end_ms: int | None = None
    faces: tuple[FaceMark, ...] = ()  # the faces drawn (none recorded: every face neutral)
    background: str = ""  # the back wall drawn ("": the default; "#rrggbb"; an image file)
    encoder: str | None = None  # None: libjpeg-turbo on the CPU (reproducible); else e.g. "torchvision-cuda"
    jpeg: bytes = b""
