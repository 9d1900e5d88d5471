"""The bridge: one platform connector's chat published as danmaku of a run, every message
accounted for.

Two tasks and a bounded queue between them.  The reader connects (again after a drop, with
``Backoff``: doubling waits with jitter, back to the first once a connection held), reads, and
queues what arrives; when it is connected again after a drop it queues the gap, which becomes a
``danmaku.gap`` event (from when until when, why, what the platform says was missed).  The
publisher takes what is queued in batches and publishes each viewer's message as a
``danmaku.received``:

- its id is derived from the run and the platform's own message id (kept as ``source_id``),
  so a message read twice (a reconnect, a resend, a second bridge on the same room) is one
  event: JetStream drops the second within its duplicate window, and the bridge drops one it
  published already before that (``skipped: duplicate``);
- comments over the rate cap (a token bucket; gifts always pass) are published as
  ``danmaku.skipped`` with reason ``rate_cap`` instead: seen in the store, never lost silently;
- with no run to publish to (following the run on air, and none is), a message is counted as
  ``skipped: no_run`` and logged;
- what else the platform sends is counted by name (``troupe_bridge_notices``).

A publish that fails is tried again (``publish_events`` retries passing failures; past that the
batch is tried again after a pause), and the reader waits while the queue is full: what was read
is published or the bridge is still trying.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from nats.js import JetStreamContext

from app.bridges.base import (
    Backoff,
    BridgeFatal,
    ChatEnded,
    ChatMessage,
    ConnectionLost,
    Connector,
    Item,
    PlatformNotice,
)
from app.publish import RunEndedError, UnknownRunError, check_run
from events.base import Event, derive_id
from events.danmaku import DanmakuGap, DanmakuReceived, DanmakuSkipped
from events.errors import BusError
from infra.bus import publish_events, transient
from infra.lease import runs_on_air
from infra.metrics import Metrics

log = logging.getLogger(__name__)

QUEUE = 2000           # items read and not yet published (the reader waits past this)
BATCH = 256            # published together, their acks awaited together
SEEN = 100_000         # message ids remembered (a reconnect's replay is dropped, however late)
RUN_CHECK_S = 2.0      # how often the run on air is looked up again
RETRY_S = 2.0          # a batch that could not be published is tried again this much later


@dataclass
class RateCap:
    """A token bucket: ``per_s`` comments a second, ``burst`` at once (0: no cap)."""

    per_s: float
    burst: float
    _tokens: float = -1.0
    _at: float = 0.0

    def take(self, now: float) -> bool:
        if self.per_s <= 0:
            return True
        if self._tokens < 0:
            self._tokens, self._at = self.burst, now
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_s)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False


@dataclass(frozen=True, slots=True)
class BridgeConfig:
    """What a bridge publishes where: ``run`` None follows the run on air."""

    source: str                      # the channel, room or video: named in gaps and logs
    run: str | None = None
    to: str | None = None            # every message addressed to this role (None: the director reads the text)
    rate_per_s: float = 20.0         # comments a second published at most (gifts always are); 0: no cap
    burst: int = 40
    backoff: Backoff = field(default_factory=Backoff)


@dataclass
class BridgeTotals:
    """What a bridge did, for its summary line."""

    published: int = 0
    gifts: int = 0
    duplicates: int = 0
    capped: int = 0
    no_run: int = 0
    notices: int = 0
    reconnects: int = 0
    gaps: list[DanmakuGap] = field(default_factory=list)

    def line(self) -> str:
        return (f"{self.published} published ({self.gifts} gifts), {self.duplicates} duplicates dropped, "
                f"{self.capped} over the rate cap, {self.no_run} with no run on air, {self.notices} notices, "
                f"{self.reconnects} reconnects")


@dataclass(frozen=True, slots=True)
class _Gap:
    from_ms: int
    until_ms: int
    reason: str
    missed: int
    detail: str


@dataclass(frozen=True, slots=True)
class _Read:
    item: Item | _Gap
    read_at: float   # perf_counter when it came off the connection


class Bridge:
    """A connector's chat into a run (``run()`` until the chat ends, ``stop`` is set, or the
    platform refuses for good: ``BridgeFatal``)."""

    def __init__(self, connector: Connector, js: JetStreamContext, config: BridgeConfig,
                 metrics: Metrics | None = None, *, wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 rand: Callable[[], float] = random.random) -> None:
        self.connector, self.js, self.config, self.metrics = connector, js, config, metrics
        self.platform = connector.platform
        self.wall_ms, self.rand = wall_ms, rand
        self.totals = BridgeTotals()
        self.published: OrderedDict[str, str] = OrderedDict()  # danmaku id -> the viewer's name (bounded)
        self._seen: OrderedDict[str, str] = OrderedDict()
        self._queue: asyncio.Queue[_Read | None] = asyncio.Queue(QUEUE)
        self._cap = RateCap(config.rate_per_s, config.burst)
        self._run: tuple[str, int] | None = None  # the run published to and its start (wall ms)
        self._run_checked = 0.0
        self._refresh: asyncio.Task[None] | None = None  # a lookup of the run, in the background
        self.connected = asyncio.Event()
        self.run_over = asyncio.Event()  # the run it was told to publish to has ended

    async def run(self, stop: asyncio.Event | None = None) -> BridgeTotals:
        """Read and publish until the chat ends or ``stop`` is set; what was read is published.
        Raises ``BridgeFatal`` when the platform refuses for good."""
        stop = stop or asyncio.Event()
        publisher = asyncio.create_task(self._publish_loop(), name=f"bridge-{self.platform}-publish")
        reader = asyncio.create_task(self._read_loop(stop), name=f"bridge-{self.platform}-read")
        waits = [asyncio.create_task(e.wait(), name=f"bridge-{self.platform}-{n}")
                 for n, e in (("stop", stop), ("run-over", self.run_over))]
        try:
            await asyncio.wait({reader, publisher, *waits}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, *waits):
                task.cancel()
            await asyncio.gather(reader, *waits, return_exceptions=True)
            if not publisher.done():
                await self._queue.put(None)  # the publisher publishes what was read, then ends
            await asyncio.gather(publisher, return_exceptions=True)
            if self._refresh is not None:
                self._refresh.cancel()
                await asyncio.gather(self._refresh, return_exceptions=True)
            await self.connector.close()
            if self.metrics is not None:
                self.metrics.bridge_connected.labels(self.platform).set(0)
        for task in (reader, publisher):  # a refusal (BridgeFatal) or a failure surfaces here
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        return self.totals

    # -- reading ---------------------------------------------------------------------------

    async def _read_loop(self, stop: asyncio.Event) -> None:
        backoff, down_since, reason = self.config.backoff, 0, ""
        while not stop.is_set():
            try:
                await self.connector.connect()
            except BridgeFatal:
                raise
            except (TimeoutError, OSError, ConnectionLost) as exc:
                down_since = down_since or self.wall_ms()
                reason = reason or _why(exc)
                await self._wait(stop, backoff.delay(self.rand()), f"connect failed: {_why(exc)}")
                continue
            self._connected(True)
            if down_since:
                await self._gap(down_since, reason)
                down_since, reason = 0, ""
            try:
                async for item in self.connector.read():
                    backoff.reset()  # a connection that delivers has held
                    await self._queue.put(_Read(item, time.perf_counter()))
                return  # the chat has ended
            except ChatEnded:
                return
            except (TimeoutError, OSError, ConnectionLost) as exc:
                self._connected(False)  # connect() makes it again (close() is final: an Open Live game ends)
                down_since, reason = self.wall_ms(), _why(exc)
                await self._wait(stop, backoff.delay(self.rand()), f"connection lost: {reason}")

    async def _wait(self, stop: asyncio.Event, delay_s: float, why: str) -> None:
        log.warning("%s %s: %s; connecting again in %.1f s", self.platform, self.config.source, why, delay_s)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), delay_s)

    def _connected(self, up: bool) -> None:
        if up:
            self.connected.set()
        else:
            self.connected.clear()
        if self.metrics is not None:
            self.metrics.bridge_connected.labels(self.platform).set(1 if up else 0)

    async def _gap(self, since_ms: int, reason: str) -> None:
        self.totals.reconnects += 1
        if self.metrics is not None:
            self.metrics.bridge_reconnects.labels(self.platform).inc()
        missed = self.connector.missed()
        count = -1 if missed is None or missed.count is None else missed.count
        gap = _Gap(since_ms, self.wall_ms(), reason, count, missed.detail if missed is not None else "")
        await self._queue.put(_Read(gap, time.perf_counter()))

    # -- publishing --------------------------------------------------------------------------

    async def _publish_loop(self) -> None:
        ending = False
        while not ending:
            first = await self._queue.get()
            batch: list[_Read] = []
            if first is None:
                break
            batch.append(first)
            while len(batch) < BATCH and not self._queue.empty():
                more = self._queue.get_nowait()
                if more is None:
                    ending = True
                    break
                batch.append(more)
            await self._publish(batch)

    async def _publish(self, batch: list[_Read]) -> None:
        run = await self._current_run()
        events: list[tuple[Event, _Read]] = []
        for read in batch:
            event = self._event(read.item, run)
            if event is not None:
                events.append((event, read))
        while events:
            try:
                await publish_events(self.js, [e for e, _ in events])
                break
            except Exception as exc:
                if not transient(exc):  # refused for good (permissions, a message too big): say so
                    raise BusError(f"publishing {len(events)} danmaku failed: {exc or type(exc).__name__}") from exc
                # NATS away longer than publish_events waits: kept and tried again, nothing read is lost
                log.warning("publishing %d danmaku failed (%s); trying again in %.0f s", len(events), exc, RETRY_S)
                await asyncio.sleep(RETRY_S)
        now, wall = time.perf_counter(), self.wall_ms()
        for event, read in events:
            self._published(event, read, now, wall)

    def _event(self, item: Item | _Gap, run: tuple[str, int] | None) -> Event | None:
        """The event to publish for what was read (None: counted only)."""
        if isinstance(item, PlatformNotice):
            self.totals.notices += 1
            if self.metrics is not None:
                self.metrics.bridge_notices.labels(self.platform, item.name[:32]).inc()
            if item.name == "unparsed":
                log.warning("%s sent something unparsed: %s", self.platform, item.detail)
            return None
        if run is None:
            self._skip("no_run")
            log.warning("%s: no run on air: %s", self.platform, item)
            return None
        run_id, started = run
        if isinstance(item, _Gap):
            return DanmakuGap(id=derive_id(f"{run_id}/{self.platform}/{self.config.source}", item.from_ms), run=run_id,
                              t_ms=max(0, item.until_ms - started), at_ms=item.until_ms, platform=self.platform, source=self.config.source,
                              from_ms=item.from_ms, until_ms=item.until_ms, reason=item.reason, missed=item.missed,
                              detail=item.detail)
        return self._danmaku(item, run_id, started)

    def _danmaku(self, message: ChatMessage, run: str, started: int) -> Event | None:
        if message.id in self._seen:
            self._skip("duplicate")
            return None
        _remember(self._seen, message.id, "")
        if self.metrics is not None:
            self.metrics.bridge_messages.labels(self.platform, message.kind).inc()
        event_id = derive_id(run, message.id)
        wall = self.wall_ms()
        t_ms = max(0, wall - started)
        if message.kind != "gift" and not self._cap.take(time.monotonic()):
            self._skip("rate_cap")
            return DanmakuSkipped(id=event_id, run=run, t_ms=t_ms, at_ms=wall, reason="rate_cap", user=message.name[:64],
                                  text=message.text[:200], heard_ms=t_ms,
                                  detail=f"over the bridge's cap of {self.config.rate_per_s:g} comments a second")
        return DanmakuReceived(id=event_id, run=run, t_ms=t_ms, at_ms=wall, text=message.text, user=message.name, to=self.config.to,
                               kind=message.kind, viewer=message.viewer, platform=message.platform,
                               value=message.value, currency=message.currency, badges=message.badges,
                               source_id=message.id)

    def _published(self, event: Event, read: _Read, now: float, wall: int) -> None:
        if isinstance(event, DanmakuGap):
            self.totals.gaps.append(event)
            return
        if isinstance(event, DanmakuReceived):
            self.totals.published += 1
            self.totals.gifts += event.kind == "gift"
            _remember(self.published, event.id, event.user)
        if self.metrics is not None and isinstance(read.item, ChatMessage):
            self.metrics.bridge_publish.labels(self.platform).observe(now - read.read_at)
            if read.item.sent_at_ms:
                self.metrics.bridge_lag.labels(self.platform).observe(max(0, wall - read.item.sent_at_ms) / 1000)

    def _skip(self, reason: str) -> None:
        if reason == "duplicate":
            self.totals.duplicates += 1
        elif reason == "rate_cap":
            self.totals.capped += 1
        else:
            self.totals.no_run += 1
        if self.metrics is not None:
            self.metrics.bridge_skipped.labels(self.platform, reason).inc()

    async def _current_run(self) -> tuple[str, int] | None:
        """The run to publish to: the configured one (until it ends), else the newest on air.
        Looked up again every ``RUN_CHECK_S`` in the background (off the publish path: a lookup
        is two JetStream requests), and for every batch while there is none."""
        if self._run is None:
            return await self._look_up_run()
        if time.monotonic() - self._run_checked >= RUN_CHECK_S and (self._refresh is None or self._refresh.done()):
            self._run_checked = time.monotonic()
            self._refresh = asyncio.create_task(self._refresh_run(), name=f"bridge-{self.platform}-run")
        return self._run

    async def _refresh_run(self) -> None:
        try:
            await self._look_up_run()
        except Exception as exc:  # noqa: BLE001 - the run known so far is kept; looked up again later
            log.warning("%s %s: looking up the run failed: %s", self.platform, self.config.source, exc)

    async def _look_up_run(self) -> tuple[str, int] | None:
        self._run_checked = time.monotonic()
        if self.config.run is not None:
            try:
                self._run = (self.config.run, await check_run(self.js, self.config.run))
            except UnknownRunError as exc:
                raise BridgeFatal(str(exc)) from None
            except RunEndedError:
                if self._run is not None:
                    log.info("%s %s: run %s has ended: the bridge stops", self.platform, self.config.source,
                             self.config.run)
                self._run = None
                self.run_over.set()
            return self._run
        on_air = await runs_on_air(self.js)
        starts = []
        for run in sorted(on_air):
            with contextlib.suppress(UnknownRunError, RunEndedError):
                starts.append((await check_run(self.js, run), run))
        chosen = (max(starts)[1], max(starts)[0]) if starts else None
        if chosen != self._run:
            log.info("%s %s: publishing to %s", self.platform, self.config.source, chosen[0] if chosen else "no run")
        self._run = chosen
        return chosen


def _remember(ids: OrderedDict[str, str], key: str, value: str) -> None:
    ids[key] = value
    if len(ids) > SEEN:
        ids.popitem(last=False)


def _why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
