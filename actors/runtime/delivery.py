"""One fetched JetStream message on its way through an actor: its metadata, decoding, its outputs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
from nats.aio.msg import Msg

from events import codec
from events.base import Event
from events.errors import DecodeError
from events.subjects import misplaced, run_of, type_of
from infra.bus import MSG_ID, ConsumerSpec


@dataclass(frozen=True, slots=True)
class AckMetadata:
    """What the runtime needs from a JetStream message's reply subject."""

    delivered: int
    stream_seq: int
    timestamp_ns: int


def ack_metadata(msg: Msg) -> AckMetadata:
    """Parse ``$JS.ACK.[domain.hash.]stream.consumer.delivered.sseq.cseq.ts.pending``.

    Cheaper than ``msg.metadata``, which also builds datetimes and sequence objects.
    """
    tokens = (msg.reply or "").split(".")
    if len(tokens) == 9:
        base = 4
    elif len(tokens) >= 11:
        base = 6
    else:
        meta = msg.metadata
        ts = int(meta.timestamp.timestamp() * 1e9) if meta.timestamp else 0
        return AckMetadata(meta.num_delivered or 1, meta.sequence.stream, ts)
    return AckMetadata(int(tokens[base]), int(tokens[base + 1]), int(tokens[base + 3]))


@dataclass(slots=True)
class Delivery:
    """One fetched message and what became of it."""

    msg: Msg
    meta: AckMetadata | None = None
    event: Event | None = None
    outputs: list[Event] = field(default_factory=list)
    futures: list[asyncio.Future[Any]] = field(default_factory=list)
    error: str | None = None
    permanent: bool = False
    queued: bool = False      # waiting in the actor's scheduler
    streamed: list[Event] = field(default_factory=list)  # a generator's outputs, published as yielded
    republished: int = 0      # times its outputs were published again (a stream without a leader for a while)
    left: bool = False        # neither acked nor retried: left to JetStream's redelivery (stopped mid-outage)
    progress_ms: int = 0      # when JetStream was last told it is still being worked on
    hop_ms: float | None = None  # from its emission to its fetch (observed once it is handled)
    joins: bool | None = None  # a run.started: whether the actor opens the run (decided on arrival)

    @property
    def run(self) -> str:
        return self.event.run if self.event is not None else "_"

    def fail(self, error: str, permanent: bool = False) -> None:
        self.error, self.permanent = error, permanent


def message_key(spec: ConsumerSpec, meta: AckMetadata) -> str:
    """A deterministic name for a message: its family and stream sequence."""
    return f"{spec.family}-{meta.stream_seq}"


def message_id(msg: Msg, fallback: str) -> str:
    """The id an undecodable message would have had: its JSON's ``id``, its Nats-Msg-Id, else ``fallback``."""
    try:
        doc = orjson.loads(codec.split(msg.data)[0])
    except (orjson.JSONDecodeError, DecodeError):
        doc = None
    ident = doc.get("id") if isinstance(doc, dict) else None
    if isinstance(ident, str) and ident:
        return ident
    return (msg.headers or {}).get(MSG_ID) or fallback


def decode(d: Delivery, spec: ConsumerSpec) -> DecodeError | None:
    """Decode a delivery in place (synchronously: the hot path); the error when it cannot be."""
    meta = d.meta = ack_metadata(d.msg)
    run = run_of(d.msg.subject) or "_"
    defaults = {
        "id": (d.msg.headers or {}).get(MSG_ID) or message_key(spec, meta),
        "run": run,
        "at_ms": meta.timestamp_ns // 1_000_000,
    }
    try:
        event = codec.decode(d.msg.data, defaults)
        if event.run != run:
            raise DecodeError(f"run {event.run!r} does not match the subject's run {run!r}", "run")
        if event.type != type_of(d.msg.subject):  # e.g. a cue.issued sent as a danmaku
            raise DecodeError(f"wrong event type {event.type!r} for this subject", "type")
        wrong_place = misplaced(event, d.msg.subject)
        if wrong_place is not None:  # e.g. a moderator line from a producer's credentials
            raise DecodeError(wrong_place, "kind")
    except DecodeError as exc:
        d.fail(f"undecodable: {exc}", permanent=True)
        return exc
    d.event = event
    return None
