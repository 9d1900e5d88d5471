"""The floor planned from the roles' measured pace: the pure arithmetic, the director taking a
measurement in (with its reason), and the llm actor measuring its writer and the voice."""

from __future__ import annotations

import time
from collections.abc import Iterator

from actors.backends.protocols import Persona, Prompt
from actors.director import Director
from actors.kernel import ListFeed
from actors.llm import LLMActor
from events.cue import CueIssued, StagePaced
from events.danmaku import DanmakuReceived, RolePaceMeasured
from events.qos import ThrottleChanged
from events.utterance import UtteranceChunk
from events.viseme import VisemeTrack
from infra.settings import load_settings
from schedulers.pace import Pace, max_sentences, paced
from schedulers.stage import StagePolicy
from tests.showkit import demo_run

RUN = demo_run("r1")


def test_no_measurement_keeps_the_policy_and_a_slow_model_moves_every_knob() -> None:
    base = StagePolicy()
    assert paced(base, {}).policy == base
    fast = paced(base, {"host": Pace(first_sentence_ms=50, sentence_write_ms=20, speech_ms=1500)})
    assert fast.policy.lead_ms == base.lead_ms and fast.policy.sentence_ms == 1500  # espeak-like
    slow = paced(base, {"host": Pace(400, 300, 1600, opener_ms=900), "rex": Pace(2100, 700, 2400)})
    assert slow.policy.lead_ms == 2300  # the slowest first sentence, with a margin
    assert slow.policy.sentence_ms == 2400 and slow.policy.own_line_ms == 3600 and slow.policy.opener_ms == 900
    assert slow.policy.estimate_ms(2) == 900 + 2 * 2400 + base.pause_ms
    assert slow.max_sentences == {"host": 3, "rex": 2} and "shorter replies: rex 2" in slow.reason
    assert paced(base, {"x": Pace(9000)}).policy.lead_ms == 4500  # bounded
    assert max_sentences(Pace(500, 2000, 1500), base) == 1  # it writes slower than it speaks


def pace(role: str, first: int, write: int = 0, speech: int = 0, n: int = 1) -> RolePaceMeasured:
    return RolePaceMeasured(id=f"p{n}", run="r1", role=role, backend="llama_cpp", first_sentence_ms=first,
                            sentence_write_ms=write, speech_ms=speech, replies=3)


def test_the_director_plans_from_a_measured_pace_and_says_why() -> None:
    director = ListFeed(Director(load_settings(environ={}, self_driven="off")), RUN)
    director.handle(RUN, at_ms=0)
    [told] = director.handle(pace("rex", 1900, 1400, 2000), at_ms=1000)
    assert isinstance(told, StagePaced) and told.causation == "p1" and told.heard_ms == 1000
    assert (told.lead_ms, told.sentence_ms, told.max_sentences["rex"]) == (2100, 2000, 2)
    assert "first sentence up to 1900 ms (rex)" in told.reason
    assert director.handle(pace("rex", 1900, 1400, 2000, n=2), at_ms=1500) == []  # nothing changed
    [cue] = [e for e in director.handle(DanmakuReceived(id="d1", run="r1", user="ann", text="@rex which gpu?"),
                                        at_ms=2000) if isinstance(e, CueIssued)]
    assert cue.role == "rex" and cue.max_sentences == 2  # rex's writer is slow: a shorter reply


class Steady:
    """A writer that takes a fixed time per sentence (a model's pace, measured on the wall clock)."""

    name = "steady"

    def __init__(self) -> None:
        self.first_s = 0.12

    def stream(self, persona: Persona, prompt: Prompt) -> Iterator[str]:
        import time as clock
        for i, text in enumerate(["One thing first.", "Then another.", "And a third."]):
            clock.sleep(self.first_s if i == 0 else 0.05)  # the model writing (what the actor measures)
            yield text

    def write_batch(self, persona: Persona, prompts: list[Prompt]) -> list[Iterator[str]]:
        return [self.stream(persona, p) for p in prompts]


def test_the_llm_actor_measures_its_writer_and_the_voice_and_tells_when_it_moves() -> None:
    # The wall clock: time passes while the writer writes (the runtime's handlers' show time).
    llm = ListFeed(LLMActor(load_settings(environ={}), writer=Steady()), RUN, clock=time.monotonic)  # type: ignore[arg-type]
    llm.handle(ThrottleChanged(id="t", run="r1", window_tokens=400, reason="test"), at_ms=0)
    cue = CueIssued(id="c1", run="r1", role="host", correlation="d1", seq=1, user="ann", text="hi there",
                    danmaku=("d1",), routed_by="mention", priority=2.0, max_sentences=3, opener="Oh, hi ann!")
    # Noticed by the kernel as it arrives, as the runtime does: its chunk 0 (the director's) is an opener.
    out = llm.handle(cue, at_ms=100)
    [told] = [e for e in out if isinstance(e, RolePaceMeasured)]
    assert told.role == "host" and told.backend == "steady" and told.replies == 1
    assert 100 <= told.first_sentence_ms < 2000 and 40 <= told.sentence_write_ms < 1000  # wall clock, loaded machine
    assert told.speech_ms == 0  # nothing spoken yet
    chunks = [e for e in out if isinstance(e, UtteranceChunk)]
    assert [c.seq for c in chunks] == [1, 2, 3]  # after the opener
    spoken: list[object] = []
    for seq, text in [(0, cue.opener), *((c.seq, c.text) for c in chunks)]:
        spoken += llm.handle(VisemeTrack(id=f"v{seq}", run="r1", role="host", utterance="c1", audio="a",
                                         seq=seq, start_ms=0, end_ms=1800 if seq else 700,
                                         text=text, visemes=(), chunk=seq, chunk_done=True),
                             at_ms=200)
    paces = [e for e in spoken if isinstance(e, RolePaceMeasured)]
    assert paces and paces[-1].opener_ms == 700 and paces[-1].speech_ms == 1800  # chunk 0 was the opener


def test_a_reply_asked_early_is_dropped_when_its_viewer_writes_again_before_it_is_spoken() -> None:
    from events.utterance import UtteranceDropped

    actor = Director(load_settings(environ={}, self_driven="off"))
    director = ListFeed(actor, RUN)
    director.handle(RUN, at_ms=0)
    director.handle(pace("rex", 2500, 300, 2000), at_ms=0)  # a slow start: replies asked 2.7 s ahead
    [first] = [e for e in director.handle(DanmakuReceived(id="d1", run="r1", user="ann", text="@rex hi"),
                                          at_ms=100) if isinstance(e, CueIssued)]
    assert not [e for e in director.handle(DanmakuReceived(id="d2", run="r1", user="bob", text="@rex which gpu?"),
                                           at_ms=200) if isinstance(e, CueIssued)]  # the floor is busy
    due = actor.next_tick(director.state())  # the director's clock for the run
    assert due is not None and due < first.t_ms + 8000
    [second] = [e for e in director.tick(at_ms=due) if isinstance(e, CueIssued)]  # asked early: 2.7 s ahead
    out = director.handle(DanmakuReceived(id="d3", run="r1", user="bob", text="@rex actually, which cpu?"),
                          at_ms=due + 100)
    [dropped] = [e for e in out if isinstance(e, UtteranceDropped)]
    assert dropped.utterance == second.id and dropped.reason.startswith("superseded: bob wrote again")
    assert dropped.from_seq == 0 and first.id != second.id
    # ann's reply starts now: a newer comment of hers waits instead of cutting it
    out = director.handle(DanmakuReceived(id="d4", run="r1", user="ann", text="@rex and another thing"),
                          at_ms=due + 200)
    assert not any(isinstance(e, UtteranceDropped) and e.utterance == first.id for e in out)
