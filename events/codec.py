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

from events.base import ENVELOPE_FIELDS, DecodeError, Event, check_value, registry

MAGIC = b"\x00TRP"
_HEADER = struct.Struct(">I")
_ENVELOPE_TYPES: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "run": str,
    "role": (str, type(None)),
    "causation": (str, type(None)),
    "correlation": (str, type(None)),
    "t_ms": int,
    "at_ms": int,
}


def encode(event: Event) -> bytes:
    """Serialise an event (envelope, version, payload, raw blob)."""
    doc = {"type": event.type, "v": event.v}
    for name in ENVELOPE_FIELDS:
        doc[name] = getattr(event, name)
    doc["payload"] = event.payload()
    body = orjson.dumps(doc)
    if event.blob is None:
        return body
    blob = getattr(event, event.blob)
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
    hints = registry.field_types(cls.type)
    kwargs: dict[str, Any] = {}
    for name in ENVELOPE_FIELDS:
        value = doc.get(name, defaults.get(name))
        if value is None and name in defaults:
            value = defaults[name]
        if value is None:
            if name in ("id", "run"):
                raise DecodeError("missing", name)
            continue
        expected = _ENVELOPE_TYPES[name]
        if not isinstance(value, expected) or isinstance(value, bool):
            raise DecodeError(f"wrong type {type(value).__name__}", name)
        kwargs[name] = value
    for f in dataclasses.fields(cls):
        if f.name in ENVELOPE_FIELDS:
            continue
        if f.name == cls.blob:
            if blob is None:
                raise DecodeError("binary payload missing (unframed message)", f.name)
            kwargs[f.name] = blob
            continue
        if f.name in payload:
            kwargs[f.name] = check_value(payload[f.name], hints[f.name], f"payload.{f.name}")
        elif f.default is dataclasses.MISSING:
            raise DecodeError("missing", f"payload.{f.name}")
    return cls(**kwargs)
