"""The sink's muxing with a backlog: audio that comes after its placement still lands in its place."""

from __future__ import annotations

import logging
from pathlib import Path

import av
import numpy as np
import pytest

from actors.backends.render_torch import encode_jpeg
from actors.sink import AUDIO_HOLD_MAX_MS, AUDIO_WAIT_MS, SAMPLE_RATE, UNPLACED_MAX, SinkActor
from events.audio import AudioChunk, PhonemeMark
from events.frame import FrameRendered
from events.run import RunEnded
from events.viseme import VisemeMark, VisemeTrack
from infra.settings import load_settings
from tests.showkit import ctx, demo_run

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


def frames(sink: SinkActor, first: int, last: int, clock: bool = True) -> None:
    """Frames first..last-1, each arriving 10 ms after its show time (or all at show time 0)."""
    for n in range(first, last):
        sink.handle(FrameRendered(id=f"f{n}", run="r1", t_ms=n * 40, n=n, width=640, height=360,
                                  resolution="360p", jpeg=JPEG), ctx(n * 40 + 10 if clock else 0, RUN))


def rms(path: Path, *spans: tuple[float, float]) -> list[float]:
    with av.open(str(path)) as container:
        samples = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
        rate = container.streams.audio[0].codec_context.sample_rate
    return [float(np.sqrt(np.mean(samples[int(a * rate):int(b * rate)] ** 2))) for a, b in spans]


def video_frames(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


@pytest.fixture
def sink(tmp_path: Path) -> SinkActor:
    actor = SinkActor(load_settings(environ={}, out_dir=tmp_path))
    actor.handle(RUN, ctx(0, RUN))
    return actor


def test_audio_that_comes_after_its_place_was_reached_is_written_there(sink: SinkActor, caplog) -> None:  # type: ignore[no-untyped-def]
    sink.handle(track("a1", 1000), ctx(5, RUN))
    frames(sink, 0, 100)  # 4 s of video: without the wait the audio would be written to 3.4 s
    assert sink.next_tick("r1") is not None  # waiting at 1 s for a1
    sink.handle(chunk("a1"), ctx(4010, RUN))
    assert sink.next_tick("r1") is None
    frames(sink, 100, 125)
    sink.handle(RunEnded(id="end", run="r1", reason="test", duration_ms=5000), ctx(5010, RUN))
    path = sink.finished["r1"]
    speech, before, after = rms(path, (1.05, 1.45), (0.2, 0.9), (1.6, 4.8))
    assert speech > 0.1 and before < 0.01 and after < 0.01, (speech, before, after)
    assert video_frames(path) == 125
    assert "stays silent" not in caplog.text


@pytest.mark.parametrize("clock", [True, False], ids=["show-clock", "stopped-clock"])
def test_audio_that_never_comes_is_silence_after_a_bounded_wait(sink: SinkActor, caplog, clock: bool) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.WARNING)
    sink.handle(track("a1", 1000), ctx(5, RUN))
    sink.handle(chunk("a2"), ctx(5, RUN))
    sink.handle(track("a2", 1500), ctx(5, RUN))
    # With the show clock the wait ends AUDIO_WAIT_MS after it began; with a stopped clock (an
    # export) when the video is AUDIO_HOLD_MAX_MS ahead of the audio.
    given_up_ms = (1000 + 600 + AUDIO_WAIT_MS) if clock else (1000 + AUDIO_HOLD_MAX_MS)
    frames(sink, 0, given_up_ms // 40 - 5, clock)
    assert "did not arrive" not in caplog.text
    frames(sink, given_up_ms // 40 - 5, given_up_ms // 40 + 5, clock)
    assert "audio a1 of run r1 did not arrive" in caplog.text
    sink.handle(chunk("a1"), ctx(given_up_ms + 300 if clock else 0, RUN))  # too late: dropped
    end = given_up_ms // 40 + 30
    frames(sink, given_up_ms // 40 + 5, end, clock)
    sink.handle(RunEnded(id="end", run="r1", reason="test", duration_ms=end * 40), ctx(end * 40 + 10, RUN))
    silent, speech = rms(sink.finished["r1"], (1.05, 1.45), (1.55, 1.95))
    assert silent < 0.01 and speech > 0.1, (silent, speech)
    assert video_frames(sink.finished["r1"]) == end


def test_at_the_end_the_file_waits_for_the_audio_then_finishes_by_the_clock(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    results = {}
    for arrives in (True, False):
        sink = SinkActor(load_settings(environ={}, out_dir=tmp_path / str(arrives)))
        sink.handle(RUN, ctx(0, RUN))
        sink.handle(track("a1", 1800, ms=400), ctx(5, RUN))
        frames(sink, 0, 50)
        sink.handle(RunEnded(id="end", run="r1", reason="test", duration_ms=2000), ctx(2010, RUN))
        assert "r1" not in sink.finished and [r.run for r in sink.active_runs()] == ["r1"]
        due = sink.next_tick("r1")
        assert due is not None and 2010 <= due <= 2010 + AUDIO_WAIT_MS
        if arrives:
            sink.handle(chunk("a1", ms=400), ctx(2500, RUN))
        else:
            sink.tick(ctx(due, RUN))
        assert "r1" in sink.finished and not sink.active_runs()
        results[arrives] = rms(sink.finished["r1"], (1.85, 1.95))[0]
        assert video_frames(sink.finished["r1"]) == 50
    assert results[True] > 0.1 and results[False] < 0.01, results
    assert caplog.text.count("did not arrive") == 1


def test_chunks_never_placed_are_not_kept_forever(sink: SinkActor) -> None:
    for i in range(UNPLACED_MAX + 20):
        sink.handle(chunk(f"lost{i}"), ctx(i, RUN))
    mux = sink._muxes["r1"]  # noqa: SLF001 - the memory bound is the point of this test
    assert len(mux.pcm) == UNPLACED_MAX and "lost0" not in mux.pcm


def test_a_redelivered_track_neither_doubles_nor_holds_the_audio(sink: SinkActor, caplog) -> None:  # type: ignore[no-untyped-def]
    sink.handle(chunk("a1"), ctx(5, RUN))
    sink.handle(track("a1", 200), ctx(5, RUN))
    frames(sink, 0, 40)
    sink.handle(track("a1", 200), ctx(1610, RUN))  # its audio is already written
    sink.handle(chunk("a1"), ctx(1610, RUN))
    assert sink.next_tick("r1") is None
    frames(sink, 40, 50)
    sink.handle(RunEnded(id="end", run="r1", reason="test", duration_ms=2000), ctx(2010, RUN))
    speech, after = rms(sink.finished["r1"], (0.25, 0.65), (0.8, 1.9))
    assert 0.1 < speech < 0.5 and after < 0.01, (speech, after)
    assert "did not arrive" not in caplog.text
