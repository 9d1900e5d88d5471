"""Every process serves Prometheus metrics about its actors."""

from __future__ import annotations

import asyncio
import urllib.request

from app.shows import load_show
from app.supervisor import Stage
from events import codec
from events.danmaku import DanmakuReceived
from events.run import RunStarted
from infra.settings import Settings
from tests.conftest import wait_for


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


async def test_metrics_endpoint_counts_handled_inputs(settings: Settings) -> None:
    async with Stage(settings.replace(metrics_port=0)) as stage:
        assert stage.metrics.port
        await stage.start_actors(["director"])
        run = "metricsrun"
        # The chat's outcomes only: the show does not speak by itself in this run.
        await stage.publish([RunStarted(id=f"{run}-start", run=run, show=load_show().to_dict(), seed=1, started_at_ms=1,
                                        config={"self_driven": "off"})])
        for i, text in enumerate(["@rex how do GPUs work", "@host best song ever?", "小鹿吃什么"]):
            event = DanmakuReceived(id=f"{run}-{i}", run=run, text=text, at_ms=1)
            await stage.js.publish(f"troupe.{run}.danmaku.received", codec.encode(event))
        await stage.js.publish(f"troupe.{run}.danmaku.received", b"not json")

        def published(type_: str) -> float:
            value = stage.metrics.registry.get_sample_value("troupe_published_total", {"actor": "director", "type": type_})
            return value or 0.0

        # One is answered at once, the others wait for the floor (answered or let go within seconds).
        def handled() -> bool:
            return published("cue.issued") + published("danmaku.skipped") == 3.0 and bool(
                stage.metrics.registry.get_sample_value("troupe_dead_lettered_total", {"actor": "director"}))

        await wait_for(handled, timeout_s=30, what="three outcomes and one dead letter")
        text = await asyncio.to_thread(scrape, stage.metrics.port)
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert float(values['troupe_processed_total{actor="director"}']) >= 3
    assert float(values['troupe_dead_lettered_total{actor="director"}']) >= 1
    assert float(values['troupe_published_total{actor="director",type="cue.issued"}']) >= 1
    assert float(values['troupe_handler_seconds_count{actor="director"}']) >= 3
    assert float(values['troupe_hop_latency_seconds_count{hop="danmaku.received>director"}']) >= 3
    # What the show is doing, counted from the events published (bounded labels).
    assert float(values['troupe_danmaku_outcomes_total{outcome="cue",reason=""}']) >= 1
    assert float(values['troupe_danmaku_outcomes_total{outcome="rejected",reason="malformed"}']) >= 1
