"""Lipsync: placement on the show timeline, one floor, visemes from phonemes."""

from __future__ import annotations

from actors.kernel import ListFeed
from actors.lipsync import CUT_LEAD_MS, LipsyncActor, visemes_of
from events.audio import AudioChunk, PhonemeMark
from events.run import RunStarted
from events.utterance import UtteranceDropped
from events.viseme import VisemeTrack
from infra.settings import Settings
from tests.showkit import demo_run

PAUSE = Settings().reply_pause_ms  # the natural pause between two replies


def chunk(utt: str, seq: int, part: int = 0, dur: int = 400, last: bool = False, part_last: bool = True) -> AudioChunk:
    return AudioChunk(
        id=f"{utt}-{seq}-{part}", run="r1", role="host", correlation=f"c-{utt}", utterance=utt,
        seq=seq, part=part, part_last=part_last, last=last, sample_rate=22050, offset_ms=0,
        duration_ms=dur, text="hello", phonemes=(PhonemeMark("h", 0, 100), PhonemeMark("aɪ", 100, 300)),
        pcm=b"\x00\x00" * (22050 * dur // 1000),
    )


def lipsync(run: RunStarted | None = None) -> ListFeed:
    """A lipsync actor fed through its kernel, for the run r1 (lipsync opens it at its first input)."""
    return ListFeed(LipsyncActor(), run if run is not None else demo_run())


def tracks(outs: object) -> list[VisemeTrack]:
    return [t for t in outs if isinstance(t, VisemeTrack)]  # type: ignore[attr-defined]


def test_visemes_cover_the_chunk_with_silence_in_gaps() -> None:
    marks = visemes_of(chunk("u", 0), 1000)
    assert marks[0].start_ms == 1000 and marks[-1].end_ms == 1400
    assert [m.viseme for m in marks] == ["kk", "aa", "sil"]
    assert all(a.end_ms == b.start_ms for a, b in zip(marks, marks[1:], strict=False))


def test_an_utterance_is_placed_back_to_back() -> None:
    lip = lipsync()
    a = tracks(lip.handle(chunk("u1", 0, 0, part_last=False), at_ms=1000))
    b = tracks(lip.handle(chunk("u1", 0, 1), at_ms=1100))
    c = tracks(lip.handle(chunk("u1", 1, 0, last=True), at_ms=1200))
    assert [t.start_ms for t in a + b + c] == [1000, 1400, 1800]
    assert c[0].last


def test_the_floor_goes_to_the_next_utterance_after_the_current_one() -> None:
    lip = lipsync()
    lip.handle(chunk("u1", 0, last=False), at_ms=0)
    waiting = tracks(lip.handle(chunk("u2", 0, last=True), at_ms=50))
    assert waiting == []  # u1 still holds the floor
    done = tracks(lip.handle(chunk("u1", 1, last=True), at_ms=100))
    assert [t.utterance for t in done] == ["u1", "u2"]
    assert done[1].start_ms == done[0].end_ms + PAUSE and done[0].end_ms == 800


def test_out_of_order_and_redelivered_chunks() -> None:
    lip = lipsync()
    assert tracks(lip.handle(chunk("u1", 1, last=True), at_ms=0)) == []
    placed = tracks(lip.handle(chunk("u1", 0), at_ms=10))
    assert [t.audio for t in placed] == ["u1-0-0", "u1-1-0"]
    assert tracks(lip.handle(chunk("u1", 0), at_ms=20)) == []


def test_late_chunks_start_no_earlier_than_now() -> None:
    lip = lipsync()
    lip.handle(chunk("u1", 0), at_ms=0)
    [late] = tracks(lip.handle(chunk("u1", 1, last=True), at_ms=5000))
    assert late.start_ms == 5000


def dropped(utt: str, from_seq: int) -> UtteranceDropped:
    return UtteranceDropped(id=f"{utt}-drop", run="r1", role="host", utterance=utt, from_seq=from_seq, reason="deadline")


def test_a_reply_cut_short_gives_up_the_floor_and_its_late_chunks_are_ignored() -> None:
    lip = lipsync()
    first = tracks(lip.handle(chunk("u1", 0), at_ms=1000))
    assert tracks(lip.handle(chunk("u2", 0, last=True), at_ms=1100)) == []  # waits for the floor
    handed = tracks(lip.handle(dropped("u1", 1), at_ms=1200))  # u1's chunks from seq 1 on will not come
    assert [t.utterance for t in first + handed] == ["u1", "u2"]
    assert handed[0].start_ms == first[0].end_ms + PAUSE  # the floor passes on, after the pause
    assert tracks(lip.handle(chunk("u1", 1, last=True), at_ms=1300)) == []


def test_a_reply_dropped_before_it_spoke_never_takes_the_floor() -> None:
    lip = lipsync()
    assert tracks(lip.handle(dropped("u9", 0), at_ms=500)) == []
    assert tracks(lip.handle(chunk("u9", 0, last=True), at_ms=600)) == []
    assert [t.utterance for t in tracks(lip.handle(chunk("u3", 0, last=True), at_ms=700))] == ["u3"]


def urgent(utt: str, seq: int = 0, priority: float = 5.0, last: bool = True) -> AudioChunk:
    import dataclasses

    return dataclasses.replace(chunk(utt, seq, last=last), priority=priority, id=f"{utt}-{seq}-urgent")


def test_an_urgent_reply_takes_the_floor_and_the_speaking_one_stops_where_it_is() -> None:
    from events.viseme import VisemeCut

    lip = lipsync()
    placed = tracks(lip.handle(chunk("u1", 0), at_ms=1000)) + tracks(lip.handle(chunk("u1", 1), at_ms=1010))
    assert [t.start_ms for t in placed] == [1000, 1400]  # u1 holds the floor until 1800
    out = lip.handle(urgent("gift"), at_ms=1200)
    drops = [e for e in out if isinstance(e, UtteranceDropped)]
    cuts = [e for e in out if isinstance(e, VisemeCut)]
    assert len(drops) == 1 and drops[0].utterance == "u1" and drops[0].from_seq == 1  # 1 was never heard
    assert "interrupted by gift" in drops[0].reason
    at = 1200 + CUT_LEAD_MS  # the cut reaches the renderer before the frame it applies to
    assert len(cuts) == 1 and (cuts[0].utterance, cuts[0].at_ms, cuts[0].by) == ("u1", at, "gift")
    assert [(t.utterance, t.start_ms) for t in tracks(out)] == [("gift", at)]
    assert tracks(lip.handle(chunk("u1", 2, last=True), at_ms=1300)) == []  # the rest of u1 is gone


def test_an_ordinary_reply_waits_its_turn() -> None:
    lip = lipsync()
    tracks(lip.handle(chunk("u1", 0, last=True), at_ms=1000))  # placed 1000..1400
    out = lip.handle(urgent("u2", priority=2.0), at_ms=1100)
    assert [(t.utterance, t.start_ms) for t in tracks(out)] == [("u2", 1400 + PAUSE)]  # after u1, not over it
    assert [e.type for e in out] == ["viseme.track", "danmaku.placed"]  # nothing cut


def test_a_cut_track_keeps_what_was_spoken() -> None:
    from actors.visemes import cut_track

    track = tracks(lipsync().handle(chunk("u1", 0), at_ms=1000))[0]
    cut = cut_track(track, 1150)
    assert cut is not None and cut.end_ms == 1150 and cut.last
    assert cut.visemes[-1].end_ms <= 1150
    assert cut_track(track, 1000) is None and cut_track(track, 5000) == track


def test_an_urgent_reply_cuts_replies_placed_ahead_too() -> None:
    from events.viseme import VisemeCut

    lip = lipsync()
    tracks(lip.handle(chunk("u1", 0, last=True), at_ms=1000))          # 1000..1400, on air
    ahead = tracks(lip.handle(chunk("u2", 0, last=True), at_ms=1010))  # placed 1650..2050
    assert [t.start_ms for t in ahead] == [1400 + PAUSE]
    out = lip.handle(urgent("mod"), at_ms=1100)
    cuts = {c.utterance: c.at_ms for c in out if isinstance(c, VisemeCut)}
    assert cuts == {"u1": 1100 + CUT_LEAD_MS, "u2": 1400 + PAUSE}  # u2 never begins
    assert [(t.utterance, t.start_ms) for t in tracks(out)] == [("mod", 1100 + CUT_LEAD_MS)]


def test_a_reply_that_cannot_start_by_its_deadline_is_dropped_whole() -> None:
    import dataclasses

    lip = lipsync()
    tracks(lip.handle(chunk("u1", 0, last=True), at_ms=1000))  # the floor is taken until 1400
    late = dataclasses.replace(chunk("u2", 0, last=True), deadline_ms=1200)
    out = lip.handle(late, at_ms=1100)
    assert tracks(out) == []
    [drop] = [e for e in out if isinstance(e, UtteranceDropped)]
    assert drop.utterance == "u2" and drop.from_seq == 0 and "deadline" in drop.reason
    on_time = dataclasses.replace(chunk("u3", 0, last=True), deadline_ms=1400 + PAUSE)
    assert [t.start_ms for t in tracks(lip.handle(on_time, at_ms=1150))] == [1400 + PAUSE]


def test_nothing_is_placed_after_the_show_ends() -> None:
    import dataclasses

    lip = lipsync(dataclasses.replace(demo_run(), duration_ms=1700))
    out = [*lip.handle(chunk("u1", 0), at_ms=1000), *lip.handle(chunk("u1", 1), at_ms=1000)]  # 1 would end at 1800
    out += lip.handle(chunk("u1", 2, last=True), at_ms=1000)
    assert [t.end_ms for t in tracks(out)] == [1400]
    assert [e.from_seq for e in out if isinstance(e, UtteranceDropped)] == [1]


def test_the_director_is_told_where_each_reply_was_placed() -> None:
    from events.danmaku import SpeechPlaced

    lip = lipsync()

    def told(outs: object) -> list[tuple[str, int, int, bool, int]]:
        return [(e.utterance, e.start_ms, e.end_ms, e.done, e.floor_ms)
                for e in outs if isinstance(e, SpeechPlaced)]  # type: ignore[attr-defined]

    assert told(lip.handle(chunk("u1", 0), at_ms=1000)) == [("u1", 1000, 1400, False, 1400)]  # its start
    assert told(lip.handle(chunk("u1", 1), at_ms=1100)) == []  # placed, but not its end yet
    assert told(lip.handle(chunk("u2", 0, last=True), at_ms=1150)) == []  # waits: not placed yet
    # u1's last sentence: u1 is done, and u2 is placed a pause after it, whole.
    assert told(lip.handle(chunk("u1", 2, last=True), at_ms=1200)) == [
        ("u1", 1000, 2200, True, 2200 + PAUSE + 400), ("u2", 2200 + PAUSE, 2200 + PAUSE + 400, True, 2200 + PAUSE + 400)]
    # A reply dropped before any of it was placed: told so (start -1), once.
    assert told(lip.handle(dropped("u3", 0), at_ms=1300)) == [("u3", -1, 0, True, 2200 + PAUSE + 400)]
    assert told(lip.handle(dropped("u3", 0), at_ms=1310)) == []


def test_a_reply_dropped_on_deck_is_taken_off_whole_and_the_floor_frees_before_it() -> None:
    from events.danmaku import SpeechPlaced
    from events.viseme import VisemeCut

    lip = lipsync()
    lip.handle(chunk("u1", 0, last=True), at_ms=1000)                                 # 1000..1400, on air
    [deck] = tracks(lip.handle(chunk("u2", 0, last=True), at_ms=1010))                # on deck: 1400 + pause
    out = lip.handle(dropped("u2", 0), at_ms=1100)                                    # a comment took its place
    [cut] = [e for e in out if isinstance(e, VisemeCut)]
    assert (cut.utterance, cut.at_ms) == ("u2", deck.start_ms)                       # nothing of it is heard
    assert [(e.utterance, e.start_ms, e.done) for e in out if isinstance(e, SpeechPlaced)] == [("u2", -1, True)]
    [after] = tracks(lip.handle(chunk("u3", 0, last=True), at_ms=1150))
    assert after.start_ms == 1400 + PAUSE                                             # where u2 would have been
    # One already on air is not taken off: only its rest goes.
    assert not [e for e in lip.handle(dropped("u3", 0), at_ms=1700) if isinstance(e, VisemeCut)]


def test_the_stage_is_the_run_s_state_in_the_kernel_and_goes_with_the_run() -> None:
    lip = lipsync()
    lip.handle(chunk("u1", 0), at_ms=1000)
    assert lip.kernel.holds("r1") and "u1" in lip.state().known
    assert vars(lip.actor) == {"lead_ms": 0}  # nothing of the run on the actor
    lip.release()
    assert not lip.kernel.holds("r1") and lip.state() is None
    # An input that came after its run's end, for a run no longer held: no stage to place it on.
    assert lip.handle(chunk("u2", 0, last=True), at_ms=5000, late=True) == []
    assert not lip.kernel.holds("r1")
