"""The preview's media over WebRTC (aiortc): the stage's frames as video, its speech as audio.

The video track sends the newest frame the preview actor has (frames are decoded from their
JPEG with PyAV; none is ever waited for past a short while: the last one is repeated), with
the frame's number drawn into its top-left corner as 16 black or white cells between two
reference cells, so that a page can tell which frame it shows (``FrameMark``).  The audio
track plays the speech placed on the show timeline, a little behind the show clock so that a
chunk placed just before its frame is drawn is not missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import logging
import time
from dataclasses import dataclass
from typing import Any

import av
import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from actors.preview import Boards, PreviewActor
from actors.sink import SAMPLE_RATE
from events.frame import FrameRendered

log = logging.getLogger(__name__)
VIDEO_CLOCK = 90_000
REPEAT_S = 0.2             # with no new frame, the last one is sent again this often
AUDIO_PTIME_S = 0.02       # 20 ms audio frames
AUDIO_DELAY_MS = 120       # the audio plays this far behind the show clock
BLANK = (640, 360)         # what is sent before the run's first frame


@dataclass(frozen=True, slots=True)
class FrameMark:
    """The frame number drawn into each video frame: ``bits`` cells of ``cell`` pixels in a row
    at the top left, after a white and a black reference cell; white is 1, most significant
    first; the number is ``n`` modulo 2**bits."""

    cell: int = 12
    bits: int = 16

    def draw(self, yuv: np.ndarray, n: int) -> None:
        """Draw ``n`` into the luma plane of a yuv420p picture (``VideoFrame.to_ndarray``)."""
        c = self.cell
        cells = [1, 0] + [(n >> (self.bits - 1 - i)) & 1 for i in range(self.bits)]
        for i, bit in enumerate(cells):
            yuv[0:c, i * c:(i + 1) * c] = 235 if bit else 16

    def read(self, luma: np.ndarray) -> int:
        """The number drawn in a luma picture (the page does the same in JavaScript)."""
        c = self.cell
        values = [float(luma[c // 2, i * c + c // 2]) for i in range(self.bits + 2)]
        threshold = (values[0] + values[1]) / 2
        n = 0
        for v in values[2:]:
            n = (n << 1) | (v > threshold)
        return n


MARK = FrameMark()


class StageVideo(MediaStreamTrack):
    """A run's stage as a video track: its newest frame, numbered."""

    kind = "video"

    def __init__(self, preview: PreviewActor, boards: Boards, run: str) -> None:
        super().__init__()
        self.preview = preview
        self.run = run
        self._fresh = asyncio.Event()
        self._newest: FrameRendered | None = None
        self._sent_n = -1
        self._last: av.VideoFrame | None = None
        self._decoder = av.CodecContext.create("mjpeg", "r")
        self._t0: float | None = None
        board = boards.get(run)
        if board is not None and board.frame is not None:
            self._newest = board.frame
            self._fresh.set()
        preview.frame_listeners.append(self._on_frame)

    def _on_frame(self, run: str, frame: FrameRendered) -> None:
        if run == self.run and frame.jpeg and (self._newest is None or frame.n > self._newest.n):
            self._newest = frame
            self._fresh.set()

    def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self.preview.frame_listeners.remove(self._on_frame)
        super().stop()

    def _picture(self, frame: FrameRendered) -> av.VideoFrame | None:
        try:
            [decoded] = self._decoder.decode(av.Packet(frame.jpeg))
        except (av.FFmpegError, ValueError) as exc:
            log.warning("frame %d of run %s cannot be decoded: %s", frame.n, self.run, exc)
            return None
        yuv = decoded.reformat(format="yuv420p").to_ndarray()
        MARK.draw(yuv, frame.n)
        return av.VideoFrame.from_ndarray(yuv, format="yuv420p")

    async def recv(self) -> av.VideoFrame:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._fresh.wait(), REPEAT_S)
        self._fresh.clear()
        newest = self._newest
        if newest is not None and newest.n != self._sent_n:
            picture = self._picture(newest)
            if picture is not None:
                self._last, self._sent_n = picture, newest.n
        if self._last is None:
            self._last = av.VideoFrame.from_ndarray(np.zeros((BLANK[1] * 3 // 2, BLANK[0]), np.uint8) + 16,
                                                    format="yuv420p")
        now = time.monotonic()
        if self._t0 is None:
            self._t0 = now
        out = self._last
        out.pts = int((now - self._t0) * VIDEO_CLOCK)
        out.time_base = fractions.Fraction(1, VIDEO_CLOCK)
        return out


class StageAudio(MediaStreamTrack):
    """A run's speech as an audio track, on the show clock."""

    kind = "audio"

    def __init__(self, boards: Boards, run: str) -> None:
        super().__init__()
        self.boards = boards
        self.run = run
        self._t0: float | None = None
        self._sent = 0  # samples sent
        self._start = 0  # the show-time sample the track began at

    def _show_sample(self, wall_s: float) -> int:
        board = self.boards.get(self.run)
        if board is None:
            return 0
        show_ms = wall_s * 1000 - board.run.started_at_ms - AUDIO_DELAY_MS
        return int(show_ms * SAMPLE_RATE // 1000)

    async def recv(self) -> av.AudioFrame:
        count = int(SAMPLE_RATE * AUDIO_PTIME_S)
        if self._t0 is None:
            self._t0 = time.time()
            self._start = self._show_sample(self._t0)
        due = self._t0 + self._sent / SAMPLE_RATE
        delay = due - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        board = self.boards.get(self.run)
        pcm = board.audio(self._start + self._sent, count) if board is not None else np.zeros(count, np.int16)
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = SAMPLE_RATE
        frame.pts = self._sent
        frame.time_base = fractions.Fraction(1, SAMPLE_RATE)
        self._sent += count
        return frame


class Peers:
    """The browsers watching, one peer connection each."""

    def __init__(self, preview: PreviewActor, boards: Boards) -> None:
        self.preview = preview
        self.boards = boards
        self._peers: set[RTCPeerConnection] = set()

    async def answer(self, run: str, offer: dict[str, Any]) -> dict[str, str]:
        """Answer a page's offer with the run's video and audio."""
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # loopback or LAN: no STUN
        self._peers.add(pc)

        @pc.on("connectionstatechange")
        async def _changed() -> None:
            if pc.connectionState in ("failed", "closed"):
                await self._close(pc)

        pc.addTrack(StageVideo(self.preview, self.boards, run))
        pc.addTrack(StageAudio(self.boards, run))
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer["sdp"], type=offer["type"]))
            await pc.setLocalDescription(await pc.createAnswer())
        except BaseException:
            await self._close(pc)
            raise
        return {"sdp": pc.localDescription.sdp, "type": pc.localDescription.type}

    async def _close(self, pc: RTCPeerConnection) -> None:
        self._peers.discard(pc)
        for sender in pc.getSenders():
            if sender.track is not None:
                sender.track.stop()
        await pc.close()

    def __len__(self) -> int:
        return len(self._peers)

    async def close(self) -> None:
        for pc in list(self._peers):
            await self._close(pc)
