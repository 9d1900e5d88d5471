"""Typed Troupe events: one module per family, one codec, one registry."""

from events import audio, cue, danmaku, error, frame, qos, role, run, utterance, viseme
from events.base import DecodeError, Event, EventError, UnknownEventType, derive_id, registry
from events.codec import decode, encode

__all__ = [
    "DecodeError", "Event", "EventError", "UnknownEventType", "audio", "cue", "danmaku",
    "decode", "derive_id", "encode", "error", "frame", "qos", "registry", "role", "run",
    "utterance", "viseme",
]
