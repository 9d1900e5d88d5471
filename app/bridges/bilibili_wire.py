"""Bilibili live danmaku's wire layer, shared by both routes (``app.bridges.bilibili``, the web
room; ``app.bridges.bilibili_open``, the Open Live platform): the packet framing, the commands'
common parts, ``request_json`` and ``LiveSocket``.

A packet is a 16-byte big-endian header (length u32, header length u16 = 16, protocol version
u16, operation u32, sequence u32) and a body.  Versions: 0 JSON, 1 a heartbeat's or an auth's
body, 2 zlib, 3 brotli; a compressed body holds several whole packets side by side.  Operations:
2 heartbeat, 3 its reply (the room's popularity, u32), 5 commands (JSON ``{"cmd": ...}``; the
name may carry a suffix after ``:``), 7 auth, 8 its reply (``{"code": 0}``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import struct
import zlib
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from typing import Any

import aiohttp
import orjson

from app.bridges.base import BridgeFatal, ConnectionLost, Item, PlatformNotice
from events.errors import DecodeError

try:
    import brotli
except ImportError:  # without it the connector asks the server for zlib (protocol 2)
    brotli = None
_DECOMPRESS_ERRORS: tuple[type[Exception], ...] = (zlib.error, *((brotli.error,) if brotli else ()))

PLATFORM = "bilibili"
HEADER = struct.Struct(">IHHII")
PROTO_JSON, PROTO_INT, PROTO_ZLIB, PROTO_BROTLI = 0, 1, 2, 3
OP_HEARTBEAT, OP_HEARTBEAT_REPLY, OP_MESSAGE, OP_AUTH, OP_AUTH_REPLY = 2, 3, 5, 7, 8
MAX_NESTING = 3           # compressed packets inside compressed packets: the server uses one level


@dataclasses.dataclass(frozen=True, slots=True)
class Packet:
    """One framed packet (compressed ones are unpacked into the packets they hold)."""

    op: int
    body: bytes
    protover: int = PROTO_JSON
    seq: int = 1


def pack(op: int, body: bytes = b"", protover: int = PROTO_INT, seq: int = 1) -> bytes:
    """One packet: the header and ``body``, compressed here for protocol 2 (zlib) or 3 (brotli)."""
    if protover == PROTO_ZLIB:
        body = zlib.compress(body)
    elif protover == PROTO_BROTLI:
        if brotli is None:
            raise BridgeFatal("protocol 3 needs the brotli package (pip install brotli)")
        body = brotli.compress(body, quality=5)
    return HEADER.pack(HEADER.size + len(body), HEADER.size, protover, op, seq) + body


def pack_commands(cmds: Iterable[Mapping[str, Any] | bytes], protover: int = PROTO_BROTLI) -> bytes:
    """Commands as the server sends them: op-5 JSON packets, for protocol 2 or 3 all compressed
    into one packet, for protocol 0 side by side."""
    inner = b"".join(pack(OP_MESSAGE, c if isinstance(c, bytes) else orjson.dumps(c), PROTO_JSON)
                     for c in cmds)
    return inner if protover == PROTO_JSON else pack(OP_MESSAGE, inner, protover)


def unpack(data: bytes, _depth: int = 0) -> list[Packet]:
    """The packets in one WebSocket frame, compressed ones opened; ``DecodeError`` if malformed."""
    packets: list[Packet] = []
    offset = 0
    while offset < len(data):
        if len(data) - offset < HEADER.size:
            raise DecodeError(f"{len(data) - offset} bytes left, less than a header", "packet")
        length, header_len, protover, op, seq = HEADER.unpack_from(data, offset)
        if header_len < HEADER.size or length < header_len or offset + length > len(data):
            raise DecodeError(f"length {length}/{header_len} at {offset} of {len(data)} bytes", "packet")
        body = data[offset + header_len:offset + length]
        offset += length
        if protover in (PROTO_ZLIB, PROTO_BROTLI):
            if _depth >= MAX_NESTING:
                raise DecodeError("compressed packets nested too deep", "packet")
            packets.extend(unpack(_decompress(body, protover), _depth + 1))
        else:
            packets.append(Packet(op, body, protover, seq))
    return packets


def _decompress(body: bytes, protover: int) -> bytes:
    try:
        if protover == PROTO_ZLIB:
            return zlib.decompress(body)
        if brotli is None:
            raise DecodeError("a brotli packet, and brotli is not installed", "packet")
        return bytes(brotli.decompress(body))
    except _DECOMPRESS_ERRORS as exc:
        raise DecodeError(f"protocol {protover} body: {exc}", "packet") from exc


# --- what both routes' commands share ---------------------------------------------------------

def viewer_id(uid: int) -> str:
    """``bili:<uid>``, or "" for uid 0 (a masked or anonymous viewer: never identified)."""
    return f"bili:{uid}" if uid else ""


def digest(*parts: object) -> str:
    """A stable id for a message the platform gave no id: the same packet, the same digest."""
    return hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=10).hexdigest()


def chat_badges(admin: bool = False, guard: int = 0, medal: int = 0) -> tuple[str, ...]:
    """Bilibili's marks made common: room admin, guard (舰长 3, 提督 2, 总督 1), fan medal level."""
    out = ["moderator"] if admin else []
    if guard in (1, 2, 3):
        out += ["member", f"guard:{guard}"]
    if medal:
        out.append(f"medal:{medal}")
    return tuple(out)


def parse_body(body: bytes, parse: Callable[[dict[str, Any]], Item]) -> Item:
    """One op-5 body through ``parse``; what cannot be read is an ``unparsed`` notice."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return PlatformNotice(PLATFORM, "unparsed", f"not JSON: {exc}")
    if not isinstance(doc, dict) or not isinstance(doc.get("cmd"), str):
        return PlatformNotice(PLATFORM, "unparsed", "no cmd")
    try:
        return parse(doc)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        return PlatformNotice(PLATFORM, "unparsed", f"{doc['cmd']}: {type(exc).__name__}: {exc}")


async def request_json(http: aiohttp.ClientSession, method: str, url: str,
                       limits: aiohttp.ClientTimeout, **kwargs: Any) -> dict[str, Any]:
    """One API call's JSON object; an unreachable, failing or garbled server is ``ConnectionLost``."""
    try:
        async with http.request(method, url, timeout=limits, **kwargs) as resp:
            if resp.status != 200:
                raise ConnectionLost(f"{method} {url}: HTTP {resp.status}")
            doc = await resp.json(loads=orjson.loads, content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise ConnectionLost(f"{method} {url}: {exc!r}") from exc
    if not isinstance(doc, dict):
        raise ConnectionLost(f"{method} {url}: not a JSON object")
    return doc


# --- the WebSocket ----------------------------------------------------------------------------

class LiveSocket:
    """The danmaku WebSocket both routes speak: auth (op 7, its reply op 8), a heartbeat (op 2)
    every ``heartbeat_s``, frames unpacked and parsed; nothing at all for ``silence_s`` (the
    heartbeat replies included) ends it with ``ConnectionLost``."""

    def __init__(self, owner: str, parse: Callable[[dict[str, Any]], Item], heartbeat_s: float,
                 silence_s: float, connect_s: float) -> None:
        self.owner = owner
        self.popularity = 0            # the last heartbeat reply's number
        self._parse = parse
        self._heartbeat_s = heartbeat_s
        self._silence_s, self._connect_s = silence_s, connect_s
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._beat: asyncio.Task[None] | None = None
        self._early: list[Item] = []   # what came in the auth reply's frame, yielded first
        self._lost: ConnectionLost | None = None

    async def open(self, http: aiohttp.ClientSession, url: str, auth: bytes) -> None:
        """Connect, authenticate, start the heartbeats: a refused auth is ``BridgeFatal``."""
        await self.close()
        self._lost = None
        try:
            async with asyncio.timeout(self._connect_s):
                ws = await http.ws_connect(url, max_msg_size=0)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise ConnectionLost(f"{self.owner}: cannot open {url}: {exc!r}") from exc
        self._ws = ws
        try:
            await ws.send_bytes(pack(OP_AUTH, auth))
            await self._await_auth(ws)
        except BaseException:
            await self.close()
            raise
        self._beat = asyncio.create_task(self._heartbeats(ws), name=f"{self.owner} heartbeat")

    async def _await_auth(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        try:
            async with asyncio.timeout(self._connect_s):
                while True:   # the reply comes first; whatever shares its frame is kept for items()
                    msg = await ws.receive()
                    if msg.type != aiohttp.WSMsgType.BINARY:
                        raise ConnectionLost(f"{self.owner}: ended before the auth reply ({msg.type.name})")
                    packets = unpack(msg.data)
                    self._early += [self._item(p) for p in packets if p.op != OP_AUTH_REPLY]
                    reply = next((p.body for p in packets if p.op == OP_AUTH_REPLY), None)
                    if reply is not None:
                        code = orjson.loads(reply).get("code")
                        break
        except TimeoutError:
            raise ConnectionLost(f"{self.owner}: no auth reply in {self._connect_s:g} s") from None
        except (ValueError, AttributeError) as exc:   # DecodeError, JSONDecodeError, not an object
            raise ConnectionLost(f"{self.owner}: unreadable auth reply: {exc}") from exc
        if code != 0:
            raise BridgeFatal(f"{self.owner}: the danmaku server refused the auth (code {code}): "
                              "check the cookie, token or identity code")

    async def _heartbeats(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        try:
            while not ws.closed:
                await ws.send_bytes(pack(OP_HEARTBEAT))
                await asyncio.sleep(self._heartbeat_s)
        except (ConnectionError, aiohttp.ClientError) as exc:  # the reader sees the end too
            self._lost = ConnectionLost(f"{self.owner}: heartbeat not sent: {exc!r}")

    def _item(self, packet: Packet) -> Item:
        if packet.op == OP_MESSAGE:
            return parse_body(packet.body, self._parse)
        if packet.op == OP_HEARTBEAT_REPLY and len(packet.body) >= 4:
            self.popularity = int.from_bytes(packet.body[:4], "big")
            return PlatformNotice(PLATFORM, "HEARTBEAT_REPLY", str(self.popularity))
        return PlatformNotice(PLATFORM, "unparsed", f"operation {packet.op}, {len(packet.body)} bytes")

    async def items(self) -> AsyncGenerator[Item, None]:
        """What arrives, until the connection ends (``ConnectionLost``)."""
        ws = self._ws
        if ws is None:
            raise ConnectionLost(f"{self.owner}: not connected")
        while self._early:
            yield self._early.pop(0)
        while True:
            try:
                async with asyncio.timeout(self._silence_s):
                    msg = await ws.receive()
            except TimeoutError:
                raise ConnectionLost(f"{self.owner}: nothing for {self._silence_s:g} s") from None
            if msg.type == aiohttp.WSMsgType.BINARY:
                try:
                    packets = unpack(msg.data)
                except DecodeError as exc:
                    yield PlatformNotice(PLATFORM, "unparsed", exc.reason)
                    continue
                for packet in packets:
                    yield self._item(packet)
            elif msg.type == aiohttp.WSMsgType.TEXT:
                yield PlatformNotice(PLATFORM, "unparsed", f"a text frame of {len(msg.data)} chars")
            else:
                raise self._lost or ConnectionLost(f"{self.owner}: connection ended ({msg.type.name})")

    async def lose(self, reason: str) -> None:
        """End the stream from outside (the Open Live game ended): ``items()`` raises ConnectionLost."""
        self._lost = ConnectionLost(f"{self.owner}: {reason}")
        if self._ws is not None:
            await self._ws.close()

    async def close(self) -> None:
        """Stop the heartbeats and close the socket (idempotent)."""
        beat, self._beat = self._beat, None
        if beat is not None:
            beat.cancel()
            await asyncio.wait({beat}, timeout=5)
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()
        self._early.clear()

