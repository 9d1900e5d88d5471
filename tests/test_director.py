"""Director: validation, routing and merging, driven without NATS."""

from __future__ import annotations

import pytest

from actors.base import Context
from actors.director import Director
from events.cue import CueIssued, CueMerged
from events.danmaku import DanmakuReceived, DanmakuRejected
from infra.settings import load_settings
from tests.showkit import ctx


def danmaku(text: str, user: str = "u", n: int = 1, **kw: object) -> DanmakuReceived:
    return DanmakuReceived(id=f"d{n}", run="r1", text=text, user=user, **kw)  # type: ignore[arg-type]


@pytest.fixture
def director() -> Director:
    return Director(load_settings(environ={}, blocklist=("casino",)))


def test_mention_routes_to_the_role(director: Director) -> None:
    [cue] = director.handle(danmaku("@rex what do you think?"), ctx(100))
    assert isinstance(cue, CueIssued)
    assert (cue.role, cue.routed_by, cue.correlation, cue.causation) == ("rex", "mention", "d1", "d1")
    assert cue.deadline_ms > 100


def test_display_name_mention_and_explicit_address(director: Director) -> None:
    [cue] = director.handle(danmaku("@小鹿 你好"), ctx())
    assert cue.role == "xiaolu"
    [cue] = director.handle(danmaku("anything", n=2, to="host"), ctx())
    assert (cue.role, cue.routed_by) == ("host", "addressed")


def test_keywords_route_by_persona(director: Director) -> None:
    [cue] = director.handle(danmaku("my computer has a new gpu"), ctx())
    assert (cue.role, cue.routed_by) == ("rex", "keyword")
    [cue] = director.handle(danmaku("推荐美食", n=2), ctx())
    assert cue.role == "xiaolu"


def test_least_busy_spreads_unrouted_comments(director: Director) -> None:
    texts = ["what a lovely evening", "first time here", "the weather is odd today"]
    roles = [director.handle(danmaku(t, n=i), ctx(0))[0].role for i, t in enumerate(texts)]
    assert sorted(roles) == ["host", "rex", "xiaolu"]


def test_near_identical_comments_merge_within_the_window(director: Director) -> None:
    [first] = director.handle(danmaku("Is the new GPU worth it?"), ctx(0))
    [merged] = director.handle(danmaku("is the new gpu worth it??", n=2), ctx(400))
    assert isinstance(merged, CueMerged) and merged.cue == first.id
    [later] = director.handle(danmaku("is the new gpu worth it", n=3), ctx(10_000))
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
def test_bad_danmaku_is_rejected_with_a_reason(director: Director, event: DanmakuReceived, reason: str) -> None:
    [out] = director.handle(event, ctx())
    assert isinstance(out, DanmakuRejected)
    assert out.reason == reason and out.detail
    assert out.correlation == event.id


def test_unknown_run_is_rejected(director: Director) -> None:
    [out] = director.handle(danmaku("hello"), Context(None, 0))
    assert isinstance(out, DanmakuRejected) and out.reason == "unknown_run"


def test_undecodable_bytes_become_a_rejection(director: Director) -> None:
    [out] = director.undecodable("danmaku-9", b"\xff\xfe garbage", "not valid JSON", ctx())
    assert isinstance(out, DanmakuRejected) and out.reason == "malformed"
    assert director.undecodable("danmaku-9", b"x", "bad", Context(None, 0)) == ()


def test_same_input_same_output_ids(director: Director) -> None:
    other = Director(load_settings(environ={}))
    a = director.handle(danmaku("@rex hi"), ctx(5))
    b = other.handle(danmaku("@rex hi"), ctx(5))
    assert a == b
