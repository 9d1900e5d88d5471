"""Bilibili's danmaku XML as danmaku for a run: the chat of a recorded stream drives a show.

A file holds ``<d p="time,mode,size,color,timestamp,pool,user_hash,id">text</d>`` elements
(``time``: seconds into the video; ``mode`` 1-6 scrolling, bottom, top, reverse; 7 positioned,
whose text is the 5th item of a JSON array; ``user_hash``: the viewer's hashed uid; ``id``:
the danmaku's row id).  Every element becomes one ``DanmakuReceived`` with its offset in the
recording, in order of time; the director validates each as it does any producer's.

The whole file is read and checked before anything is sent: an element without a usable
``p`` stops it with ``file:line: reason`` (nothing partly sent).
"""

from __future__ import annotations

import hashlib
import math
import xml.parsers.expat
from dataclasses import dataclass
from pathlib import Path

import orjson

from app.publish import DanmakuFileError, danmaku_from
from events.danmaku import DanmakuReceived
from events.errors import DecodeError


@dataclass(frozen=True, slots=True)
class Timed:
    """A danmaku and its offset (seconds) from the first one in the recording."""

    at_s: float
    event: DanmakuReceived


def read_bilibili_xml(path: Path, run: str, now_ms: int) -> list[Timed]:
    """Every ``<d>`` element of a Bilibili danmaku XML file, in order of time."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise DanmakuFileError(f"cannot read {path}: {exc}") from None
    digest = hashlib.sha256(content).hexdigest()[:12]
    parser = xml.parsers.expat.ParserCreate()
    found: list[tuple[int, str | None, list[str]]] = []  # (line, p, text pieces)
    current: list[str] | None = None

    def start(name: str, attrs: dict[str, str]) -> None:
        nonlocal current
        if name == "d":
            current = []
            found.append((parser.CurrentLineNumber, attrs.get("p"), current))

    def end(name: str) -> None:
        nonlocal current
        if name == "d":
            current = None

    def text(data: str) -> None:
        if current is not None:
            current.append(data)

    parser.StartElementHandler, parser.EndElementHandler, parser.CharacterDataHandler = start, end, text
    # No DTDs, no entities from outside: a chat file needs neither.
    parser.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)
    try:
        parser.Parse(content, True)
    except xml.parsers.expat.ExpatError as exc:
        raise DanmakuFileError(f"{path}:{exc.lineno}: not well-formed XML: {xml.parsers.expat.ErrorString(exc.code)}") from None
    out: list[tuple[float, int, DanmakuReceived]] = []
    seen: dict[str, int] = {}
    for index, (line, p, pieces) in enumerate(found):
        where = f"{path}:{line}"
        at_s, mode, user, row = _attributes(p, where)
        body = "".join(pieces)
        if mode == 7:
            body = _positioned_text(body, where)
        event_id = f"bili-{row}" if row else f"bili-{digest}-{index}"
        if event_id in seen:
            raise DanmakuFileError(f"{where}: danmaku id {row} is already used on line {seen[event_id]}")
        seen[event_id] = line
        try:
            event = danmaku_from({"id": event_id, "user": f"bili_{user}" if user else "", "text": body},
                                 event_id, run, now_ms)
        except DecodeError as exc:
            raise DanmakuFileError(f"{where}: {exc}") from None
        out.append((at_s, index, event))
    if not out:
        raise DanmakuFileError(f"{path}: no <d> danmaku in the file")
    out.sort(key=lambda item: (item[0], item[1]))
    first = out[0][0]
    return [Timed(at_s - first, event) for at_s, _, event in out]


def _attributes(p: str | None, where: str) -> tuple[float, int, str, str]:
    """(time, mode, user hash, row id) of a ``p`` attribute."""
    if p is None:
        raise DanmakuFileError(f"{where}: <d> without its p attribute")
    fields = p.split(",")
    if len(fields) < 2:
        raise DanmakuFileError(f"{where}: p={p!r} needs at least time and mode")
    try:
        at_s, mode = float(fields[0]), int(fields[1])
    except ValueError:
        raise DanmakuFileError(f"{where}: p={p!r}: time and mode must be numbers") from None
    if not math.isfinite(at_s) or at_s < 0:
        raise DanmakuFileError(f"{where}: p={p!r}: time must be 0 or more seconds")
    user = fields[6].strip() if len(fields) > 6 else ""
    row = fields[7].strip() if len(fields) > 7 else ""
    if row and not row.isalnum():
        raise DanmakuFileError(f"{where}: p={p!r}: the danmaku id must be letters and digits")
    return at_s, mode, "".join(c for c in user if c.isalnum())[:32], row


def _positioned_text(body: str, where: str) -> str:
    """The visible text of a positioned (mode 7) danmaku: ``[x, y, "alpha", duration, text, ...]``."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body  # not the JSON form: the text as it is
    if isinstance(doc, list) and len(doc) > 4 and isinstance(doc[4], str):
        return doc[4]
    raise DanmakuFileError(f"{where}: a positioned danmaku (mode 7) without its text")
