"""An interrupted reply: the renderer stops its mouth and the sink its audio at the cut."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

from actors.backends.render_torch import encode_jpeg
from actors.kernel import ListFeed
from actors.render import RenderActor
from actors.sink import SAMPLE_RATE, SinkActor
from events.audio import AudioChunk, PhonemeMark
from events.frame import FrameRendered
from events.run import RunEnded
from events.viseme import VisemeCut, VisemeMark, VisemeTrack
from infra.settings import load_settings
from tests.showkit import demo_run


def track(start: int, end: int, audio: str = "a1", utterance: str = "u1") -> VisemeTrack:
    return VisemeTrack(id=f"t-{audio}", run="r1", role="host", correlation="c1", utterance=utterance, audio=audio,
                       seq=0, start_ms=start, end_ms=end, text="hello there",
                       visemes=(VisemeMark("aa", start, end),))


def test_the_renderer_stops_the_mouth_at_the_cut(tmp_path: Path) -> None:
    run = demo_run("r1", resolution="360p")
    feed = ListFeed(RenderActor(load_settings(environ={}, out_dir=tmp_path)), run)
    feed.handle(run, at_ms=0)
    feed.handle(track(0, 2000), at_ms=10)
    feed.handle(VisemeCut(id="cut", run="r1", utterance="u1", at_ms=400, by="gift"), at_ms=400)
    feed.handle(track(2000, 3000, audio="a2"), at_ms=410)  # placed before the cut was known
    frames = {e.n: e for e in feed.advance(2500) if isinstance(e, FrameRendered)}  # all drawn after the cut came
    speaking = {n: bool(frames[n].speaking) for n in (5, 9, 10, 11, 60)}  # 200, 360, 400, 440 and 2400 ms
    assert speaking == {5: True, 9: True, 10: False, 11: False, 60: False}


def test_the_sink_stops_the_audio_at_the_cut(tmp_path: Path) -> None:
    run = demo_run("r1", resolution="360p")
    feed = ListFeed(SinkActor(load_settings(environ={}, out_dir=tmp_path)), run)
    feed.handle(run, at_ms=0)
    pcm = (np.full(SAMPLE_RATE, 8000, dtype="<i2")).tobytes()  # one second of loud sound
    chunk = AudioChunk(id="a1", run="r1", role="host", utterance="u1", seq=0, sample_rate=SAMPLE_RATE,
                       offset_ms=0, duration_ms=1000, text="x", phonemes=(PhonemeMark("a", 0, 1000),), pcm=pcm)
    feed.handle(chunk, at_ms=0)
    feed.handle(track(0, 1000), at_ms=0)
    feed.handle(VisemeCut(id="cut", run="r1", utterance="u1", at_ms=400, by="gift"), at_ms=0)
    jpeg = encode_jpeg(np.zeros((360, 640, 3), dtype=np.uint8))  # a still picture will do
    for n in range(50):
        feed.handle(FrameRendered(id=f"f{n}", run="r1", t_ms=n * 40, n=n, width=640, height=360,
                                  resolution="360p", jpeg=jpeg), at_ms=0)
    feed.handle(RunEnded(id="end", run="r1", reason="test", duration_ms=2000), at_ms=0)
    mux = feed.state()
    feed.release()  # the run dropped: its file finished, if it was not yet
    assert mux.finished is not None
    with av.open(str(mux.finished)) as container:
        samples = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
        rate = container.streams.audio[0].codec_context.sample_rate
    rms = [float(np.sqrt(np.mean(samples[int(a * rate):int(b * rate)] ** 2))) for a, b in ((0.1, 0.3), (0.5, 0.9))]
    assert rms[0] > 0.1 and rms[1] < 0.01, rms
