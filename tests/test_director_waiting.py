"""A comment that waits for the floor is said to wait (``danmaku.waiting``) when the director takes
it in: the show time it was taken in is recorded before it is decided, so that a standby that
takes the director over, and re-execution, hand it over at that time and decide as the live
director did.  It is no outcome: each danmaku still gets exactly one."""

from __future__ import annotations

from pathlib import Path

from actors.director import Director
from actors.kernel import Kernel, ListFeed, handled_at, heard_at, take_over
from actors.runtime.takeover import unpublished
from app import inspect
from app.reexec import format_verification, verify
from app.summary import danmaku_outcomes
from events import codec
from events.base import Event, derive_id
from events.cue import CueIssued, CueMerged
from events.danmaku import DanmakuReceived, DanmakuSkipped, DanmakuWaiting
from events.subjects import subject_for
from infra.settings import Settings, load_settings
from store.database import open_engine
from store.recorder import EventWriter, Recorded
from tests.showkit import demo_run

RUN = demo_run()


def _settings() -> Settings:
    return load_settings(environ={}, self_driven="off")


def danmaku(n: int, text: str, user: str, **kw: object) -> DanmakuReceived:
    return DanmakuReceived(**{"id": f"d{n}", "run": "r1", "text": text, "user": user, **kw})  # type: ignore[arg-type]


# A long reply first, then comments while it is spoken: they wait.
CHAT = [
    (0, danmaku(0, "tell me a long story about kettles", "a")),
    (100, danmaku(1, "what is your favourite violin", "b")),
    (3000, danmaku(2, "the harbour looks lovely tonight", "c")),
    (3100, danmaku(3, "the harbour looks lovely tonight!", "e")),  # a near-duplicate of d2, waiting
]


def _live(chat: list[tuple[int, DanmakuReceived]] = CHAT) -> tuple[ListFeed, list[Event]]:
    """A director given the run's start, then the chat, each comment after the ticks due by it."""
    feed = ListFeed(Director(_settings()), RUN)
    out = feed.handle(RUN, at_ms=0)
    for at, event in chat:
        out += feed.advance(at)
        out += feed.handle(event, at_ms=at)
    return feed, out


def test_a_comment_that_waits_is_said_to_wait_when_it_was_taken_in() -> None:
    feed, _ = _live(CHAT[:1])
    [waiting] = feed.handle(CHAT[1][1], at_ms=100)  # the first reply holds the floor: it waits
    assert isinstance(waiting, DanmakuWaiting)
    assert (waiting.heard_ms, waiting.t_ms, waiting.causation, waiting.correlation) == (100, 100, "d1", "d1")
    assert waiting.id == derive_id("d1", "waiting") and waiting.role is None
    assert (waiting.cls, waiting.form, waiting.waits_for, waiting.joined) == ("comment", "question", "", "")
    assert (waiting.ahead, waiting.waiting) == (0, 1)
    assert waiting.free_ms > 100 and waiting.until_ms == 100 + 4500  # a comment's wait limit
    assert (waiting.user, waiting.text) == ("b", "what is your favourite violin")
    [cue] = [e for e in feed.advance(60_000) if e.correlation == "d1"]  # its one outcome, when the floor frees
    assert isinstance(cue, CueIssued) and cue.heard_ms == 100 and cue.t_ms > 100


def test_an_addressed_comment_waits_for_its_role_ahead_of_the_others() -> None:
    feed, _ = _live(CHAT[:2])
    [addressed] = feed.handle(danmaku(5, "@rex are you there", "x"), at_ms=200)
    assert isinstance(addressed, DanmakuWaiting)
    assert (addressed.cls, addressed.waits_for, addressed.ahead, addressed.waiting) == ("addressed", "rex", 0, 2)
    assert addressed.until_ms == 200 + 6000  # an addressed comment's wait limit
    [plain] = feed.handle(danmaku(6, "my computer is too slow", "y"), at_ms=300)
    assert isinstance(plain, DanmakuWaiting)
    assert plain.cls == "comment" and plain.waits_for == "rex" and plain.form == "remark"  # rex's keywords
    assert plain.ahead == 2 and plain.waiting == 3  # the addressed one first, then d1's question


def test_a_comment_answered_at_once_or_turned_away_does_not_wait() -> None:
    feed = ListFeed(Director(_settings()), RUN)
    feed.handle(RUN, at_ms=0)
    [cue] = feed.handle(CHAT[0][1], at_ms=0)
    assert isinstance(cue, CueIssued)
    out = feed.handle(danmaku(7, "a rocket for you", "g", kind="gift"), at_ms=200)  # takes the floor
    assert [type(e) for e in out] == [CueIssued]
    out = feed.handle(danmaku(8, "tell me a long story about kettles", "h"), at_ms=300)  # merged into d0's cue
    assert [type(e) for e in out] == [CueMerged]


def test_a_repeat_joining_a_waiting_comment_names_it_and_keeps_its_own_time() -> None:
    feed, out = _live()
    waits = {e.correlation: e for e in out if isinstance(e, DanmakuWaiting)}
    assert set(waits) == {"d1", "d2", "d3"}
    repeat = waits["d3"]
    assert (repeat.heard_ms, repeat.joined, repeat.causation) == (3100, "d2", "d3")
    assert (repeat.cls, repeat.until_ms) == (waits["d2"].cls, waits["d2"].until_ms)  # d2's wait: answered with it
    decided = feed.advance(60_000)
    [cue] = [e for e in decided if isinstance(e, CueIssued) and e.correlation == "d2"]
    [merged] = [e for e in decided if isinstance(e, CueMerged)]
    assert cue.danmaku == ("d2", "d3") and cue.heard_ms == 3000
    assert (merged.correlation, merged.cue, merged.heard_ms) == ("d3", cue.id, 3100)  # its own time, not d2's


def test_a_repeat_let_go_with_the_comment_it_joined_keeps_its_own_time() -> None:
    chat = [*CHAT[:2], (200, danmaku(2, "the harbour looks lovely tonight", "c")),
            (400, danmaku(3, "the harbour looks lovely tonight!", "e"))]  # behind d1: they go stale
    feed, out = _live(chat)
    out += feed.advance(60_000)
    skipped = {e.correlation: e for e in out if isinstance(e, DanmakuSkipped)}
    assert {d: (e.reason, e.heard_ms) for d, e in skipped.items()} == {"d2": ("stale", 200), "d3": ("stale", 400)}
    assert next(e for e in out if isinstance(e, DanmakuWaiting) and e.correlation == "d3").joined == "d2"


def _rebuilt(stored: list[Event], until_ms: int) -> tuple[list[Event], list[Event]]:
    """A standby's director rebuilt from the store as ``actors.runtime.takeover.rebuild_run`` does
    it (each input at the earliest time its outputs record, else with the input before it), then
    its clock run on to ``until_ms``: what the rebuild emitted, and what it decided after."""
    caused: dict[str, int] = {}
    last_ms = 0
    for e in stored:
        if e.causation is not None:
            caused[e.causation] = min(heard_at(e), caused.get(e.causation, heard_at(e)))
        if type(e) in Director.clock_marks:
            last_ms = max(last_ms, e.t_ms)
    feed: list[tuple[int, Event]] = [(0, RUN)]
    handled = 0
    for _, event in CHAT:
        handled = max(handled, handled_at(event, caused))
        feed.append((handled, event))
    kernel: Kernel[Event] = Kernel(Director(_settings()))
    emitted = take_over(kernel, RUN, feed, last_ms, None)
    return emitted, list(kernel.tick(RUN, until_ms))


def test_a_rebuilt_director_takes_each_waiting_comment_in_at_its_recorded_time_and_decides_alike() -> None:
    live, stored = _live()  # the holder dies here: d2 and d3 wait, undecided
    after = live.advance(60_000)
    assert any(isinstance(e, CueIssued) and e.correlation == "d2" for e in after)
    emitted, decided = _rebuilt(stored, 60_000)
    assert {e.id for e in emitted} <= {e.id for e in stored}  # nothing new to publish
    assert decided == after
    # Without the waiting events the standby can only guess (with the input before them): it
    # takes d2 in at 100 ms, and lets it go as stale where the live director answered it.
    guessed, differently = _rebuilt([e for e in stored if not isinstance(e, DanmakuWaiting)], 60_000)
    assert differently != after
    assert any(isinstance(e, DanmakuSkipped) and e.correlation == "d2" for e in differently)


def test_a_decision_whose_comment_had_only_waited_in_the_store_is_published() -> None:
    live, out = _live()
    after = live.advance(60_000)
    cue = next(e for e in after if isinstance(e, CueIssued) and e.correlation == "d2")
    # The holder died after its merge of d3 was stored, before the cue it goes with was: d2 has
    # only its waiting event stored, which answers nothing.
    stored = [*out, *(e for e in after if e.id != cue.id and e.causation != cue.id)]
    emitted, _ = _rebuilt(stored, 60_000)
    answered = {e.causation for e in stored if e.causation is not None and e.answers}
    missing = unpublished(emitted, {e.id for e in stored}, answered)
    assert cue in missing and all(e.causation in ("d2", cue.id) for e in missing)


def test_re_execution_checks_the_waiting_events_and_each_danmaku_keeps_one_outcome(tmp_path: Path) -> None:
    live, out = _live()
    out += live.advance(60_000)
    engine = open_engine(f"sqlite:///{tmp_path / 'store.db'}")
    inputs = {e.id for _, e in CHAT}
    rows: list[Recorded] = [Recorded(RUN, codec.encode(RUN), subject_for(RUN), 1)]
    rows += [Recorded(e, codec.encode(e), subject_for(e), i + 1) for i, (_, e) in enumerate(CHAT)]
    rows += [Recorded(e, codec.encode(e), subject_for(e)) for e in out if e.id not in inputs and e.id != RUN.id]
    EventWriter(engine).append(rows)
    outcomes = danmaku_outcomes(engine, "r1")
    assert (outcomes["received"], outcomes["none"], outcomes["twice"]) == (4, 0, 0)
    assert (outcomes["answered"], outcomes["merged"]) == (3, 1)
    result = verify(engine, "r1", actors=("director",), settings=_settings(), build=lambda _, s: Director(s))
    assert result.divergence is None, format_verification(result)  # the waiting events compared too
    waited = sum(isinstance(e, DanmakuWaiting) for e in out)
    assert waited == 3 and result.checked["director"] == len(rows) - len(CHAT) - 1
    chain = inspect.chain(engine, "r1", "d3")
    assert chain["waited"] == {"from_ms": 3100, "cls": "comment", "form": "remark", "waits_for": "",
                               "ahead": 0, "waiting": 1, "until_ms": 7500, "joined": "d2",
                               "outcome": "cue.merged", "ms": chain["waited"]["ms"]}
    assert chain["waited"]["ms"] > 0
    text = inspect.format_chain(chain)
    assert "waited from 3100 ms" in text and "joined d2" in text and "cue.merged after" in text
    assert inspect.chain(engine, "r1", "d0")["waited"] is None  # answered at once
    engine.dispose()
