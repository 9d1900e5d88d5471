"""When a show's drain is over (``app.supervisor.DrainWatch``): a slow drain that makes progress
goes on past the timeout; a stuck one is given up on."""

from __future__ import annotations

from app.supervisor import DrainWatch


def run(pending: list[int], closed_from: int = 0, timeout_s: float = 60.0) -> tuple[bool, float]:
    """Step a watch once a second through what is pending; the outcome and when it came."""
    watch = DrainWatch(timeout_s, quiet_s=1.3, now=0.0)
    t = 0.0
    for i in range(10_000):
        t = float(i)
        done = watch.step(t, pending[min(i, len(pending) - 1)], i >= closed_from)
        if done is not None:
            return done, t
    raise AssertionError("never decided")


def test_a_drain_is_done_once_nothing_has_been_pending_for_the_quiet_time() -> None:
    assert run([5, 3, 0]) == (True, 4.0)  # 0 pending from 2 s: quiet past 1.3 s at 4 s


def test_it_waits_for_the_video_to_be_closed() -> None:
    assert run([0], closed_from=30) == (True, 32.0)


def test_a_slow_drain_that_makes_progress_goes_on_past_the_timeout() -> None:
    # A sink behind on a loaded machine: 500 frames, 5 a second, 100 s > the 60 s timeout.
    assert run(list(range(500, -1, -5))) == (True, 102.0)


def test_a_stuck_drain_is_given_up_after_the_timeout_without_progress() -> None:
    assert run([7, 4, 4]) == (False, 61.0)  # the last new low at 1 s


def test_ups_and_downs_above_the_low_are_no_progress() -> None:
    assert run([4] + [6, 5] * 100) == (False, 60.0)
