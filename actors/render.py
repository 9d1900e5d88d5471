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
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from actors.backends.protocols import RoleLook, RoleState, StageDrawer
from actors.backends.registry import BACKENDS, render_device
from actors.base import ClockedActor, Context
from actors.faces import Face, FaceTimeline, drawn, mark
from actors.visemes import cut_track
from events.base import Event, derive_id
from events.cue import SegmentStarted
from events.errors import StoreError
from events.frame import FaceMark, FrameRendered, SpeakingMark
from events.qos import FramesObserved, QosObserved, ResolutionChanged
from events.run import RunEnded, RunStarted
from events.show import RESOLUTIONS, Show, resolution_name, show_from_dict
from events.viseme import FaceChanged, VisemeCut, VisemeTrack
from infra.settings import Settings, run_settings
from schedulers.baseline import nearest_rank

log = logging.getLogger(__name__)
T = TypeVar("T")
SUBTITLE_HOLD_MS = 1200
FRAME_BATCH = 8  # frames a worker takes at once where many are drawn (export, re-execution)
# How far behind the renderer may fall and still draw every frame (late, in one batch): a
# collection or a busy core, not an overload.  Further behind, it skips to the present.
HICCUP_FRAMES = 3


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


@dataclass(slots=True, weakref_slot=True)  # weakly referable: a test sees a released show go
class _Show:
    """What the renderer keeps for one run (``open_run``): its stage, once drawn, and its clock."""

    run: RunStarted
    roles: tuple[str, ...]
    quality: int
    spec: Show   # the run's show
    faces: FaceTimeline
    # The run's drawer, made as its start is taken in time (``handle``); None: the run is not drawn
    # (its start not taken yet, or taken too long after it began), and its inputs are ignored.
    renderer: StageDrawer | None = None
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
    walls: list[tuple[int, str]] = field(default_factory=list)  # (show time, back wall) as segments start
    catch_up: bool = False  # started, or taken over: the frames nobody drew are drawn late, not skipped
    catch_up_to: int | None = None  # started: the last frame caught up (-1: set at the first tick)
    # Catching up: the show time of the next batch, a frame's time after the last one, so that the
    # shows drawn on time get their ticks in between (a takeover's backlog never starves them).
    catch_up_next_ms: int = 0


class RenderActor(ClockedActor):
    """Viseme tracks and QoS decisions in, stage frames out."""

    name = "render"
    consumes = (RunStarted, RunEnded, VisemeTrack, VisemeCut, FaceChanged, SegmentStarted, ResolutionChanged)
    emits = (FrameRendered, FramesObserved, QosObserved)
    takes_over = True
    resumes_from = FrameRendered
    blocking_tick = True  # drawing and JPEG run in a thread; taking in visemes stays on the loop

    def __init__(self, settings: Settings, device: str | None = None, drawers: Drawers | None = None) -> None:
        self.settings = settings
        self.slow_render_ms = settings.slow_render_ms  # fault injection; may be changed while running
        self.device = render_device(device or settings.render_device)
        if drawers is None:
            BACKENDS.require_render()
        self.drawers: Drawers = drawers or BACKENDS.stage_drawer

    def open_run(self, run: RunStarted, settings: Settings) -> _Show:
        """The run's show, not drawn yet: its start, taken in time, makes its drawer (``handle``)."""
        spec = show_from_dict(run.show)
        roles = tuple(r.id for r in spec.roles)
        # A planned length bounds the frames before run.ended arrives: that event is published
        # at the very show time of the first frame past the end, and often handled after it.
        planned = frame_count(run.duration_ms, run.fps) if run.duration_ms > 0 else None
        return _Show(run, roles, settings.jpeg_quality, spec, FaceTimeline(roles, run.seed), frames=planned)

    def prepares(self, event: Event) -> bool:
        return isinstance(event, RunStarted | ResolutionChanged)  # the other inputs take no thread hop

    def prepare(self, event: Event, ctx: Context) -> StageDrawer | None:
        # A run's sprites take a few hundred ms to build, a resolution's too: built here, the
        # frames of the shows on air are drawn meanwhile (shows starting together miss none).
        show: _Show | None = ctx.state
        if isinstance(event, RunStarted):
            # Not a playback (never drawn), nor a show drawn already (its start again).
            if event.replay_of is None and (show is None or show.renderer is None):
                return self._drawer(event)
        elif isinstance(event, ResolutionChanged) and show is not None and show.renderer is not None:
            prebuild = getattr(show.renderer, "prebuild", None)  # a drawer that can build ahead
            if prebuild is not None:
                prebuild(event.after)
        return None

    @staticmethod
    def _finished(show: _Show) -> bool:
        return show.frames is not None and show.next_frame >= show.frames

    def resume(self, state: _Show, last: Event) -> None:
        """Taken over: go on from the frame after the last one stored.  The frames nobody drew
        while the show had no renderer are drawn now, late, a batch at a time, so the video
        and the live output miss none; frames are skipped again once caught up."""
        if state.renderer is None or not isinstance(last, FrameRendered):
            return
        state.next_frame = last.n + 1
        state.catch_up = True

    def next_tick(self, state: _Show) -> int | None:
        if state.renderer is None or self._finished(state):
            return None
        # Draw a frame a moment after its show time, so visemes placed at that very
        # moment (one NATS hop away) make it into the frame instead of the next one.
        due = frame_time(state.next_frame, state.run.fps) + self.settings.render_delay_ms
        return max(due, state.catch_up_next_ms) if state.catch_up else due

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        show: _Show | None = ctx.state
        if isinstance(event, RunStarted):
            if show is None or show.renderer is not None:  # drawn already: its start again
                return ()
            if ctx.joinable(self.settings.join_window_s):
                self._start(show, ctx.prepared)
            else:  # a run long under way (or long over) when this renderer met it
                log.warning("not rendering run %s: it started %d s ago", event.run, ctx.now_ms // 1000)
            return ()
        if show is None or show.renderer is None:  # not held, or not drawn
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
        elif isinstance(event, FaceChanged):
            show.faces.add(event)
        elif isinstance(event, SegmentStarted):
            bisect.insort(show.walls, (event.t_ms, show.spec.background_of(event.title)))
        elif isinstance(event, ResolutionChanged):
            show.resolution = event.after
        return ()

    def _drawer(self, run: RunStarted) -> StageDrawer:
        """A run's drawer with its sprite caches built (a few hundred ms)."""
        renderer, _ = stage_renderer(run, self.device, self.drawers)
        spec = show_from_dict(run.show)
        set_background = getattr(renderer, "set_background", None)
        if set_background is not None:  # every wall built now, not when its segment starts; the show's last
            for wall in (*spec.backgrounds[1:], spec.background):
                set_background(wall)
        return renderer

    def _start(self, show: _Show, prepared: StageDrawer | None = None) -> None:
        """Draw the show: its drawer (built here when not ahead: a takeover), from its first frame.
        A show's video begins at its first frame: frames due before this renderer was ready for
        it (shows starting together) are drawn late, not skipped, as after a takeover; only those
        (``catch_up_to``, set at the first tick): a renderer slower than the clock skips."""
        show.renderer = prepared or self._drawer(show.run)
        show.catch_up, show.catch_up_to = True, -1

    def tick(self, ctx: Context) -> Sequence[Event]:
        show: _Show | None = ctx.state
        # Not held or not drawn (no tick asked for), or the end became known after this tick was scheduled.
        if show is None or (renderer := show.renderer) is None or self._finished(show):
            return ()
        due = (ctx.now_ms - self.settings.render_delay_ms) * show.run.fps // 1000
        if show.frames is not None:
            due = min(due, show.frames - 1)
        if show.catch_up_to == -1:  # a show's first tick: the frames already due are caught up
            show.catch_up_to = due
        if show.catch_up and (due - show.next_frame <= 1
                              or show.catch_up_to is not None and show.next_frame > show.catch_up_to):
            show.catch_up = False  # caught up: from here on, frames are skipped when late
        if show.catch_up:  # taken over: draw what was missed, a batch a frame's time
            first, count = show.next_frame, min(FRAME_BATCH, due - show.next_frame + 1)
            show.catch_up_next_ms = ctx.now_ms + 1000 // show.run.fps
        else:
            if due - show.next_frame > HICCUP_FRAMES:  # further behind than a hiccup: drop to the present
                show.skipped += due - show.next_frame
                show.window_skipped += due - show.next_frame
                show.next_frame = due
            # A few frames behind (a collection, a busy core): the frames due are drawn together, late.
            first, count = show.next_frame, due - show.next_frame + 1
        show.next_frame += count
        began = time.perf_counter()
        frames = self._frames(show, renderer, range(first, first + count), ctx.now_ms)
        cost_ms = (time.perf_counter() - began) * 1000 / count
        out: list[Event] = []
        for frame in frames:
            show.window_cost.append(cost_ms)
            show.window_late.append(frame.late_ms)
            out.append(frame)
            if len(show.window_late) + show.window_skipped >= show.run.fps:  # one second of frames
                out.append(self._observed(show, frame))
                gpu = renderer.memory_fraction()
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

    def slow_ms(self, run: RunStarted, renderer: StageDrawer) -> float:
        """The injected extra cost of a frame: ``slow_render_ms`` at the run's resolution, scaled by
        the pixels of the current one (a real renderer gets cheaper as the picture shrinks)."""
        if self.slow_render_ms <= 0:
            return 0.0
        w0, h0 = RESOLUTIONS[run.resolution]
        w, h = renderer.size
        return self.slow_render_ms * (w * h) / (w0 * h0)

    def _frames(self, show: _Show, renderer: StageDrawer, numbers: Sequence[int], now_ms: int) -> list[FrameRendered]:
        if show.resolution is not None:  # a clean boundary: between two ticks
            renderer.set_resolution(show.resolution)
            show.resolution = None
        times = [frame_time(n, show.run.fps) for n in numbers]
        self._forget_before(show, times[0] - SUBTITLE_HOLD_MS)
        jobs = []
        for n, t in zip(numbers, times, strict=True):
            i = bisect.bisect_right(show.starts, t) - 1
            jobs.append((n, show.tracks[i] if i >= 0 else None))
        wall = wall_at(show.walls, times[0], show.spec.background)
        set_background = getattr(renderer, "set_background", None)
        if set_background is not None:
            set_background(wall)
        slow_ms = self.slow_ms(show.run, renderer)
        return draw_frames(
            renderer, show.run, show.roles, jobs, show.quality,
            late_ms=[float(max(0, now_ms - t - self.settings.render_delay_ms)) for t in times],
            # fault injection: a slower renderer
            before_encode=(lambda: time.sleep(slow_ms / 1000)) if slow_ms > 0 else None, memo=show.memo,
            faces=show.faces,
        )

    @staticmethod
    def _walls_before(show: _Show, t: int) -> None:
        while len(show.walls) > 1 and show.walls[1][0] <= t:
            del show.walls[0]

    def _forget_before(self, show: _Show, t: int) -> None:
        show.faces.forget_before(t)
        self._walls_before(show, t)
        keep = 0
        while keep < len(show.tracks) - 1 and show.tracks[keep].end_ms < t:
            keep += 1
        if keep:
            del show.tracks[:keep]
            del show.starts[:keep]


def wall_at(walls: Sequence[tuple[int, str]], t: int, default: str) -> str:
    """The back wall at show time ``t``: the last segment started by then's (``walls``: (start,
    wall) in time order), else the show's."""
    i = bisect.bisect_right(walls, (t, "\uffff")) - 1
    return walls[i][1] if i >= 0 else default


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
    memo: FrameMemo | None = None, faces: Faces = None,
) -> FrameRendered:
    """Frame ``n`` of a run given the latest track started by its show time and the faces (the
    run's timeline, or the marks a recorded frame drew): a pure function of its arguments (the
    live renderer, re-execution and export all draw through it)."""
    return draw_frames(renderer, run, roles, [(n, latest)], quality, [late_ms], before_encode,
                       memo, [faces])[0]


@dataclass(frozen=True, slots=True)
class _Shot:
    """What one frame shows: its time, the roles' states, whose mouth moves, the subtitle."""

    n: int
    t: int
    track: VisemeTrack | None
    states: tuple[RoleState, ...]
    marks: tuple[SpeakingMark, ...]
    subtitle: str | None
    faces: tuple[FaceMark, ...]


Faces = FaceTimeline | tuple[FaceMark, ...] | None  # the run's faces, or those a frame recorded


def _shot(roles: Sequence[str], n: int, fps: int, latest: VisemeTrack | None, faces: Faces) -> _Shot:
    t = frame_time(n, fps)
    track, speaking = shown(latest, t)
    states, marks, drawn_faces = [], [], []
    recorded = {m.role: m for m in faces} if isinstance(faces, tuple) else {}
    for role in roles:
        viseme, lit = "sil", False
        if speaking and track is not None and track.role == role:
            viseme, lit = _viseme_at(track, t), True
            marks.append(SpeakingMark(role, track.correlation or "", viseme))
        face = Face()
        if isinstance(faces, FaceTimeline):
            m = mark(role, faces.face(role, t, lit))
            drawn_faces.append(m)
            face = drawn(m)
        elif role in recorded:
            drawn_faces.append(recorded[role])
            face = drawn(recorded[role])
        states.append(RoleState(role, viseme, lit, face.expression, face.previous, face.blend, face.gaze, face.nod))
    subtitle = track.text if track is not None else None
    return _Shot(n, t, track, tuple(states), tuple(marks), subtitle, tuple(drawn_faces))


def draw_frames(
    renderer: StageDrawer, run: RunStarted, roles: Sequence[str],
    jobs: Sequence[tuple[int, VisemeTrack | None]], quality: int,
    late_ms: Sequence[float] | None = None, before_encode: Callable[[], None] | None = None,
    memo: FrameMemo | None = None, faces: Sequence[Faces] | FaceTimeline | None = None,
) -> list[FrameRendered]:
    """What ``draw_frame`` gives for each ``(n, latest track)``, the pictures not in the memo
    drawn by ``draw_batch`` and encoded by ``encode_batch``, ``frame_batch`` of them a call.
    ``faces``: the run's timeline for every frame, or each frame's own."""
    each = faces if isinstance(faces, Sequence) else [faces] * len(jobs)
    shots = [_shot(roles, n, run.fps, latest, f) for (n, latest), f in zip(jobs, each, strict=True)]
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
            track=shot.track.id if shot.track is not None else None,
            track_end_ms=shot.track.end_ms if shot.track is not None else None, faces=shot.faces,
            background=getattr(renderer, "background", ""), encoder=encoder, jpeg=jpeg,
        ))
    return frames


class Redrawer:
    """Draws a recorded run's frames again (re-execution, export, playback): one renderer per
    resolution, the run's JPEG quality, a memo of recent pictures.  Safe to use from threads."""

    def __init__(self, run: RunStarted, settings: Settings, memo_size: int = 256,
                 faces: Iterable[Event] = (), segments: Iterable[Event] = ()) -> None:
        """``faces``: the run's recorded ``viseme.face`` events, in the order they were emitted;
        ``segments``: its ``cue.segment`` events (for the back wall of frames never drawn)."""
        self.run = run
        self.quality = run_settings(settings, run.config).jpeg_quality
        self.memo = FrameMemo(memo_size)
        self.show = show_from_dict(run.show)
        self.faces = FaceTimeline.of([r.id for r in self.show.roles], run.seed,
                                     (e for e in faces if isinstance(e, FaceChanged)))
        self.walls = sorted((e.t_ms, self.show.background_of(e.title)) for e in segments
                            if isinstance(e, SegmentStarted))
        self._renderers: dict[tuple[str, str], StageDrawer] = {}
        self._roles: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def prepare(self, resolution: str, background: str = "") -> None:
        """Build the renderer of a resolution (and back wall) now (a few hundred ms), not in the
        middle of drawing; each has its own, so that threads draw at once."""
        with self._lock:
            if (resolution, background) not in self._renderers:
                renderer, self._roles = stage_renderer(self.run, same_art=True)
                renderer.set_resolution(resolution)
                set_background = getattr(renderer, "set_background", None)
                if set_background is not None:
                    set_background(background)
                self._renderers[(resolution, background)] = renderer

    def draw(self, n: int, latest: VisemeTrack | None, resolution: str,
             faces: tuple[FaceMark, ...] | None = None, background: str = "") -> FrameRendered:
        """Frame ``n`` at ``resolution`` given the latest track started by its show time, the
        faces the recorded frame drew (None: a frame never drawn; its faces from the run's events)
        and its back wall."""
        return self.draw_batch([(n, latest, resolution, faces, background)])[0]

    def draw_batch(self, jobs: Sequence[Job]) -> list[FrameRendered]:
        """What ``draw`` gives for each ``(n, latest track, resolution, faces, back wall)``, in
        order: a resolution's (and wall's) frames drawn and encoded together (``draw_frames``)."""
        out: list[FrameRendered] = []
        for (resolution, wall), group in itertools.groupby(jobs, key=lambda job: (job[2], job[4])):
            self.prepare(resolution, wall)
            part = list(group)
            out += draw_frames(self._renderers[(resolution, wall)], self.run, self._roles,
                               [(n, t) for n, t, _, _, _ in part], self.quality, memo=self.memo,
                               faces=[self.faces if f is None else f for _, _, _, f, _ in part])
        return out

    def wall_at(self, t: int) -> str:
        """The back wall at show time ``t`` by the run's recorded segments (a frame never drawn)."""
        return wall_at(self.walls, t, self.show.background)


# A frame to redraw: its number, the latest track started by then, its resolution, the faces it
# recorded (None: from the run's faces) and its back wall.
Job = tuple[int, VisemeTrack | None, str, tuple[FaceMark, ...] | None, str]


def batches(items: Sequence[T], size: int = FRAME_BATCH) -> list[Sequence[T]]:
    """``items`` cut into consecutive batches of ``size`` (the last may be shorter)."""
    return [items[i:i + size] for i in range(0, len(items), size)]


def stage_renderer(run: RunStarted, device: str = "cpu", drawers: Drawers | None = None,
                   same_art: bool = False) -> tuple[StageDrawer, tuple[str, ...]]:
    """The drawer of a run's stage and its role ids in stage order.  ``same_art``: refuse (a
    StoreError) where a role's avatar art on disk is not what the run was drawn with."""
    spec = show_from_dict(run.show)
    if same_art:
        for r in spec.roles:
            if r.avatar:
                _same_art(run, f"role {r.id}'s avatar art", r.avatar, r.avatar_digest)
        for wall, recorded in spec.art:
            _same_art(run, "the background", wall, recorded)
    looks = [RoleLook(r.id, r.name, r.color, r.shape, r.avatar) for r in spec.roles]
    drawer = (drawers or BACKENDS.stage_drawer)(looks, run.resolution, seed=run.seed, device=device)
    return drawer, tuple(r.id for r in spec.roles)


def _same_art(run: RunStarted, what: str, path: str, recorded: str) -> None:
    """Refuse (a StoreError) where the art at ``path`` is not what the run was drawn with."""
    import hashlib

    from actors.backends.avatar import AvatarError, digest

    try:
        now = digest(path) if Path(path).is_dir() else hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except (AvatarError, OSError) as exc:
        raise StoreError(f"run {run.run}: {what} cannot be read ({exc}): its frames cannot be drawn again") from None
    if now != recorded:
        raise StoreError(f"run {run.run}: {what} in {path} changed since the run (sha256 {now[:12]}, the run "
                         f"drew {recorded[:12]}): its frames would not be the same")


def _viseme_at(track: VisemeTrack, t: int) -> str:
    for shape in track.visemes:
        if shape.start_ms <= t < shape.end_ms:
            return shape.viseme
    return "sil"

