"""Sink actor: muxes the stage frames and the placed speech into ``<out>/<run>.mp4``.

Audio is laid on a timeline by ``viseme.track.start_ms`` (where lipsync put each
chunk) and written a little behind the video, so that speech placed just before
a frame was drawn is never missed.  Frames the renderer skipped are repeated, so
the video keeps the show clock.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from actors.backends.mp4 import Mp4Writer
from actors.backends.render_torch import RESOLUTIONS
from actors.base import Actor, Context, Input
from events.audio import AudioChunk
from events.base import Event
from events.frame import FrameRendered
from events.run import RunEnded, RunStarted
from events.viseme import VisemeCut, VisemeTrack
from infra.settings import Settings

log = logging.getLogger(__name__)
SAMPLE_RATE = 22050
AUDIO_LAG_MS = 600


@dataclass(slots=True)
class _Mux:
    writer: Mp4Writer
    path: Path
    fps: int
    frames_written: int = 0
    last_frame: bytes | None = None
    pending_frames: dict[int, bytes] = field(default_factory=dict)
    pcm: dict[str, np.ndarray] = field(default_factory=dict)
    placements: list[tuple[int, str, int | None]] = field(default_factory=list)  # start, audio, stop
    utterances: dict[str, str] = field(default_factory=dict)  # audio id -> utterance
    cuts: dict[str, int] = field(default_factory=dict)        # interrupted utterance -> stop (show ms)
    samples_written: int = 0
    end_ms: int | None = None
    closed: bool = False


class SinkActor(Actor):
    """Frames and audio in, an MP4 file out."""

    name = "sink"
    inputs = (Input("run"), Input("frame"), Input("viseme"), Input("audio"))
    plays_replays = True  # a playback is written to its own MP4
    blocking = True

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._muxes: dict[str, _Mux] = {}
        self.finished: dict[str, Path] = {}

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        if isinstance(event, RunStarted):
            if ctx.joinable(self.settings.join_window_s):
                self._open(event)
            else:  # a run long under way (or long over): its start cannot be recorded any more
                log.warning("not writing run %s: it started %d s ago", event.run, ctx.now_ms // 1000)
            return ()
        mux = self._muxes.get(event.run)
        if mux is None or mux.closed:
            return ()
        if isinstance(event, FrameRendered):
            mux.pending_frames[event.n] = event.jpeg
            self._write_frames(mux)
        elif isinstance(event, AudioChunk):
            mux.pcm[event.id] = _as_rate(event.pcm, event.sample_rate)
        elif isinstance(event, VisemeTrack):
            stop = mux.cuts.get(event.utterance)
            if stop is None or event.start_ms < stop:
                mux.placements.append((event.start_ms, event.audio, stop))
                mux.utterances[event.audio] = event.utterance
        elif isinstance(event, VisemeCut):
            mux.cuts[event.utterance] = event.at_ms
            mux.placements = [
                (start, audio, event.at_ms if mux.utterances.get(audio) == event.utterance else stop)
                for start, audio, stop in mux.placements
                if mux.utterances.get(audio) != event.utterance or start < event.at_ms
            ]
        elif isinstance(event, RunEnded):
            mux.end_ms = event.duration_ms
        self._maybe_finish(event.run, mux)
        return ()

    def _open(self, run: RunStarted) -> None:
        if run.run in self._muxes:
            return
        width, height = RESOLUTIONS[run.resolution]
        out = Path(self.settings.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{run.run}.mp4"
        writer = Mp4Writer(path, width, height, run.fps, SAMPLE_RATE, self.settings.video_crf, self.settings.video_preset)
        self._muxes[run.run] = _Mux(writer, path, run.fps)

    def _write_frames(self, mux: _Mux) -> None:
        limit = None if mux.end_ms is None else mux.end_ms * mux.fps // 1000
        while mux.pending_frames:
            if limit is not None and mux.frames_written >= limit:
                mux.pending_frames.clear()
                break
            jpeg = mux.pending_frames.pop(mux.frames_written, None)
            if jpeg is None:
                if min(mux.pending_frames) < mux.frames_written:
                    for stale in [n for n in mux.pending_frames if n < mux.frames_written]:
                        del mux.pending_frames[stale]
                    continue
                # The renderer skipped this frame (frames arrive in order): hold the picture,
                # or show the first one early when the show opened with a skip.
                jpeg = mux.last_frame or mux.pending_frames[min(mux.pending_frames)]
            mux.writer.write_frame(jpeg)
            mux.last_frame = jpeg
            mux.frames_written += 1
        video_ms = mux.frames_written * 1000 // mux.fps
        self._write_audio(mux, video_ms - AUDIO_LAG_MS)

    def _write_audio(self, mux: _Mux, until_ms: int) -> None:
        until = max(0, until_ms) * SAMPLE_RATE // 1000
        if until <= mux.samples_written:
            return
        start = mux.samples_written
        block = np.zeros(until - start, dtype=np.int32)
        keep: list[tuple[int, str, int | None]] = []
        for start_ms, audio_id, stop_ms in mux.placements:
            pcm = mux.pcm.get(audio_id)
            at = start_ms * SAMPLE_RATE // 1000
            if pcm is None:
                keep.append((start_ms, audio_id, stop_ms))
                if at < start:
                    log.warning("audio %s arrived too late for the mux; its place stays silent", audio_id)
                continue
            end = at + len(pcm)
            if stop_ms is not None:  # an interrupted utterance: its audio stops with its mouth
                end = min(end, stop_ms * SAMPLE_RATE // 1000)
            lo, hi = max(at, start), min(end, until)
            if hi > lo:
                block[lo - start : hi - start] += pcm[lo - at : hi - at]
            if end > until:
                keep.append((start_ms, audio_id, stop_ms))
            else:
                del mux.pcm[audio_id]
        mux.placements = keep
        mux.writer.write_audio(np.clip(block, -32768, 32767).astype("<i2").tobytes())
        mux.samples_written = until

    def _maybe_finish(self, run: str, mux: _Mux) -> None:
        if mux.end_ms is None:
            return
        if mux.frames_written * 1000 // mux.fps >= mux.end_ms - 1:
            self._finish(run, mux)

    def _finish(self, run: str, mux: _Mux) -> None:
        if mux.closed:
            return
        if mux.end_ms is not None and mux.last_frame is not None:
            while mux.frames_written * 1000 // mux.fps < mux.end_ms:
                mux.writer.write_frame(mux.last_frame)
                mux.frames_written += 1
        self._write_audio(mux, mux.frames_written * 1000 // mux.fps)
        mux.writer.close()
        mux.closed = True
        self.finished[run] = mux.path

    def close(self) -> None:
        for run, mux in self._muxes.items():
            try:
                self._finish(run, mux)
            except Exception:  # noqa: BLE001 - one bad file must not stop the others closing
                log.exception("closing the video of %s failed", run)


def _as_rate(pcm: bytes, rate: int) -> np.ndarray:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.int32)
    if rate == SAMPLE_RATE or len(samples) == 0:
        return samples
    n = len(samples) * SAMPLE_RATE // rate
    return np.interp(np.linspace(0, len(samples) - 1, n), np.arange(len(samples)), samples).astype(np.int32)
