"""A show on a three-node JetStream cluster (loopback), its streams with three replicas: the node
leading the streams is killed mid-show, then another; the show goes on, the nodes come back, and
the store holds every event of the run exactly once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import av
import pytest
from nats.js import JetStreamContext

from app.shows import load_show
from app.supervisor import Stage, new_run_id, run_show
from events.subjects import FAMILIES, stream_name
from infra.bus import connect
from infra.natsserver import NatsCluster
from infra.settings import load_settings
from store.recorder import read_events
from tests.conftest import wait_for
from tests.showkit import assert_stored_once, stream_counts

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]


async def jetstream_ready(url: str) -> None:
    """Wait until the cluster has elected its JetStream meta leader (streams can be made)."""
    nc = await connect(url, "probe")
    try:
        async def ready() -> bool:
            try:
                await nc.jetstream(timeout=2).account_info()
            except Exception:  # noqa: BLE001 - no meta leader yet
                return False
            return True
        await wait_for(ready, 60, "a JetStream meta leader")
    finally:
        await nc.close()


async def leaders(js: JetStreamContext) -> dict[str, str | None]:
    out = {}
    for family in FAMILIES:
        try:
            info = await js.stream_info(stream_name(family))
            out[family] = info.cluster.leader if info.cluster else None
        except Exception:  # noqa: BLE001 - mid-election
            out[family] = None
    return out


async def frames_of(js: JetStreamContext, run: str) -> int:
    try:
        info = await js.stream_info("TROUPE_FRAME", subjects_filter=f"troupe.{run}.>")
    except Exception:  # noqa: BLE001 - mid-election
        return -1
    return sum((info.state.subjects or {}).values()) if info.state.subjects else 0


async def all_current(js: JetStreamContext) -> bool:
    """Every stream has a leader and every replica caught up."""
    for family in FAMILIES:
        try:
            info = await js.stream_info(stream_name(family))
        except Exception:  # noqa: BLE001 - mid-election
            return False
        cluster = info.cluster
        if cluster is None or cluster.leader is None or len(cluster.replicas or []) != 2:
            return False
        if not all(r.current for r in cluster.replicas or []):
            return False
    return True


async def lose_node(cluster: NatsCluster, js: JetStreamContext, run: str, name: str) -> dict[str, float]:
    """Kill a node; measure how long until the streams it led have new leaders and frames are
    stored again; restart it and wait until every replica is current."""
    led = [f for f, leader in (await leaders(js)).items() if leader == name]
    before = await frames_of(js, run)
    t0 = time.monotonic()
    await cluster.node(name).kill()

    async def new_leaders() -> bool:
        now = await leaders(js)
        return all(now[f] not in (None, name) for f in led)

    async def frames_again() -> bool:
        return await frames_of(js, run) >= before + 25

    # Both watched at once, each asked with a short timeout (a request to a stream without a
    # leader waits its whole timeout).
    async def since(condition, what: str) -> float:  # type: ignore[no-untyped-def]
        await wait_for(condition, 40, what)
        return time.monotonic() - t0

    elected, flowing = await asyncio.gather(since(new_leaders, f"new leaders for the streams {name} led"),
                                            since(frames_again, "frames stored again"))
    await cluster.node(name).start()
    await wait_for(lambda: all_current(js), 60, "every replica current")
    return {"led": len(led), "elected_s": round(elected, 2), "frames_again_s": round(flowing, 2),
            "caught_up_s": round(time.monotonic() - t0, 2)}


async def test_a_show_survives_losing_the_stream_leader_then_another_node(tmp_path: Path) -> None:
    async with NatsCluster(tmp_path / "nats") as cluster:
        await jetstream_ready(cluster.url)
        settings = load_settings(
            environ={}, nats_url=cluster.url, stream_replicas=3, state_dir=tmp_path / "state",
            out_dir=tmp_path / "out", metrics_port=-1, resolution="360p",
        )
        run = new_run_id()
        async with Stage(settings) as stage:
            watch = stage.nc.jetstream(timeout=1.0)
            replicas = {(await stage.js.stream_info(stream_name(f))).config.num_replicas for f in FAMILIES}
            assert replicas == {3}
            show = asyncio.create_task(run_show(stage, load_show(), 45.0, run_id=run, drain_timeout_s=120))
            try:
                async def started() -> bool:
                    return await frames_of(stage.js, run) >= 100
                await wait_for(started, 90, "four seconds of frames")
                now = await leaders(stage.js)
                first = max(set(now.values()) - {None}, key=lambda n: list(now.values()).count(n))
                lost_first = await lose_node(cluster, watch, run, str(first))
                others = [n.cluster.server_name for n in cluster.nodes if n.cluster and n.cluster.server_name != first]
                lost_second = await lose_node(cluster, watch, run, others[0])
                result = await show
            finally:
                show.cancel()
            print(f"\ncluster recovery: leader {first}: {lost_first}; then {others[0]}: {lost_second}")
            counts = await stream_counts(stage.js, run)
        assert result.mp4 is not None and result.mp4.exists()
        assert_stored_once(stage.engine, run, counts)
        # The show went on: frames stop only while the frame stream elects a leader (about 10 s
        # each time here: its followers notice a killed leader by missed heartbeats); the video
        # repeats the last frame through the gap and keeps the show's length.
        assert counts["cue"] >= 5, counts
        drawn = {e.n for e in read_events(stage.engine, run, ["frame.rendered"])}  # type: ignore[attr-defined]
        assert set(range(45 * 25 - 5 * 25, 45 * 25)) <= drawn, "the show's last 5 s were not drawn"
        assert len(drawn) >= 45 * 25 / 2, len(drawn)
        for lost in (lost_first, lost_second):
            assert lost["frames_again_s"] < 20, lost
        with av.open(str(result.mp4)) as container:
            assert container.streams.video[0].frames == 45 * 25
        stage.engine.dispose()
