"""Re-execution hands lipsync its second input (replies dropped upstream) among the audio chunks
at the moment lipsync took each in, as what it caused says."""

from __future__ import annotations

from app.reexec import _lipsync_inputs, _Recording
from events.audio import AudioChunk
from events.base import Event
from events.danmaku import SpeechPlaced
from events.utterance import UtteranceDropped
from events.viseme import VisemeTrack
from store.queries import Row


def _chunk(utt: str, seq: int, t_ms: int) -> AudioChunk:
    return AudioChunk(id=f"{utt}-{seq}", run="r1", role="host", utterance=utt, seq=seq, part=0, part_last=True,
                      last=True, sample_rate=22050, offset_ms=0, duration_ms=400, text="hi", phonemes=(),
                      pcm=b"\x00\x00" * 100, t_ms=t_ms)


def _rows(*events: Event) -> list[Row]:
    return [Row(pos, pos, pos if isinstance(e, AudioChunk) else None, "", None, e) for pos, e in enumerate(events)]


def test_a_drop_is_handed_over_when_lipsync_took_it_in_not_when_it_was_sent() -> None:
    chunk = _chunk("u1", 0, 1000)
    drop = UtteranceDropped(id="d1", run="r1", utterance="u1", reason="superseded: b wrote again", t_ms=900)
    track = VisemeTrack(id="v1", run="r1", role="host", utterance="u1", audio=chunk.id, seq=0, start_ms=2000,
                        end_ms=2400, text="hi", visemes=(), causation=chunk.id, t_ms=1010)
    told = SpeechPlaced(id="p1", run="r1", utterance="u1", start_ms=-1, done=True, causation="d1", t_ms=1200)
    rows = _rows(chunk, drop, track, told)
    order = [r.event.id for r in _lipsync_inputs(rows, _Recording(rows))]
    assert order == ["u1-0", "d1"]  # placed first (its track), the drop taken in after it


def test_a_drop_before_any_of_a_reply_was_placed_goes_before_its_chunks_that_caused_nothing() -> None:
    chunk = _chunk("u2", 0, 1000)  # sent before the drop reached lipsync, handled after it: let go
    drop = UtteranceDropped(id="d2", run="r1", utterance="u2", reason="superseded: b wrote again", t_ms=990)
    told = SpeechPlaced(id="p2", run="r1", utterance="u2", start_ms=-1, done=True, causation="d2", t_ms=1010)
    rows = _rows(chunk, drop, told)
    order = [r.event.id for r in _lipsync_inputs(rows, _Recording(rows))]
    assert order == ["d2", "u2-0"]


def test_a_drop_that_caused_nothing_comes_after_the_input_that_ended_its_reply() -> None:
    first = _chunk("u3", 0, 1000)
    track = VisemeTrack(id="v3", run="r1", role="host", utterance="u3", audio=first.id, seq=0, start_ms=3000,
                        end_ms=3400, text="hi", visemes=(), causation=first.id, t_ms=1010)
    drop = UtteranceDropped(id="d3", run="r1", utterance="u3", reason="interrupted while writing", from_seq=1,
                            t_ms=1500)  # sent first, taken in after the urgent chunk had cut the reply
    urgent = _chunk("gift", 0, 1490)
    told = SpeechPlaced(id="p3", run="r1", utterance="u3", start_ms=3000, end_ms=3400, done=True,
                        causation=urgent.id, t_ms=1520)
    rows = _rows(first, track, urgent, drop, told)
    order = [r.event.id for r in _lipsync_inputs(rows, _Recording(rows))]
    assert order == ["u3-0", "gift-0", "d3"]
