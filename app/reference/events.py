"""The events page, from the event registry, and the JSON Schemas of what producers send."""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from typing import Any

from actors.director import KINDS
from app.reference.markdown import cell, code, header, table, value
from events import registry
from events.base import ENVELOPE_FIELDS, Event, payload_names
from events.danmaku import CONTROLS, DanmakuReceived, OperatorControl
from events.subjects import FAMILIES, MODERATOR, TOKEN, stream_specs

# What each envelope field is (events.base.Event declares them; a KeyError here means a new one).
ENVELOPE_DOCS = {
    "id": "the event's id: JetStream drops a second message with the same id (Nats-Msg-Id)",
    "run": "the run it belongs to (the subject's run token)",
    "role": "the role it is about, if any (then the last token of its subject)",
    "causation": "the id of the event it was made from",
    "correlation": "the id of the danmaku (or cue) that started its chain",
    "t_ms": "show time: milliseconds since the run started",
    "at_ms": "wall-clock milliseconds when it was published",
    "seen": "on a stateful actor's outputs: per input family, the stream position of the last input of the run it had taken in",
    "ticked_ms": "on what a stateful actor's clock emitted: the show time of that tick",
}
# What a producer sends: the schema's file name -> the event class.
PRODUCED: dict[str, type[Event]] = {"danmaku.received.json": DanmakuReceived, "danmaku.control.json": OperatorControl}
_ENUMS: dict[tuple[type[Event], str], tuple[str, ...]] = {(DanmakuReceived, "kind"): KINDS,
                                                         (OperatorControl, "action"): CONTROLS}
_JSON = {str: "string", int: "integer", float: "number", bool: "boolean"}


def type_name(annotation: Any) -> str:
    """An annotation as a reader writes it: ``str | None``, ``tuple[VisemeMark, ...]``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(annotation))
    if typing.get_origin(annotation) is not None:
        args = ", ".join("..." if a is Ellipsis else type_name(a) for a in typing.get_args(annotation))
        return f"{typing.get_origin(annotation).__name__}[{args}]"
    return "None" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


def _doc(cls: type) -> str:
    return inspect.cleandoc(cls.__doc__ or "").replace("\n", " ")


def _fields(cls: type, names: tuple[str, ...]) -> list[str]:
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        if f.name in names:
            if f.default is not dataclasses.MISSING:
                default = code(_json_value(f.default))
            elif f.default_factory is not dataclasses.MISSING:
                default = code(_json_value(f.default_factory()))
            else:
                default = "required"
            rows.append([code(f.name), code(type_name(hints[f.name])), default])
    return table(["field", "type", "default"], rows) if rows else ["No payload fields.", ""]


def _json_value(v: Any) -> str:
    """A default as it travels in JSON."""
    return "null" if v is None else "{}" if v == {} else value(v)


def _kept(seconds: float) -> str:
    return f"{seconds / 86400:g} days" if seconds >= 86400 else f"{seconds / 60:g} min"


def _records(classes: list[type[Event]]) -> list[type]:
    """The records (frozen dataclasses) that payload fields are lists of, in order of appearance."""
    out: list[type] = []
    for cls in classes:
        for hint in typing.get_type_hints(cls).values():
            for arg in typing.get_args(hint):
                if dataclasses.is_dataclass(arg) and isinstance(arg, type) and arg not in out:
                    out.append(arg)
    return out


def page() -> str:
    """``docs/reference/events.md``."""
    classes = [registry.lookup(t) for t in registry.types()]
    lines = header("Events", "the event registry (`events/`)",
                   "Every event is JSON on NATS JetStream: the envelope, the type and its version `v`, and a "
                   "`payload` object. Decoding ignores fields it does not know and rejects types it does not "
                   "know. An event with a binary payload (audio, frames, dead letters) travels as `\\x00TRP`, "
                   "the JSON's length (4 bytes, big-endian), the JSON, then the raw bytes.")
    lines += ["## Envelope", ""]
    hints = typing.get_type_hints(Event)
    lines += table(["field", "type", "what it is"],
                   ([code(n), code(type_name(hints[n])), cell(ENVELOPE_DOCS[n])] for n in ENVELOPE_FIELDS))
    lines += ["## What producers send", "",
              "A producer publishes `danmaku.received` on `troupe.<run>.danmaku.received` (a moderator line, "
              f"`kind` {code(MODERATOR)}, on `troupe.<run>.danmaku.received.moderator`, with a moderator's "
              "credentials) and an operator's `danmaku.control` on `troupe.<run>.danmaku.control`. Their "
              "JSON Schemas (draft 2020-12): [danmaku.received.json](schemas/danmaku.received.json), "
              "[danmaku.control.json](schemas/danmaku.control.json).", ""]
    lines += ["## Streams", "", "One JetStream stream per family; subjects are "
              "`troupe.<run>.<family>.<name>[.<role>]`.", ""]
    lines += table(["family", "stream", "kept", "largest message"],
                   ([f, code(s.name), f"{_kept(s.max_age_s)}, at most {s.max_bytes / 1024**3:g} GiB",
                     f"{s.max_msg_size / 1024**2:g} MiB"] for f, s in zip(FAMILIES, stream_specs(), strict=True)))
    for family in FAMILIES:
        lines += [f"## {family}", ""]
        for cls in (c for c in classes if c.type.split(".")[0] == family):
            blob = f" Its raw bytes: `{cls.blob}`." if cls.blob else ""
            lines += [f"### {cls.type}", "", f"`troupe.<run>.{cls.type}[.<role>]`, version {cls.v}.{blob}", "",
                      cell(_doc(cls)), "", *_fields(cls, payload_names(cls))]
    lines += ["## Records", "", "Payload fields that are lists of records carry each as an object (or a list "
              "of its fields in order).", ""]
    for record in _records(classes):
        names = tuple(f.name for f in dataclasses.fields(record))
        lines += [f"### {record.__name__}", "", cell(_doc(record)), "", *_fields(record, names)]
    return "\n".join(lines)


def _json_type(annotation: Any) -> dict[str, Any]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = [_json_type(a)["type"] for a in typing.get_args(annotation)]
        return {"type": kinds}
    if typing.get_origin(annotation) is tuple:  # tuple[str, ...]: a JSON array of strings
        return {"type": "array", "items": _json_type(typing.get_args(annotation)[0])}
    return {"type": "null" if annotation is type(None) else _JSON[annotation]}


def schema(cls: type[Event]) -> dict[str, Any]:
    """The JSON Schema of the message a producer publishes for ``cls``, as ``events.codec`` decodes
    it (unknown fields are ignored, so objects stay open)."""
    hints = typing.get_type_hints(cls)
    properties: dict[str, Any] = {}
    required = []
    for f in dataclasses.fields(cls):
        if f.name not in payload_names(cls):
            continue
        prop = _json_type(hints[f.name])
        if (cls, f.name) in _ENUMS:
            prop["enum"] = list(_ENUMS[cls, f.name])
        if f.default is dataclasses.MISSING:
            required.append(f.name)
        else:
            prop["default"] = list(f.default) if isinstance(f.default, tuple) else f.default
        properties[f.name] = prop
    payload = {"type": "object", "properties": properties, "required": required}
    envelope: dict[str, Any] = {
        "type": {"const": cls.type}, "v": {"type": "integer", "minimum": 1, "maximum": cls.v},
        **{n: {**_json_type(hints[n] | None), "description": ENVELOPE_DOCS[n]} for n in ENVELOPE_FIELDS
           if n not in ("seen", "ticked_ms")},  # stamped by stateful actors, never sent by a producer
    }
    envelope["run"]["pattern"] = TOKEN.pattern
    doc: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": cls.type, "description": _doc(cls) + " Fields left out take the defaults shown; id, run and "
        "at_ms default to the message's Nats-Msg-Id header (else one made from its stream sequence), the "
        "subject's run and the time JetStream stored it.",
        "type": "object", "required": ["type", "payload"],
        "properties": {**envelope, "payload": {"$ref": "#/$defs/payload"}}, "$defs": {"payload": payload},
    }
    if cls is DanmakuReceived:  # troupe serve and troupe publish --file take the payload and an id
        doc["$defs"]["item"] = {
            "description": "one danmaku as POST /runs/RUN/danmaku and troupe publish --file take it",
            "allOf": [{"$ref": "#/$defs/payload"}],
            "properties": {"id": {"type": "string", "minLength": 1}},
        }
    return doc
