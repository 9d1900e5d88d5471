"""The event envelope, the type registry and payload validation.

Every event is a frozen, slotted dataclass: the envelope (``ENVELOPE_FIELDS``) plus the payload
fields its family module (``events.danmaku``, ``events.cue``, ...) declares.  A registry maps the
stable type string (``danmaku.received``) to its class; the codec looks classes up there and
never uses Python import paths on the wire.

The envelope:

- ``id``: the event's name, unique in the store and sent as the message's ``Nats-Msg-Id``, so
  that JetStream drops a second publish of it within the stream's duplicate window
  (``events.subjects``).  What an actor emits gets an id derived from its cause
  (``derive_id(parent, discriminator)``: BLAKE2b of ``"parent/discriminator"``, 10 bytes as 20 hex
  characters), so handling the same input again (a redelivery, a takeover, re-execution) gives
  the same ids.  The roots are named by whoever publishes them: ``<run>-start``, ``<run>-end`` and
  ``<run>-script-<i>`` by the show's process; a producer's danmaku by the producer, else by its
  ``Nats-Msg-Id``, else ``<family>-<stream sequence>`` (the runtime fills it in as it decodes).
- ``run``: the run it belongs to (a subject token: it is in the event's subject too).
- ``role``: the role it concerns, if one (then the last token of its subject).
- ``causation``: the id of the event whose handling emitted it; None for a root (a viewer's
  comment, ``run.started``).
- ``correlation``: the id of the chain's root, for a reply the danmaku it answers, carried by
  every event that follows from it, so that ``troupe inspect RUN --correlation ID`` follows one
  comment through its cue, reply, speech and visemes to the frames that show it.
- ``t_ms``: show time, in ms since the run's ``started_at_ms``: the clock handlers decide by,
  and the one re-execution replays.
- ``at_ms``: wall-clock ms when it was emitted (stamped as it is published when it has none;
  a producer's message without one gets its stream timestamp as it is decoded).
- ``seen``: on what a run's stateful actor (director, lipsync, render, sink) emits, the inputs
  it had taken in of that run when it emitted it: for each input family, the stream position
  (JetStream sequence) of the last one.  Inputs of several streams reach an actor in an order
  no stream holds; this records it, so that re-execution and a takeover hand them over in that
  order again (``actors.kernel.handling_order``).  None elsewhere.
- ``ticked_ms``: on what such an actor's clock emitted (a tick), the show time of that tick, so
  that re-execution and a takeover tick it there again, after the inputs ``seen`` says it had
  taken in; None on what a handler emitted.

Encoding lives in ``events.codec``: a JSON object of ``type``, ``v``, the envelope and
``payload``; an event with a ``blob`` field (audio, a frame's JPEG) travels as the JSON framed
with its raw bytes after it, never base64.  ``v`` is the payload's schema version: an older
payload is brought up to date on decode by the class's ``upcasters``, one version at a time.
Decoding ignores payload fields it does not know, rejects types it does not know
(``UnknownEventType``), checks each payload field against its annotation (``check_value``), and
names the field that is wrong (``DecodeError``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from events.errors import DecodeError

ENVELOPE_FIELDS = ("id", "run", "role", "causation", "correlation", "t_ms", "at_ms", "seen", "ticked_ms")


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
    # False for an output that only records when its input was taken in (``danmaku.waiting``):
    # it answers nothing, the input's answer is still to come (a takeover publishes the answer
    # its rebuilt state makes, where the last holder died before publishing it).
    answers: ClassVar[bool] = True
    # Payload fields that measure the machine (what drawing a frame cost), not what the actor
    # decided: re-execution does not compare them.
    measured: ClassVar[tuple[str, ...]] = ()
    # Payload fields that hold a viewer's personal text (what they wrote, their name and id, what
    # the stage wrote from it): what ``events.viewer.redact`` blanks when a viewer is forgotten.
    personal: ClassVar[tuple[str, ...]] = ()

    id: str
    run: str
    role: str | None = None
    causation: str | None = None
    correlation: str | None = None
    t_ms: int = 0
    at_ms: int = 0
    seen: dict[str, int] | None = None
    ticked_ms: int | None = None

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
    return run_check(checker(annotation), value, field)


def run_check(check: Check, value: Any, field: str) -> Any:
    """``check_value`` with the annotation's check already looked up (``checker``)."""
    try:
        return check(value)
    except _Bad as exc:
        raise DecodeError(exc.reason, field + exc.path) from None


def build_record(cls: type, value: Any, field: str) -> Any:
    """Build a nested frozen record (e.g. a phoneme or a viseme) from a JSON object or list."""
    return check_value(value, cls, field)


class _Bad(Exception):
    """A value that does not fit; ``path`` is where below the value checked (``[2].name``)."""

    def __init__(self, reason: str, path: str = "") -> None:
        self.reason = reason
        self.path = path


Check = Callable[[Any], Any]


def checker(annotation: Any) -> Check:
    """The check of an annotation, made once: messages are decoded by the thousand a second and
    their frames carry records (marks, visemes), so nothing of the annotation is looked into
    again per value."""
    try:
        return _checker(annotation)
    except TypeError:  # an annotation that cannot be a key (none of Troupe's events have one)
        return _checker.__wrapped__(annotation)


@functools.cache
def _checker(annotation: Any) -> Check:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return _union(typing.get_args(annotation))
    if origin is tuple:
        return _tuple(typing.get_args(annotation))
    if origin is dict:
        def a_dict(value: Any) -> Any:
            if not isinstance(value, dict):
                raise _Bad(f"expected an object, got {type(value).__name__}")
            return value
        return a_dict
    if annotation is Any:
        return lambda value: value
    if annotation is float:
        def a_float(value: Any) -> float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _Bad(f"expected a number, got {type(value).__name__}")
            return float(value)
        return a_float
    if annotation is int:
        def an_int(value: Any) -> int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise _Bad(f"expected an integer, got {type(value).__name__}")
            return value
        return an_int
    if annotation in (str, bool, bytes):
        def a_scalar(value: Any) -> Any:
            if not isinstance(value, annotation) or (annotation is not bool and isinstance(value, bool)):
                raise _Bad(f"expected {annotation.__name__}, got {type(value).__name__}")
            return value
        return a_scalar
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return _record(annotation)

    def unsupported(value: Any) -> Any:
        raise _Bad(f"unsupported annotation {annotation!r}")
    return unsupported


def _union(options: tuple[Any, ...]) -> Check:
    nullable = type(None) in options
    checks = [checker(o) for o in options if o is not type(None)]

    def a_union(value: Any) -> Any:
        if value is None and nullable:
            return None
        errors = []
        for check in checks:
            try:
                return check(value)
            except _Bad as exc:
                errors.append(exc.reason)
        raise _Bad("; ".join(errors) or "invalid value")
    return a_union


def _tuple(args: tuple[Any, ...]) -> Check:
    if len(args) == 2 and args[1] is Ellipsis:
        each = checker(args[0])

        def many(value: Any) -> tuple[Any, ...]:
            if not isinstance(value, list | tuple):
                raise _Bad(f"expected a list, got {type(value).__name__}")
            try:
                return tuple(map(each, value))
            except _Bad as exc:  # which item: found again, on the failing path only
                i = next(i for i, v in enumerate(value) if not _fits(each, v))
                raise _Bad(exc.reason, f"[{i}]{exc.path}") from None
        return many
    checks = [checker(a) for a in args]

    def fixed(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, list | tuple):
            raise _Bad(f"expected a list, got {type(value).__name__}")
        if len(checks) != len(value):
            raise _Bad(f"expected {len(checks)} items, got {len(value)}")
        out = []
        for i, (check, v) in enumerate(zip(checks, value, strict=True)):
            try:
                out.append(check(v))
            except _Bad as exc:
                raise _Bad(exc.reason, f"[{i}]{exc.path}") from None
        return tuple(out)
    return fixed


def _fits(check: Check, value: Any) -> bool:
    try:
        check(value)
    except _Bad:
        return False
    return True


def _record(cls: type) -> Check:
    fields = [(name, checker(hint), required) for name, hint, required in record_fields(cls)]
    names = [name for name, _, _ in fields]

    def a_record(value: Any) -> Any:
        if isinstance(value, list):
            if len(value) != len(names):
                raise _Bad(f"expected {len(names)} items, got {len(value)}")
            value = dict(zip(names, value, strict=True))
        if not isinstance(value, dict):
            raise _Bad(f"expected an object, got {type(value).__name__}")
        kwargs = {}
        for name, check, required in fields:
            if name in value:
                try:
                    kwargs[name] = check(value[name])
                except _Bad as exc:
                    raise _Bad(exc.reason, f".{name}{exc.path}") from None
            elif required:
                raise _Bad("missing", f".{name}")
        return cls(**kwargs)
    return a_record


@functools.cache
def record_fields(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """A record's fields: name, resolved annotation, required (resolved once per class: a frame's
    marks and a track's visemes are records, decoded by the thousand a second)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                 for f in dataclasses.fields(cls))
