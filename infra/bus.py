"""NATS connection and idempotent provisioning of streams and durable consumers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, PubAck, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from events import codec
from events.base import Event
from events.errors import BusError
from events.subjects import StreamSpec, family_filter, stream_name, stream_specs, subject_for

log = logging.getLogger(__name__)


def masked_url(url: str) -> str:
    """A NATS URL fit for a log line: its password replaced by ``***``."""
    parsed = urlparse(url if "://" in url else f"nats://{url}")
    if parsed.password is None:
        return url
    return parsed._replace(netloc=f"{parsed.username}:***@{parsed.hostname}:{parsed.port or 4222}").geturl()


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
    # check that the server answers at all, so a wrong URL fails fast with one line.
    parsed = urlparse(url if "://" in url else f"nats://{url}")
    try:
        _reader, writer = await asyncio.wait_for(
            asyncio.open_connection(parsed.hostname or "127.0.0.1", parsed.port or 4222), 3.0
        )
        writer.close()
    except (OSError, TimeoutError) as exc:
        raise BusError(f"cannot connect to NATS at {where}: {exc}") from None
    connecting = asyncio.ensure_future(nats.connect(
        url, name=name, connect_timeout=3, max_reconnect_attempts=-1,
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


def _stream_config(spec: StreamSpec) -> StreamConfig:
    return StreamConfig(
        name=spec.name, subjects=spec.subjects, storage=StorageType.FILE,
        max_age=spec.max_age_s, max_bytes=spec.max_bytes, max_msg_size=spec.max_msg_size,
        duplicate_window=120.0,
    )


_COMPARED = ("subjects", "storage", "max_age", "max_bytes", "max_msg_size", "duplicate_window")


async def provision_streams(js: JetStreamContext, frame_max_age_s: float = 600.0) -> list[str]:
    """Create or update every family stream; returns the names it had to change."""
    changed = []
    for spec in stream_specs(frame_max_age_s):
        wanted = _stream_config(spec)
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
    return changed


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A durable pull consumer: one per actor kind and input family."""

    durable: str
    family: str
    filters: tuple[str, ...] = ()
    max_deliver: int = 5
    ack_wait_s: float = 30.0
    max_ack_pending: int = 1024

    @property
    def stream(self) -> str:
        return stream_name(self.family)

    def config(self) -> ConsumerConfig:
        filters = list(self.filters) or [family_filter(self.family)]
        return ConsumerConfig(
            durable_name=self.durable, ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL, max_deliver=self.max_deliver,
            ack_wait=self.ack_wait_s, max_ack_pending=self.max_ack_pending,
            filter_subject=filters[0] if len(filters) == 1 else None,
            filter_subjects=filters if len(filters) > 1 else None,
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
            await js.add_consumer(spec.stream, wanted)  # same durable name: an update
            changed.append(spec.durable)
    return changed


# Every publish carries a deterministic id as Nats-Msg-Id: JetStream drops a duplicate
# (a redelivered input's outputs, a producer's retry) within the stream's window.
MSG_ID = "Nats-Msg-Id"


async def publish_raw(js: JetStreamContext, subject: str, data: bytes, msg_id: str) -> asyncio.Future[Any]:
    """Publish an encoded message with its dedupe id; returns the future of its ack."""
    return await js.publish_async(subject, data, headers={MSG_ID: msg_id})


async def publish_event(js: JetStreamContext, event: Event, at_ms: int | None = None) -> asyncio.Future[Any]:
    """Publish an event on its subject with its id as dedupe id; returns the future of its ack."""
    return await publish_raw(js, subject_for(event), codec.encode(event, at_ms=at_ms), event.id)


async def publish_events(js: JetStreamContext, events: Sequence[Event], at_ms: int | None = None) -> list[PubAck]:
    """Publish events and wait until JetStream stored them all (raises on the first failure)."""
    futures = [await publish_event(js, e, at_ms) for e in events]
    return list(await asyncio.gather(*futures))
