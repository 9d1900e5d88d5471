"""Output family: the live outputs of a run (an RTMP ingest, an HLS folder) connecting,
dropping and closing, each with its reason; the MP4 file is never affected by them."""

from __future__ import annotations

from dataclasses import dataclass

from events.base import Event, registry


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class OutputConnected(Event):
    """A live output is connected (``attempt`` 1: the first time; more: a reconnect)."""

    type = "output.connected"
    output: str       # "rtmp" or "hls"
    target: str       # where, without secrets (an RTMP stream key is masked)
    attempt: int = 1


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class OutputDropped(Event):
    """A live output lost its connection (or could not connect); the sink retries with backoff."""

    type = "output.dropped"
    output: str
    target: str
    reason: str
    retry_in_ms: int = 0


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class OutputClosed(Event):
    """A live output ended with its run: what it sent and what it lost."""

    type = "output.closed"
    output: str
    target: str
    packets_sent: int
    packets_lost: int       # dropped while disconnected or behind (the MP4 has them all)
    reconnects: int
