"""NATS connection and idempotent provisioning of streams and durable consumers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import nats
import orjson
from nats.aio.client import Client
from nats.errors import ConnectionClosedError, NoRespondersError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, PubAck, StorageType, StreamConfig
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError, ServiceUnavailableError

from events import codec
from events.base import Event
from events.errors import BusError, ConfigError
from events.subjects import (
    StreamSpec,
    family_filter,
    file_store_bytes,
    stream_name,
    stream_specs,
    subject_for,
)

log = logging.getLogger(__name__)


SCHEMES = ("nats", "tls", "ws", "wss")


def nats_servers(url: str) -> list[str]:
    """The servers a NATS URL names: one, or several separated by commas (the nodes of a
    cluster, as NATS clients take them); a ConfigError in one line for one that is not a URL."""
    out = []
    for part in (p.strip() for p in url.split(",")):
        if not part:
            continue
        full = part if "://" in part else f"nats://{part}"
        parsed = urlparse(full)
        try:
            parsed.port  # noqa: B018 - raises for a port that is not a number
        except ValueError:
            raise ConfigError(f"not a NATS URL: {masked_url(part)!r} (its port is not a number)") from None
        if parsed.scheme not in SCHEMES or not parsed.hostname or parsed.netloc.endswith(":"):
            raise ConfigError(f"not a NATS URL: {masked_url(part)!r} (like nats://host:4222; several: a comma "
                              "between them)")
        out.append(full)
    if not out:
        raise ConfigError("no NATS URL given")
    return out


def masked_url(url: str) -> str:
    """A NATS URL (or a list of them) fit for a log line: passwords replaced by ``***``."""
    if "," in url:
        return ",".join(masked_url(part.strip()) for part in url.split(","))
    parsed = urlparse(url if "://" in url else f"nats://{url}")
    try:
        port = parsed.port or 4222
    except ValueError:
        return url if parsed.password is None else "(a NATS URL with a password)"
    if parsed.password is None:
        return url
    return parsed._replace(netloc=f"{parsed.username}:***@{parsed.hostname}:{port}").geturl()


async def connect(url: str, name: str) -> Client:
    """Connect to NATS with reconnects; raises BusError with a one-line reason (a refused user or
    password at once: nats-py would otherwise retry it forever)."""
    where = masked_url(url)
    refused: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def on_error(exc: Exception) -> None:
        if "authorization violation" in str(exc).lower() and not refused.done():
            refused.set_result(str(exc))
        log.warning("nats: %s", exc)

    # nats-py retries a failed first connect as long as it would reconnect (forever here):
    # check that a server answers at all, so a wrong URL fails fast with one line.
    servers = nats_servers(url)
    failures = []
    for server in servers:
        parsed = urlparse(server)
        try:
            _reader, writer = await asyncio.wait_for(
                asyncio.open_connection(parsed.hostname or "127.0.0.1", parsed.port or 4222), 3.0
            )
            writer.close()
            break
        except (OSError, TimeoutError) as exc:
            failures.append(f"{masked_url(server)}: {exc or type(exc).__name__}")
    else:
        raise BusError(f"cannot connect to NATS at {'; '.join(failures)}")
    connecting = asyncio.ensure_future(nats.connect(
        servers=servers, name=name, connect_timeout=3, max_reconnect_attempts=-1,
        reconnect_time_wait=0.5, error_cb=on_error, pending_size=64 * 1024 * 1024,
    ))
    either: list[asyncio.Future[Any]] = [connecting, refused]
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    if not connecting.done():
        connecting.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await connecting
        raise BusError(f"NATS at {where} refused the credentials: {refused.result()}")
    refused.cancel()
    try:
        return connecting.result()
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear error
        raise BusError(f"cannot connect to NATS at {where}: {exc}") from None


def _stream_config(spec: StreamSpec, replicas: int = 1) -> StreamConfig:
    return StreamConfig(
        name=spec.name, subjects=spec.subjects, storage=StorageType.FILE,
        max_age=spec.max_age_s, max_bytes=spec.max_bytes, max_msg_size=spec.max_msg_size,
        duplicate_window=120.0, num_replicas=replicas,
    )


_COMPARED = ("subjects", "storage", "max_age", "max_bytes", "max_msg_size", "duplicate_window", "num_replicas")


async def provision_streams(js: JetStreamContext, frame_max_age_s: float = 600.0, replicas: int = 1) -> list[str]:
    """Create or update every family stream (``replicas`` copies of each on a cluster's nodes);
    returns the names it had to change."""
    changed = []
    for spec in stream_specs(frame_max_age_s):
        wanted = _stream_config(spec, replicas)
        try:
            try:
                info = await js.stream_info(spec.name)
            except NotFoundError:
                await js.add_stream(wanted)
                changed.append(spec.name)
                continue
            current = info.config
            if any(getattr(current, k) != getattr(wanted, k) for k in _COMPARED):
                await js.update_stream(wanted)
                changed.append(spec.name)
        except APIError as exc:
            if exc.err_code == NO_STORAGE:
                raise BusError(
                    f"NATS cannot reserve {spec.max_bytes // 2**30} GiB for stream {spec.name}: its JetStream file "
                    f"store is too small; give the server `max_file_store: {file_store_bytes()}` in its jetstream "
                    "block (`troupe nats-config` writes it; left unset, it is 75% of the disk free at its start)"
                ) from None
            raise
    return changed


NO_STORAGE = 10047  # JetStream: "insufficient storage resources available"


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A durable pull consumer: one per actor kind and input family."""

    durable: str
    family: str
    filters: tuple[str, ...] = ()
    max_deliver: int = 5
    ack_wait_s: float = 30.0
    max_ack_pending: int = 1024
    # Deleted by the server after this long without a client (a run's own consumer, left behind
    # when its run ended with nobody holding it); None: kept.
    inactive_threshold_s: float | None = None

    @property
    def stream(self) -> str:
        return stream_name(self.family)

    @property
    def subjects(self) -> list[str]:
        """The subjects it reads: its filters, else its whole family."""
        return list(self.filters) or [family_filter(self.family)]

    def config(self) -> ConsumerConfig:
        filters = self.subjects
        return ConsumerConfig(
            durable_name=self.durable, ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL, max_deliver=self.max_deliver,
            ack_wait=self.ack_wait_s, max_ack_pending=self.max_ack_pending,
            filter_subject=filters[0] if len(filters) == 1 else None,
            filter_subjects=filters if len(filters) > 1 else None,
            inactive_threshold=self.inactive_threshold_s,
        )


async def provision_consumers(js: JetStreamContext, specs: Sequence[ConsumerSpec]) -> list[str]:
    """Create missing durable consumers, update drifted ones; returns the changed names."""
    changed = []
    for spec in specs:
        wanted = spec.config()
        try:
            info = await js.consumer_info(spec.stream, spec.durable)
        except NotFoundError:
            await js.add_consumer(spec.stream, wanted)
            changed.append(spec.durable)
            continue
        current = info.config
        keys = ("max_deliver", "ack_wait", "max_ack_pending", "filter_subject", "filter_subjects")
        if any(getattr(current, k) != getattr(wanted, k) for k in keys):
            # Same durable name: an update, which keeps where it delivers from (re-made from its
            # ack floor by a process that took it over: JetStream refuses to change that).
            kept = dataclasses.replace(wanted, deliver_policy=current.deliver_policy, opt_start_seq=current.opt_start_seq)
            await js.add_consumer(spec.stream, kept)
            changed.append(spec.durable)
    return changed


# Every publish carries a deterministic id as Nats-Msg-Id: JetStream drops a duplicate
# (a redelivered input's outputs, a producer's retry) within the stream's window.
MSG_ID = "Nats-Msg-Id"


async def publish_raw(js: JetStreamContext, subject: str, data: bytes, msg_id: str) -> asyncio.Future[Any]:
    """Publish an encoded message with its dedupe id; returns the future of its ack."""
    nc: Client = js._nc  # noqa: SLF001 - the connection a JetStream context publishes on (no public accessor)
    publisher = _PUBLISHERS.get(nc)
    if publisher is None:
        publisher = _PUBLISHERS[nc] = AsyncPublisher(nc)
    return await publisher.publish(subject, data, {MSG_ID: msg_id})


class AsyncPublisher:
    """JetStream publishes whose acks come back, as futures, on one reply subscription: what
    nats-py's ``publish_async`` does, with less work per message on the hot path (a counter for
    the reply token, orjson for the ack, no ``wait_for`` around the room left), and an ack that
    says the stream refused the message fails its future (nats-py's raises in its callback and
    leaves the future waiting)."""

    def __init__(self, nc: Client, max_pending: int = 4000) -> None:
        self._nc = nc
        self._prefix = ""
        self._cut = 0
        self._futures: dict[str, asyncio.Future[PubAck]] = {}
        self._next = 0
        self._room = asyncio.Semaphore(max_pending)  # publishes whose ack has not come: bounded
        self._starting: asyncio.Lock | None = None

    async def _start(self) -> None:
        self._starting = self._starting or asyncio.Lock()
        async with self._starting:
            if not self._prefix:
                prefix = self._nc.new_inbox() + "."
                await self._nc.subscribe(prefix + "*", cb=self._on_ack)
                self._prefix, self._cut = prefix, len(prefix)

    async def publish(self, subject: str, data: bytes, headers: dict[str, str]) -> asyncio.Future[PubAck]:
        if not self._prefix:
            await self._start()
        await self._room.acquire()
        self._next += 1
        token = f"{self._next:x}"
        future: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        self._futures[token] = future
        future.add_done_callback(lambda _f: self._done(token))  # acked, failed or given up on
        try:
            await self._nc.publish(subject, data, reply=self._prefix + token, headers=headers)
        except BaseException:
            future.cancel()  # its room is given back; the caller gets the error, not the future
            raise
        return future

    def _done(self, token: str) -> None:
        del self._futures[token]
        self._room.release()

    async def _on_ack(self, msg: Any) -> None:
        future = self._futures.get(msg.subject[self._cut:])
        if future is None or future.done():  # given up on (no ack in time) before it came
            return
        if msg.headers and msg.headers.get("Status") == "503":  # no stream took the subject
            future.set_exception(NoStreamResponseError())
            return
        try:
            resp = orjson.loads(msg.data)
        except orjson.JSONDecodeError:
            future.set_exception(BusError(f"a publish ack that is not JSON: {msg.data[:80]!r}"))
            return
        error = resp.get("error")
        if error is not None:
            try:
                APIError.from_error(error)  # raises the error the code stands for
            except APIError as exc:
                future.set_exception(exc)
            return
        future.set_result(PubAck(stream=resp.get("stream"), seq=resp.get("seq"), domain=resp.get("domain"),
                                 duplicate=resp.get("duplicate")))


# One publisher per connection (its reply subscription lives and reconnects with it).
_PUBLISHERS: weakref.WeakKeyDictionary[Client, AsyncPublisher] = weakref.WeakKeyDictionary()


async def publish_event(js: JetStreamContext, event: Event, at_ms: int | None = None) -> asyncio.Future[Any]:
    """Publish an event on its subject with its id as dedupe id; returns the future of its ack."""
    return await publish_raw(js, subject_for(event), codec.encode(event, at_ms=at_ms), event.id)


PUBLISH_ACK_S = 5.0     # an ack not back by then is given up on (the publish is tried again)
PUBLISH_RETRY_S = 30.0  # how long a publish is tried again while the stream has no leader


def transient(exc: BaseException | None) -> bool:
    """Whether a publish failed for a passing reason: a stream electing a new leader, a node of a
    cluster lost, a connection being re-made.  The same message (its id the dedupe id) may be
    sent again: JetStream stores it once."""
    return isinstance(exc, NoStreamResponseError | ServiceUnavailableError | NoRespondersError | TimeoutError
                      | asyncio.CancelledError | ConnectionClosedError)


async def acks(futures: Sequence[asyncio.Future[Any]], timeout_s: float = PUBLISH_ACK_S) -> None:
    """Wait for publish acks; one not back within ``timeout_s`` is cancelled (a server lost with
    the message: nats-py would wait for it forever)."""
    if not futures:
        return
    done, pending = await asyncio.wait(futures, timeout=timeout_s)
    for future in pending:
        future.cancel()
    for future in done:  # each failure is read here (asyncio would log those never read)
        if not future.cancelled():
            future.exception()


def failure(future: asyncio.Future[Any]) -> BaseException | None:
    """Why a publish failed (None: it was stored)."""
    if future.cancelled():
        return asyncio.CancelledError("no ack")
    return future.exception()


class RetryWindow:
    """When to publish again what failed for a passing reason: after 0.1 s, doubling up to 2 s,
    for up to ``retry_s`` in all, and never once ``stop`` is set."""

    def __init__(self, retry_s: float = PUBLISH_RETRY_S, stop: asyncio.Event | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + retry_s
        self._delay = 0.1
        self._stop = stop

    async def wait(self, errors: Iterable[BaseException | None]) -> bool:
        """Sleep before the next try; False (at once) when there is none: a lasting failure among
        ``errors``, the window over, or stopped."""
        if (not all(transient(e) for e in errors) or self._loop.time() + self._delay > self._deadline
                or (self._stop is not None and self._stop.is_set())):
            return False
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * 2, 2.0)
        return True


async def publish_events(js: JetStreamContext, events: Sequence[Event], at_ms: int | None = None,
                         retry_s: float = PUBLISH_RETRY_S) -> list[PubAck]:
    """Publish events and wait until JetStream stored them all, trying again for up to ``retry_s``
    those that failed for a passing reason (raises the first failure otherwise)."""
    window = RetryWindow(retry_s)
    results: dict[int, PubAck] = {}
    todo = list(range(len(events)))
    while True:
        futures = {i: await publish_event(js, events[i], at_ms) for i in todo}
        await acks(list(futures.values()))
        errors = {i: failure(f) for i, f in futures.items()}
        results.update({i: futures[i].result() for i, e in errors.items() if e is None})
        todo = [i for i, e in errors.items() if e is not None]
        if not todo:
            return [results[i] for i in range(len(events))]
        first = errors[todo[0]]
        assert first is not None
        if not await window.wait(errors[i] for i in todo):
            raise first
        log.warning("publish of %d events failed (%s); trying again", len(todo), type(first).__name__)


@dataclass(frozen=True, slots=True)
class StoredMsg:
    """A message as a stream keeps it: its sequence, subject, data and when it was stored."""

    seq: int
    subject: str
    data: bytes
    time_us: int


async def read_stream(js: JetStreamContext, stream: str, filters: Sequence[str], upto_seq: int | None = None,
                      batch: int = 512, timeout_s: float = 2.0) -> list[StoredMsg]:
    """The messages of a stream on these subjects, in stream order, up to ``upto_seq`` (inclusive;
    None: all there are now), read with a short-lived consumer that acks nothing."""
    if upto_seq is not None and upto_seq <= 0:
        return []
    config = ConsumerConfig(
        ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, mem_storage=True, inactive_threshold=10.0,
        filter_subject=filters[0] if len(filters) == 1 else None,
        filter_subjects=list(filters) if len(filters) > 1 else None,
    )
    sub = await js.pull_subscribe(filters[0], stream=stream, config=config)
    out: list[StoredMsg] = []
    try:
        left = int((await sub.consumer_info()).num_pending or 0)  # what there is now: read no further
        while left > 0:
            try:
                msgs = await sub.fetch(batch=min(batch, left), timeout=timeout_s)
            except nats.errors.TimeoutError:
                return out
            left -= len(msgs)
            for msg in msgs:
                meta = msg.metadata
                seq = meta.sequence.stream
                if upto_seq is not None and seq > upto_seq:
                    return out
                stamp = meta.timestamp
                out.append(StoredMsg(seq, msg.subject, msg.data,
                                     int(stamp.timestamp() * 1_000_000) if stamp is not None else 0))
        return out
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def erase_messages(js: JetStreamContext, messages: Iterable[tuple[str, int]]) -> tuple[int, int]:
    """Erase single messages, (stream, sequence) each, from JetStream (``STREAM.MSG.DELETE``
    without ``no_erase``: the server overwrites the message, not only unlinks it).  Returns
    (erased, already gone: aged out, or erased before)."""
    erased = gone = 0
    for stream, seq in messages:
        try:
            await js.delete_msg(stream, seq)
            erased += 1
        except NotFoundError:
            gone += 1
        except APIError as exc:
            if exc.err_code in (10037, 10057) or "no message found" in str(exc.description or "").lower():
                gone += 1  # the message, or the stream's messages up to it, are gone already
                continue
            raise BusError(f"cannot erase message {seq} of {stream}: {exc.description or exc}") from exc
    return erased, gone
