"""A loopback Bilibili: the web room's HTTP API, the Open Live platform's and the danmaku
WebSocket, for the connector tests (``tests/bridges/test_bilibili.py``) and the bridge benchmark.

``BilibiliPeer`` serves on 127.0.0.1 (a free port unless given):

- ``GET /room/v1/Room/room_init?id=`` resolves a short room id (``rooms``) or a real one;
  an unknown room answers code 60004 as the real API does;
- ``GET /x/web-interface/nav`` gives the WBI keys (logged out: code -101, keys present);
- ``GET /xlive/web-room/v1/index/getDanmuInfo`` checks the WBI signature (``w_rid``, ``wts``;
  code -352 without or wrong) and gives the token and itself as the host;
- ``POST /v2/app/start``, ``/v2/app/heartbeat``, ``/v2/app/end`` check the HMAC signature
  (4001 unknown key id, 4012 MD5, 4002 signature, 4004 a nonce used twice) and the identity code
  (7007); a game ended by ``expire_game`` answers its heartbeat with 7003;
- ``/sub``, the WebSocket: the first packet must be the auth (op 7), answered by op 8 with
  ``{"code": 0}`` (``auth_code`` otherwise; -101 for a wrong token or auth body); heartbeats
  (op 2) are answered with op 3 and ``popularity`` unless ``answer_heartbeats`` is off.

``send(cmds, protover)`` sends commands to every authenticated connection, several in one
packet (compressed for 2 and 3) as the real server does, in frames of ``batch`` commands;
``drop()`` cuts every connection without a close frame; ``restart()`` stops and serves again on
the same port.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from app.bridges.bilibili import wbi_sign
from app.bridges.bilibili_wire import (
    OP_AUTH,
    OP_AUTH_REPLY,
    OP_HEARTBEAT,
    OP_HEARTBEAT_REPLY,
    PROTO_BROTLI,
    PROTO_INT,
    pack,
    pack_commands,
    unpack,
)

IMG_KEY, SUB_KEY = "7cd084941338484aae1ad9425b84077c", "4932caff0ff746eab6f01bf08b70ac45"


def _json(doc: Mapping[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(doc), content_type="application/json")


def _open_error(code: int, message: str) -> web.Response:
    return _json({"code": code, "message": message, "request_id": secrets.token_hex(8), "data": {}})


class BilibiliPeer:
    """The loopback server (an async context manager); what clients did is kept for the tests."""

    def __init__(self, *, rooms: Mapping[int, int] | None = None, owner_uid: int = 2920960,
                 token: str = "peer-token", popularity: int = 1, app_id: int = 1650000000001,
                 access_keys: Mapping[str, str] | None = None,
                 codes: Mapping[str, int] | None = None, port: int = 0) -> None:
        self.rooms = dict(rooms if rooms is not None else {1: 21452505})   # short id -> real id
        self.owner_uid, self.token, self.popularity = owner_uid, token, popularity
        self.app_id = app_id
        self.access_keys = dict(access_keys if access_keys is not None else {"peer-key": "peer-secret"})
        self.codes = dict(codes if codes is not None else {"CODE1234ABCD5": 21452505})  # identity code -> room
        self.port = port
        self.answer_heartbeats = True
        self.auth_code = 0                     # what op 8 answers a correct auth with
        self.auths: list[bytes] = []           # every auth body received
        self.heartbeats = 0                    # op 2 received
        self.danmu_info_params: list[dict[str, str]] = []
        self.games: dict[str, bool] = {}       # game id -> alive
        self.app_heartbeats = 0
        self.ended: list[str] = []
        self.open_auths: set[bytes] = set()   # the auth bodies games were given
        self.connections: list[tuple[web.Request, web.WebSocketResponse]] = []
        self._nonces: set[str] = set()
        self._runner: web.AppRunner | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/sub"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/room/v1/Room/room_init", self._room_init)
        app.router.add_get("/x/web-interface/nav", self._nav)
        app.router.add_get("/xlive/web-room/v1/index/getDanmuInfo", self._danmu_info)
        app.router.add_post("/v2/app/start", self._start_game)
        app.router.add_post("/v2/app/heartbeat", self._app_heartbeat)
        app.router.add_post("/v2/app/end", self._end_game)
        app.router.add_get("/sub", self._sub)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        self.drop()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def restart(self) -> None:
        """Stop and serve again on the same port (clients see a drop, then a fresh server)."""
        await self.stop()
        await self.start()

    async def __aenter__(self) -> BilibiliPeer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- what a test does ---

    async def send(self, cmds: Iterable[Mapping[str, Any] | bytes], protover: int = PROTO_BROTLI,
                   batch: int = 0) -> int:
        """Send commands to every connection, ``batch`` per frame (0: all in one); returns how
        many connections got them."""
        cmds = list(cmds)
        size = batch or max(len(cmds), 1)
        frames = [pack_commands(cmds[i:i + size], protover) for i in range(0, len(cmds), size)]
        return await self.send_frames(frames)

    async def send_frames(self, frames: Iterable[bytes]) -> int:
        """Send ready-made frames (``pack_commands``) to every connection, as they are."""
        frames = list(frames)
        conns = [ws for _, ws in self.connections if not ws.closed]
        for ws in conns:
            for frame in frames:
                await ws.send_bytes(frame)
        return len(conns)

    def drop(self) -> None:
        """Cut every connection abruptly: no close frame, the TCP connection just ends."""
        for request, _ in self.connections:
            if request.transport is not None:
                request.transport.close()
        self.connections.clear()

    def expire_game(self, game_id: str) -> None:
        """The platform forgets a game: its next app heartbeat is answered with 7003."""
        self.games[game_id] = False

    # --- the web room ---

    async def _room_init(self, request: web.Request) -> web.Response:
        asked = int(request.query.get("id", "0") or 0)
        real = self.rooms.get(asked) or (asked if asked in self.rooms.values() else 0)
        if not real:
            return _json({"code": 60004, "msg": "直播间不存在", "message": "直播间不存在", "data": {}})
        short = next((s for s, r in self.rooms.items() if r == real), 0)
        return _json({"code": 0, "msg": "ok", "message": "ok", "data": {
            "room_id": real, "short_id": short, "uid": self.owner_uid, "need_p2p": 0, "is_hidden": False,
            "is_locked": False, "is_portrait": False, "live_status": 1, "hidden_till": 0, "lock_till": 0,
            "encrypted": False, "pwd_verified": False, "live_time": int(time.time()) - 600,
            "room_shield": 0, "is_sp": 0, "special_type": 0}})

    async def _nav(self, request: web.Request) -> web.Response:
        return _json({"code": -101, "message": "账号未登录", "ttl": 1, "data": {"isLogin": False, "wbi_img": {
            "img_url": f"https://i0.hdslb.com/bfs/wbi/{IMG_KEY}.png",
            "sub_url": f"https://i0.hdslb.com/bfs/wbi/{SUB_KEY}.png"}}})

    async def _danmu_info(self, request: web.Request) -> web.Response:
        query = dict(request.query)
        self.danmu_info_params.append(query)
        unsigned = {k: v for k, v in query.items() if k not in ("w_rid", "wts")}
        wts = query.get("wts", "")
        if not wts.isdigit() or wbi_sign(unsigned, IMG_KEY, SUB_KEY, int(wts))["w_rid"] != query.get("w_rid"):
            return _json({"code": -352, "message": "-352", "ttl": 1, "data": None})
        host = {"host": "127.0.0.1", "port": self.port, "wss_port": self.port, "ws_port": self.port}
        return _json({"code": 0, "message": "0", "ttl": 1, "data": {
            "group": "live", "business_id": 0, "refresh_row_factor": 0.125, "refresh_rate": 100,
            "max_delay": 5000, "token": self.token, "host_list": [host]}})

    # --- the Open Live platform ---

    async def _signed(self, request: web.Request) -> tuple[dict[str, Any], web.Response | None]:
        body = await request.read()
        h = request.headers
        secret = self.access_keys.get(h.get("x-bili-accesskeyid", ""))
        if secret is None:
            return {}, _open_error(4001, "应用无效")
        if h.get("x-bili-content-md5") != hashlib.md5(body, usedforsecurity=False).hexdigest():
            return {}, _open_error(4012, "MD5校验失败")
        names = sorted(k.lower() for k in h if k.lower().startswith("x-bili-"))
        lines = "\n".join(f"{name}:{h[name]}" for name in names)
        expected = hmac.new(secret.encode(), lines.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, h.get("Authorization", "")):
            return {}, _open_error(4002, "签名异常")
        nonce = h.get("x-bili-signature-nonce", "")
        if nonce in self._nonces:
            return {}, _open_error(4004, "重复请求")
        self._nonces.add(nonce)
        return orjson.loads(body or b"{}"), None

    async def _start_game(self, request: web.Request) -> web.Response:
        doc, refused = await self._signed(request)
        if refused is not None:
            return refused
        room = self.codes.get(str(doc.get("code")))
        if room is None:
            return _open_error(7007, "身份码错误")
        if doc.get("app_id") != self.app_id:
            return _open_error(8002, "项目无权限访问")
        game_id = secrets.token_hex(16)
        self.games[game_id] = True
        auth = orjson.dumps({"roomid": room, "protover": 2, "uid": 0, "key": secrets.token_hex(24),
                             "group": "open"})
        self.open_auths.add(auth)
        return _json({"code": 0, "message": "0", "request_id": secrets.token_hex(8), "data": {
            "game_info": {"game_id": game_id},
            "websocket_info": {"auth_body": auth.decode(), "wss_link": [self.ws_url]},
            "anchor_info": {"room_id": room, "uname": "主播", "uface": "", "uid": 0,
                            "open_id": "anchor-open-id", "union_id": ""}}})

    async def _app_heartbeat(self, request: web.Request) -> web.Response:
        doc, refused = await self._signed(request)
        if refused is not None:
            return refused
        self.app_heartbeats += 1
        if not self.games.get(str(doc.get("game_id"))):
            return _open_error(7003, "心跳过期")
        return _open_error(0, "0")

    async def _end_game(self, request: web.Request) -> web.Response:
        doc, refused = await self._signed(request)
        if refused is not None:
            return refused
        game_id = str(doc.get("game_id"))
        self.ended.append(game_id)
        self.games.pop(game_id, None)
        return _open_error(0, "0")

    # --- the danmaku WebSocket ---

    def _auth_ok(self, body: bytes) -> bool:
        if body in self.open_auths:
            return True
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            return False
        return isinstance(doc, dict) and doc.get("key") == self.token and doc.get("roomid") in self.rooms.values()

    async def _sub(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        first = await ws.receive(timeout=10)
        packets = unpack(first.data) if first.type == WSMsgType.BINARY else []
        if not packets or packets[0].op != OP_AUTH:
            await ws.close()
            return ws
        self.auths.append(packets[0].body)
        code = self.auth_code if self._auth_ok(packets[0].body) else -101
        entry = (request, ws)
        if code == 0:   # listed before the reply: a client that has its reply can be sent to
            self.connections.append(entry)
        await ws.send_bytes(pack(OP_AUTH_REPLY, orjson.dumps({"code": code}), PROTO_INT))
        if code != 0:
            await ws.close()
            return ws
        try:
            async for msg in ws:
                if msg.type != WSMsgType.BINARY:
                    continue
                for packet in unpack(msg.data):
                    if packet.op == OP_HEARTBEAT:
                        self.heartbeats += 1
                        if self.answer_heartbeats:
                            reply = pack(OP_HEARTBEAT_REPLY, self.popularity.to_bytes(4, "big"), PROTO_INT)
                            await ws.send_bytes(reply)
        finally:
            if entry in self.connections:
                self.connections.remove(entry)
        return ws
