"""Render actor: draws the stage at 25 fps on the show clock and emits JPEG frames."""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from actors.backends.render_torch import RoleLook, RoleState, StageRenderer, encode_jpeg
from actors.base import Actor, Context, Input
from actors.show import show_from_dict
from events.base import Event, derive_id
from events.frame import FrameRendered, SpeakingMark
from events.qos import ResolutionChanged
from events.run import RunEnded, RunStarted
from events.viseme import VisemeTrack
from infra.settings import Settings

log = logging.getLogger(__name__)
SUBTITLE_HOLD_MS = 1200


@dataclass(slots=True)
class _Show:
    run: RunStarted
    renderer: StageRenderer
    roles: tuple[str, ...]
    frame_ms: float
    next_frame: int = 0
    end_ms: int | None = None
    tracks: list[VisemeTrack] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    skipped: int = 0
    resolution: str | None = None  # a decided change, applied before the next frame


class RenderActor(Actor):
    """Viseme tracks and QoS decisions in, stage frames out."""

    name = "render"
    inputs = (Input("run"), Input("viseme"), Input("qos", ("troupe.*.qos.resolution_changed",)))
    blocking_tick = True  # drawing and JPEG run in a thread; taking in visemes stays on the loop

    def __init__(self, settings: Settings, device: str = "cpu") -> None:
        self.settings = settings
        self.device = device
        self._shows: dict[str, _Show] = {}

    def active_runs(self) -> Sequence[RunStarted]:
        return [s.run for s in self._shows.values() if not self._finished(s)]

    @staticmethod
    def _finished(show: _Show) -> bool:
        return show.end_ms is not None and show.next_frame * show.frame_ms >= show.end_ms

    def next_tick(self, run: str) -> int | None:
        show = self._shows.get(run)
        if show is None or self._finished(show):
            return None
        # Draw a frame a moment after its show time, so visemes placed at that very
        # moment (one NATS hop away) make it into the frame instead of the next one.
        return int(show.next_frame * show.frame_ms) + self.settings.render_delay_ms

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        if isinstance(event, RunStarted):
            if ctx.joinable(self.settings.join_window_s):
                self._start(event)
            else:  # a run long under way (or long over) when this renderer met it
                log.warning("not rendering run %s: it started %d s ago", event.run, ctx.now_ms // 1000)
            return ()
        show = self._shows.get(event.run)
        if show is None:
            return ()
        if isinstance(event, RunEnded):
            show.end_ms = event.duration_ms
        elif isinstance(event, VisemeTrack):
            i = bisect.bisect(show.starts, event.start_ms)
            show.starts.insert(i, event.start_ms)
            show.tracks.insert(i, event)
        elif isinstance(event, ResolutionChanged):
            show.resolution = event.after
        return ()

    def _start(self, run: RunStarted) -> None:
        # Builds the sprite caches (a few hundred ms): once per run, on the event loop.
        if run.run in self._shows:
            return
        spec = show_from_dict(run.show)
        looks = [RoleLook(r.id, r.name, r.color, r.shape) for r in spec.roles]
        renderer = StageRenderer(looks, run.resolution, device=self.device, seed=run.seed)
        self._shows[run.run] = _Show(run, renderer, tuple(r.id for r in spec.roles), 1000 / run.fps)

    def tick(self, ctx: Context) -> Sequence[Event]:
        assert ctx.run is not None
        show = self._shows[ctx.run.run]
        due = int((ctx.now_ms - self.settings.render_delay_ms) // show.frame_ms)
        if show.end_ms is not None:
            due = min(due, int(show.end_ms // show.frame_ms) - 1)
        if due - show.next_frame >= 2:  # more than a frame behind: drop to the present
            show.skipped += due - show.next_frame
            show.next_frame = due
        n = show.next_frame
        show.next_frame += 1
        return [self._frame(show, n, ctx.now_ms)]

    def _frame(self, show: _Show, n: int, now_ms: int) -> FrameRendered:
        t = int(n * show.frame_ms)
        if show.resolution is not None:  # a clean boundary: between two frames
            show.renderer.set_resolution(show.resolution)
            show.resolution = None
        self._forget_before(show, t - SUBTITLE_HOLD_MS)
        current, subtitle = self._current(show, t)
        states, marks = [], []
        for role in show.roles:
            viseme, speaking = "sil", False
            if current is not None and current.role == role:
                viseme, speaking = _viseme_at(current, t), True
                marks.append(SpeakingMark(role, current.correlation or "", viseme))
            states.append(RoleState(role, viseme, speaking))
        image = show.renderer.draw(t, states, subtitle)
        if self.settings.slow_render_ms > 0:  # fault injection: a slower renderer
            time.sleep(self.settings.slow_render_ms / 1000)
        jpeg = encode_jpeg(image, self.settings.jpeg_quality)
        width, height = show.renderer.size
        return FrameRendered(
            id=derive_id(show.run.id, f"frame{n}"), run=show.run.run, t_ms=t, n=n,
            width=width, height=height, resolution=_resolution_name(height),
            speaking=tuple(marks), late_ms=float(max(0, now_ms - t - self.settings.render_delay_ms)), jpeg=jpeg,
        )

    @staticmethod
    def _current(show: _Show, t: int) -> tuple[VisemeTrack | None, str | None]:
        i = bisect.bisect_right(show.starts, t) - 1
        if i < 0:
            return None, None
        track = show.tracks[i]
        if track.start_ms <= t < track.end_ms:
            return track, track.text
        if t - track.end_ms < SUBTITLE_HOLD_MS and not track.last:
            return None, track.text
        return None, None

    @staticmethod
    def _forget_before(show: _Show, t: int) -> None:
        keep = 0
        while keep < len(show.tracks) - 1 and show.tracks[keep].end_ms < t:
            keep += 1
        if keep:
            del show.tracks[:keep]
            del show.starts[:keep]


def _viseme_at(track: VisemeTrack, t: int) -> str:
    for mark in track.visemes:
        if mark.start_ms <= t < mark.end_ms:
            return mark.viseme
    return "sil"


def _resolution_name(height: int) -> str:
    return {1080: "1080p", 720: "720p", 480: "480p", 360: "360p"}.get(height, f"{height}p")
