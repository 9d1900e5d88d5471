"""Bilibili live danmaku through the Open Live platform (直播开放平台): ``BilibiliOpenLive``.

The streamer's identity code (身份码) and a developer's app (app id, access key id and secret)
start a "game" (``POST /v2/app/start``, HMAC-signed): it gives WebSocket links and an auth body,
and the socket speaks the web room's packets (``app.bridges.bilibili_wire``).  The game lives while an
app heartbeat comes (``/v2/app/heartbeat`` every 20 s; the platform ends it 60 s after the last)
and is ended on close (``/v2/app/end``).

Viewers there are ``open_id``s (per app, stable): ``bili:open:<open_id>``.  The ``uid`` field
is deprecated and sent as 0; where it is not 0 the viewer is ``bili:<uid>``, the web route's
form.  Message ids are the platform's ``msg_id`` (a Super Chat's ``message_id``).  A reconnect
replays nothing: ``missed()`` is None.  Written from the public documentation; untested against
the real platform.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson

from app.bridges.base import BridgeFatal, ChatMessage, ConnectionLost, Item, Missed, PlatformNotice
from app.bridges.bilibili_wire import (
    PLATFORM,
    LiveSocket,
    chat_badges,
    digest,
    request_json,
    viewer_id,
)

log = logging.getLogger(__name__)
GAME_ENDED = "LIVE_OPEN_PLATFORM_INTERACTION_END"   # the platform ended the game: start a new one
# The platform's error codes (its public table), as one line each.
START_ERRORS = {
    4000: "bad parameters", 4001: "invalid app: check the access key id",
    4002: "bad signature: check the access key secret", 4003: "request expired: check the clock",
    4004: "repeated request (nonce)", 4005: "bad signature method", 4006: "bad signature version",
    4007: "this server's IP is not on the app's allow-list", 4008: "the app may not call this API",
    4009: "rate limited", 4010: "no such API", 4011: "Content-Type is not application/json",
    4012: "content MD5 mismatch", 4013: "Accept is not application/json", 5000: "service error",
    5001: "timed out", 5002: "internal error", 5003: "platform configuration error",
    5004: "the room is not on the allow-list", 5005: "the room is blocked",
    7001: "cooling down: the last game is still settling", 7002: "a game is already running in this room",
    7003: "heartbeat expired: the game is over", 7007: "the identity code (身份码) is wrong",
    8002: "the app has no access to this project: check app_id",
}
TRANSIENT = {4004, 4009, 5000, 5001, 5002, 7001, 7002}   # worth another try after a backoff


def signed_headers(body: bytes, access_key_id: str, access_key_secret: str, *,
                   now_s: int | None = None, nonce: str | None = None) -> dict[str, str]:
    """An Open Live request's headers: the ``x-bili-*`` lines and, as ``Authorization``, the hex
    HMAC-SHA256 (with the secret) of those lines sorted, ``name:value`` joined by newlines."""
    bili = {
        "x-bili-accesskeyid": access_key_id,
        "x-bili-content-md5": hashlib.md5(body, usedforsecurity=False).hexdigest(),
        "x-bili-signature-method": "HMAC-SHA256",
        "x-bili-signature-nonce": nonce or secrets.token_hex(16),
        "x-bili-signature-version": "1.0",
        "x-bili-timestamp": str(int(time.time()) if now_s is None else now_s),
    }
    lines = "\n".join(f"{name}:{bili[name]}" for name in sorted(bili))
    signature = hmac.new(access_key_secret.encode(), lines.encode(), hashlib.sha256).hexdigest()
    return {**bili, "Authorization": signature, "Content-Type": "application/json",
            "Accept": "application/json"}


# --- commands ---------------------------------------------------------------------------------

def open_viewer(d: dict[str, Any]) -> str:
    """``bili:<uid>`` where the deprecated uid is given, else ``bili:open:<open_id>``, else ""."""
    uid = int(d.get("uid") or 0)
    if uid:
        return viewer_id(uid)
    open_id = str(d.get("open_id") or "")
    return f"bili:open:{open_id}" if open_id else ""


def _badges(d: dict[str, Any], admin: bool = False) -> tuple[str, ...]:
    return chat_badges(admin, int(d.get("guard_level") or 0), int(d.get("fans_medal_level") or 0))


def _dm(doc: dict[str, Any]) -> ChatMessage:
    d = doc["data"]
    text, ts = str(d["msg"]), int(d.get("timestamp") or 0)
    mid = d.get("msg_id") or "d" + digest(d.get("open_id"), ts, text)
    return ChatMessage(PLATFORM, f"{PLATFORM}:{mid}", open_viewer(d), str(d["uname"]), text,
                       badges=_badges(d, bool(d.get("is_admin"))), sent_at_ms=ts * 1000,
                       event="LIVE_OPEN_PLATFORM_DM")


def _gift(doc: dict[str, Any]) -> ChatMessage:
    d = doc["data"]
    num, ts = int(d.get("gift_num") or 1), int(d.get("timestamp") or 0)
    total = int(d.get("price") or 0) * num          # price: per gift, 1000 = 1 CNY when paid
    mid = d.get("msg_id") or "d" + digest(d.get("open_id"), ts, d.get("gift_id"), num)
    return ChatMessage(
        PLATFORM, f"{PLATFORM}:gift:{mid}", open_viewer(d), str(d["uname"]), f"{d['gift_name']} x{num}",
        kind="gift", value=total / 1000 if d.get("paid") else float(total),
        currency="CNY" if d.get("paid") else "silver", badges=_badges(d), sent_at_ms=ts * 1000,
        event="LIVE_OPEN_PLATFORM_SEND_GIFT",
    )


def _super_chat(doc: dict[str, Any]) -> ChatMessage:
    d = doc["data"]
    mid = d.get("message_id") or d["msg_id"]
    return ChatMessage(
        PLATFORM, f"{PLATFORM}:sc:{mid}", open_viewer(d), str(d["uname"]), str(d["message"]),
        kind="gift", value=float(d["rmb"]), currency="CNY", badges=_badges(d),
        sent_at_ms=int(d.get("timestamp") or 0) * 1000, event="LIVE_OPEN_PLATFORM_SUPER_CHAT",
    )


def _guard(doc: dict[str, Any]) -> ChatMessage:
    d = doc["data"]
    user, num, ts = d["user_info"], int(d.get("guard_num") or 1), int(d.get("timestamp") or 0)
    level = int(d["guard_level"])
    name = {1: "总督", 2: "提督", 3: "舰长"}.get(level, "guard")
    mid = d.get("msg_id") or "d" + digest(user.get("open_id"), ts, level, num)
    return ChatMessage(
        PLATFORM, f"{PLATFORM}:guard:{mid}", open_viewer(user), str(user["uname"]), f"{name} x{num}",
        kind="gift", value=int(d.get("price") or 0) * num / 1000, currency="CNY",
        badges=chat_badges(False, level, int(d.get("fans_medal_level") or 0)), sent_at_ms=ts * 1000,
        event="LIVE_OPEN_PLATFORM_GUARD",
    )


_OPEN: dict[str, Callable[[dict[str, Any]], Item]] = {
    "LIVE_OPEN_PLATFORM_DM": _dm, "LIVE_OPEN_PLATFORM_SEND_GIFT": _gift,
    "LIVE_OPEN_PLATFORM_SUPER_CHAT": _super_chat, "LIVE_OPEN_PLATFORM_GUARD": _guard,
}


def parse_open(doc: dict[str, Any]) -> Item:
    """An Open Live command: a viewer's message, or a notice named by its ``cmd``."""
    cmd = doc["cmd"].split(":", 1)[0]
    handler = _OPEN.get(cmd)
    return handler(doc) if handler else PlatformNotice(PLATFORM, cmd)


# --- route 2: the Open Live platform ----------------------------------------------------------

class BilibiliOpenLive:
    """A streamer's room through the Open Live platform (a ``Connector``): the game is started
    on the first connect and kept across reconnects while its app heartbeat is accepted; a
    refused heartbeat (or ``LIVE_OPEN_PLATFORM_INTERACTION_END``) ends the reading with
    ``ConnectionLost`` and the next connect starts a new game.  Refusals of the start (a wrong
    identity code, bad keys: see ``START_ERRORS``) are ``BridgeFatal``."""

    platform = PLATFORM

    def __init__(self, code: str, app_id: int, access_key_id: str, access_key_secret: str, *,
                 api_base: str = "https://live-open.biliapi.com", heartbeat_s: float = 30.0,
                 silence_s: float = 70.0, app_heartbeat_s: float = 20.0, app_heartbeat_misses: int = 3,
                 request_timeout_s: float = 10.0) -> None:
        self._code, self._app_id = code, app_id
        self._key_id, self._secret = access_key_id, access_key_secret
        self._api = api_base.rstrip("/")
        self._app_heartbeat_s, self._misses_allowed = app_heartbeat_s, app_heartbeat_misses
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._socket = LiveSocket("bilibili open live", parse_open, heartbeat_s, silence_s,
                                  request_timeout_s)
        self._http: aiohttp.ClientSession | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self._auth, self._links, self._tries = b"", [""], 0
        self.game_id: str | None = None     # None: no game; "" a game the platform gave no id
        self.room_id = 0
        self.app_heartbeat_failures = 0

    async def connect(self) -> None:
        """Start a game unless one is running, then connect to its next link and authenticate."""
        if self._http is None:
            self._http = aiohttp.ClientSession()
        if self.game_id is None:
            await self._start(self._http)
        url = self._links[self._tries % len(self._links)]
        self._tries += 1
        await self._socket.open(self._http, url, self._auth)

    async def _call(self, http: aiohttp.ClientSession, path: str, doc: dict[str, Any]) -> dict[str, Any]:
        body = orjson.dumps(doc)
        headers = signed_headers(body, self._key_id, self._secret)
        return await request_json(http, "POST", self._api + path, self._timeout, data=body, headers=headers)

    async def _start(self, http: aiohttp.ClientSession) -> None:
        doc = await self._call(http, "/v2/app/start", {"code": self._code, "app_id": self._app_id})
        code = doc.get("code")
        if code != 0:
            why = START_ERRORS.get(code, doc.get("message") or "unknown") if isinstance(code, int) else "?"
            line = f"bilibili open live: start refused, code {code}: {why}"
            raise (ConnectionLost if code in TRANSIENT else BridgeFatal)(line)
        try:
            data = doc["data"]
            game_id, ws = str(data["game_info"]["game_id"] or ""), data["websocket_info"]
            self._auth, self._links = str(ws["auth_body"]).encode(), [str(u) for u in ws["wss_link"]]
            self.room_id = int((data.get("anchor_info") or {}).get("room_id") or 0)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConnectionLost(f"bilibili open live: start answered without {exc}") from exc
        if not self._links:
            raise ConnectionLost("bilibili open live: start gave no WebSocket link")
        self.game_id = game_id
        if game_id:   # a tool (not a game) is given no id and needs no app heartbeat
            self._keepalive = asyncio.create_task(
                self._app_heartbeats(http, game_id), name=f"bilibili open live {game_id} app heartbeat")

    async def _app_heartbeats(self, http: aiohttp.ClientSession, game_id: str) -> None:
        misses = 0
        while True:
            await asyncio.sleep(self._app_heartbeat_s)
            try:
                doc = await self._call(http, "/v2/app/heartbeat", {"game_id": game_id})
            except ConnectionLost as exc:
                misses += 1
                self.app_heartbeat_failures += 1
                log.warning("bilibili open live: app heartbeat failed (%d in a row): %s", misses, exc)
                if misses >= self._misses_allowed:
                    return await self._game_over(f"{misses} app heartbeats failed in a row")
                continue
            misses = 0
            if doc.get("code") != 0:
                self.app_heartbeat_failures += 1
                return await self._game_over(
                    f"app heartbeat refused: code {doc.get('code')} ({doc.get('message')})")

    async def _game_over(self, reason: str) -> None:
        self.game_id = None          # the next connect starts a new game
        await self._socket.lose(reason)

    async def read(self) -> AsyncIterator[Item]:
        """The room's items until the connection (or the game) ends."""
        async with contextlib.aclosing(self._socket.items()) as items:
            async for item in items:
                yield item
                if isinstance(item, PlatformNotice) and item.name == GAME_ENDED:
                    await self._stop_keepalive()
                    self.game_id = None
                    raise ConnectionLost(f"bilibili open live: the platform ended the game ({GAME_ENDED})")

    async def _stop_keepalive(self) -> None:
        task, self._keepalive = self._keepalive, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.wait({task}, timeout=5)

    async def close(self) -> None:
        """Close the socket, end the game (``/v2/app/end``) and the HTTP session (idempotent)."""
        await self._socket.close()
        await self._stop_keepalive()
        http, self._http = self._http, None
        if http is None:
            return
        if self.game_id:
            try:
                doc = await self._call(http, "/v2/app/end", {"game_id": self.game_id, "app_id": self._app_id})
            except ConnectionLost as exc:   # the platform ends it 60 s after the last heartbeat
                log.warning("bilibili open live: /v2/app/end failed: %s", exc)
            else:
                if doc.get("code") != 0:
                    log.warning("bilibili open live: /v2/app/end answered %s", doc)
        self.game_id = None
        await http.close()

    def missed(self) -> Missed | None:
        return None  # the platform replays nothing after a reconnect: unknown

    async def __aenter__(self) -> BilibiliOpenLive:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
