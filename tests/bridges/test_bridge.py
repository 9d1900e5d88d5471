"""The bridge on a real nats-server, reading a loopback YouTube API: every message published
once with its viewer, a drop recorded as a gap with nothing lost or doubled, comments over the
cap skipped with their reason, gifts always through, a second bridge on the same chat adding
nothing, and the run on air followed."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator

import pytest
from nats.js import JetStreamContext

from app.bridges.base import Backoff
from app.bridges.run import Bridge, BridgeConfig, BridgeTotals
from app.bridges.youtube import YouTubeChat
from bench.peers.youtube import YouTubePeer
from events import codec
from events.base import Event
from events.danmaku import DanmakuGap, DanmakuReceived, DanmakuSkipped
from events.run import RunStarted
from events.subjects import stream_name
from infra.bus import publish_events, read_stream
from infra.lease import lease_bucket, on_air_key
from infra.metrics import Metrics
from tests.conftest import end_run, wait_for
from tests.showkit import demo_run

VIDEO, CHAT = "vid00000001", "Cg0KC3ZpZDAwMDAwMDAx"
QUICK = Backoff(first_s=0.05, max_s=0.2, jitter=0.1)


@pytest.fixture
async def peer() -> AsyncIterator[YouTubePeer]:
    async with YouTubePeer(polling_interval_ms=20) as running:
        running.add_video(VIDEO, CHAT)
        yield running


async def _start(js: JetStreamContext, run: str) -> RunStarted:
    started = dataclasses.replace(demo_run(run), started_at_ms=int(time.time() * 1000))
    await publish_events(js, [started])
    return started


async def _danmaku(js: JetStreamContext, run: str) -> list[Event]:
    return [codec.decode(m.data) for m in await read_stream(js, stream_name("danmaku"), [f"troupe.{run}.danmaku.>"])]


def _bridge(peer: YouTubePeer, js: JetStreamContext, run: str | None, metrics: Metrics | None = None,
            rate: float = 0.0, burst: int = 40) -> Bridge:
    chat = YouTubeChat(video_id=VIDEO, api_key="test-key", api_base=peer.url, backfill_s=60, quota_units=10**9)
    return Bridge(chat, js, BridgeConfig(f"youtube video {VIDEO}", run, rate_per_s=rate, burst=burst, backoff=QUICK),
                  metrics)


class Running:
    """A bridge's ``run()`` as a task, stopped (and its totals read) at the end."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge, self.stop = bridge, asyncio.Event()
        self.task = asyncio.create_task(bridge.run(self.stop))

    async def finish(self) -> BridgeTotals:
        self.stop.set()
        return await asyncio.wait_for(self.task, 30)


async def test_each_message_is_published_once_with_its_viewer_and_a_drop_is_a_gap(
        js: JetStreamContext, peer: YouTubePeer) -> None:
    run = "bridge-once"
    await _start(js, run)
    metrics = Metrics()
    running = Running(_bridge(peer, js, run, metrics))
    try:
        peer.post(CHAT, text="first!", author="Ada", channel_id="UCada", moderator=True)
        peer.post(CHAT, "superChatEvent", text="for the show", author="Bo", channel_id="UCbo",
                  amount_micros=5_000_000, currency="EUR")
        await wait_for(lambda: _count(js, run, DanmakuReceived, 2), timeout_s=30, what="the first two danmaku")
        peer.drop(None, "503")  # the API fails until it recovers: the bridge is disconnected
        await wait_for(lambda: not running.bridge.connected.is_set(), timeout_s=30, what="the bridge sees the drop")
        during = [peer.post(CHAT, text=f"while down {i}", author=f"V{i}", channel_id=f"UCv{i}")["id"] for i in range(5)]
        peer.recover()
        await wait_for(lambda: _count(js, run, DanmakuGap, 1), timeout_s=30, what="the gap recorded")
        peer.post(CHAT, text="after", author="Ada", channel_id="UCada")
        await wait_for(lambda: _count(js, run, DanmakuReceived, 8), timeout_s=30, what="every danmaku")
    finally:
        totals = await running.finish()
        await end_run(js, run)
    events = await _danmaku(js, run)
    received = [e for e in events if isinstance(e, DanmakuReceived)]
    assert [e.text for e in received] == ["first!", "for the show", *(f"while down {i}" for i in range(5)), "after"]
    assert len({e.id for e in received}) == 8 and len({e.source_id for e in received}) == 8
    assert all(abs(e.at_ms - time.time() * 1000) < 600_000 for e in received)  # when it came off the socket
    ada, bo = received[0], received[1]
    assert (ada.viewer, ada.user, ada.platform, ada.kind, ada.badges) == ("yt:UCada", "Ada", "youtube", "comment",
                                                                           ("moderator",))
    assert (bo.kind, bo.value, bo.currency, bo.viewer) == ("gift", 5.0, "EUR", "yt:UCbo")
    assert {e.source_id for e in received[2:7]} == {f"youtube:{i}" for i in during}
    [gap] = [e for e in events if isinstance(e, DanmakuGap)]
    assert gap.platform == "youtube" and gap.source == f"youtube video {VIDEO}"
    assert 0 < gap.from_ms <= gap.until_ms and gap.reason and gap.missed == 0  # resumed from the page token
    assert totals.published == 8 and totals.reconnects == 1 and totals.gifts == 1
    assert metrics.bridge_reconnects.labels("youtube")._value.get() == 1  # noqa: SLF001 - the metric's value
    assert metrics.bridge_messages.labels("youtube", "gift")._value.get() == 1  # noqa: SLF001


async def test_comments_over_the_cap_are_skipped_with_their_reason_and_gifts_pass(
        js: JetStreamContext, peer: YouTubePeer) -> None:
    run = "bridge-cap"
    await _start(js, run)
    for i in range(12):
        peer.post(CHAT, text=f"spam {i}", author=f"S{i}", channel_id=f"UCs{i}")
    peer.post(CHAT, "superChatEvent", text="a gift in the flood", author="G", channel_id="UCg")
    running = Running(_bridge(peer, js, run, rate=0.01, burst=3))  # three at once, then almost none
    try:
        await wait_for(lambda: _count(js, run, DanmakuSkipped, 9), timeout_s=30, what="the capped comments")
        await wait_for(lambda: _count(js, run, DanmakuReceived, 4), timeout_s=30, what="the rest")
    finally:
        totals = await running.finish()
        await end_run(js, run)
    events = await _danmaku(js, run)
    received = [e for e in events if isinstance(e, DanmakuReceived)]
    skipped = [e for e in events if isinstance(e, DanmakuSkipped)]
    assert [e.text for e in received] == ["spam 0", "spam 1", "spam 2", "a gift in the flood"]
    assert [e.text for e in skipped] == [f"spam {i}" for i in range(3, 12)]
    assert all(e.reason == "rate_cap" and "cap" in e.detail for e in skipped)
    assert totals.capped == 9 and totals.published == 4


async def test_a_second_bridge_on_the_same_chat_adds_nothing(js: JetStreamContext, peer: YouTubePeer) -> None:
    run = "bridge-twice"
    await _start(js, run)
    for i in range(6):
        peer.post(CHAT, text=f"hello {i}", author=f"A{i}", channel_id=f"UCa{i}")
    first = Running(_bridge(peer, js, run))
    try:
        await wait_for(lambda: _count(js, run, DanmakuReceived, 6), timeout_s=30, what="the first bridge's")
        second = Running(_bridge(peer, js, run))  # reads the same history again
        await wait_for(lambda: second.bridge.totals.published == 6, timeout_s=30, what="the second bridge's")
        await second.finish()
    finally:
        await first.finish()
        await end_run(js, run)
    assert len([e for e in await _danmaku(js, run) if isinstance(e, DanmakuReceived)]) == 6  # JetStream's dedupe


async def test_without_a_run_it_follows_the_run_on_air(js: JetStreamContext, peer: YouTubePeer) -> None:
    run = "bridge-onair"
    running = Running(_bridge(peer, js, None))
    bucket = await lease_bucket(js, ttl_s=30)
    try:
        peer.post(CHAT, text="nobody is on air", author="Early", channel_id="UCearly")
        await wait_for(lambda: running.bridge.totals.no_run == 1, timeout_s=30, what="counted: no run")
        await _start(js, run)
        await bucket.put(on_air_key(run), b"test")
        peer.post(CHAT, text="on air now", author="Late", channel_id="UClate")
        await wait_for(lambda: _count(js, run, DanmakuReceived, 1), timeout_s=30, what="published to the run on air")
    finally:
        await running.finish()
        await bucket.delete(on_air_key(run))
        await end_run(js, run)
    [event] = [e for e in await _danmaku(js, run) if isinstance(e, DanmakuReceived)]
    assert event.text == "on air now"


async def _count(js: JetStreamContext, run: str, cls: type[Event], n: int) -> bool:
    return sum(isinstance(e, cls) for e in await _danmaku(js, run)) >= n


async def test_a_bridge_to_a_run_stops_when_the_run_ends(js: JetStreamContext, peer: YouTubePeer) -> None:
    run = "bridge-ends"
    await _start(js, run)
    running = Running(_bridge(peer, js, run))
    peer.post(CHAT, text="before the end", author="A", channel_id="UCa")
    await wait_for(lambda: _count(js, run, DanmakuReceived, 1), timeout_s=30, what="the first danmaku")
    await end_run(js, run)

    async def stopped() -> bool:
        peer.post(CHAT, text="after the end", author="B", channel_id="UCb")  # keeps the bridge publishing
        return running.task.done()

    await wait_for(stopped, timeout_s=30, what="the bridge stops with its run")
    totals = await running.finish()
    assert totals.published >= 1 and running.bridge.run_over.is_set()
