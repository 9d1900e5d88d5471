"""Bilibili's danmaku XML as danmaku for a run: the chat of a recorded stream drives a show.

Two kinds of file share the format:

- a video's danmaku: ``<d p="time,mode,size,color,timestamp,pool,user_hash,id">text</d>``
  (``time``: seconds into the video; ``mode`` 1-6 scrolling, bottom, top, reverse; 7 positioned,
  whose text is the 5th item of a JSON array; ``user_hash``: the viewer's hashed uid; ``id``:
  the danmaku's row id);
- a live room's chat as recorders write it (B站录播姬 / BililiveRecorder): the same ``<d>``
  with ``user="name"`` (the viewer's name), the uid in place of the hash and ``0`` as the row
  id, and paid events beside them: ``<sc ts user price time>text</sc>`` (a Super Chat),
  ``<gift ts user giftname giftcount/>`` and ``<guard ts user level count/>`` (a captain's
  membership bought).

Every element becomes one ``DanmakuReceived`` with its offset in the recording, in order of
time: ``<d>`` a comment from ``user`` (else ``bili_<hash>``), a Super Chat a gift whose text
is its message (its ``price`` the gift's value in CNY), a gift or a membership a gift whose text
names it.  Each is from ``platform`` bilibili; a live recording's viewer is ``bili:<uid>`` (the
``<d>``'s uid field, a paid element's ``uid`` attribute where the recorder wrote one); a video's
file has only a hash of it, which identifies nobody.  Its id is ``bili-<row id>``
where the file gives one, else ``bili-<file digest>-<element index>``, so playing the same file
again sends nothing twice.  The director validates each as it does any producer's.

The whole file is read and checked before anything is sent: an element without a usable
time stops it with ``file:line: reason`` (nothing partly sent).
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

ELEMENTS = ("d", "sc", "gift", "guard")
GUARD_LEVELS = {"1": "总督", "2": "提督", "3": "舰长"}  # a captain's membership, by level


@dataclass(frozen=True, slots=True)
class Timed:
    """A danmaku and its offset (seconds) from the first one in the recording."""

    at_s: float
    event: DanmakuReceived


@dataclass(frozen=True, slots=True)
class _Element:
    """One chat element of the file as read: its name, line, attributes and text."""

    name: str
    line: int
    attrs: dict[str, str]
    pieces: list[str]


def read_bilibili_xml(path: Path, run: str, now_ms: int) -> list[Timed]:
    """Every chat element (``<d>``, ``<sc>``, ``<gift>``, ``<guard>``) of a Bilibili danmaku XML
    file, in order of time."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise DanmakuFileError(f"cannot read {path}: {exc}") from None
    digest = hashlib.sha256(content).hexdigest()[:12]
    out: list[tuple[float, int, DanmakuReceived]] = []
    seen: dict[str, int] = {}
    for index, element in enumerate(_elements(path, content)):
        where = f"{path}:{element.line}"
        at_s, doc, row = _danmaku_of(element, where)
        event_id = f"bili-{row}" if row else f"bili-{digest}-{index}"
        if event_id in seen:
            raise DanmakuFileError(f"{where}: danmaku id {row} is already used on line {seen[event_id]}")
        seen[event_id] = element.line
        try:
            event = danmaku_from({"id": event_id, **doc}, event_id, run, now_ms)
        except DecodeError as exc:
            raise DanmakuFileError(f"{where}: {exc}") from None
        out.append((at_s, index, event))
    if not out:
        raise DanmakuFileError(f"{path}: no <d> danmaku in the file")
    out.sort(key=lambda item: (item[0], item[1]))
    first = out[0][0]
    return [Timed(at_s - first, event) for at_s, _, event in out]


def _elements(path: Path, content: bytes) -> list[_Element]:
    """The file's chat elements, in the order written; broken XML stops it with its line."""
    parser = xml.parsers.expat.ParserCreate()
    found: list[_Element] = []
    current: list[str] | None = None

    def start(name: str, attrs: dict[str, str]) -> None:
        nonlocal current
        if name in ELEMENTS:
            current = []
            found.append(_Element(name, parser.CurrentLineNumber, attrs, current))

    def end(name: str) -> None:
        nonlocal current
        if name in ELEMENTS:
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
    return found


def _danmaku_of(element: _Element, where: str) -> tuple[float, dict[str, object], str]:
    """(offset, the producer's danmaku object, row id or "") of one element."""
    attrs, body = element.attrs, "".join(element.pieces)
    name = attrs.get("user", "").strip()
    if element.name == "d":
        at_s, mode, user, row = _attributes(attrs.get("p"), where)
        if mode == 7:
            body = _positioned_text(body, where)
        # A live recording names its viewer (user=...) and puts their uid where a video's file
        # has a hash of it: only a uid identifies a viewer.
        uid = user if name else ""
        return at_s, {"user": name or (f"bili_{user}" if user else ""), "text": body, **_viewer(uid)}, row
    at_s = _seconds(attrs.get("ts"), f"<{element.name}> ts", where)
    paid: dict[str, object] = {}
    if element.name == "sc":  # a Super Chat: a paid message, answered as a gift is
        text = body.strip() or f"Super Chat ¥{attrs.get('price', '?')}"
        price = _price(attrs.get("price", ""))
        paid = {"value": price, "currency": "CNY"} if price else {}
    elif element.name == "gift":
        text = f"{attrs.get('giftname', '').strip() or 'gift'} x{attrs.get('giftcount', '1').strip() or '1'}"
    else:
        level = GUARD_LEVELS.get(attrs.get("level", "").strip(), "舰长")
        text = f"{level} x{attrs.get('count', '1').strip() or '1'}"
    return at_s, {"user": name, "text": text, "kind": "gift", **paid, **_viewer(attrs.get("uid", "").strip())}, ""


def _viewer(uid: str) -> dict[str, object]:
    """The viewer's fields of a recorded element: ``bili:<uid>`` where it has a uid (0: masked)."""
    viewer = f"bili:{uid}" if uid.isdigit() and uid.strip("0") else ""
    return {"platform": "bilibili", **({"viewer": viewer} if viewer else {})}


def _price(raw: str) -> float:
    try:
        price = float(raw)
    except ValueError:
        return 0.0
    return price if math.isfinite(price) and price > 0 else 0.0


def _seconds(raw: str | None, what: str, where: str) -> float:
    """A time in seconds, 0 or more."""
    if raw is None:
        raise DanmakuFileError(f"{where}: {what} is missing")
    try:
        at_s = float(raw)
    except ValueError:
        raise DanmakuFileError(f"{where}: {what}={raw!r} must be a number of seconds") from None
    if not math.isfinite(at_s) or at_s < 0:
        raise DanmakuFileError(f"{where}: {what}={raw!r}: time must be 0 or more seconds")
    return at_s


def _attributes(p: str | None, where: str) -> tuple[float, int, str, str]:
    """(time, mode, user hash, row id) of a ``p`` attribute; row id "" where the file gives none
    (a live room's recorder writes 0 for every danmaku)."""
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
    return at_s, mode, "".join(c for c in user if c.isalnum())[:32], "" if row.strip("0") == "" else row


def _positioned_text(body: str, where: str) -> str:
    """The visible text of a positioned (mode 7) danmaku: ``[x, y, "alpha", duration, text, ...]``."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body  # not the JSON form: the text as it is
    if isinstance(doc, list) and len(doc) > 4 and isinstance(doc[4], str):
        return doc[4]
    raise DanmakuFileError(f"{where}: a positioned danmaku (mode 7) without its text")
