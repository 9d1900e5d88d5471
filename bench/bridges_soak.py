"""The bridges' soak with forced disconnects, and what it and ``bench.bridges`` drive a peer with.

Each platform's loopback peer sends a steady stream of messages, each with an id of its own,
through its connector and a ``Bridge`` into one run; every ``drop_every_s`` every connection is
cut (Twitch and Bilibili: the peer drops its sockets; YouTube: the API answers 503 until the
bridge has seen it).  Afterwards the ids sent are compared with the ``source_id`` of the
``danmaku.received`` events the stream holds, and the drops forced with the ``danmaku.gap``
events recorded.

What counts as sent: Twitch's IRC server and Bilibili's danmaku server do not keep messages for
a client that is away, so a message sent while no client was connected is not expected to
arrive (counted apart, as ``sent_to_no_client``); YouTube keeps the chat, and the page token
resumes it, so every message posted must arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nats.js import JetStreamContext

from app.bridges.base import Connector
from app.bridges.run import Bridge, BridgeConfig, BridgeTotals
from app.shows import load_show
from events import codec
from events.base import Event
from events.danmaku import DanmakuGap, DanmakuReceived
from events.run import RunStarted
from events.subjects import stream_name
from infra.bus import publish_events, read_stream

RATES = {"twitch": 20.0, "bilibili": 10.0, "youtube": 5.0}   # messages a second in the soak
SETTLE_S = 60.0        # after the last message: how long what was sent may take to be stored


@dataclass(frozen=True, slots=True)
class Unit:
    """What a peer sends in one piece (an IRC line, a packed frame, a posted message) and the
    source ids it holds (a YouTube message's id is known once posted: none here)."""

    data: Any
    ids: tuple[str, ...]


class Rig(Protocol):
    """A platform's loopback peer, as the benchmark drives it, and the connector that reads it."""

    platform: str
    source: str

    def connector(self) -> Connector: ...

    def units(self, per_unit: int = 1) -> Iterator[Unit]: ...

    async def deliver(self, units: Sequence[Unit]) -> tuple[list[str], int]:
        """Send ``units``: the source ids that reached a client (or the API), and how many
        messages reached none."""
        ...

    async def drop(self, bridge: Bridge) -> None:
        """Cut the bridge's connection (it connects again by itself)."""
        ...


async def until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Wait until ``condition()`` holds; ``TimeoutError`` naming ``what`` after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(0.02)


async def start_run(js: JetStreamContext, prefix: str) -> str:
    """A new run on the bus (the demo show, started now), for a bridge to publish into."""
    run = f"{prefix}-{uuid.uuid4().hex[:8]}"
    await publish_events(js, [RunStarted(id=f"{run}-start", run=run, show=load_show().to_dict(), seed=7,
                                         resolution="360p", started_at_ms=int(time.time() * 1000))])
    return run


async def danmaku_of(js: JetStreamContext, run: str) -> list[Event]:
    """The run's danmaku events as the stream holds them."""
    stored = await read_stream(js, stream_name("danmaku"), [f"troupe.{run}.danmaku.>"])
    return [codec.decode(m.data) for m in stored]


@dataclass
class _Feed:
    """One platform's side of the soak: its bridge and what its peer sent."""

    rig: Rig
    bridge: Bridge
    task: asyncio.Task[BridgeTotals]
    delivered: list[str] = field(default_factory=list)
    unheard: int = 0                  # sent while no client was connected
    drops: int = 0


async def soak(js: JetStreamContext, rigs: Sequence[Rig], seconds: float, drop_every_s: float,
               rates: dict[str, float] | None = None) -> dict[str, Any]:
    """Each rig's stream for ``seconds``, every connection cut every ``drop_every_s``; per
    platform, what was sent, stored, lost, stored twice, and the gaps recorded against the drops."""
    rates = rates or RATES
    run = await start_run(js, "bridges-soak")
    stop = asyncio.Event()
    feeds, senders = [], []
    for rig in rigs:
        bridge = Bridge(rig.connector(), js, BridgeConfig(rig.source, run, rate_per_s=0))
        feeds.append(_Feed(rig, bridge, asyncio.create_task(bridge.run(stop), name=f"soak-{rig.platform}-bridge")))
    try:
        await until(lambda: all(f.bridge.connected.is_set() for f in feeds), 60, "every bridge connected")
        loop = asyncio.get_running_loop()
        start = loop.time()
        senders += [asyncio.create_task(_send(f, rates[f.rig.platform], start, start + seconds),
                                       name=f"soak-{f.rig.platform}-send") for f in feeds]
        k = 1
        while k * drop_every_s < seconds - 1e-6:
            await asyncio.sleep(max(0.0, start + k * drop_every_s - loop.time()))   # the schedule, not a wait
            for f in feeds:   # a drop cuts a connection that is up: two drops are never one gap
                await until(f.bridge.connected.is_set, 60, f"{f.rig.platform} connected before drop {k}")
                await f.rig.drop(f.bridge)
                f.drops += 1
            k += 1
        await asyncio.gather(*senders)
        with contextlib.suppress(TimeoutError):   # what never arrives is reported as lost
            await until(lambda: all(f.bridge.totals.published >= len(f.delivered) for f in feeds), SETTLE_S,
                        "every message sent to a client published")
    finally:
        for sender in senders:
            sender.cancel()
        stop.set()
        done = await asyncio.gather(*(asyncio.wait_for(f.task, 30) for f in feeds), return_exceptions=True)
    events = await danmaku_of(js, run)
    out: dict[str, Any] = {"seconds": seconds, "drop_every_s": drop_every_s, "rates": rates}
    for f, totals in zip(feeds, done, strict=True):
        if isinstance(totals, BaseException):
            raise totals
        out[f.rig.platform] = _accounting(f, totals, events)
    return out


async def _send(feed: _Feed, rate: float, start: float, end: float) -> None:
    loop = asyncio.get_running_loop()
    units = feed.rig.units()
    i = 0
    while (at := start + i / rate) < end:
        await asyncio.sleep(max(0.0, at - loop.time()))   # the pace, not a wait
        reached, unheard = await feed.rig.deliver([next(units)])
        feed.delivered += reached
        feed.unheard += unheard
        i += 1


def _accounting(feed: _Feed, totals: BridgeTotals, events: Sequence[Event]) -> dict[str, Any]:
    platform = feed.rig.platform
    received = Counter(e.source_id for e in events if isinstance(e, DanmakuReceived) and e.platform == platform)
    gaps = [e for e in events if isinstance(e, DanmakuGap) and e.platform == platform]
    sent = set(feed.delivered)
    gap_s = [(g.until_ms - g.from_ms) / 1000 for g in gaps]
    return {
        "sent_to_a_client": len(feed.delivered), "sent_to_no_client": feed.unheard,
        "stored": sum(received.values()), "published": totals.published,
        "lost": len(sent - set(received)), "twice": sum(1 for n in received.values() if n > 1),
        "unexpected": len(set(received) - sent), "repeats_dropped": totals.duplicates,
        "drops": feed.drops, "gaps": len(gaps), "reconnects": totals.reconnects,
        "gap_s_median": statistics.median(gap_s) if gap_s else None, "gap_s_max": max(gap_s, default=None),
        "gap_missed": sorted({g.missed for g in gaps}),
    }
