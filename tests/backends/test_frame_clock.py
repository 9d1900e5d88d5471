"""The renderer's frame clock: a show of D seconds at F fps has exactly D x F frames."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from actors.render import RenderActor, frame_count, frame_time
from events.frame import FrameRendered
from events.qos import FramesObserved
from events.run import RunEnded, RunStarted
from infra.settings import load_settings
from tests.showkit import ctx, demo_run


@pytest.mark.parametrize("fps", [24, 25, 30, 60])
@pytest.mark.parametrize("duration_ms", [1, 999, 1000, 1001, 20000])
def test_frames_are_the_ones_before_the_end(fps: int, duration_ms: int) -> None:
    n = frame_count(duration_ms, fps)
    assert (n - 1) * 1000 / fps < duration_ms <= n * 1000 / fps  # frame n - 1 is in, frame n is not
    assert frame_time(n - 1, fps) < duration_ms
    assert all(frame_time(i, fps) == int(i * 1000 / fps) for i in range(n + 1))
    assert frame_count(20000, 25) == 500 and frame_count(0, 25) == 0


def drawn(render: RenderActor, run: RunStarted, until_ms: int = 10**9) -> list[int]:
    """Tick the renderer at each show time it asks for; the frame numbers it draws."""
    out = []
    while (due := render.next_tick(run.run)) is not None and due <= until_ms:
        out += [e.n for e in render.tick(ctx(due, run)) if isinstance(e, FrameRendered)]
    return out


@pytest.fixture
def render(tmp_path: Path) -> RenderActor:
    return RenderActor(load_settings(environ={}, out_dir=tmp_path))


def test_a_planned_length_bounds_the_frames_before_the_end_is_announced(render: RenderActor) -> None:
    run = dataclasses.replace(demo_run("r1", resolution="360p"), duration_ms=1000, fps=25)
    render.handle(run, ctx(0, run))
    assert drawn(render, run) == list(range(25))  # run.ended has not come, and need not


def test_an_end_that_becomes_known_after_the_tick_was_scheduled_stops_the_clock(render: RenderActor) -> None:
    run = demo_run("r1", resolution="360p")
    render.handle(run, ctx(0, run))
    assert drawn(render, run, until_ms=1000) == list(range(25))
    due = render.next_tick("r1")
    assert due is not None and due == 1000 + render.settings.render_delay_ms  # frame 25 would be next
    render.handle(RunEnded(id="end", run="r1", t_ms=1000, reason="test", duration_ms=1000), ctx(due - 1, run))
    assert render.tick(ctx(due, run)) == ()  # the tick loop had already picked this tick
    assert render.next_tick("r1") is None and render.active_runs() == []


def test_a_renderer_behind_at_the_end_skips_to_the_last_frame(render: RenderActor) -> None:
    run = dataclasses.replace(demo_run("r1", resolution="360p"), duration_ms=1000)
    render.handle(run, ctx(0, run))
    first = drawn(render, run, until_ms=400)
    late = [e.n for e in render.tick(ctx(5000, run)) if isinstance(e, FrameRendered)]
    assert first == list(range(10)) and late == [24]
    assert render.next_tick("r1") is None
    assert render._shows["r1"].skipped + len(first + late) == 25  # noqa: SLF001 - drawn + skipped = due


def test_release_forgets_a_runs_stage(render: RenderActor) -> None:
    run = dataclasses.replace(demo_run("r1", resolution="360p"), duration_ms=1000)
    other = dataclasses.replace(demo_run("r2", resolution="360p"), duration_ms=1000)
    render.handle(run, ctx(0, run))
    render.handle(other, ctx(0, other))
    assert drawn(render, run, until_ms=100)
    render.release("r1")
    assert render.next_tick("r1") is None and [r.run for r in render.active_runs()] == ["r2"]
    assert not render.holds("r1") and render.holds("r2")  # drawer, sprites, memo and tracks went with it


def test_a_renderer_one_frame_behind_draws_exactly_every_frame(render: RenderActor) -> None:
    run = dataclasses.replace(demo_run("r1", resolution="360p"), duration_ms=20_000, fps=25)
    render.handle(run, ctx(0, run))
    ticks, frames, observed = 0, [], []
    while (due := render.next_tick(run.run)) is not None:
        ticks += 1
        out = render.tick(ctx(due + 40, run))  # each tick a frame late: two frames are due
        frames += [e.n for e in out if isinstance(e, FrameRendered)]
        observed += [e for e in out if isinstance(e, FramesObserved)]
    assert frames == list(range(500)) and ticks == 250  # two frames a tick, none skipped
    assert render._shows["r1"].skipped == 0  # noqa: SLF001 - nothing dropped
    assert [o.frames for o in observed] == [25] * 20 and all(o.loss == 0 for o in observed)
