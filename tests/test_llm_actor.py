"""The llm actor: the LLM->TTS throttle, deadlines and QoS weights (handler alone, no NATS)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from actors.backends.llm_scripted import ScriptedLLM
from actors.backends.protocols import Persona, Prompt, Sentence
from actors.llm import LLMActor
from app.shows import load_show as demo_show
from events.cue import CueIssued
from events.danmaku import RolePaceMeasured
from events.qos import ThrottleChanged
from events.role import RoleWeightsChanged
from events.utterance import UtteranceChunk, UtteranceCompleted, UtteranceDropped
from events.viseme import VisemeTrack
from infra.settings import load_settings
from tests.showkit import ctx, demo_run

RUN = demo_run("r1")


def cue(i: int = 0, deadline_ms: int = 0) -> CueIssued:
    return CueIssued(id=f"cue{i}", run="r1", role="host", correlation=f"d{i}", seq=i, user="ann",
                     text="what game are we playing tonight", danmaku=(f"d{i}",), routed_by="mention",
                     priority=2.0, deadline_ms=deadline_ms)


def spoken(chunk: UtteranceChunk) -> VisemeTrack:
    return VisemeTrack(id=f"{chunk.id}-v", run="r1", role="host", utterance=chunk.utterance, audio="a", seq=0,
                       start_ms=0, end_ms=100, text=chunk.text, visemes=(), chunk=chunk.seq, chunk_done=True)


def test_text_goes_to_tts_only_a_window_ahead_of_speech() -> None:
    llm = LLMActor(load_settings(environ={}, llm_max_sentences=3))
    llm.handle(ThrottleChanged(id="t", run="r1", window_tokens=4, reason="the tts buffer is full"), ctx(0, RUN))
    first = list(llm.handle(cue(), ctx(100, RUN)))
    chunks = [e for e in first if isinstance(e, UtteranceChunk)]
    assert len(chunks) == 1 and not any(isinstance(e, UtteranceCompleted) for e in first)  # one sentence ahead
    released = list(chunks)
    while not any(isinstance(e, UtteranceCompleted) for e in first):
        first = list(llm.handle(spoken(released[-1]), ctx(200, RUN)))  # the last sentence is placed: one more
        more = [e for e in first if isinstance(e, UtteranceChunk)]
        assert len(more) <= 1
        released += more
    assert [c.seq for c in released] == list(range(len(released))) and released[-1].last
    assert len(released) >= 2


def test_a_wider_window_releases_more_at_once_and_a_cut_reply_stops() -> None:
    llm = LLMActor(load_settings(environ={}, llm_max_sentences=3))
    llm.handle(ThrottleChanged(id="t", run="r1", window_tokens=200, reason="test"), ctx(0, RUN))
    out = list(llm.handle(cue(1), ctx(100, RUN)))
    assert any(isinstance(e, UtteranceCompleted) for e in out)  # everything fits in 200 tokens
    llm.handle(ThrottleChanged(id="t2", run="r1", window_tokens=4, reason="test"), ctx(0, RUN))
    held = list(llm.handle(cue(2), ctx(100, RUN)))
    assert len([e for e in held if isinstance(e, UtteranceChunk)]) == 1
    llm.handle(UtteranceDropped(id="x", run="r1", utterance="cue2", reason="interrupted"), ctx(150, RUN))
    assert llm.handle(spoken(held[0]), ctx(200, RUN)) == ()  # type: ignore[arg-type]


def test_work_describes_the_cue_and_expiry_is_an_event() -> None:
    llm = LLMActor(load_settings(environ={}))
    llm.handle(RoleWeightsChanged(id="w", run="r1", weights={"host": 1.5}, reason="test"), ctx(0, RUN))
    work = llm.work(cue(3, deadline_ms=900), ctx(0, RUN))
    assert work is not None and (work.role, work.weight, work.deadline_ms) == ("host", 3.0, 900)
    dropped = llm.expired(cue(3, deadline_ms=900), ctx(1000, RUN))
    assert len(dropped) == 1 and isinstance(dropped[0], UtteranceDropped)
    assert "deadline passed 100 ms ago" in dropped[0].reason


class CountingWriter(ScriptedLLM):
    """The scripted writer, recording how many sentences it has written and the batches it got."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0
        self.batches: list[int] = []

    def stream(self, persona: Persona, prompt: Prompt) -> Iterator[str]:
        for sentence in ("One.", "Two.", "Three.", "Four."):
            self.written += 1
            yield sentence

    def write_batch(self, persona: Persona, prompts: Sequence[Prompt]) -> list[Iterator[str]]:
        self.batches.append(len(prompts))
        return super().write_batch(persona, prompts)


def test_a_reply_streams_sentence_by_sentence() -> None:
    writer = CountingWriter()
    llm = LLMActor(load_settings(environ={}, llm_max_sentences=3), writer=writer)
    out = llm.handle(cue(), ctx(100, RUN))
    first = next(iter(out))
    # A plain sentence goes once the second is written (that says the first is not the last).
    assert isinstance(first, UtteranceChunk) and first.text == "One." and not first.last and writer.written == 2
    rest = list(out)
    assert [e.text for e in rest if isinstance(e, UtteranceChunk)] == ["Two.", "Three."]
    assert isinstance(rest[-1], UtteranceCompleted) and rest[-1].chunks == 3 and writer.written == 3  # cut at 3


class KnowingWriter(CountingWriter):
    """Says of each sentence whether it is the last (as a model that has seen what follows)."""

    def __init__(self, sentences: Sequence[Sentence]) -> None:
        super().__init__()
        self.sentences = sentences

    def stream(self, persona: Persona, prompt: Prompt) -> Iterator[str]:
        for sentence in self.sentences:
            self.written += 1
            yield sentence


def test_a_sentence_that_says_it_is_not_the_last_goes_before_the_next_is_written() -> None:
    writer = KnowingWriter([Sentence("One.", last=False), Sentence("Two.", last=True)])
    llm = LLMActor(load_settings(environ={}, llm_max_sentences=3), writer=writer)
    out = iter(llm.handle(cue(), ctx(100, RUN)))
    first = next(out)
    assert isinstance(first, UtteranceChunk) and first.text == "One." and not first.last and writer.written == 1
    rest = list(out)
    chunks = [e for e in rest if isinstance(e, UtteranceChunk)]
    assert [(c.text, c.last) for c in chunks] == [("Two.", True)] and writer.written == 2
    assert isinstance(rest[-1], UtteranceCompleted) and rest[-1].chunks == 2


def test_a_writer_that_ends_after_announcing_more_still_ends_the_reply() -> None:
    # Released at once (wide window): the rest of the reply is dropped, so lipsync frees the floor.
    writer = KnowingWriter([Sentence("One.", last=False)])
    llm = LLMActor(load_settings(environ={}, llm_max_sentences=3), writer=writer)
    llm.handle(ThrottleChanged(id="t", run="r1", window_tokens=200, reason="test"), ctx(0, RUN))
    out = list(llm.handle(cue(), ctx(100, RUN)))
    assert isinstance(out[0], UtteranceChunk) and not out[0].last
    [dropped] = [e for e in out if isinstance(e, UtteranceDropped)]
    assert dropped.from_seq == 1 and "without the sentence it announced" in dropped.reason
    # Still held by the throttle (its window is full): the held sentence becomes the last.
    llm = LLMActor(load_settings(environ={}, llm_max_sentences=3), writer=KnowingWriter(
        [Sentence("One two three four five six.", last=False), Sentence("Seven.", last=False)]))
    llm.handle(ThrottleChanged(id="t", run="r1", window_tokens=4, reason="test"), ctx(0, RUN))
    out = list(llm.handle(cue(), ctx(100, RUN)))
    assert [(e.seq, e.last) for e in out if isinstance(e, UtteranceChunk)] == [(0, False)]
    assert not any(isinstance(e, UtteranceDropped) for e in out)
    released = llm.handle(spoken(out[0]), ctx(2000, RUN))  # type: ignore[arg-type]
    assert [(e.seq, e.last) for e in released if isinstance(e, UtteranceChunk)] == [(1, True)]


def test_streaming_gives_the_events_of_a_whole_reply_at_once() -> None:
    """Ids, order and fields as when the reply was written whole before anything went out."""
    for window in (4, 8, 200):
        llm = LLMActor(load_settings(environ={}, llm_max_sentences=3))
        llm.handle(ThrottleChanged(id="t", run="r1", window_tokens=window, reason="test"), ctx(0, RUN))
        out = list(llm.handle(cue(5), ctx(100, RUN)))
        sentences = list(ScriptedLLM().stream(*_asked(cue(5))))[:3]
        chunks = [e for e in out if isinstance(e, UtteranceChunk)]
        assert [c.text for c in chunks] == sentences[:len(chunks)]
        assert [c.id for c in chunks] == [f"{cue(5).derive(f'chunk{i}')}" for i in range(len(chunks))]
        assert [c.last for c in chunks] == [i == len(sentences) - 1 for i in range(len(chunks))]


def _asked(event: CueIssued) -> tuple[Persona, Prompt]:
    role = demo_show().role("host")
    assert role is not None
    return (Persona(role.id, role.name, role.persona, role.language, role.keywords),
            Prompt(event.id, event.user, event.text, seed=RUN.seed))


def test_a_batch_of_cues_reaches_the_writer_in_one_call() -> None:
    writer = CountingWriter()
    llm = LLMActor(load_settings(environ={}, llm_max_sentences=2, openers="off"), writer=writer)
    llm.handle(ThrottleChanged(id="t", run="r1", window_tokens=200, reason="test"), ctx(0, RUN))
    late = cue(9, deadline_ms=50)
    outs = llm.handle_batch([cue(7), late, cue(8)], ctx(100, RUN))
    assert writer.batches == [2]  # the expired cue is dropped, not written
    assert [type(e).__name__ for e in outs[1]] == ["UtteranceDropped"]
    for i, out in ((7, outs[0]), (8, outs[2])):
        events = [e for e in out if not isinstance(e, RolePaceMeasured)]  # the writer's pace besides
        assert [e.id for e in events] == [cue(i).derive("chunk0"), cue(i).derive("chunk1"), cue(i).derive("completed")]


def test_a_reply_cut_short_while_it_is_written_stops() -> None:
    writer = CountingWriter()
    llm = LLMActor(load_settings(environ={}, llm_max_sentences=3), writer=writer)
    llm.handle(ThrottleChanged(id="t", run="r1", window_tokens=200, reason="test"), ctx(0, RUN))
    out = iter(llm.handle(cue(), ctx(100, RUN)))
    next(out)
    llm.handle(UtteranceDropped(id="x", run="r1", utterance="cue0", reason="interrupted"), ctx(150, RUN))
    assert list(out) == [] and writer.written == 3


def test_release_forgets_everything_of_a_run() -> None:
    llm = LLMActor(load_settings(environ={}, llm_max_sentences=3))
    llm.handle(ThrottleChanged(id="t", run="r1", window_tokens=4, reason="test"), ctx(0, RUN))
    llm.handle(RoleWeightsChanged(id="w", run="r1", weights={"host": 1.5}, reason="test"), ctx(0, RUN))
    list(llm.handle(cue(), ctx(100, RUN)))  # a reply held by the throttle
    assert llm.holds("r1") and llm.windows["r1"] and llm.factors["r1"]
    llm.release("r1")
    assert not llm.holds("r1") and not llm.windows and not llm.factors
