"""Typed Troupe events: one module per family, one codec, one registry."""

from events import (
    audio,
    cue,
    danmaku,
    error,
    frame,
    output,
    qos,
    role,
    run,
    utterance,
    viewer,
    viseme,
)
from events.base import Event, UnknownEventType, derive_id, registry
from events.codec import decode, encode
from events.errors import DecodeError, TroupeError

__all__ = [
    "DecodeError", "Event", "TroupeError", "UnknownEventType", "audio", "cue", "danmaku",
    "decode", "derive_id", "encode", "error", "frame", "output", "qos", "registry", "role", "run",
    "utterance", "viewer", "viseme",
]
