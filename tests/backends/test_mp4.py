"""MP4 writer: H.264 + AAC timing, scaling of odd-sized frames, .part handling, close semantics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import torch

from actors.backends.mp4 import Mp4Writer
from actors.backends.protocols import RoleLook, RoleState
from actors.backends.render_torch import StageRenderer, encode_jpeg

RATE = 22050
LOOKS = (RoleLook("a", "Ann", "#e0603a", "round"), RoleLook("b", "Ben", "#3a8ee0", "square"))


def sine(seconds: float, hz: float = 440.0) -> bytes:
    t = np.arange(round(seconds * RATE)) / RATE
    return (np.sin(2 * np.pi * hz * t) * 0.3 * 32767).astype("<i2").tobytes()


def seconds(stream: av.stream.Stream) -> float:
    assert stream.duration is not None and stream.time_base is not None
    return float(stream.duration * stream.time_base)


def probe(path: Path) -> dict[str, Any]:
    """Stream facts plus every decoded video frame's size and the audio sample count."""
    with av.open(str(path)) as container:
        video = container.streams.video[0]
        facts: dict[str, Any] = {
            "vcodec": video.codec_context.name, "rate": video.average_rate,
            "vduration": seconds(video), "audio": bool(container.streams.audio),
        }
        if container.streams.audio:
            audio = container.streams.audio[0]
            facts.update(acodec=audio.codec_context.name, arate=audio.sample_rate,
                         channels=audio.codec_context.channels,
                         aduration=seconds(audio))
        sizes, samples, first = [], 0, None
        for frame in container.decode(*container.streams):
            if isinstance(frame, av.VideoFrame):
                sizes.append((frame.width, frame.height))
                if first is None:
                    first = frame.to_ndarray(format="rgb24")
            else:
                samples += frame.samples
        facts.update(sizes=sizes, samples=samples, first=first)
    return facts


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    stage = StageRenderer(LOOKS, "360p")
    return [encode_jpeg(stage.draw(i * 40, [RoleState("a", ("sil", "aa", "oh")[i % 3], True)], f"line {i // 10}"))
            for i in range(50)]


def test_two_seconds_of_video_and_audio(tmp_path: Path, jpegs: list[bytes]) -> None:
    out = tmp_path / "show.mp4"
    writer = Mp4Writer(out, 640, 360, fps=25, sample_rate=RATE)
    pcm = sine(2.0)
    for i, jpeg in enumerate(jpegs):
        writer.write_frame(jpeg)
        writer.write_audio(pcm[i * 1764:(i + 1) * 1764])  # 882 samples = one frame of audio
    assert not out.exists()
    writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["show.mp4"]
    facts = probe(out)
    assert facts["vcodec"] == "h264" and facts["rate"] == 25
    assert facts["sizes"] == [(640, 360)] * 50
    assert facts["vduration"] == pytest.approx(2.0, abs=0.05)
    assert facts["acodec"] == "aac" and facts["arate"] == RATE and facts["channels"] == 1
    assert facts["aduration"] == pytest.approx(2.0, abs=0.1)
    assert facts["samples"] == pytest.approx(2 * RATE, abs=2048)  # AAC priming/padding only
    assert writer.frames == 50 and writer.samples == 2 * RATE


def test_ragged_audio_writes_stay_continuous(tmp_path: Path) -> None:
    pcm = sine(1.5)
    cuts = [0, 1, 2, 777, 778, 5000, 5001, 20000, len(pcm)]  # odd cuts split samples in half
    with Mp4Writer(tmp_path / "a.mp4", 64, 64) as writer:
        for _ in range(38):
            writer.write_frame(np.zeros((64, 64, 3), np.uint8))
        for a, b in zip(cuts, cuts[1:], strict=False):
            writer.write_audio(pcm[a:b])
    assert writer.samples == round(1.5 * RATE)
    assert probe(tmp_path / "a.mp4")["aduration"] == pytest.approx(1.5, abs=0.1)


def test_frames_of_any_size_are_scaled(tmp_path: Path, jpegs: list[bytes]) -> None:
    grey = np.full((180, 320, 3), 128, np.uint8)
    big = np.zeros((720, 1280, 3), np.uint8)
    big[..., 0] = 200
    with Mp4Writer(tmp_path / "s.mp4", 640, 360) as writer:
        writer.write_frame(encode_jpeg(big))  # JPEG, larger than the writer
        writer.write_frame(torch.from_numpy(grey))  # tensor, smaller
        writer.write_frame(grey)
        writer.write_frame(jpegs[0])
    facts = probe(tmp_path / "s.mp4")
    assert not facts["audio"]  # the MP4 muxer leaves out a stream that got no packets
    assert facts["sizes"] == [(640, 360)] * 4
    # full-range JPEG is mapped to limited-range video and back: red stays red
    red = facts["first"].reshape(-1, 3).mean(axis=0)
    assert red == pytest.approx([200, 0, 0], abs=8)


def test_close_twice_and_write_after_close(tmp_path: Path) -> None:
    writer = Mp4Writer(tmp_path / "c.mp4", 64, 64)
    writer.write_frame(np.zeros((64, 64, 3), np.uint8))
    writer.close()
    writer.close()
    with pytest.raises(RuntimeError):
        writer.write_frame(np.zeros((64, 64, 3), np.uint8))
    assert (tmp_path / "c.mp4").exists() and not (tmp_path / "c.mp4.part").exists()


def test_empty_show_still_makes_a_file(tmp_path: Path) -> None:
    with Mp4Writer(tmp_path / "e.mp4", 64, 64):
        pass
    assert (tmp_path / "e.mp4").exists()


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Mp4Writer(tmp_path / "odd.mp4", 65, 64)
    with Mp4Writer(tmp_path / "b.mp4", 64, 64) as writer, pytest.raises(ValueError):
        writer.write_frame(np.zeros((64, 64), np.uint8))
