"""NATS credentials per service: a real nats-server with the generated config (infra/nats/nats.conf)
refuses what a service may not do, and the whole show runs with every service on its own user."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import av
import nats
import pytest
from nats.aio.client import Client

from app.natsauth import server_config, users
from app.publish import send
from app.shows import load_show
from app.supervisor import ACTOR_NAMES, Stage, run_show
from app.web import WebServer, preview_server
from events.codec import encode
from events.danmaku import DanmakuReceived, OperatorControl
from events.subjects import subject_for
from infra.natsserver import EmbeddedNats, free_port, server_binary
from infra.settings import Settings
from store.recorder import read_events
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.timeout(240),
    # nats-py leaves the socket of a refused connection to the garbage collector.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


@dataclass
class SecuredNats:
    port: int
    log: Path
    passwords: dict[str, str]

    def url(self, user: str, password: str | None = None) -> str:
        return f"nats://{user}:{password or self.passwords[user]}@127.0.0.1:{self.port}"

    def violations(self) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if "Violation" in line]


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[SecuredNats]:
    port, monitor = free_port(), free_port()
    config = tmp_path / "nats.conf"
    config.write_text(server_config(port=port, monitor_port=monitor, store_dir=str(tmp_path / "js")))
    passwords = {u.name: f"{u.name}-secret" for u in users()}
    env = {**os.environ, **{u.password_variable: passwords[u.name] for u in users()}}
    log = tmp_path / "nats.log"
    with log.open("w") as out:
        proc = subprocess.Popen([str(server_binary()), "-c", str(config)], stdout=out, stderr=out, env=env)
    try:
        wait_listening(port)
        yield SecuredNats(port, log, passwords)
    finally:
        proc.terminate()
        proc.wait(10)


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)  # polling a port for the server's start (no event to wait on)
    raise AssertionError("nats-server did not start")


class Client_:
    """A raw NATS client that keeps the server's errors (permission violations come as errors)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.nc: Client | None = None

    async def connect(self, url: str) -> Client:
        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc))

        self.nc = await nats.connect(url, error_cb=on_error, allow_reconnect=False, connect_timeout=3)
        return self.nc


@pytest.fixture
async def clients() -> AsyncIterator[list[Client_]]:
    made: list[Client_] = []
    yield made
    for c in made:
        if c.nc is not None and not c.nc.is_closed:
            await c.nc.close()


async def _client(secured: SecuredNats, made: list[Client_], user: str) -> Client_:
    c = Client_()
    await c.connect(secured.url(user))
    made.append(c)
    return c


def test_the_committed_config_is_what_the_actors_declare() -> None:
    committed = (ROOT / "infra/nats/nats.conf").read_text()
    assert committed == server_config(), "infra/nats/nats.conf is stale: regenerate it with troupe nats-config"


def test_the_config_is_valid_for_nats_server(tmp_path: Path) -> None:
    env = {**os.environ, **{u.password_variable: "x" for u in users()}}
    out = subprocess.run([str(server_binary()), "-c", str(ROOT / "infra/nats/nats.conf"), "-t"],
                         capture_output=True, text=True, env=env, timeout=30, check=False)
    assert out.returncode == 0 and "is valid" in out.stdout + out.stderr, out.stderr


async def test_a_wrong_password_and_anonymous_connections_are_refused(secured: SecuredNats) -> None:
    for url in (secured.url("producer", "wrong"), f"nats://127.0.0.1:{secured.port}",
                secured.url("nobody", "x")):
        with pytest.raises(Exception, match="(?i)authorization"):
            await nats.connect(url, allow_reconnect=False, connect_timeout=3, max_reconnect_attempts=0)


async def test_what_each_service_may_not_do_is_refused(secured: SecuredNats, settings: Settings,
                                                       clients: list[Client_]) -> None:
    # The show provisions the streams and starts a run.
    async with Stage(settings.replace(nats_url=secured.url("show"))) as show_stage:
        js_show = show_stage.js
        frames_before = (await js_show.stream_info("TROUPE_FRAME")).state.messages
        producer = await _client(secured, clients, "producer")
        nc = producer.nc
        assert nc is not None
        # A producer may publish a danmaku (JetStream stores it) ...
        danmaku = DanmakuReceived(id="p-1", run="perm", text="hello", user="ann")
        ack = await nc.jetstream().publish(subject_for(danmaku), encode(danmaku))
        assert ack.stream == "TROUPE_DANMAKU"
        # ... but not a frame, nor a moderator line, and it reads no stream.
        await nc.publish("troupe.perm.frame.rendered", b"{}")
        moderator = DanmakuReceived(id="p-2", run="perm", text="take the floor", kind="moderator")
        await nc.publish(subject_for(moderator), encode(moderator))
        control = OperatorControl(id="p-3", run="perm", action="hold")  # nor an operator's control
        await nc.publish(subject_for(control), encode(control))
        with pytest.raises(Exception):  # noqa: B017 - a timeout or a permissions error, by client version
            await nc.jetstream(timeout=1.5).get_last_msg("TROUPE_RUN", "troupe.perm.run.started")
        await nc.subscribe("troupe.>")
        await nc.flush()
        await wait_for(lambda: len(producer.errors) >= 5, 10, "the producer's violations")
        said = " ".join(producer.errors).lower()
        assert 'publish to "troupe.perm.frame.rendered"' in said
        assert 'publish to "troupe.perm.danmaku.received.moderator"' in said
        assert 'publish to "troupe.perm.danmaku.control"' in said
        assert 'publish to "$js.api.stream.msg.get.troupe_run"' in said
        assert 'subscription to "troupe.>"' in said
        # An actor may publish what it emits, not another family's events.
        llm = await _client(secured, clients, "llm")
        assert llm.nc is not None
        await llm.nc.publish("troupe.perm.utterance.chunk", b"{}")
        await llm.nc.publish("troupe.perm.frame.rendered", b"{}")
        await llm.nc.publish("troupe.perm.cue.issued", b"{}")
        await llm.nc.flush()
        await wait_for(lambda: len(llm.errors) >= 2, 10, "the llm's violations")
        assert not any("utterance.chunk" in e for e in llm.errors)
        assert any("frame.rendered" in e for e in llm.errors) and any("cue.issued" in e for e in llm.errors)
        # The preview's page sends danmaku, never a moderator line.
        preview = await _client(secured, clients, "preview")
        assert preview.nc is not None
        await preview.nc.publish(subject_for(moderator), encode(moderator))
        await preview.nc.flush()
        await wait_for(lambda: len(preview.errors) >= 1, 10, "the preview's violation")
        assert "danmaku.received.moderator" in preview.errors[0]
        # The recorder reads everything and publishes nothing.
        recorder = await _client(secured, clients, "recorder")
        assert recorder.nc is not None
        await recorder.nc.publish("troupe.perm.danmaku.received", b"{}")
        await recorder.nc.flush()
        await wait_for(lambda: len(recorder.errors) >= 1, 10, "the recorder's violation")
        assert (await js_show.stream_info("TROUPE_FRAME")).state.messages == frames_before


async def test_the_show_runs_with_every_service_on_its_own_credentials(secured: SecuredNats,
                                                                        settings: Settings) -> None:
    stages: list[Stage | WebServer] = []
    try:
        show = Stage(settings.replace(nats_url=secured.url("show")))
        await show.__aenter__()
        stages.append(show)
        page = None
        for name in (*ACTOR_NAMES, "preview"):
            stage = Stage(settings.replace(nats_url=secured.url(name), preview_token="t", http_port=0))
            await stage.__aenter__()
            stages.append(stage)
            [runtime] = await stage.start_actors([name])
            if name == "preview":  # its page, whose input box sends with the preview's user
                page = await preview_server(stage, runtime)
                stages.append(page)
        # The demo without its scripted chat: the page's comment below is the only one, so that it is
        # answered whatever the scripted comments' timing (a fresher one would go first).
        quiet = dataclasses.replace(load_show(), script=())
        running = asyncio.create_task(run_show(show, quiet, 12.0, names=(), run_id="creds"))
        # A producer's moderator line sent on the plain danmaku subject is rejected: the floor
        # is taken only on the moderator subject, with a moderator's credentials.
        producer = Client_()
        nc = await producer.connect(secured.url("producer"))
        line = DanmakuReceived(id="creds-fake-mod", run="creds", text="stop the show", kind="moderator")
        async def started() -> bool:
            with contextlib.suppress(Exception):
                return bool(await show.js.get_last_msg("TROUPE_RUN", "troupe.creds.run.started"))
            return False

        await wait_for(started, 20, "the run")
        await nc.jetstream().publish("troupe.creds.danmaku.received", encode(line))
        await nc.close()
        # The operator's say, with the moderator's credentials: checked, applied and answered.
        moderator = Client_()
        mnc = await moderator.connect(secured.url("moderator"))
        say = OperatorControl(id="creds-say", run="creds", action="say", target="rex", user="op",
                              text="Thanks for watching, everyone.")
        [said] = await send(mnc, "creds", [say], 10.0)
        await mnc.close()
        assert said.to_dict()["outcome"] == "applied", said.to_dict()
        # A platform's chat, bridged with the bridge's credentials into the run on air.
        bridged = await _bridge_one_message(secured)
        assert page is not None
        async with aiohttp.ClientSession() as http, http.post(
            f"http://127.0.0.1:{page.port}/runs/creds/danmaku?wait=15", json={"text": "hello @rex", "user": "web"},
            headers={"Authorization": "Bearer t"},
        ) as response:
            answer = await response.json()
        assert response.status == 200 and answer["results"][0]["outcome"] == "cue", answer
        result = await running
        rejected = [e for e in read_events(show.engine, "creds") if e.type == "danmaku.rejected"
                    and e.correlation == "creds-fake-mod"]
        assert len(rejected) == 1 and "moderator" in rejected[0].detail  # type: ignore[attr-defined]
        spoken = [e for e in read_events(show.engine, "creds") if e.type == "utterance.completed"
                  and e.utterance == say.derive("say")]  # type: ignore[attr-defined]
        assert [e.text for e in spoken] == ["Thanks for watching, everyone."]  # type: ignore[attr-defined]
        assert [getattr(e, "text", "") for e in read_events(show.engine, "creds")
                if isinstance(e, DanmakuReceived) and e.platform == "youtube"] == [bridged]
        assert (Path(settings.out_dir) / "creds.mp4").exists()
        stored = list(read_events(show.engine, result.run))
        types = {e.type for e in stored}
        assert {"cue.issued", "utterance.completed", "audio.chunk", "viseme.track", "frame.rendered"} <= types
        with av.open(str(Path(settings.out_dir) / "creds.mp4")) as mp4:  # 12 s at 25 fps, skipped ones repeated
            assert sum(1 for _ in mp4.decode(video=0)) == 300
        assert secured.violations() == [], secured.violations()[:5]
    finally:
        for stage in reversed(stages):
            if isinstance(stage, WebServer):
                await stage.close()
            else:
                await stage.__aexit__(None, None, None)


async def _bridge_one_message(secured: SecuredNats) -> str:
    """A YouTube chat message through a bridge connected as the bridge user, following the run
    on air (the lease bucket's keys, the run's start): published, then the bridge stopped."""
    from app.bridges.base import Backoff
    from app.bridges.run import Bridge, BridgeConfig
    from app.bridges.youtube import YouTubeChat
    from bench.peers.youtube import YouTubePeer

    text = "hello from youtube"
    bridge_client = Client_()
    bnc = await bridge_client.connect(secured.url("bridge"))
    async with YouTubePeer(polling_interval_ms=20) as peer:
        peer.add_video("v1", "chat1")
        chat = YouTubeChat(video_id="v1", api_key="test-key", api_base=peer.url, quota_units=10**9, backfill_s=60)
        bridge = Bridge(chat, bnc.jetstream(), BridgeConfig("youtube video v1", backoff=Backoff(0.05, 0.2)))
        stop = asyncio.Event()
        task = asyncio.create_task(bridge.run(stop))
        peer.post("chat1", text=text, author="Yuki", channel_id="UCyuki")
        await wait_for(lambda: bridge.totals.published == 1 or task.done(), 30, "the bridged message")
        stop.set()
        await asyncio.wait_for(task, 30)
    await bnc.close()
    return text


def test_troupe_up_s_embedded_server_listens_on_loopback_only(nats_server: EmbeddedNats) -> None:
    config = (nats_server.state_dir / "nats-server.conf").read_text()
    assert f'listen: "127.0.0.1:{nats_server.port}"' in config and "authorization" not in config
