"""Builds the recorded binary packets from the recorded JSON commands, framed as the danmaku
server frames them, with its own few lines of framing (not ``app.bridges.bilibili_wire.pack``),
so that the connector's ``unpack`` is checked against an independent writer.

    .venv/bin/python tests/bridges/data/bilibili/make_packets.py

- ``web_zlib.bin``: one protocol-2 packet (op 5) holding the web commands, in ``WEB`` order;
- ``web_brotli.bin``: the same as a protocol-3 packet;
- ``frame_mixed.bin``: one WebSocket frame as the server sends after the auth: the auth reply
  (op 8), a heartbeat reply (op 3, popularity 1), and a protocol-3 packet of the Open Live
  danmaku and ``WATCHED_CHANGE``.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import brotli

HERE = Path(__file__).parent
WEB = ("danmu_msg.json", "danmu_msg_masked.json", "send_gift.json", "send_gift_silver.json",
       "super_chat_message.json", "guard_buy.json", "interact_word.json", "watched_change.json")


def packet(protover: int, op: int, body: bytes, seq: int = 0) -> bytes:
    return struct.pack(">IHHII", 16 + len(body), 16, protover, op, seq) + body


def command(name: str) -> bytes:
    doc = json.loads((HERE / name).read_text(encoding="utf-8"))
    return packet(0, 5, json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode())


def main() -> None:
    web = b"".join(command(name) for name in WEB)
    (HERE / "web_zlib.bin").write_bytes(packet(2, 5, zlib.compress(web)))
    (HERE / "web_brotli.bin").write_bytes(packet(3, 5, brotli.compress(web)))
    inner = command("open_dm.json") + command("watched_change.json")
    mixed = (packet(1, 8, b'{"code":0}', 1) + packet(1, 3, struct.pack(">I", 1), 1)
             + packet(3, 5, brotli.compress(inner)))
    (HERE / "frame_mixed.bin").write_bytes(mixed)


if __name__ == "__main__":
    main()
