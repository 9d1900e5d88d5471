"""Frames drawn in batches: the live renderer one frame behind, re-drawing recorded runs, and the
protocol's frame-by-frame defaults give what drawing one frame at a time gives."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors.backends.protocols import RoleLook, RoleState, StageDrawer
from actors.backends.render_torch import StageRenderer
from actors.kernel import ListFeed
from actors.render import FrameMemo, Redrawer, RenderActor, batches, draw_frame, draw_frames
from events.frame import FaceMark, FrameRendered
from events.show import show_from_dict
from events.viseme import VisemeMark, VisemeTrack
from infra.settings import load_settings
from tests.showkit import demo_run


def track(start: int, end: int) -> VisemeTrack:
    visemes = tuple(VisemeMark(v, start + 80 * i, start + 80 * (i + 1))
                    for i, v in enumerate(("aa", "oh", "E", "PP") * ((end - start) // 320)))
    return VisemeTrack(id=f"t{start}", run="r1", role="host", correlation="c1",
                       utterance=f"u{start}", audio=f"a{start}", seq=0, start_ms=start, end_ms=end,
                       text=f"line at {start}", visemes=visemes)


def rendered(tmp_path: Path, late_ms: int) -> list[FrameRendered]:
    """A 2 s show with two lines, its renderer ticked ``late_ms`` after each tick it asks for."""
    run = dataclasses.replace(demo_run("r1", resolution="360p"), duration_ms=2000)
    render = RenderActor(load_settings(environ={}, out_dir=tmp_path))
    feed = ListFeed(render, run)
    feed.handle(run, track(100, 900), track(1000, 1640), at_ms=0)
    out: list[FrameRendered] = []
    while (due := render.next_tick(feed.state())) is not None:
        out += [e for e in feed.tick(at_ms=due + late_ms) if isinstance(e, FrameRendered)]
    return out


def test_one_frame_behind_draws_both_frames_in_one_tick_as_on_time(tmp_path: Path) -> None:
    on_time, behind = rendered(tmp_path, 0), rendered(tmp_path, 40)
    assert [f.n for f in on_time] == [f.n for f in behind] == list(range(50))
    # The same frames, to the byte; only the measured lateness differs.
    assert [dataclasses.replace(f, late_ms=0.0) for f in behind] == [
        dataclasses.replace(f, late_ms=0.0) for f in on_time]
    assert any(f.speaking for f in behind) and all(f.late_ms >= 35 for f in behind[::2])


def test_redrawing_in_batches_gives_the_frames_one_by_one(tmp_path: Path) -> None:
    run = demo_run("r1", resolution="360p")
    settings = load_settings(environ={}, out_dir=tmp_path)
    lines = [track(100, 900), track(1000, 1640)]
    happy = (FaceMark("host", "happy", "neutral", 8, 2, 4),)  # what a recorded frame drew: half way to happy
    jobs = [(n, lines[n >= 25], "360p" if n % 20 < 13 else "480p", None if n % 3 else happy, "#203040" if n > 40 else "")
            for n in range(45)]
    singles = Redrawer(run, settings)
    expected = [singles.draw(*job) for job in jobs]
    batched = Redrawer(run, settings)
    frames = [f for batch in batches(jobs) for f in batched.draw_batch(batch)]
    assert frames == expected
    assert {f.resolution for f in frames} == {"360p", "480p"}
    assert frames[3].faces == happy and frames[1].faces[0].expression == "neutral"  # recorded, or the run's own
    assert frames[44].background == "#203040" and frames[40].background == ""
    assert [len(b) for b in batches(jobs)] == [8, 8, 8, 8, 8, 5]


class _Sketch(StageDrawer):
    """A drawer with only the one-frame methods: the protocol's batch defaults fill in."""

    size = (4, 2)

    def set_resolution(self, resolution: str) -> None: ...

    def scene_key(self, t_ms: int, states: Sequence[RoleState],
                  subtitle: str | None) -> tuple[Any, ...]:
        return (t_ms, tuple(states), subtitle)

    def draw(self, t_ms: int, states: Sequence[RoleState], subtitle: str | None) -> Any:
        return (t_ms, tuple(s.viseme for s in states), subtitle)

    def encode(self, picture: Any, quality: int) -> bytes:
        return repr((picture, quality)).encode()

    def memory_fraction(self) -> float | None:
        return None


def test_the_tensor_path_gives_the_frames_of_the_numpy_path(tmp_path: Path) -> None:
    run = demo_run("r1", resolution="360p")
    roles = ("host", "xiaolu", "rex")  # the demo show's
    looks = [RoleLook(r.id, r.name, r.color, r.shape) for r in show_from_dict(run.show).roles]
    numpy_stage = StageRenderer(looks, "360p", seed=run.seed)
    tensor_stage = StageRenderer(looks, "360p", seed=run.seed, tensors=True)
    assert (numpy_stage.frame_batch, tensor_stage.frame_batch) == (1, 8)
    lines = [track(100, 900), track(1000, 1640)]
    jobs = [(n, lines[n >= 25]) for n in range(45)] + [(3, lines[0]), (3, lines[0])]  # repeats
    singles = [draw_frame(numpy_stage, run, roles, n, latest, 80) for n, latest in jobs]
    assert draw_frames(tensor_stage, run, roles, jobs, 80, memo=FrameMemo()) == singles
    assert draw_frames(numpy_stage, run, roles, jobs, 80, memo=FrameMemo()) == singles


def test_the_protocol_batches_frame_by_frame_by_default() -> None:
    sketch = _Sketch()
    assert sketch.frame_batch == 1
    frames = [(0, [RoleState("host", "aa", True)], "hi"), (40, [], None)]
    pictures = sketch.draw_batch(frames)
    assert pictures == [sketch.draw(*f) for f in frames]
    assert sketch.encode_batch(pictures, 70) == [sketch.encode(p, 70) for p in pictures]
    run = demo_run("r1", resolution="360p")
    roles = ("host", "xiaolu", "rex")  # the demo show's
    frame = draw_frame(sketch, run, roles, 3, track(0, 800), 70)  # 120 ms: the host says "oh"
    states = [RoleState(r, "oh" if r == "host" else "sil", r == "host") for r in roles]
    assert frame.jpeg == sketch.encode(sketch.draw(120, states, "line at 0"), 70)


def test_frames_from_a_gpu_jpeg_encoder_are_compared_by_what_they_show() -> None:
    """Re-execution redraws on the CPU: a frame a GPU encoded (other JPEG bytes) is compared by
    its number, size, speakers and track, a CPU-encoded frame by its bytes too."""
    from app.reexec import comparable
    from events.frame import FrameRendered

    cpu = FrameRendered(id="f0", run="r", t_ms=0, n=0, width=640, height=360, resolution="360p", jpeg=b"one")
    assert comparable(cpu) != comparable(dataclasses.replace(cpu, jpeg=b"two"))
    gpu = dataclasses.replace(cpu, encoder="torchvision-cuda")
    assert comparable(gpu) == comparable(dataclasses.replace(gpu, jpeg=b"two"))
    assert comparable(gpu) != comparable(dataclasses.replace(gpu, n=1))


def test_a_taken_over_shows_backlog_leaves_the_shows_on_time_their_ticks(tmp_path: Path) -> None:
    """A renderer that takes over a show a second behind draws its backlog a batch a frame's time,
    so the show it already drew on time keeps its ticks in between and misses no frame."""
    on_time = dataclasses.replace(demo_run("a", resolution="360p"), duration_ms=4000)
    taken = dataclasses.replace(demo_run("b", resolution="360p"), duration_ms=4000)
    feed = ListFeed(RenderActor(load_settings(environ={}, out_dir=tmp_path)), on_time)
    feed.handle(on_time, at_ms=0)
    feed.advance(2000)
    kernel = feed.kernel
    kernel.taking_over(taken)  # its past handed over at 2 s: its last frame stored was #24 (1 s behind)
    feed.handle(taken, at_ms=2000)
    last = next(e for e in feed.out if isinstance(e.event, FrameRendered) and e.event.run == "a")
    kernel.resume(taken, dataclasses.replace(last.event, run="b", n=24))
    start = len(feed.out)
    feed.advance(2400)
    drawn = [(e.at_ms, e.event) for e in feed.out[start:] if isinstance(e.event, FrameRendered)]
    ticks_b = sorted({at for at, f in drawn if f.run == "b" and f.late_ms >= 40})  # its backlog's batches
    assert [f.n for _, f in drawn if f.run == "b"][:1] == [25]  # the backlog, from the frame after the last stored
    # A batch a frame's time, not all at once: on a busy core, the shows on time get their ticks between.
    assert len(ticks_b) >= 3 and all(later - earlier >= 40 for earlier, later in zip(ticks_b, ticks_b[1:], strict=False))
    frames_a = [f for _, f in drawn if f.run == "a"]
    assert [f.n for f in frames_a] == list(range(frames_a[0].n, frames_a[0].n + len(frames_a)))  # none skipped
    assert max(f.late_ms for f in frames_a) < 40  # each drawn within a frame of its time
    assert max(f.n for _, f in drawn if f.run == "b") >= 58  # and the backlog caught up within 0.4 s
