"""Render actor: draws the stage at 25 fps on the show clock and emits JPEG frames.

The stage drawer is a backend (``actors.backends``): one per run, on the device
``TROUPE_RENDER_DEVICE`` names.  Re-execution, export and playback draw on the CPU.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from actors.backends.protocols import RoleLook, RoleState, StageDrawer
from actors.backends.registry import BACKENDS, render_device
from actors.base import ClockedActor, Context
from actors.visemes import cut_track
from events.base import Event, derive_id
from events.frame import FrameRendered, SpeakingMark
from events.qos import FramesObserved, QosObserved, ResolutionChanged
from events.run import RunEnded, RunStarted
from events.show import RESOLUTIONS, resolution_name, show_from_dict
from events.viseme import VisemeCut, VisemeTrack
from infra.settings import Settings, for_run
from schedulers.baseline import nearest_rank

log = logging.getLogger(__name__)
T = TypeVar("T")
SUBTITLE_HOLD_MS = 1200
FRAME_BATCH = 8  # frames a worker takes at once where many are drawn (export, re-execution)


class Drawers(Protocol):
    """Builds the drawer of a run's stage (``Backends.stage_drawer`` by default)."""

    def __call__(self, looks: Sequence[RoleLook], resolution: str, *, seed: int, device: str) -> StageDrawer: ...


class FrameMemo:
    """The JPEGs of the last few distinct stage pictures: an unchanged stage is not drawn again.

    A few hundred KB per entry at most; thread-safe (re-execution draws on several threads).
    """

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.hits = 0
        self._jpegs: OrderedDict[tuple[Any, ...], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> bytes | None:
        with self._lock:
            jpeg = self._jpegs.get(key)
            if jpeg is not None:
                self._jpegs.move_to_end(key)
                self.hits += 1
            return jpeg

    def put(self, key: tuple[Any, ...], jpeg: bytes) -> None:
        with self._lock:
            self._jpegs[key] = jpeg
            if len(self._jpegs) > self.size:
                self._jpegs.popitem(last=False)


@dataclass(slots=True)
class _Show:
    run: RunStarted
    renderer: StageDrawer
    roles: tuple[str, ...]
    quality: int
    memo: FrameMemo = field(default_factory=FrameMemo)
    next_frame: int = 0
    # Frames the show has (n < frames): from its planned length, or its end once known.
    frames: int | None = None
    tracks: list[VisemeTrack] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    skipped: int = 0
    resolution: str | None = None  # a decided change, applied before the next frame
    # The current observation window: lateness of the frames drawn, frames skipped.
    window_late: list[float] = field(default_factory=list)
    window_cost: list[float] = field(default_factory=list)
    window_skipped: int = 0
    cuts: dict[str, int] = field(default_factory=dict)  # interrupted utterance -> where it stopped


class RenderActor(ClockedActor):
    """Viseme tracks and QoS decisions in, stage frames out."""

    name = "render"
    consumes = (RunStarted, RunEnded, VisemeTrack, VisemeCut, ResolutionChanged)
    emits = (FrameRendered, FramesObserved, QosObserved)
    blocking_tick = True  # drawing and JPEG run in a thread; taking in visemes stays on the loop

    def __init__(self, settings: Settings, device: str | None = None, drawers: Drawers | None = None) -> None:
        self.settings = settings
        self.slow_render_ms = settings.slow_render_ms  # fault injection; may be changed while running
        self.device = render_device(device or settings.render_device)
        if drawers is None:
            BACKENDS.require_render()
        self.drawers: Drawers = drawers or BACKENDS.stage_drawer
        self._shows: dict[str, _Show] = {}

    def holds(self, run: str) -> bool:
        return run in self._shows

    def release(self, run: str) -> None:
        self._shows.pop(run, None)  # its drawer, sprite caches, memo, tracks

    def active_runs(self) -> Sequence[RunStarted]:
        return [s.run for s in self._shows.values() if not self._finished(s)]

    @staticmethod
    def _finished(show: _Show) -> bool:
        return show.frames is not None and show.next_frame >= show.frames

    def next_tick(self, run: str) -> int | None:
        show = self._shows.get(run)
        if show is None or self._finished(show):
            return None
        # Draw a frame a moment after its show time, so visemes placed at that very
        # moment (one NATS hop away) make it into the frame instead of the next one.
        return frame_time(show.next_frame, show.run.fps) + self.settings.render_delay_ms

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
            ended = frame_count(event.duration_ms, show.run.fps)
            show.frames = ended if show.frames is None else min(show.frames, ended)
        elif isinstance(event, VisemeTrack):
            if event.utterance in show.cuts:  # placed before the cut arrived: cut it too
                cut = cut_track(event, show.cuts[event.utterance])
                if cut is None:
                    return ()
                event = cut
            i = bisect.bisect(show.starts, event.start_ms)
            show.starts.insert(i, event.start_ms)
            show.tracks.insert(i, event)
        elif isinstance(event, VisemeCut):
            show.cuts[event.utterance] = event.at_ms
            kept = [c for t in show.tracks if (c := (cut_track(t, event.at_ms) if t.utterance == event.utterance else t))]
            show.tracks = kept
            show.starts = [t.start_ms for t in kept]
        elif isinstance(event, ResolutionChanged):
            show.resolution = event.after
        return ()

    def _start(self, run: RunStarted) -> None:
        # Builds the sprite caches (a few hundred ms): once per run, on the event loop.
        if run.run in self._shows:
            return
        renderer, roles = stage_renderer(run, self.device, self.drawers)
        quality = for_run(self.settings, run.config).jpeg_quality
        # A planned length bounds the frames before run.ended arrives: that event is published
        # at the very show time of the first frame past the end, and often handled after it.
        planned = frame_count(run.duration_ms, run.fps) if run.duration_ms > 0 else None
        self._shows[run.run] = _Show(run, renderer, roles, quality, frames=planned)

    def tick(self, ctx: Context) -> Sequence[Event]:
        assert ctx.run is not None
        show = self._shows[ctx.run.run]
        if self._finished(show):  # the end became known after this tick was scheduled
            return ()
        due = (ctx.now_ms - self.settings.render_delay_ms) * show.run.fps // 1000
        if show.frames is not None:
            due = min(due, show.frames - 1)
        if due - show.next_frame >= 2:  # more than a frame behind: drop to the present
            show.skipped += due - show.next_frame
            show.window_skipped += due - show.next_frame
            show.next_frame = due
        # One frame behind, this frame and the next are both due: drawn together, as one batch.
        first, count = show.next_frame, 2 if due - show.next_frame == 1 else 1
        show.next_frame += count
        began = time.perf_counter()
        frames = self._frames(show, range(first, first + count), ctx.now_ms)
        cost_ms = (time.perf_counter() - began) * 1000 / count
        out: list[Event] = []
        for frame in frames:
            show.window_cost.append(cost_ms)
            show.window_late.append(frame.late_ms)
            out.append(frame)
            if len(show.window_late) + show.window_skipped >= ctx.run.fps:  # one second of frames
                out.append(self._observed(show, frame))
                gpu = show.renderer.memory_fraction()
                if gpu is not None:
                    out.append(QosObserved(
                        id=derive_id(show.run.id, f"gpu{frame.n}"), run=show.run.run,
                        t_ms=frame.t_ms, metric="gpu_memory_fraction", value=round(gpu, 4),
                        source="render",
                    ))
        return out

    @staticmethod
    def _observed(show: _Show, last: FrameRendered) -> FramesObserved:
        late = sorted(show.window_late)
        due = len(late) + show.window_skipped
        obs = FramesObserved(
            id=derive_id(show.run.id, f"frames{last.n}"), run=show.run.run, t_ms=last.t_ms,
            window_end_ms=last.t_ms, frames=len(late), lateness_p99_ms=nearest_rank(late, 99),
            loss=show.window_skipped / due, resolution=last.resolution,
            cost_p99_ms=round(nearest_rank(sorted(show.window_cost), 99), 2),
        )
        show.window_cost.clear()
        show.window_late.clear()
        show.window_skipped = 0
        return obs

    def slow_ms(self, show: _Show) -> float:
        """The injected extra cost of a frame: ``slow_render_ms`` at the run's resolution, scaled by
        the pixels of the current one (a real renderer gets cheaper as the picture shrinks)."""
        if self.slow_render_ms <= 0:
            return 0.0
        w0, h0 = RESOLUTIONS[show.run.resolution]
        w, h = show.renderer.size
        return self.slow_render_ms * (w * h) / (w0 * h0)

    def _frames(self, show: _Show, numbers: Sequence[int], now_ms: int) -> list[FrameRendered]:
        if show.resolution is not None:  # a clean boundary: between two ticks
            show.renderer.set_resolution(show.resolution)
            show.resolution = None
        times = [frame_time(n, show.run.fps) for n in numbers]
        self._forget_before(show, times[0] - SUBTITLE_HOLD_MS)
        jobs = []
        for n, t in zip(numbers, times, strict=True):
            i = bisect.bisect_right(show.starts, t) - 1
            jobs.append((n, show.tracks[i] if i >= 0 else None))
        slow_ms = self.slow_ms(show)
        return draw_frames(
            show.renderer, show.run, show.roles, jobs, show.quality,
            late_ms=[float(max(0, now_ms - t - self.settings.render_delay_ms)) for t in times],
            # fault injection: a slower renderer
            before_encode=(lambda: time.sleep(slow_ms / 1000)) if slow_ms > 0 else None, memo=show.memo,
        )

    @staticmethod
    def _forget_before(show: _Show, t: int) -> None:
        keep = 0
        while keep < len(show.tracks) - 1 and show.tracks[keep].end_ms < t:
            keep += 1
        if keep:
            del show.tracks[:keep]
            del show.starts[:keep]


def frame_time(n: int, fps: int) -> int:
    """Show time (ms) of frame ``n``: ``n * 1000 / fps`` rounded down, in integers."""
    return n * 1000 // fps


def frame_count(duration_ms: int, fps: int) -> int:
    """The frames of a show of ``duration_ms``: those whose show time is before its end."""
    return -(-max(0, duration_ms) * fps // 1000)


def shown(track: VisemeTrack | None, t: int) -> tuple[VisemeTrack | None, bool]:
    """What a frame at ``t`` shows of the latest track that started by then.

    (track, True) while it is spoken: mouth and subtitle; (track, False) for a moment after
    a sentence that the utterance goes on from: its subtitle only; else (None, False).
    """
    if track is None or track.start_ms > t:
        return None, False
    if t < track.end_ms:
        return track, True
    if t - track.end_ms < SUBTITLE_HOLD_MS and not track.last:
        return track, False
    return None, False


def draw_frame(
    renderer: StageDrawer, run: RunStarted, roles: Sequence[str], n: int, latest: VisemeTrack | None,
    quality: int, late_ms: float = 0.0, before_encode: Callable[[], None] | None = None,
    memo: FrameMemo | None = None,
) -> FrameRendered:
    """Frame ``n`` of a run given the latest track started by its show time: a pure function of
    its arguments (the live renderer, re-execution and export all draw through it)."""
    return draw_frames(renderer, run, roles, [(n, latest)], quality, [late_ms], before_encode,
                       memo)[0]


@dataclass(frozen=True, slots=True)
class _Shot:
    """What one frame shows: its time, the roles' states, whose mouth moves, the subtitle."""

    n: int
    t: int
    track: VisemeTrack | None
    states: tuple[RoleState, ...]
    marks: tuple[SpeakingMark, ...]
    subtitle: str | None


def _shot(roles: Sequence[str], n: int, fps: int, latest: VisemeTrack | None) -> _Shot:
    t = frame_time(n, fps)
    track, speaking = shown(latest, t)
    states, marks = [], []
    for role in roles:
        viseme, lit = "sil", False
        if speaking and track is not None and track.role == role:
            viseme, lit = _viseme_at(track, t), True
            marks.append(SpeakingMark(role, track.correlation or "", viseme))
        states.append(RoleState(role, viseme, lit))
    subtitle = track.text if track is not None else None
    return _Shot(n, t, track, tuple(states), tuple(marks), subtitle)


def draw_frames(
    renderer: StageDrawer, run: RunStarted, roles: Sequence[str],
    jobs: Sequence[tuple[int, VisemeTrack | None]], quality: int,
    late_ms: Sequence[float] | None = None, before_encode: Callable[[], None] | None = None,
    memo: FrameMemo | None = None,
) -> list[FrameRendered]:
    """What ``draw_frame`` gives for each ``(n, latest track)``, the pictures not in the memo
    drawn by ``draw_batch`` and encoded by ``encode_batch``, ``frame_batch`` of them a call."""
    shots = [_shot(roles, n, run.fps, latest) for n, latest in jobs]
    used = getattr(renderer, "jpeg_encoder", None)
    encoder = None if used in (None, "simplejpeg") else str(used)  # None: the reproducible CPU encoder
    keys = [renderer.scene_key(s.t, s.states, s.subtitle) + (quality,) if memo is not None else None
            for s in shots]
    jpegs = [memo.get(key) if memo is not None and key is not None else None for key in keys]
    todo: dict[Hashable, list[int]] = {}  # each picture to draw -> the frames that show it
    for i, (key, jpeg) in enumerate(zip(keys, jpegs, strict=True)):
        if jpeg is None:
            todo.setdefault(key if key is not None else i, []).append(i)
    for part in batches(list(todo.values()), renderer.frame_batch):
        pictures = renderer.draw_batch([(shots[ix[0]].t, shots[ix[0]].states, shots[ix[0]].subtitle)
                                        for ix in part])
        for ix, jpeg in zip(part, renderer.encode_batch(pictures, quality), strict=True):
            key = keys[ix[0]]
            if memo is not None and key is not None:
                memo.put(key, jpeg)
            for i in ix:
                jpegs[i] = jpeg
    if before_encode is not None:
        for _ in shots:
            before_encode()
    width, height = renderer.size
    lateness = late_ms if late_ms is not None else [0.0] * len(shots)
    frames = []
    for shot, late, jpeg in zip(shots, lateness, jpegs, strict=True):
        assert jpeg is not None  # every frame was found in the memo or drawn above
        frames.append(FrameRendered(
            id=derive_id(run.id, f"frame{shot.n}"), run=run.run, t_ms=shot.t, n=shot.n, width=width,
            height=height, resolution=resolution_name(height), speaking=shot.marks, late_ms=late,
            track=shot.track.id if shot.track is not None else None, encoder=encoder, jpeg=jpeg,
        ))
    return frames


class Redrawer:
    """Draws a recorded run's frames again (re-execution, export, playback): one renderer per
    resolution, the run's JPEG quality, a memo of recent pictures.  Safe to use from threads."""

    def __init__(self, run: RunStarted, settings: Settings, memo_size: int = 256) -> None:
        self.run = run
        self.quality = for_run(settings, run.config).jpeg_quality
        self.memo = FrameMemo(memo_size)
        self._renderers: dict[str, StageDrawer] = {}
        self._roles: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def prepare(self, resolution: str) -> None:
        """Build the renderer of a resolution now (a few hundred ms), not in the middle of drawing."""
        with self._lock:
            if resolution not in self._renderers:
                renderer, self._roles = stage_renderer(self.run)
                renderer.set_resolution(resolution)
                self._renderers[resolution] = renderer

    def draw(self, n: int, latest: VisemeTrack | None, resolution: str) -> FrameRendered:
        """Frame ``n`` at ``resolution`` given the latest track started by its show time."""
        self.prepare(resolution)
        return draw_frame(self._renderers[resolution], self.run, self._roles, n, latest, self.quality, memo=self.memo)

    def draw_batch(
        self, jobs: Sequence[tuple[int, VisemeTrack | None, str]],
    ) -> list[FrameRendered]:
        """What ``draw`` gives for each ``(n, latest track, resolution)``, in order: a resolution's
        frames drawn and encoded together (``draw_frames``)."""
        out: list[FrameRendered] = []
        for resolution, group in itertools.groupby(jobs, key=lambda job: job[2]):
            self.prepare(resolution)
            frames = [(n, latest) for n, latest, _ in group]
            out += draw_frames(self._renderers[resolution], self.run, self._roles, frames,
                               self.quality, memo=self.memo)
        return out


def batches(items: Sequence[T], size: int = FRAME_BATCH) -> list[Sequence[T]]:
    """``items`` cut into consecutive batches of ``size`` (the last may be shorter)."""
    return [items[i:i + size] for i in range(0, len(items), size)]


def stage_renderer(run: RunStarted, device: str = "cpu",
                   drawers: Drawers | None = None) -> tuple[StageDrawer, tuple[str, ...]]:
    """The drawer of a run's stage and its role ids in stage order."""
    spec = show_from_dict(run.show)
    looks = [RoleLook(r.id, r.name, r.color, r.shape) for r in spec.roles]
    drawer = (drawers or BACKENDS.stage_drawer)(looks, run.resolution, seed=run.seed, device=device)
    return drawer, tuple(r.id for r in spec.roles)


def _viseme_at(track: VisemeTrack, t: int) -> str:
    for mark in track.visemes:
        if mark.start_ms <= t < mark.end_ms:
            return mark.viseme
    return "sil"

