"""The Bilibili connector: the packet framing, each recorded command made common, and both routes
(the web room, the Open Live platform) against the loopback peer (``bench.peers.bilibili``)."""

from __future__ import annotations

import asyncio
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import brotli
import orjson
import pytest

from app.bridges.base import BridgeFatal, ChatMessage, ConnectionLost, Item, PlatformNotice
from app.bridges.bilibili import BilibiliRoom, mixin_key, parse_web, wbi_sign
from app.bridges.bilibili_open import BilibiliOpenLive, parse_open
from app.bridges.bilibili_wire import (
    OP_AUTH_REPLY,
    OP_HEARTBEAT,
    OP_HEARTBEAT_REPLY,
    OP_MESSAGE,
    PROTO_BROTLI,
    PROTO_INT,
    PROTO_JSON,
    PROTO_ZLIB,
    Packet,
    digest,
    pack,
    pack_commands,
    parse_body,
    unpack,
)
from bench.peers.bilibili import BilibiliPeer
from events.errors import DecodeError
from tests.conftest import wait_for

DATA = Path(__file__).parent / "data" / "bilibili"
WEB_FILES = ("danmu_msg.json", "danmu_msg_masked.json", "send_gift.json", "send_gift_silver.json",
             "super_chat_message.json", "guard_buy.json", "interact_word.json", "watched_change.json")
OPEN_FILES = ("open_dm.json", "open_send_gift.json", "open_super_chat.json", "open_guard.json")
COOKIE = ("SESSDATA=0a1b2c3d%2C1720000000%2Cabcde%2A71; bili_jct=9f8e7d6c5b4a; DedeUserID=35261453; "
          "DedeUserID__ckMd5=5f4e3d2c1b0a; buvid3=B3A1C2D4-1111-2222-3333-444455556666infoc")
CODE = "CODE1234ABCD5"


def recorded(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / name).read_text(encoding="utf-8"))
    return doc


def _msg(id: str, viewer: str, name: str, text: str, event: str, sent_at_ms: int, badges: tuple[str, ...] = (),
         kind: str = "comment", value: float = 0.0, currency: str = "") -> ChatMessage:
    return ChatMessage("bilibili", id, viewer, name, text, kind, value, currency, badges, sent_at_ms, event)


WEB_EXPECTED: dict[str, Item] = {
    "danmu_msg.json": _msg(
        "bilibili:5513a205e04377f16955f306c465a4c134", "bili:495732423", "蓝色柚子的粉丝",
        "张飞加香香或伽罗也很强的", "DANMU_MSG", 1705296197463, ("moderator", "member", "guard:3", "medal:4")),
    "danmu_msg_masked.json": _msg(
        "bilibili:9f2cd64f4a7d0e4b7c6a1e0d3b2a65d3a1", "", "张***", "主播今天唱什么歌", "DANMU_MSG",
        1705296203118),
    "send_gift.json": _msg(
        "bilibili:gift:1705296337121500001", "bili:35261453", "热心观众", "小花花 x5", "SEND_GIFT",
        1705296337000, ("member", "guard:3", "medal:21"), "gift", 0.5, "CNY"),
    "send_gift_silver.json": _msg(
        "bilibili:gift:1705296341121300002", "", "路***", "辣条 x1", "SEND_GIFT", 1705296341000, (),
        "gift", 100.0, "silver"),
    "super_chat_message.json": _msg(
        "bilibili:sc:9253105", "bili:35261453", "热心观众", "今天的歌太好听了！", "SUPER_CHAT_MESSAGE",
        1705296397000, ("member", "guard:3", "medal:21"), "gift", 30.0, "CNY"),
    "guard_buy.json": _msg(
        "bilibili:guard:d" + digest(96820781, 1577610165, 3, 1, 198000), "bili:96820781", "死磕偷了狗哥家小电扇",
        "舰长 x1", "GUARD_BUY", 1577610165000, ("member", "guard:3"), "gift", 198.0, "CNY"),
    "interact_word.json": PlatformNotice("bilibili", "INTERACT_WORD"),
    "watched_change.json": PlatformNotice("bilibili", "WATCHED_CHANGE"),
}
OPEN_EXPECTED: dict[str, Item] = {
    "open_dm.json": _msg(
        "bilibili:eb805544-0cf2-4688-bca1-88299e5344bf", "bili:open:39b8fedb-60a5-4e29-ac75-b16955f7e632",
        "猫裙少年泽远喵", "你们谁扔个小心心呗", "LIVE_OPEN_PLATFORM_DM", 1650717881000, ("moderator", "medal:21")),
    "open_send_gift.json": _msg(
        "bilibili:gift:e0677be6-4d08-49bc-a722-17238b0f370b", "bili:open:d1f8e2a4-5b3c-4e6f-9a7b-0c1d2e3f4a5b",
        "不忘韩文初心", "小花花 x3", "LIVE_OPEN_PLATFORM_SEND_GIFT", 1650717898000,
        ("member", "guard:3", "medal:25"), "gift", 0.3, "CNY"),
    "open_super_chat.json": _msg(
        "bilibili:sc:9253106", "bili:open:39b8fedb-60a5-4e29-ac75-b16955f7e632", "猫裙少年泽远喵", "主播加油！",
        "LIVE_OPEN_PLATFORM_SUPER_CHAT", 1650718000000, ("medal:21",), "gift", 50.0, "CNY"),
    "open_guard.json": _msg(
        "bilibili:guard:6f5e4d3c-2b1a-4098-8776-655443322110", "bili:open:7a6b5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c5d",
        "你的魔法", "舰长 x1", "LIVE_OPEN_PLATFORM_GUARD", 1654801753000, ("member", "guard:3"), "gift", 198.0, "CNY"),
}


# --- framing ----------------------------------------------------------------------------------

def test_a_heartbeat_packet_is_the_documented_16_bytes() -> None:
    assert pack(OP_HEARTBEAT) == bytes.fromhex("00000010" "0010" "0001" "00000002" "00000001")


@pytest.mark.parametrize("protover", [PROTO_JSON, PROTO_INT, PROTO_ZLIB, PROTO_BROTLI])
def test_pack_unpack_round_trip(protover: int) -> None:
    body = orjson.dumps({"cmd": "DANMU_MSG", "info": [[0], "你好", [1, "a"]]})
    inner = pack(OP_MESSAGE, body, PROTO_JSON, seq=7) if protover in (PROTO_ZLIB, PROTO_BROTLI) else body
    packets = unpack(pack(OP_MESSAGE, inner, protover, seq=7))
    assert packets == [Packet(OP_MESSAGE, body, PROTO_JSON if protover > PROTO_INT else protover, 7)]


def test_nested_compressed_packets_come_out_flat_and_in_order() -> None:
    a, b, c, d = (orjson.dumps({"cmd": name}) for name in ("A", "B", "C", "D"))
    zlib_inside = pack(OP_MESSAGE, pack(OP_MESSAGE, b, PROTO_JSON) + pack(OP_MESSAGE, c, PROTO_JSON), PROTO_ZLIB)
    outer = pack(OP_MESSAGE, pack(OP_MESSAGE, a, PROTO_JSON) + zlib_inside, PROTO_BROTLI)
    frame = outer + pack(OP_HEARTBEAT_REPLY, (77).to_bytes(4, "big"), PROTO_INT) + pack(OP_MESSAGE, d, PROTO_JSON)
    assert [(p.op, p.body) for p in unpack(frame)] == [
        (OP_MESSAGE, a), (OP_MESSAGE, b), (OP_MESSAGE, c), (OP_HEARTBEAT_REPLY, (77).to_bytes(4, "big")),
        (OP_MESSAGE, d)]


def test_pack_commands_puts_several_in_one_compressed_packet() -> None:
    cmds = [recorded(name) for name in WEB_FILES]
    for protover in (PROTO_ZLIB, PROTO_BROTLI):
        frame = pack_commands(cmds, protover)
        assert struct.unpack_from(">IHHII", frame)[:4] == (len(frame), 16, protover, OP_MESSAGE)
        assert [orjson.loads(p.body) for p in unpack(frame)] == cmds
    assert [orjson.loads(p.body) for p in unpack(pack_commands(cmds, PROTO_JSON))] == cmds


@pytest.mark.parametrize("frame, why", [
    (b"\x00\x00\x00\x10\x00\x10", "less than a header"),
    (struct.pack(">IHHII", 40, 16, 0, 5, 1) + b"{}", "length"),
    (struct.pack(">IHHII", 12, 16, 0, 5, 1), "length"),
    (struct.pack(">IHHII", 20, 16, 2, 5, 1) + b"nope", "protocol 2"),
    (struct.pack(">IHHII", 20, 16, 3, 5, 1) + b"nope", "protocol 3"),
])
def test_malformed_frames_raise_decode_error(frame: bytes, why: str) -> None:
    with pytest.raises(DecodeError, match=why):
        unpack(frame)


def test_compression_nested_past_the_limit_is_refused() -> None:
    frame = pack(OP_MESSAGE, b"{}", PROTO_JSON)
    for _ in range(4):
        frame = pack(OP_MESSAGE, frame, PROTO_ZLIB)
    with pytest.raises(DecodeError, match="nested"):
        unpack(frame)


def test_recorded_binary_packets_hold_the_recorded_commands() -> None:
    web = [recorded(name) for name in WEB_FILES]
    for name in ("web_zlib.bin", "web_brotli.bin"):
        assert [orjson.loads(p.body) for p in unpack((DATA / name).read_bytes())] == web
    mixed = unpack((DATA / "frame_mixed.bin").read_bytes())
    assert [(p.op, p.protover) for p in mixed] == [(OP_AUTH_REPLY, 1), (OP_HEARTBEAT_REPLY, 1), (5, 0), (5, 0)]
    assert orjson.loads(mixed[0].body) == {"code": 0} and int.from_bytes(mixed[1].body, "big") == 1
    assert [orjson.loads(p.body) for p in mixed[2:]] == [recorded("open_dm.json"), recorded("watched_change.json")]
    # they were written by the script's own framing: the same bytes as ours, for zlib
    inner = b"".join(pack(OP_MESSAGE, p.body, PROTO_JSON, seq=0) for p in unpack((DATA / "web_zlib.bin").read_bytes()))
    assert zlib.decompress((DATA / "web_zlib.bin").read_bytes()[16:]) == inner
    assert brotli.decompress((DATA / "web_brotli.bin").read_bytes()[16:]) == inner


# --- commands ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", WEB_FILES)
def test_each_recorded_web_command_maps_exactly(name: str) -> None:
    assert parse_body(orjson.dumps(recorded(name)), parse_web) == WEB_EXPECTED[name]


@pytest.mark.parametrize("name", OPEN_FILES)
def test_each_recorded_open_live_command_maps_exactly(name: str) -> None:
    assert parse_body(orjson.dumps(recorded(name)), parse_open) == OPEN_EXPECTED[name]


def test_masked_viewers_are_never_identified() -> None:
    for name in ("danmu_msg_masked.json", "send_gift_silver.json"):
        item = parse_web(recorded(name))
        assert isinstance(item, ChatMessage) and item.viewer == "" and "***" in item.name
    doc = recorded("open_dm.json")
    doc["data"].update(open_id="", uid=0)
    assert parse_open(doc).viewer == ""  # type: ignore[union-attr]
    doc["data"]["uid"] = 42  # the deprecated uid, where the platform still sends one
    assert parse_open(doc).viewer == "bili:42"  # type: ignore[union-attr]


def test_a_cmd_suffix_is_stripped() -> None:
    doc = recorded("danmu_msg.json")
    doc["cmd"] = "DANMU_MSG:4:0:2:2:2:0"
    assert parse_web(doc) == WEB_EXPECTED["danmu_msg.json"]


def test_a_danmaku_without_id_str_gets_a_stable_digest() -> None:
    doc = recorded("danmu_msg_masked.json")
    doc["info"][0] = doc["info"][0][:15]          # the older shape: no mode info, no id_str
    first, again = parse_web(doc), parse_web(json.loads(json.dumps(doc)))
    assert isinstance(first, ChatMessage) and first == again
    assert first.id == "bilibili:d" + digest(0, 1705296203118, "主播今天唱什么歌", 1705296203, "7B1E95C2")
    doc["info"][9]["ct"] = "0000AAAA"             # another masked viewer, same text, same millisecond
    assert parse_web(doc).id != first.id  # type: ignore[union-attr]
    garbled = recorded("danmu_msg.json")
    garbled["info"][0][15]["extra"] = '{"id_str": "5513a2'
    item = parse_web(garbled)
    assert isinstance(item, ChatMessage) and item.id.startswith("bilibili:d") and item.viewer == "bili:495732423"


def test_unreadable_bodies_are_unparsed_notices_with_a_reason() -> None:
    broken = recorded("danmu_msg.json")
    broken["info"] = broken["info"][:1]
    cases = {b"not json": "not JSON", b"[1, 2]": "no cmd", b'{"cmd": 5}': "no cmd",
             orjson.dumps(broken): "DANMU_MSG: IndexError",
             orjson.dumps({"cmd": "SEND_GIFT", "data": {"uid": "x"}}): "SEND_GIFT: ValueError"}
    for body, why in cases.items():
        item = parse_body(body, parse_web)
        assert isinstance(item, PlatformNotice) and item.name == "unparsed" and why in item.detail, body


def test_wbi_signing_matches_the_documented_example() -> None:
    img, sub = "7cd084941338484aae1ad9425b84077c", "4932caff0ff746eab6f01bf08b70ac45"
    assert mixin_key(img, sub) == "ea1db124af3c7062474693fa704f4ff8"
    signed = wbi_sign({"foo": "114", "bar": "514", "zab": 1919810}, img, sub, 1702204169)
    assert signed == {"foo": "114", "bar": "514", "zab": "1919810", "wts": "1702204169",
                      "w_rid": "8f6f2b5b3d485fe1886cec6a0be8c5d4"}


# --- against the loopback peer ----------------------------------------------------------------

class Reader:
    """Reads a connector in the background, keeping what came and how it ended."""

    def __init__(self, conn: BilibiliRoom | BilibiliOpenLive) -> None:
        self.items: list[Item] = []
        self.error: Exception | None = None
        self.task = asyncio.create_task(self._run(conn), name="test reader")

    async def _run(self, conn: BilibiliRoom | BilibiliOpenLive) -> None:
        try:
            async for item in conn.read():
                self.items.append(item)
        except (ConnectionLost, BridgeFatal) as exc:
            self.error = exc

    def said(self) -> list[Item]:
        """What came, less the heartbeat replies."""
        return [i for i in self.items if not (isinstance(i, PlatformNotice) and i.name == "HEARTBEAT_REPLY")]

    def chats(self) -> list[ChatMessage]:
        return [i for i in self.items if isinstance(i, ChatMessage)]

    def named(self, name: str) -> list[PlatformNotice]:
        return [i for i in self.items if isinstance(i, PlatformNotice) and i.name == name]


@pytest.fixture
async def peer():  # type: ignore[no-untyped-def]
    async with BilibiliPeer() as server:
        yield server


def web_room(peer: BilibiliPeer, room: int = 1, **kw: Any) -> BilibiliRoom:
    return BilibiliRoom(room, COOKIE, api_base=peer.api_base, nav_base=peer.api_base, ws_url=peer.ws_url, **kw)


def open_live(peer: BilibiliPeer, code: str = CODE, secret: str = "peer-secret", **kw: Any) -> BilibiliOpenLive:
    return BilibiliOpenLive(code, peer.app_id, "peer-key", secret, api_base=peer.api_base, **kw)


async def test_web_room_authenticates_as_the_web_client(peer: BilibiliPeer) -> None:
    async with web_room(peer) as room:
        assert room.real_id == 21452505 and room.owner_uid == peer.owner_uid
        assert orjson.loads(peer.auths[-1]) == {
            "uid": 35261453, "roomid": 21452505, "protover": 3, "platform": "web", "type": 2,
            "key": "peer-token", "buvid": "B3A1C2D4-1111-2222-3333-444455556666infoc"}
        assert {"id", "type", "web_location", "wts", "w_rid"} <= set(peer.danmu_info_params[-1])


async def test_heartbeats_are_sent_and_their_replies_read(peer: BilibiliPeer) -> None:
    peer.popularity = 4242
    async with web_room(peer, heartbeat_s=0.05) as room:
        reader = Reader(room)
        await wait_for(lambda: len(reader.named("HEARTBEAT_REPLY")) >= 3, 5, "three heartbeat replies")
        assert peer.heartbeats >= 3 and reader.named("HEARTBEAT_REPLY")[0].detail == "4242"


@pytest.mark.parametrize("protover", [PROTO_JSON, PROTO_ZLIB, PROTO_BROTLI])
async def test_web_messages_arrive_in_each_protocol(peer: BilibiliPeer, protover: int) -> None:
    async with web_room(peer) as room:
        reader = Reader(room)
        assert await peer.send([recorded(n) for n in WEB_FILES], protover) == 1
        await wait_for(lambda: len(reader.said()) == len(WEB_FILES), 5, "every command")
        assert reader.said() == [WEB_EXPECTED[n] for n in WEB_FILES]


async def test_the_streamers_own_danmaku_is_marked_broadcaster(peer: BilibiliPeer) -> None:
    doc = recorded("danmu_msg.json")
    doc["info"][2][0] = peer.owner_uid
    async with web_room(peer) as room:
        reader = Reader(room)
        await peer.send([doc])
        await wait_for(lambda: bool(reader.chats()), 5, "the streamer's line")
        assert reader.chats()[0].badges[-1] == "broadcaster"


async def test_a_garbled_frame_is_an_unparsed_notice_and_reading_goes_on(peer: BilibiliPeer) -> None:
    async with web_room(peer) as room:
        reader = Reader(room)
        await peer.send_frames([b"\x00\x00\x00\x30garbage", pack_commands([recorded("danmu_msg.json")])])
        await wait_for(lambda: bool(reader.chats()), 5, "the message after the garbage")
        assert reader.named("unparsed") and reader.error is None


async def test_a_drop_is_connection_lost_and_a_reconnect_reads_on(peer: BilibiliPeer) -> None:
    room = web_room(peer)
    try:
        await room.connect()
        reader = Reader(room)
        await peer.send([recorded("danmu_msg.json")])
        await wait_for(lambda: len(reader.chats()) == 1, 5, "the first message")
        peer.drop()
        await wait_for(lambda: reader.error is not None, 5, "ConnectionLost")
        assert isinstance(reader.error, ConnectionLost) and room.missed() is None
        await room.connect()
        again = Reader(room)
        await peer.send([recorded("super_chat_message.json")], PROTO_ZLIB)
        await wait_for(lambda: bool(again.chats()), 5, "a message after the reconnect")
        assert again.chats() == [WEB_EXPECTED["super_chat_message.json"]] and len(peer.auths) == 2
    finally:
        await room.close()


async def test_a_server_restart_refuses_then_accepts(peer: BilibiliPeer) -> None:
    room = web_room(peer)
    try:
        await room.connect()
        reader = Reader(room)
        await peer.stop()
        await wait_for(lambda: reader.error is not None, 5, "ConnectionLost")
        with pytest.raises(ConnectionLost):
            await room.connect()
        await peer.start()
        await room.connect()
        again = Reader(room)
        await peer.send([recorded("danmu_msg.json")])
        await wait_for(lambda: bool(again.chats()), 5, "a message from the restarted server")
    finally:
        await room.close()


async def test_silence_past_the_limit_is_connection_lost(peer: BilibiliPeer) -> None:
    peer.answer_heartbeats = False
    async with web_room(peer, heartbeat_s=60, silence_s=0.3) as room:
        reader = Reader(room)
        await wait_for(lambda: reader.error is not None, 5, "the silence noticed")
        assert isinstance(reader.error, ConnectionLost) and "nothing for 0.3 s" in str(reader.error)


async def test_an_unknown_room_is_fatal(peer: BilibiliPeer) -> None:
    room = web_room(peer, room=999)
    try:
        with pytest.raises(BridgeFatal, match="unknown room 999"):
            await room.connect()
    finally:
        await room.close()


async def test_a_refused_auth_is_fatal(peer: BilibiliPeer) -> None:
    peer.auth_code = -101
    room = web_room(peer)
    try:
        with pytest.raises(BridgeFatal, match="refused the auth"):
            await room.connect()
    finally:
        await room.close()


async def test_open_live_starts_a_game_and_reads_its_commands(peer: BilibiliPeer) -> None:
    conn = open_live(peer, app_heartbeat_s=0.05)
    try:
        await conn.connect()
        assert conn.game_id in peer.games and conn.room_id == 21452505
        assert peer.auths[-1] in peer.open_auths       # the auth body, verbatim
        reader = Reader(conn)
        await peer.send([recorded(n) for n in OPEN_FILES], PROTO_ZLIB)
        await wait_for(lambda: len(reader.chats()) == len(OPEN_FILES), 5, "every command")
        assert reader.chats() == [OPEN_EXPECTED[n] for n in OPEN_FILES]
        await wait_for(lambda: peer.app_heartbeats >= 2, 5, "app heartbeats")
        game = conn.game_id
    finally:
        await conn.close()
    assert peer.ended == [game] and conn.app_heartbeat_failures == 0


async def test_open_live_keeps_its_game_across_a_drop(peer: BilibiliPeer) -> None:
    async with open_live(peer) as conn:
        reader = Reader(conn)
        game = conn.game_id
        peer.drop()
        await wait_for(lambda: reader.error is not None, 5, "ConnectionLost")
        await conn.connect()
        assert conn.game_id == game and len(peer.games) == 1 and len(peer.auths) == 2


@pytest.mark.parametrize("kw, code", [
    ({"secret": "wrong-secret"}, 4002), ({"code": "WRONGCODE0000"}, 7007)])
async def test_open_live_refusals_are_fatal(peer: BilibiliPeer, kw: dict[str, str], code: int) -> None:
    conn = open_live(peer, **kw)
    try:
        with pytest.raises(BridgeFatal, match=f"code {code}"):
            await conn.connect()
    finally:
        await conn.close()
    assert not peer.games


async def test_a_refused_app_heartbeat_ends_the_reading_and_a_new_game_starts(peer: BilibiliPeer) -> None:
    async with open_live(peer, app_heartbeat_s=0.05) as conn:
        reader = Reader(conn)
        first = conn.game_id
        assert first is not None
        peer.expire_game(first)
        await wait_for(lambda: reader.error is not None, 5, "ConnectionLost")
        assert "7003" in str(reader.error) and conn.game_id is None
        await conn.connect()
        assert conn.game_id not in (None, first)


async def test_the_platform_ending_the_game_is_connection_lost(peer: BilibiliPeer) -> None:
    async with open_live(peer) as conn:
        reader = Reader(conn)
        await peer.send([{"cmd": "LIVE_OPEN_PLATFORM_INTERACTION_END",
                          "data": {"game_id": conn.game_id, "timestamp": 1650718000}}])
        await wait_for(lambda: reader.error is not None, 5, "ConnectionLost")
        assert reader.named("LIVE_OPEN_PLATFORM_INTERACTION_END") and conn.game_id is None
