"""MP4 sink: H.264 video and AAC audio through PyAV, written to a .part file renamed on close."""

from __future__ import annotations

import os
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import Any

import av
import numpy as np
from av.video.frame import PictureType
from av.video.reformatter import VideoReformatter

_AAC_FRAME = 1024  # samples per AAC frame; the encoder refuses other sizes except the last
_AUDIO_BITRATE = 64_000  # mono speech at 22.05 kHz needs no more


class Mp4Writer:
    """Writes H.264 video and AAC audio into an MP4 file."""

    def __init__(self, path: str | Path, width: int, height: int, fps: int = 25, sample_rate: int = 22050,
                 crf: int = 23, preset: str = "veryfast", keyint: int | None = None,
                 maxrate_kbps: int | None = None, threads: int = 0) -> None:
        if width <= 0 or height <= 0 or width % 2 or height % 2:
            raise ValueError(f"yuv420p needs even positive width and height, got {width}x{height}")
        self._path = Path(path)
        self._part = self._path.with_name(self._path.name + ".part")
        self._size = (width, height)
        self._rate = sample_rate
        self._frames = 0
        self._samples = 0
        self._odd = b""  # half a sample left over from an odd-length write
        self._closed = False
        self._container = av.open(str(self._part), mode="w", format="mp4")
        try:
            video = self._container.add_stream("libx264", rate=fps)
            video.width, video.height, video.pix_fmt = width, height, "yuv420p"
            video.codec_context.time_base = Fraction(1, fps)
            video.codec_context.color_range = 1  # MPEG (limited): what every player assumes
            video.options = {"crf": str(crf), "preset": preset}
            if keyint is not None:  # a live output joins, and resumes after a drop, at a keyframe
                video.options |= {"g": str(keyint), "keyint_min": str(keyint), "sc_threshold": "0"}
            if maxrate_kbps is not None:  # capped CRF: the quality of CRF within an ingest's bitrate
                video.options |= {"maxrate": f"{maxrate_kbps}k", "bufsize": f"{2 * maxrate_kbps}k"}
            # 0: x264 picks (1.5 frame threads a core): a frame's wall time is shortest, but its CPU
            # time 16% longer than on one thread (480p veryfast: 5.88 against 5.07 ms, medians of
            # 5), where many shows share the cores.
            video.thread_count = threads
            audio = self._container.add_stream("aac", rate=sample_rate)
            audio.codec_context.layout = "mono"
            audio.codec_context.bit_rate = _AUDIO_BITRATE
        except Exception:
            self._container.close()
            self._part.unlink(missing_ok=True)
            raise
        self._video, self._audio = video, audio
        self._vtb = Fraction(1, fps)
        self._atb = Fraction(1, sample_rate)
        # The resampler also re-chunks arbitrary writes into AAC-sized frames, buffering the rest.
        self._resampler = av.AudioResampler(format="fltp", layout="mono", rate=sample_rate,
                                            frame_size=_AAC_FRAME)
        self._taps: list[Callable[[str, list[av.Packet]], None]] = []
        self._jpeg = av.CodecContext.create("mjpeg", "r")
        self._jpeg.thread_count = 1  # one frame in, one frame out: no decoder delay
        self._scaler = VideoReformatter()

    @property
    def streams(self) -> tuple[Any, Any]:
        """The (video, audio) streams: templates for another container of the same packets."""
        return self._video, self._audio

    def tap(self, receiver: Callable[[str, list[av.Packet]], None]) -> None:
        """Also hand every encoded packet to ``receiver("video" | "audio", packets)`` before it
        is written (a live output copies them)."""
        self._taps.append(receiver)

    def _mux(self, stream: str, packets: list[av.Packet]) -> None:
        for receiver in self._taps:
            receiver(stream, packets)
        self._container.mux(packets)

    @property
    def path(self) -> Path:
        """Final file path (valid once closed)."""
        return self._path

    @property
    def frames(self) -> int:
        """Video frames written so far."""
        return self._frames

    @property
    def samples(self) -> int:
        """Audio samples written so far."""
        return self._samples

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self._path} is closed")

    def to_frame(self, image: bytes | np.ndarray | Any) -> av.VideoFrame:
        """Decodes or wraps image, then scales it to the writer's size in limited-range yuv420p."""
        if isinstance(image, bytes | bytearray | memoryview):
            # FFmpeg's mjpeg decoder measured ~3x faster than Pillow's at 720p here.
            frames = self._jpeg.decode(av.Packet(bytes(image)))
            if not frames:
                raise ValueError("JPEG did not decode to a frame")
            frame, src_range = frames[0], "JPEG"
        else:
            # A torch tensor (from the renderer) without importing torch here: a sink needs none.
            arr = image.detach().cpu().numpy() if hasattr(image, "detach") else image
            if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
                raise ValueError(f"need uint8 HxWx3, got {arr.dtype} {arr.shape}")
            frame, src_range = av.VideoFrame.from_ndarray(np.ascontiguousarray(arr), format="rgb24"), "MPEG"
        width, height = self._size
        return self._scaler.reformat(frame, width, height, format="yuv420p", src_color_range=src_range,
                                     dst_color_range="MPEG", threads=1)

    def write_frame(self, image: bytes | np.ndarray | Any) -> None:
        """Appends one video frame: JPEG bytes or uint8 HxWx3 RGB of any size."""
        self._check_open()
        frame = self.to_frame(image)
        frame.pts, frame.time_base = self._frames, self._vtb
        # Decoded JPEGs are tagged I; libx264 would then make every frame a keyframe (50x bigger, 2x slower).
        frame.pict_type = PictureType.NONE
        self._frames += 1
        self._mux("video", self._video.encode(frame))

    def write_audio(self, pcm: bytes) -> None:
        """Appends s16le mono PCM at the writer's sample rate to the audio timeline."""
        self._check_open()
        data = self._odd + bytes(pcm)
        cut = len(data) - len(data) % 2
        self._odd = data[cut:]
        if cut == 0:
            return
        samples = np.frombuffer(data[:cut], dtype="<i2").reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = self._rate
        self._encode_audio(frame)

    def _encode_audio(self, frame: av.AudioFrame | None) -> None:
        """Resamples frame (None flushes) and encodes the chunks with pts counted in samples."""
        for chunk in self._resampler.resample(frame):
            # pts by sample count keeps audio continuous, hence in sync with frame-count video.
            chunk.pts, chunk.time_base = self._samples, self._atb
            self._samples += chunk.samples
            self._mux("audio", self._audio.encode(chunk))

    def close(self) -> None:
        """Flushes both encoders, finishes the file and renames it from .part; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._encode_audio(None)
            self._mux("audio", self._audio.encode(None))
            self._mux("video", self._video.encode(None))
            # PyAV writes the header with the first packet; an empty show still gets a file.
            self._container.start_encoding()
        finally:
            self._container.close()
        os.replace(self._part, self._path)

    def __enter__(self) -> Mp4Writer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # Finish the file even after an error: what was written is still a playable show.
        self.close()
