"""The renderer's frame clock: a show of D seconds at F fps has exactly D x F frames."""

from __future__ import annotations

import dataclasses
import gc
import weakref
from pathlib import Path

import pytest

from actors.kernel import Kernel, ListFeed
from actors.render import RenderActor, frame_count, frame_time
from events.base import Event
from events.frame import FrameRendered
from events.qos import FramesObserved
from events.run import RunEnded, RunStarted
from infra.settings import load_settings
from tests.showkit import demo_run


@pytest.mark.parametrize("fps", [24, 25, 30, 60])
@pytest.mark.parametrize("duration_ms", [1, 999, 1000, 1001, 20000])
def test_frames_are_the_ones_before_the_end(fps: int, duration_ms: int) -> None:
    n = frame_count(duration_ms, fps)
    assert (n - 1) * 1000 / fps < duration_ms <= n * 1000 / fps  # frame n - 1 is in, frame n is not
    assert frame_time(n - 1, fps) < duration_ms
    assert all(frame_time(i, fps) == int(i * 1000 / fps) for i in range(n + 1))
    assert frame_count(20000, 25) == 500 and frame_count(0, 25) == 0


def drawn(feed: ListFeed, until_ms: int = 10**9) -> list[int]:
    """Run the renderer's clock (each tick at the show time it asks for); the frame numbers of the
    feed's run it draws."""
    return [e.n for e in feed.advance(until_ms) if isinstance(e, FrameRendered) and e.run == feed.run.run]


@pytest.fixture
def render(tmp_path: Path) -> RenderActor:
    return RenderActor(load_settings(environ={}, out_dir=tmp_path))


def started(render: RenderActor, run: RunStarted) -> ListFeed:
    """A feed of ``run`` to the renderer, the run's start taken at show time 0."""
    feed = ListFeed(render, run)
    feed.handle(run, at_ms=0)
    return feed


def test_a_planned_length_bounds_the_frames_before_the_end_is_announced(render: RenderActor) -> None:
    run = dataclasses.replace(demo_run("r1", resolution="360p"), duration_ms=1000, fps=25)
    feed = started(render, run)
    assert drawn(feed) == list(range(25))  # run.ended has not come, and need not


def test_an_end_that_becomes_known_after_the_tick_was_scheduled_stops_the_clock(render: RenderActor) -> None:
    run = demo_run("r1", resolution="360p")
    feed = started(render, run)
    assert drawn(feed, until_ms=1000) == list(range(25))
    due = render.next_tick(feed.state())
    assert due is not None and due == 1000 + render.settings.render_delay_ms  # frame 25 would be next
    feed.handle(RunEnded(id="end", run="r1", t_ms=1000, reason="test", duration_ms=1000), at_ms=due - 1)
    assert feed.tick(at_ms=due) == []  # the tick loop had already picked this tick
    assert render.next_tick(feed.state()) is None and feed.kernel.next_tick() is None


def test_a_renderer_behind_at_the_end_skips_to_the_last_frame(render: RenderActor) -> None:
    run = dataclasses.replace(demo_run("r1", resolution="360p"), duration_ms=1000)
    feed = started(render, run)
    first = drawn(feed, until_ms=400)
    late = [e.n for e in feed.tick(at_ms=5000) if isinstance(e, FrameRendered)]
    assert first == list(range(10)) and late == [24]
    assert render.next_tick(feed.state()) is None
    assert feed.state().skipped + len(first + late) == 25  # drawn + skipped = due


def test_release_forgets_a_runs_stage(render: RenderActor) -> None:
    run = dataclasses.replace(demo_run("r1", resolution="360p"), duration_ms=1000)
    other = dataclasses.replace(demo_run("r2", resolution="360p"), duration_ms=1000)
    feed = started(render, run)
    feed.handle(other, at_ms=0)
    assert drawn(feed, until_ms=100)
    held = weakref.ref(feed.state("r1"))
    feed.release("r1")
    gc.collect()
    assert not feed.kernel.ticks_ahead("r1") and feed.kernel.ticks_ahead("r2")
    due = feed.kernel.next_tick()
    assert due is not None and due[1].run == "r2"  # only r2's clock goes on
    # Drawer, sprites, memo and tracks went with the state the kernel dropped: nothing keeps it.
    assert not feed.kernel.holds("r1") and feed.kernel.holds("r2") and held() is None
    assert feed.state("r1") is None and feed.state("r2") is not None


def test_a_renderer_one_frame_behind_draws_exactly_every_frame(render: RenderActor) -> None:
    run = dataclasses.replace(demo_run("r1", resolution="360p"), duration_ms=20_000, fps=25)
    feed = started(render, run)
    ticks, frames, observed = 0, [], []
    while (due := render.next_tick(feed.state())) is not None:
        ticks += 1
        out = feed.tick(at_ms=due + 40)  # each tick a frame late: two frames are due
        frames += [e.n for e in out if isinstance(e, FrameRendered)]
        observed += [e for e in out if isinstance(e, FramesObserved)]
    assert frames == list(range(500)) and ticks == 250  # two frames a tick, none skipped
    assert feed.state().skipped == 0  # nothing dropped
    assert [o.frames for o in observed] == [25] * 20 and all(o.loss == 0 for o in observed)


def test_a_run_met_long_after_its_start_is_not_drawn_and_its_inputs_are_ignored(render: RenderActor) -> None:
    run = dataclasses.replace(demo_run("r1", resolution="360p"), duration_ms=120_000)
    feed = ListFeed(render, run)
    feed.handle(run, at_ms=60_000)  # beyond the join window: the kernel holds it, nobody draws it
    feed.handle(RunEnded(id="end", run="r1", t_ms=61_000, reason="test", duration_ms=61_000), at_ms=61_000)
    assert feed.kernel.holds("r1") and feed.state().renderer is None and feed.state().frames == 3000
    assert feed.kernel.next_tick() is None and feed.advance(200_000) == []


def test_a_drawer_built_ahead_is_handed_to_its_run_s_start(render: RenderActor) -> None:
    run = demo_run("r1", resolution="360p")
    kernel: Kernel[Event] = Kernel(render)
    kernel.prepare(run)
    kernel.prepare(dataclasses.replace(demo_run("r3"), replay_of="r0"))  # a playback is never drawn: not built
    assert set(kernel.prepared) == {run.id}
    built = kernel.prepared[run.id]
    list(kernel.take(run, None, 0).handle())
    assert kernel.state("r1").renderer is built and not kernel.prepared  # taken by the run's start
    kernel.prepare(run)  # its start again (a redelivery): drawn already, nothing built
    assert not kernel.prepared
    refused = demo_run("r4", resolution="360p")
    kernel.prepare(refused)
    kernel.take(refused, None, 0, joins=False)  # a run the renderer does not join: what was built goes
    assert not kernel.prepared and not kernel.holds("r4")


def test_taken_over_it_goes_on_after_the_last_frame_stored_and_draws_the_missed_ones_late(render: RenderActor) -> None:
    run = dataclasses.replace(demo_run("r1", resolution="360p"), duration_ms=2000)
    feed = ListFeed(render, run)
    feed.kernel.taking_over(run)
    feed.handle(run, at_ms=0)  # its past handed over again
    last = FrameRendered(id="f9", run="r1", t_ms=360, n=9, width=640, height=360, resolution="360p", jpeg=b"")
    feed.kernel.resume(run, last)
    first = [e.n for e in feed.tick(at_ms=1005) if isinstance(e, FrameRendered)]  # taken over at 1 s
    assert first == list(range(10, 18))  # the frames nobody drew: a batch at a time, late
    assert drawn(feed) == list(range(18, 50)) and feed.state().skipped == 0  # then on, none missed
