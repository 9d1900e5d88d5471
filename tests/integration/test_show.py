"""The whole show on a real nats-server: video, audio, lip-sync and the store."""

from __future__ import annotations

import av
import numpy as np
import orjson
import pytest
from sqlalchemy import func, select

from app.shows import load_show
from app.summary import summarise
from events import codec
from schedulers.stage import StagePolicy
from store.recorder import read_events
from store.schema import events as events_table

pytestmark = pytest.mark.timeout(240)


def media_durations(path: str) -> dict[str, float]:
    with av.open(path) as container:
        out = {}
        for stream in container.streams:
            out[stream.type] = float(stream.duration * stream.time_base)
        return out


def audio_energy_per_frame(path: str, fps: int = 25) -> np.ndarray:
    """RMS of the MP4's audio in each video frame's interval."""
    with av.open(path) as container:
        stream = container.streams.audio[0]
        rate = stream.codec_context.sample_rate
        samples = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(stream)])
    per = rate // fps
    n = len(samples) // per
    return np.sqrt((samples[: n * per].reshape(n, per) ** 2).mean(axis=1))


async def test_the_video_and_its_audio_last_the_show(demo) -> None:  # type: ignore[no-untyped-def]
    _, result, _, _ = demo
    assert result.mp4 is not None and result.mp4.exists()
    durations = media_durations(str(result.mp4))
    assert abs(durations["video"] - 20.0) < 0.1
    assert abs(durations["audio"] - 20.0) < 0.15
    with av.open(str(result.mp4)) as container:
        video = container.streams.video[0]
        assert video.frames == 500  # 20 s x 25 fps: frames the renderer skipped are repeated
        assert (video.codec_context.name, video.codec_context.height) == ("h264", 720)
        assert int(video.average_rate) == 25
        assert container.streams.audio[0].codec_context.name == "aac"


async def test_mouths_move_with_the_speech_and_rest_in_silence(demo) -> None:  # type: ignore[no-untyped-def]
    _, result, engine, _ = demo
    energy = audio_energy_per_frame(str(result.mp4))
    query = select(events_table.c.body).where(events_table.c.run == result.run, events_table.c.type == "frame.rendered")
    open_mouth = {}
    with engine.connect() as conn:
        for (body,) in conn.execute(query):
            doc = orjson.loads(codec.split(body)[0])
            marks = doc["payload"]["speaking"]
            open_mouth[doc["payload"]["n"]] = any(m["viseme"] != "sil" for m in marks)
    frames = [n for n in sorted(open_mouth) if n < len(energy)]
    loud = 0.02 * float(energy.max())
    talking = [n for n in frames if open_mouth[n]]
    silent = [n for n in frames if energy[n] < 1e-4]
    assert len(talking) > 50 and len(silent) >= 10, (len(talking), len(silent), len(frames))
    # A mouth shaped by a viseme has sound under it; near-silence has closed mouths.
    assert np.mean([energy[n] > loud for n in talking]) > 0.9, np.mean([energy[n] > loud for n in talking])
    assert np.mean([not open_mouth[n] for n in silent]) > 0.95, [n for n in silent if open_mouth[n]]


async def test_every_cue_is_spoken_and_nothing_is_recorded_twice(demo) -> None:  # type: ignore[no-untyped-def]
    _, result, engine, stream_counts = demo
    recorded = read_events(engine, result.run)
    ids = [e.id for e in recorded]
    assert len(ids) == len(set(ids))
    by_family: dict[str, int] = {}
    for e in recorded:
        by_family[e.type.split(".")[0]] = by_family.get(e.type.split(".")[0], 0) + 1
    assert {k: v for k, v in by_family.items()} == {k: v for k, v in stream_counts.items() if v}
    cues = [e for e in recorded if e.type == "cue.issued"]
    assert len(cues) >= 5
    for cue in cues:
        mine = [e for e in recorded if getattr(e, "utterance", None) == cue.id]
        assert any(e.type == "utterance.completed" for e in mine), cue
        assert any(e.type == "audio.chunk" and e.last for e in mine), cue  # type: ignore[attr-defined]
        # Spoken to its end, or given up on purpose (it could not start by its deadline, or
        # would run past the show's end), with the reason.
        dropped = [e for e in mine if e.type == "utterance.dropped"]
        assert any(e.type == "viseme.track" and e.last for e in mine) or dropped, cue  # type: ignore[attr-defined]
        assert all(e.reason for e in dropped)  # type: ignore[attr-defined]


async def test_the_summary_reports_what_happened(demo) -> None:  # type: ignore[no-untyped-def]
    _, result, engine, _ = demo
    summary = summarise(engine, result.run, str(result.mp4))
    # Exactly the frames of 20 s at 25 fps are due (n = 0..499, never 500); the last is always
    # drawn, and a frame may be skipped when the renderer falls behind (the video repeats one).
    assert summary["frames"]["expected"] == 500
    drawn = [e.n for e in read_events(engine, result.run, ["frame.rendered"])]  # type: ignore[attr-defined]
    assert len(drawn) == len(set(drawn)) == summary["events"]["frame.rendered"] == summary["frames"]["rendered"]
    assert set(drawn) <= set(range(500)) and 499 in drawn
    # At most a second's worth skipped: with the cores busy the first frames go by while the
    # renderer builds its sprites (up to 9 seen), and a starved moment may cost one or two more.
    assert len(drawn) >= 475, f"{500 - len(drawn)} of 500 frames skipped"
    assert summary["rejected"] == 1, summary  # the blocklisted line of the demo script
    assert summary["merged"] == 1, summary    # two viewers asked Rex the same thing
    lat = summary["latency_ms"]
    assert lat["danmaku_to_first_audio"]["n"] == summary["danmaku"]["answered"], summary  # each answered is heard
    air = summary["airtime"]  # the show speaks by itself between the comments: its rundown's lines too
    assert air["own_lines"]["verbatim_said"] == [load_show().segments[0].lines[0].text], air
    # The share depends on which scripted replies the run's ids pick (short or long): 0.55 to 0.76
    # measured over runs of the demo, idle and loaded.  The silences are what the show controls,
    # up to its last seconds: nothing starts there that would not end before the show does (the
    # director plans from estimated lengths: a reply shorter than planned can leave the tail quiet).
    assert air["speaking_share"] > 0.45, air
    tracks = read_events(engine, result.run, ["viseme.track"])
    spans = sorted((t.start_ms, t.end_ms) for t in tracks)  # type: ignore[attr-defined]
    gaps, reach = [], 0
    for start, end in spans:
        if start >= 15_000:
            break
        gaps.append(start - reach)
        reach = max(reach, end)
    assert max(gaps) < 5000, (gaps, air)
    # A comment waits for the floor (the director's stage budget) at most its class's limit; once
    # its role is cued, the speech starts within a second (quiet or busy: under 50 ms).
    assert lat["danmaku_to_first_audio"]["p99"] <= max(StagePolicy().wait_ms) + 1000, lat
    recorded = read_events(engine, result.run, ["cue.issued", "audio.chunk"])
    first_audio: dict[str, int] = {}
    for e in recorded:
        if e.type == "audio.chunk" and e.correlation:
            first_audio[e.correlation] = min(e.at_ms, first_audio.get(e.correlation, e.at_ms))
    cued = {e.correlation: e.at_ms for e in recorded if e.type == "cue.issued"}
    assert cued and all(first_audio[c] - at < 1000 for c, at in cued.items()), (cued, first_audio)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(events_table)).scalar_one() >= sum(summary["events"].values())
