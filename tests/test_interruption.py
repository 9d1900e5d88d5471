"""An interrupted reply: the renderer stops its mouth and the sink its audio at the cut."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

from actors.backends.render_torch import encode_jpeg
from actors.kernel import ListFeed
from actors.render import Redrawer, RenderActor
from actors.sink import SAMPLE_RATE, SinkActor
from actors.visemes import apply_cuts, as_drawn
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


def test_frames_drawn_before_the_cut_came_are_redrawn_as_they_were_drawn(tmp_path: Path) -> None:
    # Frames at 200-440 ms drawn while the track was whole; the cut at 400 ms arrives after them
    # (a loaded renderer, a takeover): each frame says where its track ended as drawn, and
    # re-execution and export redraw it so, not with the cut that came later.
    run = demo_run("r1", resolution="360p")
    feed = ListFeed(RenderActor(load_settings(environ={}, out_dir=tmp_path)), run)
    feed.handle(run, at_ms=0)
    whole = track(0, 2000)
    feed.handle(whole, at_ms=10)
    before = {e.n: e for e in feed.advance(480) if isinstance(e, FrameRendered)}
    cut = VisemeCut(id="cut", run="r1", utterance="u1", at_ms=400, by="gift")
    feed.handle(cut, at_ms=500)
    after = {e.n: e for e in feed.advance(800) if isinstance(e, FrameRendered)}
    assert before[11].speaking and before[11].track_end_ms == 2000  # 440 ms, drawn before the cut came
    assert not after[15].speaking and after[15].track is None  # 600 ms, drawn after: the reply is over
    tracks, cuts = {whole.id: whole}, apply_cuts([whole], [cut])
    redraw = Redrawer(run, load_settings(environ={}, out_dir=tmp_path))
    for frame in (before[11], after[15]):
        again = redraw.draw(frame.n, as_drawn(frame.track, frame.track_end_ms, tracks, cuts), frame.resolution,
                            frame.faces, frame.background)
        assert again.jpeg == frame.jpeg and again.speaking == frame.speaking, frame.n
    # With the cut that came later applied, frame 11 would be drawn silent: not what viewers saw.
    assert not redraw.draw(11, cuts.get(whole.id), "360p", before[11].faces).speaking
    # A frame recorded before frames said where their track ended: the recorded cuts apply.
    assert as_drawn(whole.id, None, tracks, cuts) == cuts[whole.id]


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
