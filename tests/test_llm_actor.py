"""The llm actor: the LLM->TTS throttle, deadlines and QoS weights (handler alone, no NATS)."""

from __future__ import annotations

from actors.llm import LLMActor
from events.cue import CueIssued
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
    first = llm.handle(cue(), ctx(100, RUN))
    chunks = [e for e in first if isinstance(e, UtteranceChunk)]
    assert len(chunks) == 1 and not any(isinstance(e, UtteranceCompleted) for e in first)  # one sentence ahead
    released = list(chunks)
    while not any(isinstance(e, UtteranceCompleted) for e in first):
        first = llm.handle(spoken(released[-1]), ctx(200, RUN))  # the last sentence is placed: one more
        more = [e for e in first if isinstance(e, UtteranceChunk)]
        assert len(more) <= 1
        released += more
    assert [c.seq for c in released] == list(range(len(released))) and released[-1].last
    assert len(released) >= 2


def test_a_wider_window_releases_more_at_once_and_a_cut_reply_stops() -> None:
    llm = LLMActor(load_settings(environ={}, llm_max_sentences=3))
    llm.handle(ThrottleChanged(id="t", run="r1", window_tokens=200, reason="test"), ctx(0, RUN))
    out = llm.handle(cue(1), ctx(100, RUN))
    assert any(isinstance(e, UtteranceCompleted) for e in out)  # everything fits in 200 tokens
    llm.handle(ThrottleChanged(id="t2", run="r1", window_tokens=4, reason="test"), ctx(0, RUN))
    held = llm.handle(cue(2), ctx(100, RUN))
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
