"""Live outputs of the sink: the packets it encodes for the MP4, pushed as they are made to an
RTMP ingest (FLV) or written as a live HLS playlist, each on a thread of its own.

The sink's H.264 and AAC are encoded once; an output gets copies of the packets through a
bounded queue and never blocks the sink: when it is disconnected or behind, packets are
dropped (counted) and it resumes at the next keyframe.  An RTMP output that cannot connect,
or loses its connection, retries with backoff (0.5 s doubling to 8 s) for as long as the run
lasts; each connection and each drop is reported with its reason through ``statuses()``,
which the sink turns into events.  The MP4 is never affected.
"""

from __future__ import annotations

import contextlib
import queue
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av

_BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)
_RTMP_KEY = re.compile(r"^(rtmps?://[^/]+/[^/?]+/)([^?]*)(.*)$")


def masked(url: str) -> str:
    """An RTMP URL without its stream key (a secret of the platform account)."""
    match = _RTMP_KEY.match(url)
    return f"{match.group(1)}***" if match and match.group(2) else url


@dataclass(frozen=True, slots=True)
class Status:
    """A change of a live output: ``connected`` (attempt n) or ``dropped`` (reason)."""

    kind: str
    attempt: int = 0
    reason: str = ""
    retry_in_ms: int = 0


class LiveOutput:
    """One live output (``rtmp``: a URL; ``hls``: a playlist path) fed with the sink's packets."""

    def __init__(self, kind: str, target: str, video: Any, audio: Any, max_packets: int = 750,
                 connect_timeout_s: float = 5.0, hls_segment_s: float = 2.0) -> None:
        if kind not in ("rtmp", "hls"):
            raise ValueError(f"unknown live output {kind!r}")
        self.kind, self.target = kind, target
        self.shown = masked(target) if kind == "rtmp" else target
        self._templates = {"video": video, "audio": audio}
        self._queue: queue.Queue[tuple[str, av.Packet] | None] = queue.Queue(max_packets)
        self._statuses: list[Status] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._resync = threading.Event()
        self._timeout_s = connect_timeout_s
        self._segment_s = hls_segment_s
        self.sent = 0
        # Packets lost while the queue was full (counted by the sink's thread) and while
        # disconnected or waiting for a keyframe (by the output's): one writer per counter.
        self._lost_full = self._lost_away = 0
        self._attempts = self._connections = self._failures = 0
        self._thread = threading.Thread(target=self._run, name=f"live-{kind}", daemon=True)
        self._thread.start()

    # -- the sink's side --------------------------------------------------------

    def offer(self, stream: str, packets: list[av.Packet]) -> None:
        """Copies of freshly encoded packets of ``stream`` ("video" or "audio"); never blocks."""
        for packet in packets:
            if packet.size == 0:
                continue
            copy = av.Packet(bytes(packet))
            copy.pts, copy.dts, copy.time_base = packet.pts, packet.dts, packet.time_base
            copy.is_keyframe = packet.is_keyframe
            try:
                self._queue.put_nowait((stream, copy))
            except queue.Full:
                self._lost_full += 1
                self._resync.set()  # a gap: resume at the next keyframe

    @property
    def reconnects(self) -> int:
        """Connections after the first."""
        return max(0, self._connections - 1)

    @property
    def lost(self) -> int:
        """Packets the MP4 has and this output did not send."""
        return self._lost_full + self._lost_away

    def statuses(self) -> list[Status]:
        """The changes since the last call."""
        with self._lock:
            out, self._statuses = self._statuses, []
        return out

    def close(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (for up to ``timeout_s``), finish the stream and stop."""
        self._stop.set()
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout_s)
        self._thread.join(timeout_s)

    # -- the output's thread -------------------------------------------------------

    def _clean(self, exc: Exception) -> str:
        """An error's text without the stream key (FFmpeg puts the URL in its messages)."""
        return str(exc).replace(self.target, self.shown)

    def _report(self, status: Status) -> None:
        with self._lock:
            self._statuses.append(status)

    def _back_off(self, reason: str) -> bool:
        """Report a drop, wait the next backoff step and drop what was made meanwhile; True when
        the output was closed meanwhile."""
        wait = _BACKOFF_S[min(self._failures, len(_BACKOFF_S) - 1)]
        self._failures += 1
        self._report(Status("dropped", self._attempts, reason, int(wait * 1000)))
        return self._stop.wait(wait) or self._drain()

    def _open(self) -> tuple[Any, dict[str, Any]]:
        if self.kind == "rtmp":
            container = av.open(self.target, "w", format="flv", timeout=self._timeout_s)
        else:
            Path(self.target).parent.mkdir(parents=True, exist_ok=True)
            flags = "delete_segments+independent_segments"
            if Path(self.target).exists():  # opened again (a reconnect, a sink taking over): go on
                flags += "+append_list+discont_start"  # from the playlist there, after a discontinuity
            container = av.open(self.target, "w", format="hls", options={
                "hls_time": f"{self._segment_s:g}", "hls_list_size": "6", "hls_flags": flags,
            })
        streams = {name: container.add_stream_from_template(t) for name, t in self._templates.items()}
        return container, streams

    def _run(self) -> None:
        container: Any = None
        streams: dict[str, Any] = {}
        waiting_keyframe = True
        sent_at_open = 0
        item: tuple[str, av.Packet] | None = None
        while True:
            if item is None:
                try:
                    item = self._queue.get(timeout=0.2)
                except queue.Empty:
                    continue
                if item is None:
                    break  # closed, everything queued sent
            if container is None:
                # Opened at the first packet: the encoders are open then, and their headers known.
                self._attempts += 1
                try:
                    container, streams = self._open()
                except (av.FFmpegError, OSError) as exc:
                    item = None
                    self._lost_away += 1
                    if self._back_off(f"cannot connect: {self._clean(exc)}"):
                        break
                    continue
                waiting_keyframe = True
                sent_at_open = self.sent
            stream, packet = item
            item = None
            if self._resync.is_set():
                self._resync.clear()
                waiting_keyframe = True
            if waiting_keyframe:
                if stream != "video" or not packet.is_keyframe:
                    self._lost_away += 1
                    continue
                waiting_keyframe = False
            packet.stream = streams[stream]
            try:
                container.mux(packet)
                self.sent += 1
                if self.sent == sent_at_open + 1:  # connected for real: RTMP connects at the first write
                    self._failures = 0
                    self._connections += 1
                    self._report(Status("connected", self._attempts))
            except (av.FFmpegError, OSError) as exc:
                self._lost_away += 1
                _close_quietly(container)
                container = None
                what = "connection lost" if self.sent > sent_at_open else "cannot connect"
                if self._back_off(f"{what}: {self._clean(exc)}"):
                    break
        if container is not None:
            _close_quietly(container)

    def _drain(self) -> bool:
        """Drop what was made while away (live: nothing is sent late); True once closed."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                return True
            self._lost_away += 1


def _close_quietly(container: Any) -> None:
    with contextlib.suppress(av.FFmpegError, OSError):  # the connection is gone: nothing to finish
        container.close()
