"""A busy room's best comments get the floor: what a comment asks (``schedulers.choice``), and the
waiting room's choice under a flood (property-tested on ``StagePlan`` with speech placed as lipsync would)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from schedulers.choice import GREETING, QUESTION, REMARK, behind, comment_kind
from schedulers.stage import ADDRESSED, COMMENT, StagePlan, StagePolicy

POLICY = StagePolicy()


def test_what_a_comment_asks() -> None:
    assert [comment_kind(t) for t in ("hi", "hello @rex", "666", "哈哈哈哈哈哈", "hiiiii", "@小鹿 你好", "主播晚上好",
                                      "awesome!!!", "主播加油")] == [GREETING] * 9
    assert [comment_kind(t) for t in ("@rex is the new gpu worth it", "what game are we playing tonight",
                                      "@小鹿 今天吃什么", "推荐一个旅行的地方吧", "how was your day",
                                      "@rex explain neural networks")] == [QUESTION] * 6
    assert [comment_kind(t) for t in ("this stream is so cozy", "good evening from Berlin",
                                      "first time here, hello everyone", "@host play my favourite song",
                                      "好喜欢这个直播间")] == [REMARK] * 5


def test_a_role_behind_its_share_is_told_apart_only_once_there_is_enough_to_judge() -> None:
    weights = {"host": 2.0, "rex": 1.0}
    assert not behind("rex", {"host": 5000, "rex": 0}, weights)  # too little speech yet
    assert behind("rex", {"host": 20_000, "rex": 2000}, weights)
    assert not behind("rex", {"host": 20_000, "rex": 9000}, weights)
    assert not behind("", {"host": 20_000}, weights) and not behind("nobody", {"host": 20_000}, weights)


def _floor(arrivals: list[tuple[int, str, int, int, str]], length_ms: int, until_ms: int,
           busy_ms: int = 0) -> dict[str, str]:
    """Play arrivals (at, key, class, kind, role) into a plan, its floor taken for ``busy_ms`` first;
    each answer is placed at once, as lipsync would (``length_ms`` long, a pause after the speech
    before); the outcome of each key."""
    plan = StagePlan(POLICY, until_ms)
    plan.weights = {"host": 1.0, "rex": 1.0}
    outcome: dict[str, str] = {}
    placed_end = busy_ms
    if busy_ms:
        plan.ask("busy", 0, busy_ms)
        plan.placed("busy", 0, busy_ms, True, busy_ms, 0)
    pending = sorted(arrivals)
    now = 0
    while now < until_ms:
        decisions = []
        while pending and pending[0][0] <= now:
            at, key, cls, kind, role = pending.pop(0)
            decisions += plan.add(key, cls, key, at, kind, role, regular=key.startswith("regular"))
        decisions += plan.decide(now)
        for d in decisions:
            outcome[d.candidate.key] = "answered" if d.answer else d.reason
            if d.answer:
                start = max(now + 100, placed_end + POLICY.pause_ms if placed_end else 0)
                placed_end = start + length_ms
                plan.placed(d.candidate.key, start, placed_end, True, placed_end, now)
        due = [t for t in (plan.next_due_ms(), pending[0][0] if pending else None) if t is not None]
        now = max(now + 1, min(due)) if due else until_ms
    return outcome


@settings(max_examples=60, deadline=None)
@given(st.integers(1800, 3000), st.lists(st.integers(0, 400), min_size=3, max_size=8), st.integers(150, 400))
def test_addressed_questions_do_not_age_out_under_a_flood_of_greetings(
        length: int, extra: list[int], flood_every: int) -> None:
    # Questions to rex, one every two replies or slower; a greeting to host every few hundred ms.
    arrivals, at = [], 1000
    for i, e in enumerate(extra):
        arrivals.append((at, f"q{i}", ADDRESSED, QUESTION, "rex"))
        at += 2 * (length + POLICY.pause_ms) + e
    end = at + 10_000
    arrivals += [(t, f"g{t}", ADDRESSED, GREETING, "host") for t in range(500, at, flood_every)]
    outcome = _floor(arrivals, length, end)
    assert all(outcome[f"q{i}"] == "answered" for i in range(len(extra))), outcome


@settings(max_examples=60, deadline=None)
@given(st.integers(1500, 1800), st.lists(st.integers(0, 100), min_size=4, max_size=10))
def test_near_the_floors_capacity_the_oldest_question_is_not_starved(length: int, jitter: list[int]) -> None:
    # Two questions while the floor is taken, then one a reply apart: freshest-first would answer
    # each newcomer and let the first of the two go stale; the one about to go stale goes first,
    # and every one is on air within its wait limit.
    arrivals, at = [(100, "q-extra", COMMENT, QUESTION, "")], 200
    for i, j in enumerate(jitter):
        arrivals.append((at, f"q{i}", COMMENT, QUESTION, ""))
        at += length + POLICY.pause_ms + j  # as fast as the floor answers
    outcome = _floor(arrivals, length, at + 10_000, busy_ms=1500)
    assert all(v == "answered" for v in outcome.values()), outcome


@settings(max_examples=60, deadline=None)
@given(st.integers(1500, 2500), st.integers(300, 1500), st.integers(0, 8000), st.sampled_from([QUESTION, REMARK]))
def test_regulars_first_never_lets_a_newcomer_go_for_a_regular(length: int, every: int, newcomer_at: int,
                                                                kind: int) -> None:
    """Regulars' comments of the same kind come as fast as, or faster than, the floor answers, each
    ranked first among equals: a newcomer's comment that would be answered without the preference
    is answered with it (once about to go stale it goes first, whoever waits)."""
    flood = [(t, f"{{}}{t}", COMMENT, kind, "") for t in range(200, 12_000, every)]
    newcomer = (newcomer_at + 1, "newcomer", COMMENT, kind, "")
    plain = _floor([(t, k.format("r"), c, n, r) for t, k, c, n, r in flood] + [newcomer], length, 30_000, busy_ms=1500)
    first = _floor([(t, k.format("regular"), c, n, r) for t, k, c, n, r in flood] + [newcomer], length, 30_000,
                   busy_ms=1500)
    if plain["newcomer"] == "answered":
        assert first["newcomer"] == "answered", first


def test_a_regular_goes_first_among_equals() -> None:
    plan = StagePlan(POLICY, 0)
    plan.ask("busy", 0, 3000)
    plan.add("newcomer", COMMENT, "a", 100, QUESTION)
    plan.add("regular", COMMENT, "b", 90, QUESTION, regular=True)
    [d] = plan.decide(plan.next_due_ms() or 0)
    assert (d.candidate.key, d.answer) == ("regular", True)


def test_a_question_goes_before_a_fresher_greeting_of_the_same_class() -> None:
    plan = StagePlan(POLICY, 0)
    plan.ask("busy", 0, 3000)
    plan.add("q", COMMENT, "a", 100, QUESTION)
    plan.add("g", COMMENT, "b", 200, GREETING)
    [d] = plan.decide(plan.next_due_ms() or 0)
    assert (d.candidate.key, d.answer) == ("q", True)


def test_questions_addressed_to_a_role_are_taken_in_the_order_they_came() -> None:
    """Neither at risk yet (an addressed comment waits up to 6 s): the older question to a role
    goes first, where a fresher one used to push it back until it went stale."""
    plan = StagePlan(POLICY, 0)
    plan.ask("busy", 0, 3000)
    plan.add("older", ADDRESSED, "a", 100, QUESTION, "rex")
    plan.add("newer", ADDRESSED, "b", 200, QUESTION, "rex")
    [d, *_] = plan.decide(plan.next_due_ms() or 0)
    assert (d.candidate.key, d.answer) == ("older", True)


def test_the_addressed_class_is_the_stages() -> None:
    from schedulers.choice import ADDRESSED_CLASS

    assert ADDRESSED_CLASS == ADDRESSED
