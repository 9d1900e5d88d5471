"""Platform bridges: throughput, added latency and a soak with forced disconnects, against the
loopback peers (``bench.peers``) and a real nats-server.

``python -m bench.bridges [--json] [--quick] [--messages N] [--soak-minutes M] [--drop-every-s S]``

1. Throughput per connector: the peer sends N messages (``--quick`` 2,000) as fast as it can
   (Twitch: PRIVMSG lines with their own ``id`` tags, over TLS; Bilibili: DANMU_MSG commands, 20
   to a brotli frame; YouTube: N messages posted, then polled with a 5 ms pollingIntervalMillis
   and an endless quota).  Every payload is made before the clock starts, which starts at the
   peer's first write (not at the first message read: on YouTube that comes only after the first
   page's fetch and decode).  Parse only: the connector's ``read()`` alone, to the last message.
   End to end: through the connector and the ``Bridge`` (rate cap off) into JetStream, to the
   last ack.  Goal: ≥ 2,000 messages/s for Twitch.
2. Added latency at 50 messages/s (Twitch, Bilibili): each message's time from the peer's write to
   its publish ack, and the bridge's part of it (read off the connection to the ack: what
   ``troupe_bridge_publish_seconds`` observes).  Goal: p99 ≤ 20 ms.
3. The soak (``bench.bridges_soak``): all three for ``--soak-minutes`` (30; ``--quick`` 1.5), every
   connection cut every 3 minutes (``--quick``: 20 s; a third of a shorter soak).  Goal: nothing
   lost, nothing stored twice, every disconnect recorded as a ``danmaku.gap``.

The benchmark's process (the peers, the connectors and the bridges, in one event loop: the peers'
cost is included) runs on one core where the OS allows it; nats-server on the others.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import os
import secrets
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Self

import orjson
from nats.js import JetStreamContext

from app.bridges.base import ChatMessage
from app.bridges.bilibili import BilibiliRoom
from app.bridges.bilibili_wire import PROTO_BROTLI, pack_commands
from app.bridges.run import Bridge, BridgeConfig, _Read
from app.bridges.twitch import TwitchChat
from app.bridges.youtube import YouTubeChat
from bench.bridges_soak import Rig, Unit, soak, start_run, until
from bench.common import machine, pct, print_table, write_result
from bench.peers.bilibili import BilibiliPeer
from bench.peers.twitch import LoopbackTls, TwitchPeer, loopback_tls
from bench.peers.youtube import YouTubePeer
from events.base import Event
from events.danmaku import DanmakuReceived
from events.subjects import stream_name
from infra.bus import connect, provision_streams
from infra.natsserver import EmbeddedNats

CHANNEL, ROOM, VIDEO, CHAT = "troupebench", 1, "benchvideo1", "Cg0KC2JlbmNodmlkZW8x"
BURST = 20           # messages to a unit at full speed: Bilibili's commands in one brotli frame
RATE = 50.0          # messages a second for the latency
SAID = ("@host what game is next", "lol that was close", "hi from Lisbon", "@rex how fast is your gpu", "GG",
        "play the song again pls", "主播今天唱什么歌", "first time here, love the show", "Kappa Keepo Kappa")


def privmsg(msg_id: str, n: int) -> str:
    """A PRIVMSG as Twitch sends one (tags as in its documented examples), with its own ``id``."""
    user = 10_000 + n % 997
    return (f"@badge-info=subscriber/8;badges=subscriber/6,premium/1;client-nonce={msg_id[:8]}{n:024x};"
            f"color=#1E90FF;display-name=Viewer{user};emotes=;first-msg=0;flags=;id={msg_id};mod=0;"
            f"returning-chatter=0;room-id=713936733;subscriber=1;tmi-sent-ts={int(time.time() * 1000)};turbo=0;"
            f"user-id={user};user-type= :viewer{user}!viewer{user}@viewer{user}.tmi.twitch.tv PRIVMSG #{CHANNEL} "
            f":{SAID[n % len(SAID)]} #{n}")


def danmu_msg(id_str: str, n: int) -> dict[str, Any]:
    """A DANMU_MSG as the web room sends one (the shape of a recorded one), with its own ``id_str``."""
    uid, ts_ms, text = 400_000_000 + n % 997, int(time.time() * 1000), f"{SAID[n % len(SAID)]} #{n}"
    extra = {"send_from_me": False, "mode": 0, "color": 16777215, "dm_type": 0, "font_size": 25, "player_mode": 1,
             "show_player_type": 0, "content": text, "user_hash": str(uid * 7919 % 2**32), "emoticon_unique": "",
             "bulge_display": 0, "recommend_score": 3, "main_state_dm_color": "", "objective_state_dm_color": "",
             "direction": 0, "pk_direction": 0, "quartet_direction": 0, "anniversary_crowd": 0,
             "yeah_space_type": "", "yeah_space_url": "", "jump_to_url": "", "space_type": "", "space_url": "",
             "animation": {}, "emots": None, "is_audited": False, "id_str": id_str, "icon": None,
             "show_reply": True, "reply_mid": 0, "reply_uname": "", "reply_uname_color": "", "hit_combo": 0}
    user = {"uid": uid, "base": {"name": f"观众{uid % 997}", "face": "https://i0.hdslb.com/bfs/face/member/noface.jpg",
                                 "is_mystery": False, "name_color": 0, "name_color_str": "",
                                 "official_info": {"role": 0, "title": "", "desc": "", "type": -1},
                                 "origin_info": {"name": f"观众{uid % 997}", "face": ""}, "risk_ctrl_info": None},
            "medal": None, "wealth": {"level": 12, "dm_icon_key": ""}, "title": {"old_title_css_id": "",
                                                                                 "title_css_id": ""},
            "guard": None, "uhead_frame": None, "guard_leader": {"is_guard_leader": False}}
    mode = {"mode": 0, "show_player_type": 0, "extra": orjson.dumps(extra).decode(), "user": user}
    meta = [0, 1, 25, 16777215, ts_ms, ts_ms // 1000 - 600, 0, f"{uid:08x}"[-8:], 0, 0, 0, "", 0, "{}", "{}", mode,
            {"activity_identity": "", "activity_source": 0, "not_show": 0}, 0]
    info = [meta, text, [uid, f"观众{uid % 997}", 0, 0, 0, 10000, 1, ""], [], [12, 0, 6406234, ">50000", 0], ["", ""],
            0, 0, None, {"ts": ts_ms // 1000, "ct": f"{n:08X}"}, 0, 0, None, None, 0, 105, [12], None]
    return {"cmd": "DANMU_MSG", "info": info, "dm_v2": ""}


class _Peered:
    """A rig whose peer starts and stops with it."""

    peer: TwitchPeer | BilibiliPeer | YouTubePeer

    async def __aenter__(self) -> Self:
        await self.peer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.peer.stop()


class TwitchRig(_Peered):
    """Twitch: IRC over TLS (a loopback certificate), PRIVMSG lines each with its ``id`` tag."""

    platform, source = "twitch", f"twitch #{CHANNEL}"
    peer: TwitchPeer

    def __init__(self, tls: LoopbackTls) -> None:
        self.tls, self.peer = tls, TwitchPeer(tls=tls.server_context())

    def connector(self) -> TwitchChat:
        return TwitchChat(CHANNEL, host=self.peer.host, port=self.peer.port, ssl_context=self.tls.client_context())

    def units(self, per_unit: int = 1) -> Iterator[Unit]:
        for n in itertools.count(step=per_unit):
            ids = [str(uuid.uuid4()) for _ in range(per_unit)]
            yield Unit([privmsg(i, n + k) for k, i in enumerate(ids)], tuple(f"twitch:{i}" for i in ids))

    async def deliver(self, units: Sequence[Unit]) -> tuple[list[str], int]:
        reached = self.peer.joined > 0   # read before the lines go: send_many writes before it first waits
        await self.peer.send_many([line for u in units for line in u.data])
        ids = [i for u in units for i in u.ids]
        return (ids, 0) if reached else ([], len(ids))

    async def drop(self, bridge: Bridge) -> None:
        self.peer.drop()


class BilibiliRig(_Peered):
    """Bilibili's web room: the HTTP API, then the WebSocket; DANMU_MSG commands in brotli frames."""

    platform, source = "bilibili", f"bilibili room {ROOM}"
    peer: BilibiliPeer

    def __init__(self) -> None:
        self.peer = BilibiliPeer()

    def connector(self) -> BilibiliRoom:
        return BilibiliRoom(ROOM, api_base=self.peer.api_base, nav_base=self.peer.api_base, ws_url=self.peer.ws_url)

    def units(self, per_unit: int = 1) -> Iterator[Unit]:
        for n in itertools.count(step=per_unit):
            ids = [secrets.token_hex(17) for _ in range(per_unit)]
            frame = pack_commands([danmu_msg(i, n + k) for k, i in enumerate(ids)], PROTO_BROTLI)
            yield Unit(frame, tuple(f"bilibili:{i}" for i in ids))

    async def deliver(self, units: Sequence[Unit]) -> tuple[list[str], int]:
        reached = await self.peer.send_frames([u.data for u in units])
        ids = [i for u in units for i in u.ids]
        return (ids, 0) if reached else ([], len(ids))

    async def drop(self, bridge: Bridge) -> None:
        self.peer.drop()


class YouTubeRig(_Peered):
    """YouTube's Data API, polled: every message posted is kept, and a drop is the API answering
    503 until the bridge has seen it."""

    platform, source = "youtube", f"youtube video {VIDEO}"
    peer: YouTubePeer

    def __init__(self, polling_interval_ms: int = 5) -> None:
        self.peer = YouTubePeer(polling_interval_ms=polling_interval_ms, quota_units=10**12)
        self.peer.add_video(VIDEO, CHAT)

    def connector(self) -> YouTubeChat:
        return YouTubeChat(video_id=VIDEO, api_key="test-key", api_base=self.peer.url, quota_units=10**12)

    def units(self, per_unit: int = 1) -> Iterator[Unit]:
        for n in itertools.count(step=per_unit):
            yield Unit([(f"{SAID[(n + k) % len(SAID)]} #{n + k}", f"Viewer{(n + k) % 997}") for k in range(per_unit)], ())

    async def deliver(self, units: Sequence[Unit]) -> tuple[list[str], int]:
        posted = [self.peer.post(CHAT, text=text, author=author) for u in units for text, author in u.data]
        return [f"youtube:{p['id']}" for p in posted], 0

    async def drop(self, bridge: Bridge) -> None:
        self.peer.drop(None, "503")
        await until(lambda: not bridge.connected.is_set(), 60, "the youtube bridge to see the outage")
        self.peer.recover()


class TimedBridge(Bridge):
    """A ``Bridge`` that notes, for each message it published, when it was read and when its ack came."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.marks: dict[str, tuple[float, float]] = {}   # source id -> (read, acked), perf_counter

    def _published(self, event: Event, read: _Read, now: float, wall: int) -> None:
        super()._published(event, read, now, wall)
        if isinstance(event, DanmakuReceived) and isinstance(read.item, ChatMessage):
            self.marks[read.item.id] = (read.read_at, now)


@contextlib.asynccontextmanager
async def bridged(js: JetStreamContext, rig: Rig, run: str) -> AsyncIterator[TimedBridge]:
    """A timed bridge (rate cap off) from the rig's connector into ``run``, connected."""
    bridge = TimedBridge(rig.connector(), js, BridgeConfig(rig.source, run, rate_per_s=0))
    stop = asyncio.Event()
    task = asyncio.create_task(bridge.run(stop), name=f"bench-{rig.platform}-bridge")
    try:
        await until(lambda: bridge.connected.is_set() or task.done(), 60, f"the {rig.platform} bridge to connect")
        if task.done():
            await task   # its failure
        yield bridge
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def stored_count(js: JetStreamContext, run: str) -> int:
    """The run's ``danmaku.received`` messages on the stream."""
    info = await js.stream_info(stream_name("danmaku"), subjects_filter=f"troupe.{run}.danmaku.received")
    return sum((info.state.subjects or {}).values())


async def parse_only(rig: Rig, n: int) -> dict[str, Any]:
    """The connector's ``read()`` alone: messages a second from the peer's first write to the last parsed."""
    connector = rig.connector()
    await connector.connect()
    units = list(itertools.islice(rig.units(BURST), math.ceil(n / BURST)))   # made before the clock starts
    stamps: list[float] = []

    async def read() -> None:
        async for item in connector.read():
            if isinstance(item, ChatMessage):
                stamps.append(time.perf_counter())
                if len(stamps) == len(units) * BURST:
                    return

    reader = asyncio.create_task(read(), name=f"bench-{rig.platform}-parse")
    try:
        start = time.perf_counter()
        await rig.deliver(units)
        await asyncio.wait_for(reader, 60 + n / 100)
    finally:
        reader.cancel()
        await connector.close()
    seconds = stamps[-1] - start
    return {"parsed": len(stamps), "seconds": seconds, "per_s": len(stamps) / seconds}


async def end_to_end(js: JetStreamContext, rig: Rig, n: int) -> dict[str, Any]:
    """Through the connector and the bridge into JetStream: from the peer's first write to the last ack
    (and from the first message read, which on YouTube comes after the first page's fetch)."""
    run = await start_run(js, f"bridges-{rig.platform}")
    units = list(itertools.islice(rig.units(BURST), math.ceil(n / BURST)))
    async with bridged(js, rig, run) as bridge:
        start = time.perf_counter()
        sent, _ = await rig.deliver(units)
        await until(lambda: bridge.totals.published >= len(sent), 60 + n / 100, f"{len(sent)} {rig.platform} published")
    reads, acks = zip(*bridge.marks.values(), strict=True)
    seconds = max(acks) - start
    return {"sent": len(sent), "published": bridge.totals.published, "stored": await stored_count(js, run),
            "seconds": seconds, "per_s": len(sent) / seconds, "per_s_from_first_read": len(sent) / (max(acks) - min(reads))}


async def paced(js: JetStreamContext, rig: Rig, rate: float, seconds: float) -> dict[str, Any]:
    """Messages at ``rate`` a second for ``seconds``: each one's write to its ack, and the bridge's part."""
    run = await start_run(js, f"bridges-{rig.platform}-paced")
    units = list(itertools.islice(rig.units(1), round(rate * seconds)))
    sent_at: dict[str, float] = {}
    async with bridged(js, rig, run) as bridge:
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i, unit in enumerate(units):
            await asyncio.sleep(max(0.0, start + i / rate - loop.time()))   # the pace, not a wait
            stamp = time.perf_counter()
            reached, _ = await rig.deliver([unit])
            sent_at.update(dict.fromkeys(reached, stamp))
        await until(lambda: bridge.totals.published >= len(sent_at), 60, f"the paced {rig.platform} published")
    marks = [bridge.marks[i] for i in sent_at]
    total = [(ack - sent_at[i]) * 1000 for i, (_, ack) in zip(sent_at, marks, strict=True)]
    return {"rate": rate, "seconds": seconds, "messages": len(sent_at), "stored": await stored_count(js, run),
            "socket_to_ack_ms": spread(total), "over_20_ms": sum(1 for v in total if v > 20),
            "read_to_ack_ms": spread([(ack - read) * 1000 for read, ack in marks])}


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"p50": pct(values, 50), "p95": pct(values, 95), "p99": pct(values, 99), "max": max(values)}


async def measure(js: JetStreamContext, tls: LoopbackTls, messages: int, latency_s: float, soak_s: float,
                  drop_every_s: float) -> dict[str, Any]:
    """The three parts, one platform at a time, then the soak with all three at once."""
    rigs: dict[str, Callable[[], TwitchRig | BilibiliRig | YouTubeRig]] = {
        "twitch": lambda: TwitchRig(tls), "bilibili": BilibiliRig, "youtube": YouTubeRig}
    throughput, latency = {}, {}
    for name, make in rigs.items():
        async with make() as rig:
            parsed = await parse_only(rig, messages)
        async with make() as rig:
            throughput[name] = {"parse_per_s": parsed["per_s"], **await end_to_end(js, rig, messages)}
    for name in ("twitch", "bilibili"):
        async with rigs[name]() as rig:
            latency[name] = await paced(js, rig, RATE, latency_s)
    async with TwitchRig(tls) as twitch, BilibiliRig() as bilibili, YouTubeRig(500) as youtube:
        soaked = await soak(js, [twitch, bilibili, youtube], soak_s, drop_every_s)
    return {"messages": messages, "throughput": throughput, "latency": latency, "soak": soaked}


async def _main(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) > 1:
        os.sched_setaffinity(0, cores[1:])   # nats-server, started now, inherits the other cores
    server = await EmbeddedNats(folder / "nats").start()
    if cores:
        os.sched_setaffinity(0, {cores[0]})
    pinned = {"core": cores[0] if cores else None, "nats_server_cores": cores[1:]}
    try:
        nc = await connect(server.url, "bench-bridges")
        js = nc.jetstream()
        await provision_streams(js)
        soak_s = args.soak_minutes * 60
        every = args.drop_every_s or (20.0 if args.quick else min(180.0, soak_s / 3))
        doc = await measure(js, loopback_tls(folder / "tls"), args.messages, args.latency_s, soak_s, every)
        await nc.close()
    finally:
        await server.stop()
    return {"machine": machine(), "pinned": pinned, "quick": args.quick, **doc}


def report(doc: dict[str, Any]) -> None:
    """The tables, the machine line first."""
    m, pin = doc["machine"], doc["pinned"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['platform']}, Python {m['python']}")
    print(f"pinned: this process to core {pin['core']} (the peers share its event loop: their cost is included), "
          f"nats-server to cores {pin['nats_server_cores'] or 'the same'}" if pin["core"] is not None
          else "not pinned: this OS has no sched_setaffinity")
    print_table(f"throughput, {doc['messages']:,} messages each, rate cap off (Twitch over TLS, Bilibili {BURST} "
                "to a brotli frame, YouTube pages of up to 2,000)",
                ["platform", "parse only msg/s", "end to end msg/s", "sent", "published", "stored"],
                [[k, round(v["parse_per_s"]), round(v["per_s"]), v["sent"], v["published"], v["stored"]]
                 for k, v in doc["throughput"].items()])
    lat = doc["latency"]
    print_table(f"added latency at {RATE:g} msgs/s for {next(iter(lat.values()))['seconds']:g} s (ms): the peer's "
                "write to the JetStream ack, and read off the connection to the ack",
                ["platform", "messages", "p50", "p95", "p99", "max", "over 20 ms", "read->ack p50", "read->ack p99"],
                [[k, v["messages"], *(v["socket_to_ack_ms"][q] for q in ("p50", "p95", "p99", "max")), v["over_20_ms"],
                  v["read_to_ack_ms"]["p50"], v["read_to_ack_ms"]["p99"]] for k, v in lat.items()])
    s = doc["soak"]
    rows = [[k, f"{v['sent_to_a_client']} / {v['sent_to_no_client']}", v["stored"], v["lost"], v["twice"],
             v["repeats_dropped"], v["drops"], v["gaps"], v["gap_s_max"]]
            for k, v in s.items() if isinstance(v, dict) and "lost" in v]
    print_table(f"soak, {s['seconds'] / 60:g} min, every connection cut every {s['drop_every_s']:g} s",
                ["platform", "sent to a client / to none", "stored", "lost", "twice", "repeats dropped", "drops",
                 "gaps", "longest gap s"], rows)
    met = ", ".join(f"{what}: {'met' if ok else 'MISSED'}" for what, ok in goals(doc).items())
    print(f"goals: {met}")


def goals(doc: dict[str, Any]) -> dict[str, bool]:
    """The issue's goals, judged from the numbers."""
    soaked = [v for v in doc["soak"].values() if isinstance(v, dict) and "lost" in v]
    return {
        "Twitch end to end >= 2,000/s": doc["throughput"]["twitch"]["per_s"] >= 2000,
        "p99 write -> ack <= 20 ms": all(v["socket_to_ack_ms"]["p99"] <= 20 for v in doc["latency"].values()),
        "soak: 0 lost, 0 twice, every drop a gap": all(v["lost"] == 0 and v["twice"] == 0 and v["gaps"] == v["drops"]
                                                       for v in soaked),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 messages, 5 s of latency, a 1.5-minute soak")
    parser.add_argument("--messages", type=int, default=None, help="messages for the throughput (20,000)")
    parser.add_argument("--latency-s", type=float, default=None, help="seconds at 50 msgs/s (20)")
    parser.add_argument("--soak-minutes", type=float, default=None, help="the soak's length (30)")
    parser.add_argument("--drop-every-s", type=float, default=None, help="seconds between drops (180)")
    parser.add_argument("--json", action="store_true", help="write bench/results/bridges.json")
    args = parser.parse_args()
    args.messages = args.messages or (2000 if args.quick else 20_000)
    args.latency_s = args.latency_s or (5.0 if args.quick else 20.0)
    args.soak_minutes = args.soak_minutes or (1.5 if args.quick else 30.0)
    with tempfile.TemporaryDirectory() as tmp:
        doc = asyncio.run(_main(args, Path(tmp)))
    report(doc)
    if args.json:
        print(f"wrote {write_result('bridges', doc)}")


if __name__ == "__main__":
    main()
