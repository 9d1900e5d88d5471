"""A standby's rebuilt director publishes what the last holder decided and never published (it
died between deciding and publishing, or an input's time was known only roughly): the comment
is not left without its outcome, and nothing stored is sent again."""

from __future__ import annotations

from actors.director import Director
from actors.kernel import Kernel, handled_at, take_over
from actors.runtime.takeover import unpublished
from events.base import Event
from events.cue import CueIssued
from events.danmaku import DanmakuReceived
from events.utterance import UtteranceDropped
from infra.settings import load_settings
from tests.showkit import demo_run


def _rebuilt(*inputs: tuple[int, Event], last_ms: int) -> list[Event]:
    run = demo_run()
    return take_over(Kernel(Director(load_settings(environ={}))), run, [(0, run), *inputs], last_ms, None)


def test_a_decision_nobody_published_is_published_with_what_goes_with_it() -> None:
    question = DanmakuReceived(id="d1", run="r1", user="ann", text="@rex what is a gpu?", t_ms=2000)
    emitted = _rebuilt((2000, question), last_ms=3000)
    cue = next(e for e in emitted if isinstance(e, CueIssued) and e.causation == "d1")
    # The run's own lines were stored (their cause, the run's start, has answers stored): only
    # the comment's cue is missing, and what it caused with it.
    own = [e for e in emitted if e.causation == "r1-start"]
    stored = {e.id for e in own}
    caused = {"r1-start": 0}
    missing = unpublished(emitted, stored, caused)
    assert cue in missing
    assert all(e.causation in ("d1", cue.id) for e in missing), [(e.type, e.causation) for e in missing]
    assert not any(e.id in stored for e in missing)


def test_an_input_answered_in_the_store_keeps_that_answer_alone() -> None:
    question = DanmakuReceived(id="d1", run="r1", user="ann", text="@rex what is a gpu?", t_ms=2000)
    emitted = _rebuilt((2000, question), last_ms=3000)
    stored = {e.id for e in emitted if e.causation == "r1-start"}
    # The last holder answered d1 otherwise (say it skipped it, under another id): nothing more.
    assert unpublished(emitted, stored | {"another-answer"}, {"r1-start": 0, "d1": 2000}) == []
    # Everything stored: nothing to send.
    assert unpublished(emitted, {e.id for e in emitted}, {"r1-start": 0, "d1": 2000}) == []


def test_an_input_that_caused_nothing_is_never_taken_as_handled_before_it_was_emitted() -> None:
    # The rest of a reply dropped at 25.2 s, after a drop at 8.3 s in the same stream: taken as
    # handled with the input before it, it would reach a rebuilt lipsync before the reply's own
    # chunks (25.18 s), which it then ignores; the rebuilt state would part from the live one.
    drop = UtteranceDropped(id="d2", run="r1", causation="c2", correlation="c2", t_ms=25_200, utterance="c2",
                            from_seq=1, reason="the writer failed")
    assert max(8_305, handled_at(drop, {})) == 25_200
    assert handled_at(drop, {"d2": 25_310}) == 25_310  # its outputs say when it was handled
    outside = DanmakuReceived(id="x", run="r1", user="ann", text="hi", t_ms=99_999)  # a producer's clock: no bound
    assert handled_at(outside, {}) == 0
    assert handled_at(outside, {}, stored_ms=2_106) == 2_106  # the server stored it then: not handled before


def test_a_comment_that_dropped_a_reply_is_not_answered_by_the_drop() -> None:
    """The viewer wrote again before the reply to their first comment began: the director drops
    that reply and cues the second comment in one go.  The holder died with the drop stored and
    not the cue: the rebuilt director publishes the cue."""
    first = DanmakuReceived(id="c0", run="r1", user="ann", text="@rex what is a gpu?", t_ms=3000)
    again = DanmakuReceived(id="c1", run="r1", user="ann", text="@rex and what is a cpu then?", t_ms=4200)
    emitted = _rebuilt((3000, first), (4200, again), last_ms=4200)
    drop = next(e for e in emitted if isinstance(e, UtteranceDropped) and e.causation == "c1")
    cue = next(e for e in emitted if isinstance(e, CueIssued) and e.causation == "c1")
    stored = [e for e in emitted if e.id != cue.id and e.causation != cue.id]
    assert drop in stored
    answered = {e.causation for e in stored if e.causation is not None and e.answers}
    assert "c1" not in answered
    assert cue in unpublished(emitted, {e.id for e in stored}, answered)
