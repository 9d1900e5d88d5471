"""Sink actor: muxes the stage frames and the placed speech into ``<out>/<run>.mp4``.

Audio is laid on a timeline by ``viseme.track.start_ms`` (where lipsync put each
chunk) and written a little behind the video, so that speech placed just before
a frame was drawn is never missed.  When a chunk's place is known but its PCM has
not come (a backlog on the audio stream), the audio waits at that place, a bounded
while, so that the speech lands under the moving mouth; past the bound the place is
written as silence and logged.  Frames the renderer skipped are repeated, so the
video keeps the show clock.

Live outputs (``TROUPE_RTMP_URL``, ``TROUPE_HLS_DIR``) get the same encoded packets as the
MP4 as they are made (``actors.backends.live``): each connection, drop and end is an
``output.*`` event; they never block the sink and never affect the file.

A sink that takes over a run on air (a standby, the process that ran it killed) goes on from
the first frame it is given: the live outputs carry on from there (an HLS playlist is
appended to, after a discontinuity), and the video from there is written to
``<run>.from-frame-<n>.mp4``.  The MP4 the dead process was writing is not recoverable (it
has no index until it is closed); ``troupe export`` writes the whole show again from the store.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from actors.backends.live import LiveOutput, Status
from actors.backends.mp4 import Mp4Writer
from actors.base import ClockedActor, Context
from actors.render import frame_count
from events.audio import AudioChunk
from events.base import Event
from events.frame import FrameRendered
from events.output import OutputClosed, OutputConnected, OutputDropped
from events.run import RunEnded, RunStarted
from events.show import RESOLUTIONS
from events.viseme import VisemeCut, VisemeTrack
from infra.settings import Settings

log = logging.getLogger(__name__)
SAMPLE_RATE = 22050
AUDIO_LAG_MS = 600
# With a backlog on the audio stream a chunk can reach the sink after lipsync's placement of it:
# the audio then waits at that place for up to this long (show-clock ms since it began waiting)
# before the place is written as silence.
AUDIO_WAIT_MS = 4000
# The most the audio may fall behind the video while it waits: bounds what the sink (and the
# muxer's interleaving queue, flushed by libavformat after 10 s) holds.
AUDIO_HOLD_MAX_MS = 8000
# Chunks not placed yet that are kept (about a minute of speech); a chunk lipsync never places
# (its reply was cut) is dropped, oldest first, beyond that.
UNPLACED_MAX = 128


@dataclass(frozen=True, slots=True)
class _Placed:
    """A chunk's place on the show timeline, as lipsync decided it."""

    start_ms: int
    end_ms: int
    audio: str
    stop_ms: int | None = None  # an interrupted utterance's audio stops here


@dataclass(slots=True)
class _Mux:
    """What the sink keeps for one run (``open_run``): the file it writes and the media waiting for it."""

    run: RunStarted
    path: Path
    fps: int
    writer: Mp4Writer | None = None  # opened by the run's start; taken over, at the first frame given
    joined: bool = False    # the run's start was taken in time: its media is written (else ignored)
    resuming: bool = False  # taken over: the video opens at the first frame given
    frames_written: int = 0
    last_frame: bytes | None = None
    pending_frames: dict[int, bytes] = field(default_factory=dict)
    pcm: dict[str, np.ndarray] = field(default_factory=dict)
    unplaced: dict[str, None] = field(default_factory=dict)   # audio ids with PCM, no place yet, oldest first
    placements: list[_Placed] = field(default_factory=list)
    utterances: dict[str, str] = field(default_factory=dict)  # audio id -> utterance, for every chunk placed
    spent: set[str] = field(default_factory=set)              # audio ids written, cut or given up
    cuts: dict[str, int] = field(default_factory=dict)        # interrupted utterance -> stop (show ms)
    samples_written: int = 0
    hold_at: int | None = None       # the audio waits at this sample for a placed chunk's PCM ...
    hold_since_ms: int | None = None  # ... since this show time
    silenced: int = 0                 # placed chunks whose PCM came too late: their place is silent
    end_ms: int | None = None
    closed: bool = False
    outputs: list[LiveOutput] = field(default_factory=list)
    reported: int = 0  # output events emitted (their ids count)
    resumed_at: int | None = None  # taken over: the first frame this sink wrote (in its events' ids)
    closing: list[Event] = field(default_factory=list)  # the outputs' last events, once finished
    finished: Path | None = None  # the file, once finished


class SinkActor(ClockedActor):
    """Frames and audio in, an MP4 file out."""

    name = "sink"
    consumes = (RunStarted, RunEnded, FrameRendered, VisemeTrack, VisemeCut, AudioChunk)
    emits = (OutputConnected, OutputDropped, OutputClosed)
    plays_replays = True  # a playback is written to its own MP4
    blocking = True
    takes_over = True
    rebuild_skips = frozenset({"frame"})  # taken over, it goes on from the next frame

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.nice = settings.sink_nice

    def open_run(self, run: RunStarted, settings: Settings) -> _Mux:
        """Nothing is opened yet: the run's start opens the file (taken over: its first frame)."""
        return _Mux(run, Path(self.settings.out_dir) / f"{run.run}.mp4", run.fps)

    def close_run(self, state: _Mux) -> None:
        """A video still open (a run that never ended) is finished with what it has."""
        if not state.closed:
            self._finish(state, 0)

    def taking_over(self, state: _Mux) -> None:
        state.resuming = True

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        mux: _Mux | None = ctx.state
        if mux is None:  # a run the kernel does not hold
            return ()
        if isinstance(event, RunStarted):
            if mux.joined:  # a redelivery
                return ()
            if ctx.joinable(self.settings.join_window_s):
                mux.joined = True
                if not mux.resuming:
                    self._start_video(mux, mux.path)
            else:  # a run long under way (or long over): its start cannot be recorded any more
                log.warning("not writing run %s: it started %d s ago", event.run, ctx.now_ms // 1000)
            return ()
        if not mux.joined or mux.closed:
            return self._reports(mux, ctx.now_ms)
        if isinstance(event, FrameRendered):
            mux.pending_frames[event.n] = event.jpeg
            self._write_frames(mux)
        elif isinstance(event, AudioChunk):
            self._take_audio(mux, event)
        elif isinstance(event, VisemeTrack):
            self._place(mux, event)
        elif isinstance(event, VisemeCut):
            self._cut(mux, event)
        elif isinstance(event, RunEnded):
            mux.end_ms = event.duration_ms
        self._advance(mux, ctx.now_ms)
        self._maybe_finish(mux, ctx.now_ms)
        return self._reports(mux, ctx.now_ms)

    # A run whose audio waits for a chunk is clocked: when the wait runs out, the place is
    # written as silence (and the file finished) even if no other event comes.
    def next_tick(self, state: _Mux) -> int | None:
        if state.closed or state.hold_since_ms is None:
            return None
        return state.hold_since_ms + AUDIO_WAIT_MS

    def tick(self, ctx: Context) -> Sequence[Event]:
        mux: _Mux | None = ctx.state
        if mux is None:
            return ()
        if mux.joined and not mux.closed:
            self._advance(mux, ctx.now_ms)
            self._maybe_finish(mux, ctx.now_ms)
        return self._reports(mux, ctx.now_ms)

    def _reports(self, mux: _Mux, now_ms: int) -> list[Event]:
        """The live outputs' connections and drops since the last call, and their ends."""
        out: list[Event] = []
        for output in mux.outputs:
            for status in output.statuses():
                out.append(self._event(mux, output, status, now_ms))
        out += mux.closing
        mux.closing = []
        return out

    def _event(self, mux: _Mux, output: LiveOutput, status: Status | None, now_ms: int) -> Event:
        mux.reported += 1
        base = f"{mux.run.run}-output" if mux.resumed_at is None else f"{mux.run.run}-output-from{mux.resumed_at}"
        common: dict[str, Any] = {"id": f"{base}-{mux.reported}", "run": mux.run.run, "t_ms": now_ms,
                  "output": output.kind, "target": output.shown}
        if status is None:
            return OutputClosed(packets_sent=output.sent, packets_lost=output.lost, reconnects=output.reconnects,
                                **common)
        if status.kind == "connected":
            return OutputConnected(attempt=status.attempt, **common)
        return OutputDropped(reason=status.reason, retry_in_ms=status.retry_in_ms, **common)

    def _start_video(self, mux: _Mux, path: Path) -> None:
        """Open the video file and the live outputs, which get the same packets."""
        run = mux.run
        width, height = RESOLUTIONS[run.resolution]
        path.parent.mkdir(parents=True, exist_ok=True)
        targets: dict[str, str] = {}
        if self.settings.rtmp_url:
            targets["rtmp"] = self.settings.rtmp_url
        if self.settings.hls_dir is not None:
            targets["hls"] = str(Path(self.settings.hls_dir) / run.run / "index.m3u8")
        writer = mux.writer = Mp4Writer(
            path, width, height, run.fps, SAMPLE_RATE, self.settings.video_crf, self.settings.video_preset,
            keyint=round(self.settings.live_keyint_s * run.fps) if targets else None,
            maxrate_kbps=self.settings.live_bitrate_kbps if targets else None, threads=self.settings.video_threads,
        )
        mux.path = path
        for kind, target in targets.items():
            output = LiveOutput(kind, target, *writer.streams)
            writer.tap(output.offer)
            mux.outputs.append(output)

    def _resume(self, mux: _Mux) -> None:
        """Taken over: the video and the live outputs open at the first frame given; the speech
        placed before it is not written."""
        first = min(mux.pending_frames)
        mux.frames_written = mux.resumed_at = first
        mux.samples_written = _samples(first * 1000 // mux.fps)
        self._start_video(mux, mux.path.with_name(f"{mux.run.run}.from-frame-{first}.mp4"))
        log.warning("run %s taken over: its video goes on from frame %d in %s", mux.run.run, first, mux.path.name)

    def _forget_past(self, mux: _Mux, now_ms: int) -> None:
        """While a taken-over run waits for its first frame: speech that ended long before now is
        never written (its memory freed)."""
        kept = []
        for p in mux.placements:
            if p.end_ms < now_ms - AUDIO_HOLD_MAX_MS:
                mux.pcm.pop(p.audio, None)
                mux.spent.add(p.audio)
            else:
                kept.append(p)
        mux.placements = kept

    def _take_audio(self, mux: _Mux, chunk: AudioChunk) -> None:
        if chunk.id in mux.spent or chunk.id in mux.pcm:  # given up on, or a redelivery
            return
        mux.pcm[chunk.id] = as_rate(chunk.pcm, chunk.sample_rate)
        if chunk.id not in mux.utterances:
            mux.unplaced[chunk.id] = None
            if len(mux.unplaced) > UNPLACED_MAX:
                oldest = next(iter(mux.unplaced))
                del mux.unplaced[oldest]
                del mux.pcm[oldest]
                log.warning("audio %s was never placed on the timeline; dropped", oldest)

    def _place(self, mux: _Mux, track: VisemeTrack) -> None:
        if track.audio in mux.utterances:  # a redelivery
            return
        stop = mux.cuts.get(track.utterance)
        if stop is not None and track.start_ms >= stop:
            return
        mux.utterances[track.audio] = track.utterance
        mux.unplaced.pop(track.audio, None)
        written_ms = mux.samples_written * 1000 // SAMPLE_RATE
        if track.start_ms < written_ms:  # the placement itself came late (a backlog of tracks)
            log.warning("audio %s of run %s was placed at %d ms, after the audio there was written",
                        track.audio, mux.run.run, track.start_ms)
            if track.end_ms <= written_ms:
                mux.pcm.pop(track.audio, None)
                mux.spent.add(track.audio)
                mux.silenced += 1
                return
        mux.placements.append(_Placed(track.start_ms, track.end_ms, track.audio, stop))

    def _cut(self, mux: _Mux, cut: VisemeCut) -> None:
        mux.cuts[cut.utterance] = cut.at_ms
        kept = []
        for p in mux.placements:
            if mux.utterances.get(p.audio) != cut.utterance:
                kept.append(p)
            elif p.start_ms < cut.at_ms:
                kept.append(_Placed(p.start_ms, p.end_ms, p.audio, cut.at_ms))
            else:  # never heard: its mouth never moves
                mux.pcm.pop(p.audio, None)
                mux.spent.add(p.audio)
        mux.placements = kept

    def _write_frames(self, mux: _Mux) -> None:
        if mux.writer is None and mux.pending_frames:
            self._resume(mux)
        assert mux.writer is not None
        limit = None if mux.end_ms is None else frame_count(mux.end_ms, mux.fps)
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

    def _video_done(self, mux: _Mux) -> bool:
        return mux.end_ms is not None and mux.frames_written >= frame_count(mux.end_ms, mux.fps)

    def _advance(self, mux: _Mux, now_ms: int, final: bool = False) -> None:
        """Write the audio up to a little behind the video (all of it once the video is complete),
        waiting at the place of a placed chunk whose PCM has not arrived, within the bounds."""
        if mux.writer is None:  # taken over, no frame yet
            self._forget_past(mux, now_ms)
            return
        video_ms = mux.frames_written * 1000 // mux.fps
        until = max(0, video_ms if self._video_done(mux) else video_ms - AUDIO_LAG_MS) * SAMPLE_RATE // 1000
        held = self._awaited(mux, until)
        if held is not None:
            if held != mux.hold_at:
                mux.hold_at, mux.hold_since_ms = held, now_ms
            assert mux.hold_since_ms is not None
            behind_ms = video_ms - held * 1000 // SAMPLE_RATE
            if final or now_ms - mux.hold_since_ms >= AUDIO_WAIT_MS or behind_ms > AUDIO_HOLD_MAX_MS:
                self._give_up(mux, until)
                held = None
            else:
                until = held
        if held is None:
            mux.hold_at = mux.hold_since_ms = None
        if until > mux.samples_written:
            self._write_audio(mux, until)

    def _awaited(self, mux: _Mux, until: int) -> int | None:
        """The first sample before ``until`` not written yet that a placed chunk without PCM covers."""
        first = None
        for p in mux.placements:
            if p.audio in mux.pcm:
                continue
            lo, hi = _samples(p.start_ms), _samples(p.end_ms if p.stop_ms is None else min(p.end_ms, p.stop_ms))
            if hi <= mux.samples_written or lo >= until:
                continue
            at = max(lo, mux.samples_written)
            first = at if first is None else min(first, at)
        return first

    def _give_up(self, mux: _Mux, until: int) -> None:
        """Write the places before ``until`` of chunks whose PCM has not come as silence."""
        kept = []
        for p in mux.placements:
            if p.audio not in mux.pcm and _samples(p.start_ms) < until:
                mux.spent.add(p.audio)
                mux.silenced += 1
                log.warning("audio %s of run %s did not arrive while the mux waited at its place (%d ms); "
                            "its place stays silent", p.audio, mux.run.run, p.start_ms)
            else:
                kept.append(p)
        mux.placements = kept

    def _write_audio(self, mux: _Mux, until: int) -> None:
        start = mux.samples_written
        block = np.zeros(until - start, dtype=np.int32)
        keep: list[_Placed] = []
        for p in mux.placements:
            pcm = mux.pcm.get(p.audio)
            at = _samples(p.start_ms)
            if pcm is None:
                keep.append(p)
                continue
            end = at + len(pcm)
            if p.stop_ms is not None:  # an interrupted utterance: its audio stops with its mouth
                end = min(end, _samples(p.stop_ms))
            lo, hi = max(at, start), min(end, until)
            if hi > lo:
                block[lo - start : hi - start] += pcm[lo - at : hi - at]
            if end > until:  # the rest goes into a later block
                keep.append(p)
            else:
                del mux.pcm[p.audio]
                mux.spent.add(p.audio)
        mux.placements = keep
        assert mux.writer is not None
        mux.writer.write_audio(np.clip(block, -32768, 32767).astype("<i2").tobytes())
        mux.samples_written = until

    def _maybe_finish(self, mux: _Mux, now_ms: int) -> None:
        if self._video_done(mux) and mux.hold_since_ms is None:
            self._finish(mux, now_ms)

    def _finish(self, mux: _Mux, now_ms: int) -> None:
        if mux.closed:
            return
        run = mux.run.run
        if mux.writer is None:  # not joined, or taken over and closed before a frame came: no video
            mux.closed = True
            return
        if mux.end_ms is not None and mux.last_frame is not None:
            while mux.frames_written < frame_count(mux.end_ms, mux.fps):
                mux.writer.write_frame(mux.last_frame)
                mux.frames_written += 1
        if mux.end_ms is None:  # closed before the run ended: whatever video there is, audio to match
            mux.end_ms = mux.frames_written * 1000 // mux.fps
        self._advance(mux, now_ms, final=True)
        mux.writer.close()
        mux.closed = True
        for output in mux.outputs:
            output.close()
            mux.closing += [self._event(mux, output, status, now_ms) for status in output.statuses()]
            mux.closing.append(self._event(mux, output, None, now_ms))
        mux.finished = mux.path
        if mux.silenced:
            log.warning("run %s: %d audio chunks arrived too late for the mux; their places are silent",
                        run, mux.silenced)
        # The file is done: nothing of the run's media stays in memory.
        mux.pending_frames.clear()
        mux.pcm.clear()
        mux.unplaced.clear()
        mux.placements.clear()
        mux.utterances.clear()
        mux.spent.clear()
        mux.last_frame = None


def _samples(ms: int) -> int:
    return max(0, ms) * SAMPLE_RATE // 1000


def as_rate(pcm: bytes, rate: int) -> np.ndarray:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.int32)
    if rate == SAMPLE_RATE or len(samples) == 0:
        return samples
    n = len(samples) * SAMPLE_RATE // rate
    return np.interp(np.linspace(0, len(samples) - 1, n), np.arange(len(samples)), samples).astype(np.int32)
