"""The event envelope, the type registry and payload validation.

Every event is a frozen, slotted dataclass: the envelope fields below plus the
payload fields a family module declares.  A registry maps the stable type string
(``danmaku.received``) to its class; the codec looks classes up there and never
uses Python import paths on the wire.
"""

from __future__ import annotations

import dataclasses
import hashlib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from events.errors import DecodeError

ENVELOPE_FIELDS = ("id", "run", "role", "causation", "correlation", "t_ms", "at_ms")


class UnknownEventType(DecodeError):
    """The type string is not one this version knows."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of all events: the envelope shared by every family."""

    type: ClassVar[str] = ""
    v: ClassVar[int] = 1
    # Name of the one payload field that travels as raw bytes after the JSON.
    blob: ClassVar[str | None] = None
    # upcasters[n] turns a version-n payload dict into a version-(n+1) one.
    upcasters: ClassVar[Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {}

    id: str
    run: str
    role: str | None = None
    causation: str | None = None
    correlation: str | None = None
    t_ms: int = 0
    at_ms: int = 0

    def payload(self) -> dict[str, Any]:
        """The payload fields as a dict (the blob field excluded)."""
        return {name: getattr(self, name) for name in payload_names(type(self))}

    def derive(self, discriminator: str | int) -> str:
        """A deterministic id for an event caused by this one."""
        return derive_id(self.id, discriminator)


E = TypeVar("E", bound=type[Event])


def payload_names(cls: type[Event]) -> tuple[str, ...]:
    """The payload field names of an event class (envelope and blob excluded), in order."""
    names = _PAYLOAD_NAMES.get(cls)
    if names is None:
        names = _PAYLOAD_NAMES[cls] = tuple(
            f.name for f in dataclasses.fields(cls) if f.name not in ENVELOPE_FIELDS and f.name != cls.blob
        )
    return names


# Derived from class definitions only (a memo, not state): the codec asks for every event.
_PAYLOAD_NAMES: dict[type[Event], tuple[str, ...]] = {}


class EventRegistry:
    """Maps stable type strings to event classes."""

    def __init__(self) -> None:
        self._classes: dict[str, type[Event]] = {}
        self._fields: dict[str, dict[str, Any]] = {}

    def register(self, cls: E) -> E:
        """Register an event class under its ``type`` string (usable as a decorator)."""
        if not cls.type:
            raise ValueError(f"{cls.__name__} has no type string")
        known = self._classes.get(cls.type)
        if known is not None and known is not cls:
            raise ValueError(f"type {cls.type!r} already registered by {known.__name__}")
        self._classes[cls.type] = cls
        hints = typing.get_type_hints(cls)
        self._fields[cls.type] = {
            f.name: hints[f.name] for f in dataclasses.fields(cls)
        }
        return cls

    def lookup(self, type_name: str) -> type[Event]:
        """The class for a type string; raises UnknownEventType."""
        try:
            return self._classes[type_name]
        except KeyError:
            raise UnknownEventType(f"unknown event type {type_name!r}", "type") from None

    def field_types(self, type_name: str) -> dict[str, Any]:
        """Resolved field annotations of a registered type."""
        self.lookup(type_name)
        return self._fields[type_name]

    def types(self) -> list[str]:
        """Every registered type string, sorted."""
        return sorted(self._classes)


registry = EventRegistry()


def derive_id(parent: str, discriminator: str | int) -> str:
    """A short deterministic id from a parent id and a discriminator."""
    digest = hashlib.blake2b(f"{parent}/{discriminator}".encode(), digest_size=10).hexdigest()
    return digest


def check_value(value: Any, annotation: Any, field: str) -> Any:
    """Validate (and lightly coerce) a decoded JSON value against an annotation."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return check_value(value, option, field)
            except DecodeError as exc:
                errors.append(exc.reason)
        raise DecodeError("; ".join(errors) or "invalid value", field)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise DecodeError(f"expected a list, got {type(value).__name__}", field)
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(check_value(v, args[0], f"{field}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise DecodeError(f"expected {len(args)} items, got {len(value)}", field)
        return tuple(check_value(v, a, f"{field}[{i}]") for i, (v, a) in enumerate(zip(args, value, strict=True)))
    if origin is dict:
        if not isinstance(value, dict):
            raise DecodeError(f"expected an object, got {type(value).__name__}", field)
        return value
    if annotation is Any:
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DecodeError(f"expected a number, got {type(value).__name__}", field)
        return float(value)
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise DecodeError(f"expected an integer, got {type(value).__name__}", field)
        return value
    if annotation in (str, bool, bytes):
        if not isinstance(value, annotation) or (annotation is not bool and isinstance(value, bool)):
            raise DecodeError(f"expected {annotation.__name__}, got {type(value).__name__}", field)
        return value
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return build_record(annotation, value, field)
    raise DecodeError(f"unsupported annotation {annotation!r}", field)


def build_record(cls: type, value: Any, field: str) -> Any:
    """Build a nested frozen record (e.g. a phoneme or a viseme) from a JSON object or list."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    if isinstance(value, list):
        if len(value) != len(names):
            raise DecodeError(f"expected {len(names)} items, got {len(value)}", field)
        value = dict(zip(names, value, strict=True))
    if not isinstance(value, dict):
        raise DecodeError(f"expected an object, got {type(value).__name__}", field)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in value:
            kwargs[f.name] = check_value(value[f.name], hints[f.name], f"{field}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise DecodeError("missing", f"{field}.{f.name}")
    return cls(**kwargs)
