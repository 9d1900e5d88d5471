"""Lipsync: placement on the show timeline, one floor, visemes from phonemes."""

from __future__ import annotations

from actors.lipsync import LipsyncActor, visemes_of
from events.audio import AudioChunk, PhonemeMark
from events.viseme import VisemeTrack
from tests.showkit import ctx


def chunk(utt: str, seq: int, part: int = 0, dur: int = 400, last: bool = False, part_last: bool = True) -> AudioChunk:
    return AudioChunk(
        id=f"{utt}-{seq}-{part}", run="r1", role="host", correlation=f"c-{utt}", utterance=utt,
        seq=seq, part=part, part_last=part_last, last=last, sample_rate=22050, offset_ms=0,
        duration_ms=dur, text="hello", phonemes=(PhonemeMark("h", 0, 100), PhonemeMark("aɪ", 100, 300)),
        pcm=b"\x00\x00" * (22050 * dur // 1000),
    )


def tracks(outs: object) -> list[VisemeTrack]:
    return [t for t in outs if isinstance(t, VisemeTrack)]  # type: ignore[attr-defined]


def test_visemes_cover_the_chunk_with_silence_in_gaps() -> None:
    marks = visemes_of(chunk("u", 0), 1000)
    assert marks[0].start_ms == 1000 and marks[-1].end_ms == 1400
    assert [m.viseme for m in marks] == ["kk", "aa", "sil"]
    assert all(a.end_ms == b.start_ms for a, b in zip(marks, marks[1:], strict=False))


def test_an_utterance_is_placed_back_to_back() -> None:
    lip = LipsyncActor()
    a = tracks(lip.handle(chunk("u1", 0, 0, part_last=False), ctx(1000)))
    b = tracks(lip.handle(chunk("u1", 0, 1), ctx(1100)))
    c = tracks(lip.handle(chunk("u1", 1, 0, last=True), ctx(1200)))
    assert [t.start_ms for t in a + b + c] == [1000, 1400, 1800]
    assert c[0].last


def test_the_floor_goes_to_the_next_utterance_after_the_current_one() -> None:
    lip = LipsyncActor()
    lip.handle(chunk("u1", 0, last=False), ctx(0))
    waiting = tracks(lip.handle(chunk("u2", 0, last=True), ctx(50)))
    assert waiting == []  # u1 still holds the floor
    done = tracks(lip.handle(chunk("u1", 1, last=True), ctx(100)))
    assert [t.utterance for t in done] == ["u1", "u2"]
    assert done[1].start_ms == done[0].end_ms == 800


def test_out_of_order_and_redelivered_chunks() -> None:
    lip = LipsyncActor()
    assert tracks(lip.handle(chunk("u1", 1, last=True), ctx(0))) == []
    placed = tracks(lip.handle(chunk("u1", 0), ctx(10)))
    assert [t.audio for t in placed] == ["u1-0-0", "u1-1-0"]
    assert tracks(lip.handle(chunk("u1", 0), ctx(20))) == []


def test_late_chunks_start_no_earlier_than_now() -> None:
    lip = LipsyncActor()
    lip.handle(chunk("u1", 0), ctx(0))
    [late] = tracks(lip.handle(chunk("u1", 1, last=True), ctx(5000)))
    assert late.start_ms == 5000
