"""Property tests of the scheduling policies (pure code, time passed in)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from events.show import RESOLUTIONS
from schedulers.baseline import LatencyBaselines
from schedulers.batching import Job, RoleScheduler
from schedulers.ladder import LadderPolicy, ResolutionLadder, Window
from schedulers.priority import PriorityPolicy
from schedulers.throttle import ThrottlePolicy, releasable

ROLES = [f"r{i}" for i in range(8)]

arrivals = st.lists(
    st.tuples(st.integers(0, 20000), st.sampled_from(ROLES), st.integers(1, 80), st.floats(0.01, 10.0)),
    min_size=1, max_size=120,
)

LADDER = tuple(RESOLUTIONS)


def simulate(jobs: list[tuple[int, str, int, float]], policy: PriorityPolicy, service_ms: int,
             fifo: bool = False, max_batch: int = 4):
    """Serve jobs as they arrive; yields (now, batch, still waiting) at each pick."""
    sched = RoleScheduler(policy, max_batch=max_batch, token_budget=200, fifo=fifo)
    pending = sorted(enumerate(jobs), key=lambda x: (x[1][0], x[0]))
    now, i = 0, 0
    while i < len(pending) or len(sched):
        while i < len(pending) and pending[i][1][0] <= now:
            n, (at, role, tokens, weight) = pending[i]
            sched.add(Job(n, role, at, tokens, policy.weight(weight)))
            i += 1
        if not len(sched):
            now = pending[i][1][0]
            continue
        batch = sched.next_batch(now)
        yield now, batch, list(sched)
        now += service_ms * len(batch)
        sched.served(batch[0].role, now)


@settings(max_examples=200, deadline=None)
@given(arrivals, st.integers(1, 400))
def test_work_that_arrives_later_than_the_bound_never_goes_first(jobs, service_ms) -> None:  # type: ignore[no-untyped-def]
    policy = PriorityPolicy()
    bound = policy.overtake_bound_ms
    served = 0
    for _, batch, waiting in simulate(jobs, policy, service_ms):
        served += len(batch)
        assert batch and len({j.role for j in batch}) == 1
        for job in batch:
            for other in waiting:
                assert other.arrival_ms >= job.arrival_ms - bound, (job, other, bound)
    assert served == len(jobs)


@settings(max_examples=200, deadline=None)
@given(arrivals, st.integers(1, 400))
def test_every_wait_is_bounded_by_the_work_that_arrived_before_it_plus_the_bound(jobs, service_ms) -> None:  # type: ignore[no-untyped-def]
    policy = PriorityPolicy()
    bound = policy.overtake_bound_ms
    start: dict[int, int] = {}
    for now, batch, _ in simulate(jobs, policy, service_ms):
        for job in batch:
            start[job.key] = now  # type: ignore[index]
    for n, (at, _, _, _) in enumerate(jobs):
        # Everything served before n arrived before at + bound: n waits at most their service
        # time, plus the batch in service when it arrived.
        ahead = sum(1 for m, (at2, _, _, _) in enumerate(jobs) if m != n and at2 <= at + bound and start[m] < start[n])
        assert start[n] - at <= (ahead + 4) * service_ms


@given(st.floats(0, 1), st.floats(0, 1))
def test_the_throttle_window_stays_in_bounds_and_shrinks_as_the_buffer_fills(a, b) -> None:  # type: ignore[no-untyped-def]
    policy = ThrottlePolicy()
    lo, hi = sorted((a, b))
    assert policy.min_tokens <= policy.window(hi) <= policy.window(lo) <= policy.max_tokens
    if hi <= 0.7:
        assert policy.window(hi) == policy.max_tokens
    assert policy.window(1.0) == policy.min_tokens


@given(st.integers(0, 40), st.integers(4, 16), st.integers(1, 20))
def test_text_goes_ahead_of_speech_only_within_the_window(ahead, window, nxt) -> None:  # type: ignore[no-untyped-def]
    ok = releasable(ahead, window, nxt)
    assert ok == (ahead == 0 or ahead + nxt <= window)


windows = st.lists(st.tuples(st.floats(0, 200), st.floats(0, 0.2)), min_size=1, max_size=200)


@settings(max_examples=300, deadline=None)
@given(windows, st.sampled_from(LADDER[:2]))
def test_the_ladder_never_flaps_and_moves_one_step_at_a_time(seq, top) -> None:  # type: ignore[no-untyped-def]
    policy = LadderPolicy()
    ladder = ResolutionLadder(RESOLUTIONS, top, policy)
    changes = []
    bad_run = 0
    for i, (late, loss) in enumerate(seq):
        w = Window((i + 1) * 1000, late, loss)
        bad_run = bad_run + 1 if policy.bad(w) else 0
        change = ladder.observe(w)
        if change is not None:
            changes.append(change)
            assert abs(LADDER.index(change.after) - LADDER.index(change.before)) == 1
            if LADDER.index(change.after) > LADDER.index(change.before):
                assert bad_run >= policy.bad_windows
            assert LADDER.index(change.after) >= LADDER.index(top)
    for a, b in zip(changes, changes[1:], strict=False):
        assert b.at_ms - a.at_ms >= policy.min_gap_ms


@given(st.integers(0, 30))
def test_sustained_lateness_steps_down_within_the_bad_windows(good_first) -> None:  # type: ignore[no-untyped-def]
    policy = LadderPolicy()
    ladder = ResolutionLadder(RESOLUTIONS, "720p", policy)
    t = 0
    for _ in range(good_first):
        t += 1000
        assert ladder.observe(Window(t, 10, 0)) is None
    changes = []
    for _ in range(policy.bad_windows):
        t += 1000
        changes.append(ladder.observe(Window(t, 90, 0)))
    assert changes[:-1] == [None] * (policy.bad_windows - 1)
    assert changes[-1] is not None and (changes[-1].before, changes[-1].after) == ("720p", "480p")
    # Recovery: only after the stable period, and never within the gap.
    while True:
        t += 1000
        up = ladder.observe(Window(t, 10, 0))
        if up is not None:
            break
    assert up.after == "720p" and up.at_ms - changes[-1].at_ms >= max(policy.stable_ms, policy.min_gap_ms)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 500), min_size=1, max_size=300), st.integers(5, 50))
def test_baselines_flag_samples_far_above_the_recent_p99(samples, window) -> None:  # type: ignore[no-untyped-def]
    b = LatencyBaselines(window=window, factor=1.8, floor_ms=50, min_samples=5)
    recent: list[float] = []
    for s in samples:
        ordered = sorted(recent)
        expected_p99 = ordered[max(0, -(-99 * len(ordered) // 100) - 1)] if ordered else None
        assert b.p99("tts") == expected_p99
        anomaly = b.observe("tts", s)
        flagged = expected_p99 is not None and len(recent) >= 5 and s > expected_p99 * 1.8 and s > 50
        assert (anomaly is not None) == flagged
        recent = (recent + [s])[-window:]


def test_batches_keep_to_one_role_the_size_and_the_token_budget() -> None:
    sched = RoleScheduler(max_batch=3, token_budget=100)
    for n in range(10):
        sched.add(Job(n, "a" if n % 2 else "b", n, tokens=40, weight=2.0 if n % 2 else 1.0))
    batch = sched.next_batch(10)
    assert [j.key for j in batch] == [1, 3]  # a is heavier; 40 + 40 fits, a third would not
    assert len(sched) == 8
    fifo = RoleScheduler(fifo=True)
    for n, role in enumerate("aabab"):
        fifo.add(Job(n, role, n))
    assert [j.key for j in fifo.next_batch(5)] == [0, 1]


def test_expired_jobs_leave_the_queue() -> None:
    sched = RoleScheduler()
    sched.add(Job("x", "a", 0, deadline_ms=100))
    sched.add(Job("y", "a", 0, deadline_ms=300))
    sched.add(Job("z", "a", 0))
    assert [j.key for j in sched.expired(200)] == ["x"]
    assert sorted(j.key for j in sched) == ["y", "z"]


@given(st.floats(0, 60))
def test_the_ladder_goes_up_only_when_the_bigger_picture_would_fit(cost) -> None:  # type: ignore[no-untyped-def]
    policy = LadderPolicy()
    ladder = ResolutionLadder(RESOLUTIONS, "720p", policy)
    t = 0
    for _ in range(policy.bad_windows):
        t += 1000
        ladder.observe(Window(t, 90, 0))
    assert ladder.current == "480p"
    ups = []
    for _ in range(60):
        t += 1000
        change = ladder.observe(Window(t, 5, 0, 25, cost))
        if change is not None:
            ups.append(change)
    fits = cost * (1280 * 720) / (854 * 480) <= policy.headroom * policy.budget_ms
    assert bool(ups) == fits
