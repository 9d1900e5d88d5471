"""Director: validation, routing and merging, driven without NATS."""

from __future__ import annotations

import dataclasses

import pytest

from actors.director import Director
from actors.kernel import ListFeed
from events.base import Event
from events.cue import CueIssued, CueMerged
from events.danmaku import (
    DanmakuReceived,
    DanmakuRejected,
    DanmakuSkipped,
    DanmakuWaiting,
    OperatorControl,
)
from events.run import RunStarted
from infra.settings import Settings, load_settings
from tests.showkit import demo_run

RUN = demo_run()


def danmaku(text: str, user: str = "u", n: int = 1, **kw: object) -> DanmakuReceived:
    return DanmakuReceived(**{"id": f"d{n}", "run": "r1", "text": text, "user": user, **kw})  # type: ignore[arg-type]


def _settings() -> Settings:
    return load_settings(environ={}, blocklist=("casino",), self_driven="off")


def make(settings: Settings | None = None, run: RunStarted = RUN) -> ListFeed:
    """A director driven through its kernel, holding run ``r1`` without having taken its start in
    (handed the run, as a takeover does): the rundown is not opened, the show says nothing of its
    own, and the chat alone is answered."""
    feed = ListFeed(Director(settings or _settings()), run)
    feed.kernel.taking_over(run)
    return feed


@pytest.fixture
def director() -> ListFeed:
    return make()


def test_mention_routes_to_the_role(director: ListFeed) -> None:
    [cue] = director.handle(danmaku("@rex what do you think?"), at_ms=100)
    assert isinstance(cue, CueIssued)
    assert (cue.role, cue.routed_by, cue.correlation, cue.causation) == ("rex", "mention", "d1", "d1")
    assert cue.deadline_ms > 100


def test_display_name_mention_and_explicit_address(director: ListFeed) -> None:
    [cue] = director.handle(danmaku("@小鹿 你好"), at_ms=0)
    assert cue.role == "xiaolu"
    [cue] = director.handle(danmaku("anything", n=2, to="host"), at_ms=20_000)
    assert (cue.role, cue.routed_by) == ("host", "addressed")


def test_keywords_route_by_persona(director: ListFeed) -> None:
    [cue] = director.handle(danmaku("my computer has a new gpu"), at_ms=0)
    assert (cue.role, cue.routed_by) == ("rex", "keyword")
    [cue] = director.handle(danmaku("推荐美食", n=2), at_ms=20_000)
    assert cue.role == "xiaolu"


def test_least_busy_spreads_unrouted_comments_over_the_roles_that_speak_their_language(director: ListFeed) -> None:
    texts = ["what a lovely evening", "first time here", "the weather is odd today", "大家晚上好", "今天天气不错"]
    roles = [director.handle(danmaku(t, n=i), at_ms=i * 20_000)[0].role for i, t in enumerate(texts)]
    assert set(roles[:3]) == {"host", "rex"} and roles[0] != roles[1]  # the English ones, in turn
    assert roles[3:] == ["xiaolu", "xiaolu"]  # the one role that speaks Chinese, however busy


def test_near_identical_comments_merge_within_the_window(director: ListFeed) -> None:
    [first] = director.handle(danmaku("Is the new GPU worth it?"), at_ms=0)
    [merged] = director.handle(danmaku("is the new gpu worth it??", n=2), at_ms=400)
    assert isinstance(merged, CueMerged) and merged.cue == first.id
    [later] = director.handle(danmaku("is the new gpu worth it", n=3), at_ms=10_000)
    assert isinstance(later, CueIssued)


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (danmaku("   "), "empty"),
        (danmaku("x" * 201), "too_long"),
        (danmaku("hi\x00there"), "control_characters"),
        (danmaku("hi\u202eereht"), "control_characters"),
        (danmaku("visit my CASINO now"), "blocked"),
        (danmaku("spamlink here"), "blocked"),
        (danmaku("hello", to="ghost"), "unknown_role"),
        (danmaku("hello", kind="nuke"), "bad_kind"),
        (danmaku("hello", user="u" * 65), "bad_user"),
    ],
)
def test_bad_danmaku_is_rejected_with_a_reason(director: ListFeed, event: DanmakuReceived, reason: str) -> None:
    [out] = director.handle(event, at_ms=0)
    assert isinstance(out, DanmakuRejected)
    assert out.reason == reason and out.detail
    assert out.correlation == event.id


def test_unknown_run_is_rejected(director: ListFeed) -> None:
    [out] = director.handle(danmaku("hello", run="r9"))  # no run r9 has started
    assert isinstance(out, DanmakuRejected) and out.reason == "unknown_run"
    assert not director.kernel.holds("r9")


def test_undecodable_bytes_become_a_rejection(director: ListFeed) -> None:
    # The runtime asks with the kernel's context of the message's run (the actor has no feed for it).
    [out] = director.actor.undecodable("danmaku-9", b"\xff\xfe garbage", "not valid JSON",
                                       director.kernel.context(RUN, 0))
    assert isinstance(out, DanmakuRejected) and out.reason == "malformed"
    assert director.actor.undecodable("danmaku-9", b"x", "bad", director.kernel.context(None, 0)) == ()


def test_same_input_same_output_ids(director: ListFeed) -> None:
    other = make(load_settings(environ={}))
    a = director.handle(danmaku("@rex hi"), at_ms=5)
    b = other.handle(danmaku("@rex hi"), at_ms=5)
    assert a == b


def test_the_run_s_state_is_held_by_the_kernel_and_goes_with_its_release(director: ListFeed) -> None:
    [first] = director.handle(danmaku("Is the new GPU worth it?"), at_ms=0)
    assert set(vars(director.actor)) == {"settings", "_recall"}  # nothing per run on the actor itself
    assert [r.cue for r in director.state().recent] == [first.id]
    director.release()
    assert not director.kernel.holds("r1") and director.state() is None
    [out] = director.handle(danmaku("is the new gpu worth it??", n=2), at_ms=400)  # not held: answered still
    assert isinstance(out, DanmakuRejected) and out.reason == "unknown_run" and "not on this" in out.detail
    director.kernel.taking_over(RUN)
    [again] = director.handle(danmaku("is the new gpu worth it??", n=3), at_ms=500)
    assert isinstance(again, CueIssued)  # a fresh state: nothing to merge with


def test_a_run_whose_start_the_director_was_not_given_is_not_its_own() -> None:
    feed = ListFeed(Director(_settings()), RUN)  # neither its start nor the run handed over
    [out] = feed.handle(danmaku("@rex hello"), at_ms=100)
    assert isinstance(out, DanmakuRejected) and out.reason == "unknown_run" and out.correlation == "d1"
    [out] = feed.handle(OperatorControl(id="c1", run="r1", action="hold", user="op"), at_ms=200)
    assert isinstance(out, DanmakuRejected) and out.reason == "unknown_run" and out.causation == "c1"
    assert not feed.kernel.holds("r1") and feed.advance(60_000) == []
    feed.handle(RUN, at_ms=300)  # given its start, the run is its own from then on
    [cue] = [e for e in feed.handle(danmaku("@rex hello", n=2), at_ms=400) if isinstance(e, CueIssued)]
    assert cue.role == "rex"


# -- the stage stays live: a waiting room with a speaking budget ---------------


WORDS = ["apple", "violin", "harbour", "kettle", "meteor", "pigeon", "saddle", "tundra", "walnut", "yonder"]


def _text(i: int) -> str:
    """Distinct comments (near-identical ones merge)."""
    return f"{WORDS[i % 10]} {WORDS[(i // 10) % 10]} {WORDS[(i * 7 + 3) % 10]} number {i}"


def _outcomes(events: list[Event]) -> dict[str, str]:
    """danmaku id -> its one outcome type (fails on a second outcome).  A comment that waited was
    said to wait once, before its outcome, which records the same time it was taken in."""
    seen: dict[str, str] = {}
    waited: dict[str, int] = {}
    for e in events:
        d = e.correlation
        assert d is not None
        if isinstance(e, DanmakuWaiting):  # not an outcome: when it was taken in
            assert d not in seen and d not in waited, f"{d} waits after {seen.get(d) or 'waiting'}"
            waited[d] = e.heard_ms
            continue
        assert d not in seen, f"{d} has two outcomes: {seen[d]} and {e.type}"
        seen[d] = e.type
        if d in waited:
            assert getattr(e, "heard_ms", None) == waited[d], (d, e)
    return seen


def _run_chat(director: ListFeed, chat: list[tuple[int, DanmakuReceived]], until_ms: int) -> list[Event]:
    """Feed a chat (show ms, danmaku) and the director's clock, as the runtime would: every tick
    due by a comment's time, then the comment (at its own time), then the clock up to ``until_ms``."""
    out: list[Event] = []
    for at, event in chat:
        out += director.advance(at)
        out += director.handle(event, at_ms=at)
    out += director.advance(until_ms)
    return out


def test_a_burst_is_answered_within_the_budget_and_every_comment_gets_one_outcome(director: ListFeed) -> None:
    chat = [(i * 50, danmaku(_text(i), user=f"u{i}", n=i)) for i in range(40)]
    out = _run_chat(director, chat, 120_000)
    outcomes = _outcomes(out)
    assert set(outcomes) == {f"d{i}" for i in range(40)}
    cues = [e for e in out if isinstance(e, CueIssued)]
    skipped = [e for e in out if isinstance(e, DanmakuSkipped)]
    assert cues and skipped and all(s.reason == "stale" for s in skipped)
    for cue in cues:  # asked for within the comment class's wait, replies shortened in the crowd
        assert cue.t_ms - cue.heard_ms <= 4500 + 1
        assert 1 <= cue.max_sentences <= 3
    assert cues[1].max_sentences == 1  # the room was crowded


def test_a_viewer_is_told_apart_by_their_platform_id_not_their_name(director: ListFeed) -> None:
    """Two viewers named alike on two platforms are two viewers; one renamed is still one."""
    chat = [(0, danmaku("hello there", user="a", n=0))]
    chat += [(100 + i, danmaku(_text(i), user="Sam", n=i + 1, viewer=f"twitch:{i}", platform="twitch"))
             for i in range(3)]
    chat += [(200 + i, danmaku(_text(i + 3), user=f"Name{i}", n=i + 4, viewer="bili:42", platform="bilibili"))
             for i in range(3)]
    out = _run_chat(director, chat, 60_000)
    skipped = {e.correlation: e.reason for e in out if isinstance(e, DanmakuSkipped)}
    assert "superseded" not in {skipped.get(f"d{i}") for i in (1, 2, 3)}  # three Sams: three viewers
    assert [skipped[f"d{i}"] for i in (4, 5)] == ["superseded"] * 2     # one viewer, renamed twice
    assert set(_outcomes(out)) == {f"d{i}" for i in range(7)}


@pytest.mark.parametrize(("fields", "words"), [
    ({"viewer": "no namespace"}, "is not <platform>:<id>"),
    ({"viewer": "twitch:" + "9" * 200}, "is not <platform>:<id>"),
    ({"platform": "Twitch TV"}, "not a lower-case name"),
    ({"kind": "gift", "value": -5.0}, "0 or more"),
    ({"kind": "gift", "value": float("nan")}, "finite"),
    ({"currency": "US DOLLARS"}, "short code"),
    ({"badges": ("Moderator!",)}, "lower-case names"),
])
def test_bad_viewer_fields_are_rejected_with_their_reason(director: ListFeed, fields: dict[str, object],
                                                          words: str) -> None:
    [out] = director.handle(danmaku("hello", **fields), at_ms=100)
    assert isinstance(out, DanmakuRejected) and out.reason == "bad_viewer" and words in out.detail


def test_addressed_comments_go_before_unaddressed_ones(director: ListFeed) -> None:
    chat = [(0, danmaku("first one in", user="a", n=0))]
    chat += [(100 + i, danmaku(_text(i), user=f"p{i}", n=i + 1)) for i in range(5)]
    chat += [(200, danmaku("@rex what about you", user="x", n=9))]
    out = _run_chat(director, chat, 60_000)
    cues = [e for e in out if isinstance(e, CueIssued)]
    assert [c.correlation for c in cues[:2]] == ["d0", "d9"]
    assert cues[1].routed_by == "mention"


def test_one_viewer_cannot_fill_the_stage(director: ListFeed) -> None:
    chat = [(0, danmaku("hello there", user="a", n=0))]
    chat += [(100 + i, danmaku(_text(i), user="spammer", n=i + 1)) for i in range(6)]
    chat += [(200, danmaku("a calm question", user="b", n=9))]
    out = _run_chat(director, chat, 60_000)
    skipped = {e.correlation: e.reason for e in out if isinstance(e, DanmakuSkipped)}
    assert [skipped[f"d{i}"] for i in range(1, 6)] == ["superseded"] * 5  # one waits per viewer
    cues = [e.correlation for e in out if isinstance(e, CueIssued)]
    # Then the other viewer's and the spammer's last one, each answered or let go as stale (the
    # first reply is long: neither may be on air within its wait limit).
    assert cues[0] == "d0"
    assert all(d in cues or skipped[d] == "stale" for d in ("d6", "d9"))
    assert set(_outcomes(out)) == {f"d{i}" for i in (0, 1, 2, 3, 4, 5, 6, 9)}


def test_repeats_during_a_burst_join_the_waiting_comment(director: ListFeed) -> None:
    chat = [(0, danmaku("hello everyone", user="a", n=0))]
    chat += [(50 + i * 20, danmaku("666666 so good!!", user=f"f{i}", n=i + 1)) for i in range(30)]
    out = _run_chat(director, chat, 60_000)
    cues = [e for e in out if isinstance(e, CueIssued)]
    assert len(cues) == 2 and len(cues[1].danmaku) == 30
    assert sum(isinstance(e, CueMerged) for e in out) == 29
    assert len(_outcomes(out)) == 31


def test_gifts_and_moderators_take_the_floor(director: ListFeed) -> None:
    chat = [(0, danmaku("tell me a long story please", user="a", n=0))]
    chat += [(2000, danmaku("here is a rocket", user="g", n=1, kind="gift"))]
    chat += [(2050, danmaku("please keep it friendly", user="mod", n=2, kind="moderator"))]
    chat += [(2100, danmaku("a plain comment", user="c", n=3))]
    out = _run_chat(director, chat, 60_000)
    cues = {c.correlation: c for c in out if isinstance(c, CueIssued)}
    assert cues["d1"].t_ms == 2000 and cues["d2"].t_ms == 2050  # at once, not after the queue
    assert cues["d1"].priority >= 4.0 and cues["d2"].priority >= 4.0  # both take the floor
    assert cues["d3"].priority < 4.0 and cues["d3"].t_ms > 2050  # a comment waits behind them
    gifts = [(9000 + i * 100, danmaku(_text(i), user=f"g{i}", n=10 + i, kind="gift")) for i in range(3)]
    out = _run_chat(director, gifts, 60_000)
    assert [type(e).__name__ for e in out] == ["CueIssued", "CueMerged", "CueMerged"]  # thanked together


def test_nothing_is_asked_for_after_the_show_ends() -> None:
    director = make(load_settings(environ={}), run=dataclasses.replace(RUN, duration_ms=10_000))
    out = director.handle(danmaku("hi there", n=0), at_ms=9_000)
    assert isinstance(out[0], DanmakuSkipped) and out[0].reason == "show_ending"


def test_decisions_do_not_depend_on_when_the_clock_wakes(director: ListFeed) -> None:
    chat = [(i * 300, danmaku(_text(i), user=f"u{i}", n=i)) for i in range(20)]
    ticked = _run_chat(director, chat, 60_000)
    other = make()
    lazy: list[Event] = []  # no tick at all until the end: every decision caught up at its time
    for at, event in chat:
        lazy += other.handle(event, at_ms=at)
    lazy += other.tick(at_ms=60_000)
    assert sorted(ticked, key=lambda e: e.id) == sorted(lazy, key=lambda e: e.id)


# -- run boundaries and input gaps --------------------------------------------


def test_a_danmaku_sent_after_the_run_ended_is_rejected_as_run_ended(director: ListFeed) -> None:
    [out] = director.handle(danmaku("@rex still there?"), at_ms=30_000, late=True)
    assert isinstance(out, DanmakuRejected)
    assert (out.reason, out.causation, out.correlation) == ("run_ended", "d1", "d1")
    assert "ended" in out.detail
    [out] = director.handle(danmaku("hello", run="r9"), at_ms=0, late=True)  # an unknown run stays unknown
    assert isinstance(out, DanmakuRejected) and out.reason == "unknown_run"


@pytest.mark.parametrize(
    "text",
    ["\u200b", "\u200b\u200c\u200d", "\u2060\ufeff", "\u00ad", " \u200b \n\t", "\u3164\u115f", "\ufe0f",
     "\u202e", "\u2028\u3000", "\U000e0041"],
)
def test_text_of_invisible_characters_only_is_empty(director: ListFeed, text: str) -> None:
    [out] = director.handle(danmaku(text), at_ms=0)
    assert isinstance(out, DanmakuRejected) and out.reason == "empty"


def test_visible_text_with_invisible_characters_is_not_empty(director: ListFeed) -> None:
    out = director.handle(danmaku("hi\u200b there \U0001f44d\ufe0f"), at_ms=0)
    assert not any(isinstance(e, DanmakuRejected) for e in out)


@pytest.mark.parametrize("user", ["al\x07ice", "bob\n", "tab\tbed", "\x1b[31mred", "c1\x85", "c1\x9b", "\u202eevil",
                                  "iso\u2066late", "del\x7f"])
def test_control_characters_in_the_user_name_are_a_bad_user(director: ListFeed, user: str) -> None:
    [out] = director.handle(danmaku("hello everyone", user=user), at_ms=0)
    assert isinstance(out, DanmakuRejected) and out.reason == "bad_user"
    assert "user name" in out.detail and "U+" in out.detail


@pytest.mark.parametrize("ch", ["\x01", "\x1f", "\x7f", "\x80", "\x9f", "\u202a", "\u202b", "\u202c", "\u2069"])
def test_c0_c1_and_bidi_controls_in_the_text_are_rejected(director: ListFeed, ch: str) -> None:
    [out] = director.handle(danmaku(f"hi {ch} there"), at_ms=0)
    assert isinstance(out, DanmakuRejected) and out.reason == "control_characters"
    assert f"U+{ord(ch):04X}" in out.detail


def test_a_malformed_message_is_answered_linked_to_its_id(director: ListFeed) -> None:
    [out] = director.actor.undecodable("alice-7", b'{"type": "danmaku.received", "payload": {"text": 5}}',
                                       "payload.text: wrong type int", director.kernel.context(RUN, 1200))
    assert isinstance(out, DanmakuRejected) and out.reason == "malformed"
    assert (out.causation, out.correlation, out.t_ms) == ("alice-7", "alice-7", 1200)
    assert out.detail == "payload.text: wrong type int"
    other = make(load_settings(environ={}))
    [again] = other.actor.undecodable("alice-7", b"{}", "x", other.kernel.context(RUN, 1200))
    assert again.id == out.id  # deterministic: a redelivery answers with the same id
    [late] = director.actor.undecodable("danmaku-42", b"\xff", "not valid JSON",
                                        director.kernel.context(RUN, 9000, ended=True))
    assert isinstance(late, DanmakuRejected) and late.reason == "run_ended" and late.causation == "danmaku-42"
