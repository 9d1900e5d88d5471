"""bench.bridges in a tiny configuration on a real nats-server: its accounting (every message sent
published and stored once, every forced drop a recorded gap), not its speeds."""

from __future__ import annotations

import pytest
from nats.js import JetStreamContext

from bench.bridges import BilibiliRig, TwitchRig, YouTubeRig, end_to_end, paced, parse_only
from bench.bridges_soak import soak
from bench.peers.twitch import LoopbackTls, loopback_tls

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> LoopbackTls:
    return loopback_tls(tmp_path_factory.mktemp("tls"))


def _rig(platform: str, tls: LoopbackTls) -> TwitchRig | BilibiliRig | YouTubeRig:
    return {"twitch": lambda: TwitchRig(tls), "bilibili": BilibiliRig, "youtube": YouTubeRig}[platform]()


@pytest.mark.parametrize("platform", ["twitch", "bilibili", "youtube"])
async def test_each_message_sent_is_parsed_published_and_stored_once(
        js: JetStreamContext, tls: LoopbackTls, platform: str) -> None:
    async with _rig(platform, tls) as rig:
        parsed = await parse_only(rig, 300)
    async with _rig(platform, tls) as rig:
        result = await end_to_end(js, rig, 300)
    assert parsed["parsed"] == 300
    assert result["sent"] == result["published"] == result["stored"] == 300
    assert result["per_s"] > 0 and parsed["per_s"] > 0


@pytest.mark.parametrize("platform", ["twitch", "bilibili"])
async def test_every_paced_message_has_its_latency(js: JetStreamContext, tls: LoopbackTls, platform: str) -> None:
    async with _rig(platform, tls) as rig:
        result = await paced(js, rig, rate=50.0, seconds=1.0)
    assert result["messages"] == result["stored"] == 50
    ms = result["socket_to_ack_ms"]
    assert 0 < ms["p50"] <= ms["p99"] <= ms["max"]
    assert result["read_to_ack_ms"]["p50"] <= ms["p50"]


async def test_the_soak_loses_nothing_doubles_nothing_and_records_every_drop(
        js: JetStreamContext, tls: LoopbackTls) -> None:
    async with TwitchRig(tls) as twitch, BilibiliRig() as bilibili, YouTubeRig(100) as youtube:
        result = await soak(js, [twitch, bilibili, youtube], seconds=10.0, drop_every_s=3.5)
    for platform in ("twitch", "bilibili", "youtube"):
        s = result[platform]
        assert (s["drops"], s["gaps"], s["reconnects"]) == (2, 2, 2), platform
        assert (s["lost"], s["twice"], s["unexpected"]) == (0, 0, 0), platform
        assert s["stored"] == s["published"] == s["sent_to_a_client"] > 0, platform
    assert result["youtube"]["sent_to_no_client"] == 0   # the API keeps the chat: the page token resumes it
    assert result["youtube"]["gap_missed"] == [0]        # and the gap says nothing was missed
