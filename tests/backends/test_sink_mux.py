"""The sink's muxing with a backlog: audio that comes after its placement still lands in its place."""

from __future__ import annotations

import logging
from pathlib import Path

import av
import numpy as np
import pytest

from actors.backends.render_torch import encode_jpeg
from actors.kernel import ListFeed
from actors.sink import AUDIO_HOLD_MAX_MS, AUDIO_WAIT_MS, SAMPLE_RATE, UNPLACED_MAX, SinkActor
from events.audio import AudioChunk, PhonemeMark
from events.frame import FrameRendered
from events.run import RunEnded
from events.viseme import VisemeMark, VisemeTrack
from infra.settings import load_settings
from tests.showkit import demo_run

RUN = demo_run("r1", resolution="360p")
JPEG = encode_jpeg(np.zeros((360, 640, 3), dtype=np.uint8))  # a still picture will do


def chunk(audio: str, ms: int = 500) -> AudioChunk:
    t = np.arange(ms * SAMPLE_RATE // 1000) / SAMPLE_RATE
    pcm = (np.sin(2 * np.pi * 440 * t) * 12000).astype("<i2").tobytes()
    return AudioChunk(id=audio, run="r1", role="host", utterance="u1", seq=0, sample_rate=SAMPLE_RATE,
                      offset_ms=0, duration_ms=ms, text="x", phonemes=(PhonemeMark("a", 0, ms),), pcm=pcm)


def track(audio: str, start: int, ms: int = 500) -> VisemeTrack:
    return VisemeTrack(id=f"t-{audio}", run="r1", role="host", correlation="c1", utterance="u1", audio=audio,
                       seq=0, start_ms=start, end_ms=start + ms, text="hello", visemes=(VisemeMark("aa", start, start + ms),))


def frames(feed: ListFeed, first: int, last: int, clock: bool = True) -> None:
    """Frames first..last-1, each arriving 10 ms after its show time (or all at show time 0)."""
    for n in range(first, last):
        feed.handle(FrameRendered(id=f"f{n}", run="r1", t_ms=n * 40, n=n, width=640, height=360,
                                  resolution="360p", jpeg=JPEG), at_ms=n * 40 + 10 if clock else 0)


def written(feed: ListFeed) -> Path:
    """The run's finished file."""
    path = feed.state().finished
    assert path is not None, "the file is not finished"
    return Path(path)


def waiting(feed: ListFeed) -> int | None:
    """The show time at which the kernel next ticks the sink (its audio waits for a chunk), or None."""
    due = feed.kernel.next_tick()
    if due is None:
        return None
    assert due[1].run == "r1"
    return due[0] - due[1].started_at_ms


def rms(path: Path, *spans: tuple[float, float]) -> list[float]:
    with av.open(str(path)) as container:
        samples = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
        rate = container.streams.audio[0].codec_context.sample_rate
    return [float(np.sqrt(np.mean(samples[int(a * rate):int(b * rate)] ** 2))) for a, b in spans]


def video_frames(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def started(out_dir: Path) -> ListFeed:
    feed = ListFeed(SinkActor(load_settings(environ={}, out_dir=out_dir)), RUN)
    feed.handle(RUN, at_ms=0)
    return feed


@pytest.fixture
def feed(tmp_path: Path) -> ListFeed:
    return started(tmp_path)


def test_audio_that_comes_after_its_place_was_reached_is_written_there(feed: ListFeed, caplog) -> None:  # type: ignore[no-untyped-def]
    feed.handle(track("a1", 1000), at_ms=5)
    frames(feed, 0, 100)  # 4 s of video: without the wait the audio would be written to 3.4 s
    assert waiting(feed) is not None  # waiting at 1 s for a1
    feed.handle(chunk("a1"), at_ms=4010)
    assert waiting(feed) is None
    frames(feed, 100, 125)
    feed.handle(RunEnded(id="end", run="r1", reason="test", duration_ms=5000), at_ms=5010)
    path = written(feed)
    speech, before, after = rms(path, (1.05, 1.45), (0.2, 0.9), (1.6, 4.8))
    assert speech > 0.1 and before < 0.01 and after < 0.01, (speech, before, after)
    assert video_frames(path) == 125
    assert "stays silent" not in caplog.text


@pytest.mark.parametrize("clock", [True, False], ids=["show-clock", "stopped-clock"])
def test_audio_that_never_comes_is_silence_after_a_bounded_wait(feed: ListFeed, caplog, clock: bool) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.WARNING)
    feed.handle(track("a1", 1000), at_ms=5)
    feed.handle(chunk("a2"), at_ms=5)
    feed.handle(track("a2", 1500), at_ms=5)
    # With the show clock the wait ends AUDIO_WAIT_MS after it began; with a stopped clock (an
    # export) when the video is AUDIO_HOLD_MAX_MS ahead of the audio.
    given_up_ms = (1000 + 600 + AUDIO_WAIT_MS) if clock else (1000 + AUDIO_HOLD_MAX_MS)
    frames(feed, 0, given_up_ms // 40 - 5, clock)
    assert "did not arrive" not in caplog.text
    frames(feed, given_up_ms // 40 - 5, given_up_ms // 40 + 5, clock)
    assert "audio a1 of run r1 did not arrive" in caplog.text
    feed.handle(chunk("a1"), at_ms=given_up_ms + 300 if clock else 0)  # too late: dropped
    end = given_up_ms // 40 + 30
    frames(feed, given_up_ms // 40 + 5, end, clock)
    feed.handle(RunEnded(id="end", run="r1", reason="test", duration_ms=end * 40), at_ms=end * 40 + 10)
    silent, speech = rms(written(feed), (1.05, 1.45), (1.55, 1.95))
    assert silent < 0.01 and speech > 0.1, (silent, speech)
    assert video_frames(written(feed)) == end


def test_at_the_end_the_file_waits_for_the_audio_then_finishes_by_the_clock(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    results = {}
    for arrives in (True, False):
        feed = started(tmp_path / str(arrives))
        feed.handle(track("a1", 1800, ms=400), at_ms=5)
        frames(feed, 0, 50)
        feed.handle(RunEnded(id="end", run="r1", reason="test", duration_ms=2000), at_ms=2010)
        assert feed.state().finished is None
        due = waiting(feed)  # the run's clock ticks (the only run that does: see ``waiting``)
        assert due is not None and 2010 <= due <= 2010 + AUDIO_WAIT_MS
        if arrives:
            feed.handle(chunk("a1", ms=400), at_ms=2500)
        else:
            feed.advance(due)
        assert feed.state().finished is not None and waiting(feed) is None
        results[arrives] = rms(written(feed), (1.85, 1.95))[0]
        assert video_frames(written(feed)) == 50
    assert results[True] > 0.1 and results[False] < 0.01, results
    assert caplog.text.count("did not arrive") == 1


def test_chunks_never_placed_are_not_kept_forever(feed: ListFeed) -> None:
    for i in range(UNPLACED_MAX + 20):
        feed.handle(chunk(f"lost{i}"), at_ms=i)
    mux = feed.state()  # the memory bound is the point of this test
    assert len(mux.pcm) == UNPLACED_MAX and "lost0" not in mux.pcm


def test_a_redelivered_track_neither_doubles_nor_holds_the_audio(feed: ListFeed, caplog) -> None:  # type: ignore[no-untyped-def]
    feed.handle(chunk("a1"), at_ms=5)
    feed.handle(track("a1", 200), at_ms=5)
    frames(feed, 0, 40)
    feed.handle(track("a1", 200), at_ms=1610)  # its audio is already written
    feed.handle(chunk("a1"), at_ms=1610)
    assert waiting(feed) is None
    frames(feed, 40, 50)
    feed.handle(RunEnded(id="end", run="r1", reason="test", duration_ms=2000), at_ms=2010)
    speech, after = rms(written(feed), (0.25, 0.65), (0.8, 1.9))
    assert 0.1 < speech < 0.5 and after < 0.01, (speech, after)
    assert "did not arrive" not in caplog.text


def test_a_sink_taking_a_run_over_writes_from_the_first_frame_it_is_given(tmp_path: Path) -> None:
    feed = ListFeed(SinkActor(load_settings(environ={}, out_dir=tmp_path)), RUN)
    feed.kernel.taking_over(RUN)  # as the takeover does, before the run's past is handed again
    feed.handle(RUN, at_ms=0)
    feed.handle(chunk("a1"), track("a1", 200), at_ms=5)  # speech before the first frame: never written
    assert not list(tmp_path.glob("*.mp4"))  # the dead process's file is not touched
    frames(feed, 30, 50)
    feed.handle(RunEnded(id="end", run="r1", reason="test", duration_ms=2000), at_ms=2010)
    path = written(feed)
    assert path.name == "r1.from-frame-30.mp4" and not (tmp_path / "r1.mp4").exists()
    assert video_frames(path) == 20


def test_a_video_left_open_is_finished_when_its_run_is_released(feed: ListFeed) -> None:
    frames(feed, 0, 25)  # the run never ends
    assert feed.state().finished is None
    mux = feed.state()
    feed.release()
    assert not feed.kernel.holds("r1") and mux.finished is not None
    assert video_frames(mux.finished) == 25
