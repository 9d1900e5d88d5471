"""The show carries itself: the rundown, the show's own turns and the operator's controls, driven
through the director without NATS (the in-memory feed, on a clock the test moves)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from actors.director import Director
from actors.kernel import ListFeed
from events.base import Event
from events.cue import ControlApplied, CueIssued, SegmentStarted
from events.danmaku import DanmakuReceived, DanmakuRejected, DanmakuSkipped, OperatorControl
from events.run import RunStarted
from events.show import ShowError, show_from_dict
from infra.settings import load_settings
from schedulers.stage import StagePolicy
from tests.showkit import demo_run

TEN_MINUTES = 600_000


def _run(duration_ms: int = TEN_MINUTES) -> RunStarted:
    return dataclasses.replace(demo_run(), duration_ms=duration_ms)


def _show(run: RunStarted, until_ms: int, inputs: list[tuple[int, Event]] = ()) -> list[Event]:  # type: ignore[assignment]
    feed = ListFeed(Director(load_settings(environ={})), run)
    feed.feed(run)
    for at, event in inputs:
        feed.feed(event, at_ms=at)
    feed.advance(until_ms)
    return [e.event for e in feed.out]


def _cues(out: list[Event]) -> list[CueIssued]:
    return [e for e in out if isinstance(e, CueIssued)]


def _control(action: str, n: int, **kw: object) -> OperatorControl:
    return OperatorControl(id=f"c{n}", run="r1", action=action, user="op", **kw)  # type: ignore[arg-type]


def test_a_show_without_comments_carries_itself_by_its_rundown() -> None:
    out = _show(_run(), TEN_MINUTES)
    cues = _cues(out)
    assert all(c.self_driven and c.danmaku == () for c in cues)
    policy = StagePolicy()
    # The floor is planned back to back: the estimated silence between lines stays near the gap.
    gaps = [b.t_ms - a.t_ms - (policy.verbatim_ms(a.text) if a.verbatim else policy.own_line_ms + policy.pause_ms)
            for a, b in zip(cues, cues[1:], strict=False)]
    assert max(gaps) <= 500, max(gaps)
    cycle = policy.own_line_ms + policy.pause_ms + load_settings(environ={}).idle_gap_ms
    # until the end (each line asked for on deck, ahead of the floor), and nothing asked for past it
    assert cues[-1].t_ms + policy.ahead_ms > TEN_MINUTES - 2 * cycle
    assert all(c.t_ms + policy.own_line_ms <= TEN_MINUTES for c in cues if not c.verbatim)
    # Every role speaks, by weight (2 : 1.5 : 1), within a few points.
    turns = Counter(c.role for c in cues)
    weights = {"host": 2.0, "xiaolu": 1.5, "rex": 1.0}
    for role, weight in weights.items():
        assert abs(turns[role] / len(cues) - weight / 4.5) < 0.05, turns
    # Each verbatim line said once, in order, by its role; nothing else said word for word.
    lines = [(c.role, c.text) for c in cues if c.verbatim]
    assert lines == [("host", "Welcome to Troupe's Friday night stream!"),
                     ("rex", "This segment is brought to you by Pixel Forge: build your own game in an afternoon.")]
    # The segments start on their planned clock (30 + 45 + 45 s, looped), the first at 0.
    segments = [e for e in out if isinstance(e, SegmentStarted)]
    assert [(s.title, s.t_ms) for s in segments[:4]] == [
        ("Welcome in", 0), ("Game night picks", 30_000), ("Late-night snacks", 75_000), ("Welcome in", 120_000)]
    assert all(s.t_ms == s.planned_ms for s in segments)
    assert len(segments) == 1 + (TEN_MINUTES - 1) // 120_000 * 3 + 2  # 5 loops and the start of a 6th


def test_the_banter_is_bounded_and_no_role_holds_the_floor() -> None:
    cues = _cues(_show(_run(), TEN_MINUTES))
    banter = 0
    for cue in cues:
        banter = 0 if cue.reason == "invitation" else banter + 1
        assert banter <= load_settings(environ={}).banter_turns + 1  # N turns between roles, then the chat
    runs = [1]
    for a, b in zip(cues, cues[1:], strict=False):
        runs.append(runs[-1] + 1 if a.role == b.role else 1)
    assert max(runs) <= 2
    follow = [c for c in cues if c.reason == "follow_up"]
    by_id = {c.id: c for c in cues}
    assert follow and all(c.addressee != c.role and by_id[c.follows].role == c.addressee for c in follow)
    assert {c.reason for c in cues} == {"line", "brief", "follow_up", "invitation"}


def test_a_comment_goes_first_and_waits_at_most_for_the_line_being_spoken() -> None:
    run = _run(120_000)
    topics = ["cats", "rain", "trains", "chess", "tea", "jazz", "maps", "boats", "kites", "clocks", "owls", "bikes"]
    chat = [(5_000 + i * 7_300, DanmakuReceived(id=f"d{i}", run="r1", text=f"what about {t}?", user=f"v{i}"))
            for i, t in enumerate(topics)]
    cues = _cues(_show(run, 120_000, chat))  # type: ignore[arg-type]
    answers = {c.danmaku[0]: c for c in cues if c.danmaku}
    assert len(answers) == 12
    longest_line = max(StagePolicy().verbatim_ms(c.text) for c in cues if c.verbatim)
    for at, d in chat:
        assert answers[d.id].t_ms - at <= longest_line, (d.id, answers[d.id].t_ms - at)
    # A reply to the chat is never planned behind a line of the show's asked for after it.
    for cue in cues:
        if cue.danmaku:
            assert cue.priority > max(c.priority for c in cues if c.self_driven)


def test_re_execution_gets_the_same_show_however_the_clock_wakes() -> None:
    run = _run(90_000)
    inputs: list[tuple[int, Event]] = [
        (3_000, DanmakuReceived(id="d1", run="r1", text="hi @rex", user="a")),
        (20_000, _control("hold", 1)),
        (31_000, _control("resume", 2)),
        (33_000, _control("say", 3, text="A word from the producer. Thanks for watching!", target="xiaolu")),
        (40_000, _control("segment", 4, target="next")),
        (41_000, DanmakuReceived(id="d2", run="r1", text="gift!", user="b", kind="gift")),
    ]
    ticked = _show(run, 90_000, inputs)
    lazy_feed = ListFeed(Director(load_settings(environ={})), run)
    lazy = lazy_feed.handle(run, at_ms=0)
    for at, event in inputs:  # no tick between the inputs: each catches up what fell due
        lazy += lazy_feed.handle(event, at_ms=at)
    lazy += lazy_feed.tick(at_ms=90_000)
    assert sorted(ticked, key=lambda e: e.id) == sorted(lazy, key=lambda e: e.id)


def test_the_operator_holds_says_and_moves_the_rundown_on() -> None:
    run = _run(120_000)
    inputs: list[tuple[int, Event]] = [
        (10_000, _control("hold", 1)),
        (12_000, DanmakuReceived(id="d1", run="r1", text="still answered while held?", user="a")),
        (30_000, _control("resume", 2)),
        (50_000, _control("say", 3, text="Back after a short break.", target="rex")),
        (60_000, _control("segment", 4, target="Late-night snacks")),
        (69_800, DanmakuReceived(id="d4", run="r1", text="answered before the hold comes", user="d")),
        (69_900, DanmakuReceived(id="d3", run="r1", text="waiting when the hold comes", user="c")),
        (70_000, _control("hold", 5, all=True)),
        (71_000, DanmakuReceived(id="d2", run="r1", text="hello?", user="b")),
        (80_000, _control("resume", 6)),
    ]
    out = _show(run, 120_000, inputs)
    cues = _cues(out)
    own = [c for c in cues if c.self_driven and c.reason != "say"]
    banter = 0
    for cue in sorted(cues, key=lambda c: c.seq):  # a segment moved on keeps the banter bounded
        banter = banter + 1 if cue.reason in ("brief", "follow_up") else 0
        assert banter <= load_settings(environ={}).banter_turns
    # Held from 10 s: the line asked for before it is the last until the resume at 30 s.
    assert not [c for c in own if 10_000 < c.t_ms < 30_000]
    assert [c for c in own if 30_000 <= c.t_ms < 33_000]
    assert [c.danmaku for c in cues if c.danmaku] == [("d1",), ("d4",)]  # the chat is still answered
    [say] = [c for c in cues if c.reason == "say"]
    assert (say.role, say.text, say.verbatim, say.correlation) == ("rex", "Back after a short break.", True, "c3")
    assert 50_000 <= say.t_ms <= 53_000
    segments = [e for e in out if isinstance(e, SegmentStarted) and e.reason == "operator"]
    assert [(s.title, s.t_ms) for s in segments] == [("Late-night snacks", 60_000)]
    after = [c for c in own if c.t_ms >= 60_000]
    assert after and after[0].segment == "Late-night snacks" and after[0].t_ms <= 63_000
    skipped = [(e.reason, e.correlation) for e in out if isinstance(e, DanmakuSkipped)]
    assert skipped == [("on_hold", "d3"), ("on_hold", "d2")]
    assert not [c for c in own if 70_000 < c.t_ms < 80_000]
    applied = [e for e in out if isinstance(e, ControlApplied)]
    assert [a.action for a in applied] == ["hold", "resume", "say", "segment", "hold", "resume"]


@pytest.mark.parametrize(("control", "reason"), [
    (OperatorControl(id="c1", run="r1", action="dance"), "action 'dance' is not one of"),
    (OperatorControl(id="c1", run="r1", action="say", text="  "), "say: the line is empty"),
    (OperatorControl(id="c1", run="r1", action="say", text="hi", target="ghost"), "say: no role 'ghost'"),
    (OperatorControl(id="c1", run="r1", action="segment", target="Nope"), "segment: no segment 'Nope'"),
])
def test_a_bad_control_is_rejected_with_its_reason(control: OperatorControl, reason: str) -> None:
    run = _run(60_000)
    feed = ListFeed(Director(load_settings(environ={})), run)
    feed.handle(run, at_ms=0)
    [rejected] = [e for e in feed.handle(control, at_ms=100) if isinstance(e, DanmakuRejected)]
    assert rejected.reason == "bad_control" and rejected.detail.startswith(reason), rejected.detail


def test_a_control_for_a_run_that_is_not_there_is_rejected() -> None:
    feed = ListFeed(Director(load_settings(environ={})), _run())
    [out] = feed.handle(OperatorControl(id="c1", run="nope", action="hold"), at_ms=0)  # no run "nope" started
    assert isinstance(out, DanmakuRejected) and out.reason == "unknown_run"


def test_a_show_with_self_driven_off_only_answers_the_chat() -> None:
    run = dataclasses.replace(_run(60_000), config={"self_driven": "off"})
    out = _show(run, 60_000, [(1_000, DanmakuReceived(id="d1", run="r1", text="hi", user="a"))])
    assert [c.danmaku for c in _cues(out)] == [("d1",)]


def _doc(**segment: object) -> dict[str, object]:
    base: dict[str, object] = {"title": "Intro", "length": 30, "leads": ["a"]}
    return {"roles": [{"id": "a"}, {"id": "b"}], "segments": [{**base, **segment}]}


@pytest.mark.parametrize(("segment", "message"), [
    ({"title": ""}, "segments[0].title: a title has 1 to 80 characters"),
    ({"length": 2}, "segments[0].length: 2 s is not in 5..86400"),
    ({"leads": []}, "segments[0].leads: a segment needs at least one lead role"),
    ({"leads": ["zed"]}, "segments[0].leads: 'zed' is not a role of the show"),
    ({"joins": ["zed"]}, "segments[0].joins: 'zed' is not a role of the show"),
    ({"lines": [""]}, "segments[0].lines[0]: the line is empty"),
    ({"lines": [{"text": "hi", "role": "zed"}]}, "segments[0].lines[0].role: 'zed' is not a role of the show"),
    ({"lines": [3]}, "segments[0].lines[0]: wrong type int"),
    ({"then": "Elsewhere"}, "segments[0].then: 'Elsewhere' is not 'next', 'loop' or a segment's title"),
    ({"topics": [""]}, "segments[0].topics[0]: a topic is a string of 1 to 40 characters"),
    ({"length": "long"}, "segments[0].length: wrong type str"),
])
def test_a_bad_rundown_is_one_line_naming_the_field(segment: dict[str, object], message: str) -> None:
    with pytest.raises(ShowError) as err:
        show_from_dict(_doc(**segment))
    assert str(err.value).startswith(message), str(err.value)


def test_a_show_without_segments_gets_one_open_segment_and_both_line_forms_parse() -> None:
    show = show_from_dict({"roles": [{"id": "a", "keywords": ["chess"]}, {"id": "b", "keywords": ["tea"]}]})
    [open_talk] = show.rundown
    assert open_talk.leads == ("a", "b") and open_talk.topics == ("chess", "tea") and open_talk.then == "loop"
    show = show_from_dict(_doc(lines=["Word for word.", {"text": "By b.", "role": "b"}]))
    assert [(x.text, x.role) for x in show.segments[0].lines] == [("Word for word.", None), ("By b.", "b")]
    assert show_from_dict(show.to_dict()) == show


def test_a_run_joined_long_after_its_start_speaks_from_now_without_catching_up() -> None:
    run = dataclasses.replace(_run(0), started_at_ms=1)  # open-ended, started decades ago
    feed = ListFeed(Director(load_settings(environ={})), run)
    now = 1_700_000_000_000
    [segment] = feed.handle(run, at_ms=now)
    assert isinstance(segment, SegmentStarted) and (segment.t_ms, segment.planned_ms) == (now, now)
    out = feed.tick(at_ms=now + 10_000)
    assert 2 <= len(_cues(out)) <= 5 and all(c.t_ms >= now for c in _cues(out))


def test_the_show_ends_with_goodbyes_that_fill_its_last_seconds_and_none_past_the_end() -> None:
    ended_with_goodbyes = 0
    for end in range(59_000, 66_000, 350):  # wherever the last turn leaves the floor
        run = _run(end)
        feed = ListFeed(Director(load_settings(environ={})), run)
        feed.feed(run)
        feed.advance(end + 5_000)
        cues = _cues([e.event for e in feed.out])
        plan = feed.state().plan  # its estimates
        policy = plan.policy
        goodbyes = [c for c in cues if c.reason == "signoff"]
        # Said word for word, each once, after every other turn.
        assert all(c.verbatim for c in goodbyes) and len({c.text for c in goodbyes}) == len(goodbyes)
        assert cues[len(cues) - len(goodbyes):] == goodbyes
        ended_with_goodbyes += bool(goodbyes)
        # Planned to end before the show does, leaving less silence than the shortest goodbye.
        spoken_until = plan.floor_free_ms - policy.pause_ms
        assert spoken_until <= end, (end, spoken_until)
        assert end - spoken_until < policy.verbatim_ms("Bye for now!") + policy.lead_ms, (end, spoken_until)
    assert ended_with_goodbyes >= 10


def test_a_role_says_its_own_goodbye_and_a_chinese_role_the_stage_s_in_chinese() -> None:
    run = _run(62_000)
    doc = dict(run.show)
    doc["roles"] = [dict(r, signoff=["Good night, stars!"]) if r["id"] == "host" else r for r in doc["roles"]]
    assert show_from_dict(doc).role("host").signoff == ("Good night, stars!",)  # type: ignore[union-attr]
    run = dataclasses.replace(run, show=doc)
    said = {(c.role, c.text) for c in _cues(_show(run, 80_000)) if c.reason == "signoff"}
    languages = {r["id"]: r["language"] for r in doc["roles"]}
    for role, text in said:
        if role == "host":
            assert text == "Good night, stars!"
        elif languages[role].startswith("zh"):
            assert any(ord(ch) >= 0x2E80 for ch in text), text
    bad = dict(doc, roles=[dict(doc["roles"][0], signoff=["{user}, bye"])] + doc["roles"][1:])
    with pytest.raises(ShowError, match=r"roles\[0\]\.signoff\[0\]"):
        show_from_dict(bad)
