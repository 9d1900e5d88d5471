"""A recorder away for 60 s of a show: the show does not wait for it, JetStream keeps what it has
not recorded (within the streams' limits), and once it is back it catches up with nothing lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from nats.js.api import DiscardPolicy

from app.shows import load_show
from app.supervisor import ACTOR_NAMES, Stage, new_run_id, run_show
from events.subjects import FAMILIES, stream_name, stream_specs
from infra.natsserver import EmbeddedNats
from infra.settings import load_settings
from tests.conftest import wait_for
from tests.showkit import assert_stored_once, stream_counts

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


async def test_a_recorder_away_for_60_s_catches_up_with_nothing_lost(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    settings = load_settings(environ={}, nats_url=nats_server.url, state_dir=tmp_path / "state",
                             out_dir=tmp_path / "out", metrics_port=-1, resolution="360p")
    run = new_run_id()
    async with Stage(settings) as stage:
        # The streams' limits, as README documents them: age and bytes per family, the oldest
        # dropped first when a limit is reached (a stuck consumer never blocks the publishers).
        for spec in stream_specs(settings.frame_max_age_s):
            config = (await stage.js.stream_info(stream_name(spec.family))).config
            assert (config.max_age, config.max_bytes) == (spec.max_age_s, spec.max_bytes)
            assert config.discard in (None, DiscardPolicy.OLD)
        show = asyncio.create_task(run_show(stage, load_show(), 64.0, [n for n in ACTOR_NAMES if n != "recorder"],
                                            run_id=run, drain_timeout_s=120))
        await wait_for(lambda: stage.runs.known(run) is not None, 60, "the run to start")
        await asyncio.sleep(60)  # the outage itself: a minute with no recorder
        assert not show.done()  # the show went on without it
        [recorder] = await stage.start_actors(["recorder"])
        result = await show
        await wait_for(lambda: recorder_caught_up(stage), 120, "the recorder to catch up")
        counts = await stream_counts(stage.js, run)
    assert result.mp4 is not None
    assert_stored_once(stage.engine, run, counts)
    assert counts["frame"] >= 64 * 25 * 0.97 and set(FAMILIES) >= {k for k, v in counts.items() if v}
    stage.engine.dispose()


async def recorder_caught_up(stage: Stage) -> bool:
    return await stage.pending(["recorder"]) == 0
