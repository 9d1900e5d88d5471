"""The floor follows the speech actually placed: lipsync's placements (``danmaku.placed``) reach
the director, which asks for the next reply on deck, ``ahead_ms`` before the placed speech ends,
and plans from estimates only what is not placed yet (driven without NATS, on a moved clock)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.director import Director
from actors.kernel import ListFeed
from events.cue import CueIssued, FloorFollowed
from events.danmaku import DanmakuReceived, SpeechPlaced
from events.run import RunStarted
from infra.settings import load_settings
from schedulers.stage import StagePlan, StagePolicy
from tests.showkit import demo_run

POLICY = StagePolicy()


def _run() -> RunStarted:
    return dataclasses.replace(demo_run(), duration_ms=600_000)


def _harness() -> ListFeed:
    feed = ListFeed(Director(load_settings(environ={}, self_driven="off")), _run())
    feed.feed(feed.run)
    return feed


TEXTS = ("what game are we playing tonight", "this stream is so cozy", "how was your day", "tell us a joke",
         "recommend a book", "is it raining where you are")


def _comment(n: int) -> DanmakuReceived:
    return DanmakuReceived(id=f"d{n}", run="r1", text=TEXTS[n % len(TEXTS)], user=f"viewer{n}")


def _placed(cue: CueIssued, start: int, end: int, done: bool = True, n: int = 0) -> SpeechPlaced:
    return SpeechPlaced(id=f"p{cue.id}{n}", run="r1", role=cue.role, causation="a", correlation=cue.correlation,
                        utterance=cue.id, start_ms=start, end_ms=end, done=done, floor_ms=end)


def _cues(events: list[object]) -> list[CueIssued]:
    return [e for e in events if isinstance(e, CueIssued)]


def test_the_next_reply_goes_on_deck_before_the_placed_speech_ends() -> None:
    feed = _harness()
    [first] = _cues(feed.feed(_comment(1), at_ms=1000))
    feed.feed(*(_comment(n) for n in range(2, 6)), at_ms=1100)
    # Lipsync placed the first reply: 1.2 s from 1300 on, far shorter than its estimate.
    out = feed.feed(_placed(first, 1300, 2500), at_ms=1400)
    [followed] = [e for e in out if isinstance(e, FloorFollowed)]
    assert (followed.free_ms, followed.heard_ms, followed.causation) == (2500 + POLICY.pause_ms, 1400, followed.causation)
    # The next reply is asked for at once: the floor frees within the deck.
    [second] = _cues(feed.advance(1400))
    assert second.t_ms == 1400
    # Then nothing more until that one is placed and its end is near (by its estimate, not before).
    assert _cues(feed.advance(2000)) == []
    feed.feed(_placed(second, 2750, 6000), at_ms=2800)
    feed.feed(_comment(6), at_ms=3000)  # fresh: it can be on air within its wait limit
    assert _cues(feed.advance(6000 + POLICY.pause_ms - POLICY.ahead_ms - 1)) == []
    [third] = _cues(feed.advance(6000 + POLICY.pause_ms - POLICY.ahead_ms))
    assert third.t_ms == 6000 + POLICY.pause_ms - POLICY.ahead_ms


def test_a_reply_dropped_before_it_spoke_frees_the_floor_at_once() -> None:
    feed = _harness()
    [first] = _cues(feed.feed(_comment(1), at_ms=1000))
    feed.feed(_comment(2), at_ms=1050)
    assert _cues(feed.advance(1200)) == []  # the first reply's estimate holds the floor
    feed.feed(_placed(first, -1, 0), at_ms=1300)
    [second] = _cues(feed.advance(1300))
    assert second.t_ms == 1300


def test_a_placement_that_comes_late_changes_nothing_once_urgent_speech_cut_it() -> None:
    plan = StagePlan(POLICY, 600_000)
    plan.ask("a", 0, 5000)
    plan.ask("gift", 1000, 2000, urgent=True)
    assert plan.floor_free_ms == 3000
    assert not plan.placed("a", 100, 4000, True, 4000, 1100)  # cut: its placement no longer counts
    assert plan.floor_free_ms == 3000


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2000), st.integers(200, 6000), st.booleans()), min_size=1, max_size=12))
def test_the_floor_is_planned_from_the_placed_speech_and_estimates_only_for_the_rest(
        replies: list[tuple[int, int, bool]]) -> None:
    plan = StagePlan(POLICY, 0)
    now, placed_end = 0, 0
    for i, (wait, length, place) in enumerate(replies):
        now += wait
        plan.ask(f"c{i}", now, POLICY.estimate_ms(1))
        if place:  # lipsync places it a pause after what was placed before, or now
            start = max(now + 100, placed_end + POLICY.pause_ms if placed_end else 0)
            placed_end = start + length
            plan.placed(f"c{i}", start, placed_end, True, placed_end, now)
            assert plan.floor_free_ms >= placed_end + POLICY.pause_ms
    unplaced = [r for r in replies if not r[2]]
    if not unplaced:  # everything placed: the floor frees exactly a pause after it
        assert plan.floor_free_ms == placed_end + POLICY.pause_ms
    # never before what is placed, never later than everything estimated back to back after it
    bound = max(placed_end + POLICY.pause_ms, sum(w for w, _, _ in replies)) + len(unplaced) * POLICY.estimate_ms(1)
    assert plan.floor_free_ms <= bound


def test_urgent_speech_placed_frees_the_floor_where_it_ends_not_where_its_estimates_add_up() -> None:
    plan = StagePlan(POLICY, 600_000)
    for i, at in enumerate((1000, 1100, 1200)):  # three gifts in a row, each estimated 1.9 s
        plan.ask(f"gift{i}", at, POLICY.estimate_ms(1), urgent=True)
    assert plan.floor_free_ms == 1000 + 3 * POLICY.estimate_ms(1)
    end = 1100
    for i in range(3):  # lipsync places them back to back, each short
        start, end = end + POLICY.pause_ms, end + POLICY.pause_ms + 800
        plan.placed(f"gift{i}", start, end, True, end, 1300 + i)
    assert plan.floor_free_ms == plan.urgent_free_ms == end + POLICY.pause_ms
    plan.ask("next", 1400, POLICY.estimate_ms(1))
    assert plan.floor_free_ms == end + POLICY.pause_ms + POLICY.estimate_ms(1)


def test_a_line_of_the_show_s_own_placed_on_deck_gives_way_and_the_floor_frees_before_it() -> None:
    plan = StagePlan(POLICY, 600_000)
    plan.ask("reply", 0, 3000)
    plan.placed("reply", 100, 2900, True, 2900, 50)
    plan.occupy("own", 1300, POLICY.own_line_ms, "host", own=True)
    plan.placed("own", 2900 + POLICY.pause_ms, 6000, True, 6000, 1320)
    assert plan.floor_free_ms == 6000 + POLICY.pause_ms
    [own] = plan.on_deck_own(1400 + 500)
    assert own.key == "own"
    plan.drop("own", 1400)
    assert plan.floor_free_ms == 2900 + POLICY.pause_ms  # lipsync takes it off: the floor frees after the reply
    assert plan.on_deck_own(1400) == []


def test_a_comment_addressed_to_a_role_takes_the_deck_from_a_remark_that_has_not_begun() -> None:
    from events.utterance import UtteranceDropped

    feed = _harness()
    [first] = _cues(feed.feed(_comment(1), at_ms=1000))
    feed.feed(_placed(first, 1100, 6000, done=False), at_ms=1200)  # a long reply on air
    feed.feed(_comment(2), at_ms=4000)
    [deck] = _cues(feed.advance(6000 + POLICY.pause_ms - POLICY.ahead_ms))  # a remark, on deck
    feed.feed(_placed(deck, 6200, 11_000), at_ms=deck.t_ms + 50)  # written and placed, not begun
    # A question naming a role comes: behind the reply on deck it could not be on air in time.
    named = DanmakuReceived(id="d9", run="r1", text="@Rex what GPU do you use?", user="ann")
    out = feed.feed(named, at_ms=deck.t_ms + 100)
    [dropped] = [e for e in out if isinstance(e, UtteranceDropped)]
    assert dropped.utterance == deck.id and dropped.reason.startswith("yielded:") and dropped.causation == "d9"
    [answer] = _cues(out + feed.advance(deck.t_ms + 100))
    assert answer.correlation == "d9" and answer.role == "rex"
    # A remark does not take the deck from another remark.
    feed = _harness()
    [first] = _cues(feed.feed(_comment(1), at_ms=1000))
    feed.feed(_placed(first, 1100, 6000, done=False), at_ms=1200)
    feed.feed(_comment(2), at_ms=4000)
    [deck] = _cues(feed.advance(6000 + POLICY.pause_ms - POLICY.ahead_ms))
    feed.feed(_placed(deck, 6200, 11_000), at_ms=deck.t_ms + 50)
    out = feed.feed(_comment(3), at_ms=deck.t_ms + 100)
    assert not [e for e in out if isinstance(e, UtteranceDropped)]
    # Nor does a named comment that can be on air within its wait limit behind the deck.
    feed = _harness()
    [first] = _cues(feed.feed(_comment(1), at_ms=1000))
    feed.feed(_placed(first, 1100, 6000, done=False), at_ms=1200)
    feed.feed(_comment(2), at_ms=4000)
    [deck] = _cues(feed.advance(6000 + POLICY.pause_ms - POLICY.ahead_ms))
    out = feed.feed(dataclasses.replace(named, id="d10"), at_ms=deck.t_ms + 100)
    assert not [e for e in out if isinstance(e, UtteranceDropped)]


def test_a_comment_that_comes_while_the_show_s_own_line_is_spoken_waits_for_it_as_placed() -> None:
    from schedulers.stage import COMMENT

    plan = StagePlan(POLICY, 600_000)
    plan.occupy("own1", 1000, 3000, role="host", own=True)  # estimated to end at 4000
    plan.placed("own1", 1100, 2300, True, 2300, 1200)  # spoken from 1100 to 2300

    def waits_from(key: str, at_ms: int) -> int:
        decided = [d.candidate for d in plan.add(key, COMMENT, key, at_ms) if d.candidate.key == key]
        return (decided[0] if decided else plan.waiting[key]).from_ms

    # Its wait is counted from the line's end as placed, not as it was estimated.
    assert waits_from("d1", 1500) == 2300 + POLICY.pause_ms
    assert waits_from("d2", 2600) == 2600  # after it: from when it came
