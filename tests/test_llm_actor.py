"""The llm actor: the LLM->TTS throttle, deadlines and QoS weights (through the kernel's list feed, no NATS)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from actors.backends.llm_scripted import ScriptedLLM
from actors.backends.protocols import Persona, Prompt, Sentence
from actors.kernel import ListFeed
from actors.llm import LLMActor
from app.shows import load_show as demo_show
from events.base import Event
from events.cue import CueIssued
from events.danmaku import RolePaceMeasured
from events.qos import ThrottleChanged
from events.role import RoleWeightsChanged
from events.utterance import UtteranceChunk, UtteranceCompleted, UtteranceDropped
from events.viseme import VisemeTrack
from infra.settings import load_settings
from tests.showkit import demo_run

RUN = demo_run("r1")


def fed(llm: LLMActor, window: int | None = None) -> ListFeed:
    """A list feed of the actor for RUN (its throttle window set by the QoS actor, if given)."""
    feed = ListFeed(llm, RUN)
    if window is not None:
        feed.handle(ThrottleChanged(id="t", run="r1", window_tokens=window, reason="test"), at_ms=0)
    return feed


def streamed(feed: ListFeed, event: CueIssued, at_ms: int, picked_ms: int | None = None) -> Iterator[Event]:
    """The reply to a cue as the actor streams it, each event as it is yielded (``feed.handle``
    gives them all at once): the cue arrives at the feed's kernel, leaves its queue in a batch
    of its own at show time ``picked_ms`` (default: ``at_ms``) and is handled at ``at_ms`` (later:
    the writer was busy in between)."""
    picked = at_ms if picked_ms is None else picked_ms
    kernel = feed.kernel
    kernel.notice(event)
    assert kernel.take(event, feed.run_of(event), picked).queued
    batch = kernel.next_batch(feed.run.started_at_ms + picked)
    assert batch is not None and batch.events == [event]
    feed.now_ms = at_ms

    def handled() -> Iterator[Event]:
        [out] = kernel.handle_batch(batch, at_ms)
        yield from out
        kernel.served(batch, feed.run.started_at_ms + at_ms)  # done: what arrives now cancels it no more

    return handled()


def cue(i: int = 0, deadline_ms: int = 0) -> CueIssued:
    return CueIssued(id=f"cue{i}", run="r1", role="host", correlation=f"d{i}", seq=i, user="ann",
                     text="what game are we playing tonight", danmaku=(f"d{i}",), routed_by="mention",
                     priority=2.0, deadline_ms=deadline_ms)


def spoken(chunk: UtteranceChunk) -> VisemeTrack:
    return VisemeTrack(id=f"{chunk.id}-v", run="r1", role="host", utterance=chunk.utterance, audio="a", seq=0,
                       start_ms=0, end_ms=100, text=chunk.text, visemes=(), chunk=chunk.seq, chunk_done=True)



def test_text_goes_to_tts_only_a_window_ahead_of_speech() -> None:
    feed = fed(LLMActor(load_settings(environ={}, llm_max_sentences=3)), window=4)  # the tts buffer is full
    first = feed.handle(cue(), at_ms=100)
    chunks = [e for e in first if isinstance(e, UtteranceChunk)]
    assert len(chunks) == 1 and not any(isinstance(e, UtteranceCompleted) for e in first)  # one sentence ahead
    released = list(chunks)
    while not any(isinstance(e, UtteranceCompleted) for e in first):
        first = feed.handle(spoken(released[-1]), at_ms=200)  # the last sentence is placed: one more
        more = [e for e in first if isinstance(e, UtteranceChunk)]
        assert len(more) <= 1
        released += more
    assert [c.seq for c in released] == list(range(len(released))) and released[-1].last
    assert len(released) >= 2


def test_a_wider_window_releases_more_at_once_and_a_cut_reply_stops() -> None:
    feed = fed(LLMActor(load_settings(environ={}, llm_max_sentences=3)), window=200)
    out = feed.handle(cue(1), at_ms=100)
    assert any(isinstance(e, UtteranceCompleted) for e in out)  # everything fits in 200 tokens
    feed.handle(ThrottleChanged(id="t2", run="r1", window_tokens=4, reason="test"), at_ms=100)
    held = feed.handle(cue(2), at_ms=100)
    assert len([e for e in held if isinstance(e, UtteranceChunk)]) == 1
    feed.handle(UtteranceDropped(id="x", run="r1", utterance="cue2", reason="interrupted"), at_ms=150)
    assert isinstance(held[0], UtteranceChunk)
    assert feed.handle(spoken(held[0]), at_ms=200) == []


def test_work_describes_the_cue_and_expiry_is_an_event() -> None:
    feed = fed(LLMActor(load_settings(environ={})))
    feed.handle(RoleWeightsChanged(id="w", run="r1", weights={"host": 1.5}, reason="test"), at_ms=0)
    assert feed.kernel.take(cue(3, deadline_ms=900), RUN, 0).queued  # it waits in the kernel's queue
    assert feed.kernel.queue is not None
    [job] = feed.kernel.queue.jobs()
    assert (job.role, job.weight, job.deadline_ms - RUN.started_at_ms) == ("host", 3.0, 900)
    [dropped] = feed.advance(1000)  # still waiting when its deadline passed
    assert isinstance(dropped, UtteranceDropped) and dropped.utterance == "cue3"
    assert "deadline passed 100 ms ago" in dropped.reason


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
    out = streamed(fed(LLMActor(load_settings(environ={}, llm_max_sentences=3), writer=writer)), cue(), at_ms=100)
    first = next(out)
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
    out = streamed(fed(LLMActor(load_settings(environ={}, llm_max_sentences=3), writer=writer)), cue(), at_ms=100)
    first = next(out)
    assert isinstance(first, UtteranceChunk) and first.text == "One." and not first.last and writer.written == 1
    rest = list(out)
    chunks = [e for e in rest if isinstance(e, UtteranceChunk)]
    assert [(c.text, c.last) for c in chunks] == [("Two.", True)] and writer.written == 2
    assert isinstance(rest[-1], UtteranceCompleted) and rest[-1].chunks == 2


def test_a_writer_that_ends_after_announcing_more_still_ends_the_reply() -> None:
    # Released at once (wide window): the rest of the reply is dropped, so lipsync frees the floor.
    writer = KnowingWriter([Sentence("One.", last=False)])
    feed = fed(LLMActor(load_settings(environ={}, llm_max_sentences=3), writer=writer), window=200)
    out = feed.handle(cue(), at_ms=100)
    assert isinstance(out[0], UtteranceChunk) and not out[0].last
    [dropped] = [e for e in out if isinstance(e, UtteranceDropped)]
    assert dropped.from_seq == 1 and "without the sentence it announced" in dropped.reason
    # Still held by the throttle (its window is full): the held sentence becomes the last.
    feed = fed(LLMActor(load_settings(environ={}, llm_max_sentences=3), writer=KnowingWriter(
        [Sentence("One two three four five six.", last=False), Sentence("Seven.", last=False)])), window=4)
    out = feed.handle(cue(), at_ms=100)
    assert [(e.seq, e.last) for e in out if isinstance(e, UtteranceChunk)] == [(0, False)]
    assert not any(isinstance(e, UtteranceDropped) for e in out)
    assert isinstance(out[0], UtteranceChunk)
    released = feed.handle(spoken(out[0]), at_ms=2000)
    assert [(e.seq, e.last) for e in released if isinstance(e, UtteranceChunk)] == [(1, True)]


def test_streaming_gives_the_events_of_a_whole_reply_at_once() -> None:
    """Ids, order and fields as when the reply was written whole before anything went out."""
    for window in (4, 8, 200):
        feed = fed(LLMActor(load_settings(environ={}, llm_max_sentences=3)), window=window)
        out = feed.handle(cue(5), at_ms=100)
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
    feed = fed(LLMActor(load_settings(environ={}, llm_max_sentences=2, openers="off"), writer=writer), window=200)
    late = cue(9, deadline_ms=50)
    out = feed.handle(cue(7), late, cue(8), at_ms=100)  # arriving together: one batch of the role
    assert writer.batches == [2]  # the expired cue is dropped, not written
    assert [type(e).__name__ for e in out if e.causation == late.id] == ["UtteranceDropped"]
    for i in (7, 8):
        events = [e for e in out if e.causation == cue(i).id and not isinstance(e, RolePaceMeasured)]  # and the pace
        assert [e.id for e in events] == [cue(i).derive("chunk0"), cue(i).derive("chunk1"), cue(i).derive("completed")]


def test_a_cue_taken_up_in_time_and_reached_after_its_deadline_is_dropped_unwritten() -> None:
    writer = CountingWriter()
    feed = fed(LLMActor(load_settings(environ={}, llm_max_sentences=2, openers="off"), writer=writer), window=200)
    [dropped] = streamed(feed, cue(9, deadline_ms=50), at_ms=100, picked_ms=40)  # the writer was busy meanwhile
    assert isinstance(dropped, UtteranceDropped) and dropped.reason == "deadline passed 50 ms before writing"
    assert writer.written == 0


def test_a_reply_cut_short_while_it_is_written_stops() -> None:
    writer = CountingWriter()
    feed = fed(LLMActor(load_settings(environ={}, llm_max_sentences=3), writer=writer), window=200)
    out = streamed(feed, cue(), at_ms=100)
    next(out)
    feed.handle(UtteranceDropped(id="x", run="r1", utterance="cue0", reason="interrupted"), at_ms=150)
    assert list(out) == [] and writer.written == 3


def test_release_forgets_everything_of_a_run() -> None:
    llm = LLMActor(load_settings(environ={}, llm_max_sentences=3))
    feed = fed(llm, window=4)
    feed.handle(RoleWeightsChanged(id="w", run="r1", weights={"host": 1.5}, reason="test"), at_ms=0)
    feed.handle(cue(), at_ms=100)  # a reply held by the throttle
    state = feed.state()
    assert feed.kernel.holds("r1") and state.window == 4 and state.factors and state.held
    feed.release()
    assert not feed.kernel.holds("r1") and feed.state() is None
    assert not state.held  # a reply still being written for it stops
    # The run's state was the kernel's: nothing of it stays on the actor.
    assert not hasattr(llm, "holds")
    assert not [name for name, value in vars(llm).items() if isinstance(value, dict | set) and "r1" in value]
