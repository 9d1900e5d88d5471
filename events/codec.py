"""The one place events become bytes and bytes become events.

Wire format: plain orjson JSON for events without binary payload.  Events with a
blob field (PCM, JPEG, dead-lettered bytes) are framed as
``MAGIC + u32 big-endian JSON length + JSON + raw bytes`` so that media never
goes through base64.  Any NATS client can publish plain JSON danmaku.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping
from typing import Any

import orjson

from events.base import ENVELOPE_FIELDS, Check, Event, checker, payload_names, registry, run_check
from events.errors import DecodeError

MAGIC = b"\x00TRP"
_HEADER = struct.Struct(">I")
_ENVELOPE_KINDS = (
    ("id", str), ("run", str), ("role", str), ("causation", str), ("correlation", str),
    ("t_ms", int), ("at_ms", int), ("ticked_ms", int),
)
_REQUIRED_ENVELOPE = frozenset({"id", "run"})


def encode(event: Event, at_ms: int | None = None) -> bytes:
    """Serialise an event (envelope, version, payload, raw blob); ``at_ms`` stamps emission time."""
    doc = {"type": event.type, "v": event.v}
    for name in ENVELOPE_FIELDS:
        doc[name] = getattr(event, name)
    if event.seen is None:  # on a stateful actor's outputs only
        del doc["seen"]
    if event.ticked_ms is None:  # on what its clock emitted only
        del doc["ticked_ms"]
    if at_ms is not None and not event.at_ms:
        doc["at_ms"] = at_ms
    doc["payload"] = event.payload()
    body = orjson.dumps(doc)
    if event.blob is None:
        return body
    return frame(body, getattr(event, event.blob))


def frame(body: bytes, blob: bytes) -> bytes:
    """Join an event's JSON and its raw bytes into one message."""
    return MAGIC + _HEADER.pack(len(body)) + body + blob


def split(data: bytes) -> tuple[bytes, bytes | None]:
    """Split a message into its JSON part and its raw blob (None when unframed)."""
    if not data.startswith(MAGIC):
        return data, None
    if len(data) < len(MAGIC) + _HEADER.size:
        raise DecodeError("truncated frame header")
    (length,) = _HEADER.unpack_from(data, len(MAGIC))
    start = len(MAGIC) + _HEADER.size
    if start + length > len(data):
        raise DecodeError("frame length exceeds message")
    return data[start : start + length], data[start + length :]


def decode(data: bytes, defaults: Mapping[str, Any] | None = None) -> Event:
    """Parse bytes into a typed event; ``defaults`` fill envelope fields a producer left out.

    Raises DecodeError (UnknownEventType for unknown types) naming the bad field.
    """
    body, blob = split(data)
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise DecodeError(f"expected a JSON object, got {type(doc).__name__}")
    type_name = doc.get("type")
    if not isinstance(type_name, str):
        raise DecodeError("missing or not a string", "type")
    cls = registry.lookup(type_name)
    version = doc.get("v", cls.v)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= cls.v:
        raise DecodeError(f"unsupported version {version!r} (this build knows 1..{cls.v})", "v")
    payload = doc.get("payload", {})
    if not isinstance(payload, dict):
        raise DecodeError("expected an object", "payload")
    for step in range(version, cls.v):
        payload = cls.upcasters[step](dict(payload))
    return _build(cls, doc, payload, blob, defaults or {})


def _build(
    cls: type[Event], doc: dict[str, Any], payload: dict[str, Any], blob: bytes | None,
    defaults: Mapping[str, Any],
) -> Event:
    plan = _plan(cls)
    kwargs: dict[str, Any] = {}
    for name, kind in _ENVELOPE_KINDS:
        value = doc.get(name)
        if value is None:
            value = defaults.get(name)
            if value is None:
                if name in _REQUIRED_ENVELOPE:
                    raise DecodeError("missing", name)
                continue
        if type(value) is not kind:
            raise DecodeError(f"wrong type {type(value).__name__}", name)
        kwargs[name] = value
    seen = doc.get("seen")
    if seen is not None:
        if not isinstance(seen, dict) or not all(type(v) is int for v in seen.values()):
            raise DecodeError("expected an object of stream positions", "seen")
        kwargs["seen"] = seen
    for name, hint, check, required in plan:
        if name in payload:
            value = payload[name]
            # A str or an int where one is expected (most fields) needs no check; the rest are
            # checked, and lightly coerced (an int where a float is expected).
            kwargs[name] = value if type(value) is hint else run_check(check, value, f"payload.{name}")
        elif required:
            raise DecodeError("missing", f"payload.{name}")
    if cls.blob is not None:
        if blob is None:
            raise DecodeError("binary payload missing (unframed message)", cls.blob)
        kwargs[cls.blob] = blob
    return cls(**kwargs)


def _plan(cls: type[Event]) -> tuple[tuple[str, Any, Check, bool], ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _make_plan(cls)
    return plan


# Derived from class definitions only (a memo, not state): decoding asks for it per event.
_PLANS: dict[type[Event], tuple[tuple[str, Any, Check, bool], ...]] = {}


def _make_plan(cls: type[Event]) -> tuple[tuple[str, Any, Check, bool], ...]:
    hints = registry.field_types(cls.type)
    return tuple(
        (f.name, hints[f.name], checker(hints[f.name]),
         f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(cls)
        if f.name in payload_names(cls)
    )
