"""Bilibili live danmaku through the web client's route: the web room's commands, WBI signing,
the login cookie, and ``BilibiliRoom`` (the Open Live route is ``app.bridges.bilibili_open``;
the packet framing and the WebSocket both routes speak are ``app.bridges.bilibili_wire``).

Viewers are ``bili:<uid>``.  Without a login cookie Bilibili masks every viewer (a name such as
``张***`` and uid 0): such a viewer's ``viewer`` is ``""`` (never identified), the name is kept as
sent.  A reconnect replays nothing on this route: ``missed()`` is always None (unknown).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import orjson

from app.bridges.base import BridgeFatal, ChatMessage, ConnectionLost, Item, Missed, PlatformNotice
from app.bridges.bilibili_wire import (
    PLATFORM,
    PROTO_BROTLI,
    PROTO_ZLIB,
    LiveSocket,
    brotli,
    chat_badges,
    digest,
    request_json,
    viewer_id,
)

BROWSER_UA = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
              "Chrome/126.0.0.0 Safari/537.36")
# The web client's WBI key shuffle (public: bilibili-API-collect, docs/misc/sign/wbi.md).
MIXIN_KEY_TABLE = (
    46, 47, 18, 2, 53, 8, 23, 32, 15, 50, 10, 31, 58, 3, 45, 35, 27, 43, 5, 49, 33, 9, 42, 19, 29, 28,
    14, 39, 12, 38, 41, 13, 37, 48, 7, 16, 24, 55, 40, 61, 26, 17, 0, 1, 60, 51, 30, 4, 22, 25, 54, 21,
    56, 59, 6, 63, 57, 62, 11, 36, 20, 34, 44, 52,
)


# --- commands ---------------------------------------------------------------------------------

def parse_web(doc: dict[str, Any]) -> Item:
    """A web room's command: a viewer's message, or a notice named by its ``cmd``."""
    cmd = doc["cmd"].split(":", 1)[0]
    handler = _WEB.get(cmd)
    return handler(doc) if handler else PlatformNotice(PLATFORM, cmd)


def _danmu(doc: dict[str, Any]) -> ChatMessage:
    info = doc["info"]
    meta, text, user = info[0], str(info[1]), info[2]
    uid, ts_ms = int(user[0]), int(meta[4])
    mode = meta[15] if len(meta) > 15 and isinstance(meta[15], dict) else {}
    try:   # the extra is JSON in a string; a garbled one costs only the id_str
        extra = orjson.loads(mode.get("extra") or "{}")
    except orjson.JSONDecodeError:
        extra = {}
    extra = extra if isinstance(extra, dict) else {}
    check = info[9] if len(info) > 9 and isinstance(info[9], dict) else {}
    own = extra.get("id_str") or doc.get("msg_id")
    mid = own or "d" + digest(uid, ts_ms, text, check.get("ts", ""), check.get("ct", ""))
    medal = info[3][0] if len(info) > 3 and info[3] else 0
    guard = int(info[7]) if len(info) > 7 and info[7] else 0
    return ChatMessage(
        PLATFORM, f"{PLATFORM}:{mid}", viewer_id(uid), str(user[1]), text,
        badges=chat_badges(bool(user[2]), guard, int(medal)), sent_at_ms=ts_ms, event="DANMU_MSG",
    )


def _gift(doc: dict[str, Any]) -> ChatMessage:
    d = doc["data"]
    uid, num, name = int(d["uid"]), int(d.get("num", 1)), str(d["giftName"])
    total = int(d["total_coin"]) if d.get("total_coin") is not None else int(d["price"]) * num
    gold = d.get("coin_type") == "gold"
    mid = d.get("tid") or doc.get("msg_id")
    if not mid:  # a combo's batch_combo_id is shared by all its sends: never the id alone
        mid = "d" + digest(uid, d.get("timestamp"), d.get("giftId"), num, d.get("batch_combo_id"))
    medal = (d.get("medal_info") or {}).get("medal_level", 0)
    return ChatMessage(
        PLATFORM, f"{PLATFORM}:gift:{mid}", viewer_id(uid), str(d["uname"]), f"{name} x{num}",
        kind="gift", value=total / 1000 if gold else float(total), currency="CNY" if gold else "silver",
        badges=chat_badges(False, int(d.get("guard_level") or 0), int(medal or 0)),
        sent_at_ms=int(d.get("timestamp", 0)) * 1000, event="SEND_GIFT",
    )


def _super_chat(doc: dict[str, Any]) -> ChatMessage:
    d = doc["data"]
    user = d["user_info"]
    medal = (d.get("medal_info") or {}).get("medal_level", 0)
    return ChatMessage(
        PLATFORM, f"{PLATFORM}:sc:{d['id']}", viewer_id(int(d["uid"])), str(user["uname"]),
        str(d["message"]), kind="gift", value=float(d["price"]), currency="CNY",
        badges=chat_badges(bool(user.get("manager")), int(user.get("guard_level") or 0), int(medal or 0)),
        sent_at_ms=int(d.get("ts") or d.get("start_time") or 0) * 1000, event="SUPER_CHAT_MESSAGE",
    )


def _guard(doc: dict[str, Any]) -> ChatMessage:
    d = doc["data"]
    uid, level, num = int(d["uid"]), int(d["guard_level"]), int(d.get("num", 1))
    mid = doc.get("msg_id") or "d" + digest(uid, d.get("start_time"), level, num, d.get("price"))
    return ChatMessage(
        PLATFORM, f"{PLATFORM}:guard:{mid}", viewer_id(uid), str(d["username"]),
        f"{d.get('gift_name') or 'guard'} x{num}", kind="gift", value=int(d["price"]) * num / 1000,
        currency="CNY", badges=chat_badges(False, level), sent_at_ms=int(d.get("start_time", 0)) * 1000,
        event="GUARD_BUY",
    )


_WEB: dict[str, Callable[[dict[str, Any]], Item]] = {
    "DANMU_MSG": _danmu, "SEND_GIFT": _gift, "SUPER_CHAT_MESSAGE": _super_chat, "GUARD_BUY": _guard,
}


# --- WBI signing ------------------------------------------------------------------------------

def mixin_key(img_key: str, sub_key: str) -> str:
    """The 32-character key the web client signs with, shuffled from the two keys in ``nav``."""
    raw = img_key + sub_key
    return "".join(raw[i] for i in MIXIN_KEY_TABLE if i < len(raw))[:32]


def wbi_sign(params: Mapping[str, object], img_key: str, sub_key: str, wts: int) -> dict[str, str]:
    """``params`` with ``wts`` and ``w_rid`` added as the web client signs a WBI request: values
    stripped of ``!'()*``, sorted, percent-encoded (``%20``, upper-case hex), MD5 with the mixin key.

    Written from the public description and its worked example; untested against the real site.
    """
    signed = {k: "".join(c for c in str(v) if c not in "!'()*") for k, v in params.items()}
    signed["wts"] = str(wts)
    query = urllib.parse.urlencode(sorted(signed.items()), quote_via=urllib.parse.quote)
    signed["w_rid"] = hashlib.md5((query + mixin_key(img_key, sub_key)).encode(),
                                  usedforsecurity=False).hexdigest()
    return signed


def cookie_values(cookie: str | None) -> dict[str, str]:
    """A ``Cookie`` header's ``name=value`` pairs."""
    pairs = (part.strip().partition("=") for part in (cookie or "").split(";"))
    return {name: value for name, sep, value in pairs if sep and name}


# --- route 1: the web room --------------------------------------------------------------------

_TRANSIENT = {-352, -412, -500, -503, -509, -799}   # risk control, overload, rate limits: retry


class BilibiliRoom:
    """A live room's danmaku through the web client's route (a ``Connector``): the real room id
    (``room_init``), a token and hosts (WBI-signed ``getDanmuInfo``), then the WebSocket.

    ``cookie`` (a logged-in browser's ``Cookie``: ``SESSDATA``, ``DedeUserID``, ``buvid3``)
    unmasks viewers; without it every viewer comes as uid 0 with a masked name, unidentified.
    ``api_base``, ``nav_base`` (the WBI keys) and ``ws_url`` (instead of the hosts given) point
    it elsewhere, such as a loopback peer.  The WBI signing follows the public description and is
    untested against the real site.  A reconnect replays nothing: ``missed()`` is None.
    """

    platform = PLATFORM

    def __init__(self, room_id: int, cookie: str | None = None, *,
                 api_base: str = "https://api.live.bilibili.com",
                 nav_base: str = "https://api.bilibili.com", ws_url: str | None = None,
                 heartbeat_s: float = 30.0, silence_s: float = 70.0,
                 request_timeout_s: float = 10.0) -> None:
        self.room_id = room_id
        self.real_id: int | None = None
        self.owner_uid = 0
        cookies = cookie_values(cookie)
        uid = cookies.get("DedeUserID", "0") or "0"
        if not uid.isdigit():
            raise BridgeFatal(f"bilibili: the cookie's DedeUserID {uid!r} is not a uid")
        self._uid, self._buvid = int(uid), cookies.get("buvid3", "")
        self._headers = {"User-Agent": BROWSER_UA, "Referer": "https://live.bilibili.com/",
                         "Origin": "https://live.bilibili.com"}
        if cookie:
            self._headers["Cookie"] = cookie
        self._api, self._nav, self._ws_url = api_base.rstrip("/"), nav_base.rstrip("/"), ws_url
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._socket = LiveSocket(f"bilibili room {room_id}", parse_web, heartbeat_s, silence_s,
                                  request_timeout_s)
        self._http: aiohttp.ClientSession | None = None
        self._tries = 0

    async def connect(self) -> None:
        """Resolve the room, get a token, connect and authenticate (a new host on each try)."""
        if self._http is None:
            self._http = aiohttp.ClientSession(headers=self._headers)
        if self.real_id is None:
            self.real_id, self.owner_uid = await self._resolve(self._http)
        token, urls = await self._danmu_info(self._http, self.real_id)
        url = self._ws_url or urls[self._tries % len(urls)]
        self._tries += 1
        auth: dict[str, Any] = {"uid": self._uid, "roomid": self.real_id,
                                "protover": PROTO_BROTLI if brotli is not None else PROTO_ZLIB,
                                "platform": "web", "type": 2, "key": token}
        if self._buvid:
            auth["buvid"] = self._buvid
        await self._socket.open(self._http, url, orjson.dumps(auth))

    async def _resolve(self, http: aiohttp.ClientSession) -> tuple[int, int]:
        doc = await request_json(http, "GET", f"{self._api}/room/v1/Room/room_init", self._timeout,
                                 params={"id": self.room_id})
        code, data = doc.get("code"), doc.get("data") or {}
        if code in _TRANSIENT:
            raise ConnectionLost(f"bilibili: room_init answered code {code} ({doc.get('message')})")
        if code != 0 or not isinstance(data, dict) or not data.get("room_id"):
            raise BridgeFatal(f"bilibili: unknown room {self.room_id} (code {code}: "
                              f"{doc.get('message') or doc.get('msg') or 'no room'})")
        return int(data["room_id"]), int(data.get("uid") or 0)

    async def _danmu_info(self, http: aiohttp.ClientSession, real_id: int) -> tuple[str, list[str]]:
        nav = await request_json(http, "GET", f"{self._nav}/x/web-interface/nav", self._timeout)
        wbi = (nav.get("data") or {}).get("wbi_img") or {}   # present logged in or not (code -101)
        img, sub = (str(wbi.get(k, "")).rsplit("/", 1)[-1].partition(".")[0] for k in ("img_url", "sub_url"))
        if not img or not sub:
            raise ConnectionLost(f"bilibili: nav gave no WBI keys (code {nav.get('code')})")
        params = wbi_sign({"id": real_id, "type": 0, "web_location": "444.8"}, img, sub, int(time.time()))
        doc = await request_json(http, "GET", f"{self._api}/xlive/web-room/v1/index/getDanmuInfo",
                                 self._timeout, params=params)
        code = doc.get("code")
        if code in (-101, 65530):
            raise BridgeFatal(f"bilibili: getDanmuInfo refused the login cookie (code {code})")
        if code != 0:
            raise ConnectionLost(f"bilibili: getDanmuInfo answered code {code} ({doc.get('message')})")
        data = doc["data"]
        urls = [f"wss://{h['host']}:{h['wss_port']}/sub" for h in data.get("host_list") or []]
        return str(data["token"]), urls or ["wss://broadcastlv.chat.bilibili.com:443/sub"]

    async def read(self) -> AsyncIterator[Item]:
        """The room's items until the connection ends; the streamer's own lines get "broadcaster"."""
        owner = viewer_id(self.owner_uid)
        async for item in self._socket.items():
            if owner and isinstance(item, ChatMessage) and item.viewer == owner:
                item = dataclasses.replace(item, badges=(*item.badges, "broadcaster"))
            yield item

    async def close(self) -> None:
        """Close the socket and the HTTP session (idempotent)."""
        await self._socket.close()
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    def missed(self) -> Missed | None:
        return None  # the web route replays nothing after a reconnect: unknown

    async def __aenter__(self) -> BilibiliRoom:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
