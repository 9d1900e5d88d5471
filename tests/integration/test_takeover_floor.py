"""A process that takes a run over rebuilds it from what the last holder took in, past its ack
floor too: an input the dead holder handled and answered, but had not acked, is part of the
rebuilt state and is not handled again when it is redelivered (handled again at a later show
time, it could be answered otherwise, and both answers would be stored)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from nats.js import JetStreamContext

from actors.base import Actor, Context
from actors.runtime import ActorRuntime
from app.shows import load_show
from events import codec
from events.base import Event
from events.cue import CueIssued
from events.danmaku import DanmakuReceived
from events.run import RunOwned, RunStarted
from events.subjects import subject_for
from infra.bus import provision_consumers
from infra.lease import lease_bucket, on_air_key
from infra.metrics import Metrics
from infra.settings import Settings
from tests.conftest import wait_for
from tests.integration.test_runtime import collect


class Tally(Actor):
    """Counts a run's comments; its answer says when it was handled (a decision of its clock)."""

    name = "tally"
    consumes = (RunStarted, DanmakuReceived)
    emits = (CueIssued,)
    takes_over = True

    def open_run(self, run: RunStarted, settings: Settings) -> list[str]:
        return []

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        if not isinstance(event, DanmakuReceived) or ctx.state is None:  # (the server's other runs)
            return ()
        ctx.state.append(event.id)
        return [answer(event, ctx.now_ms, len(ctx.state))]


def answer(event: DanmakuReceived, at_ms: int, n: int, seen: dict[str, int] | None = None) -> CueIssued:
    return CueIssued(id=event.derive(f"cue@{at_ms}"), run=event.run, role="host", causation=event.id,
                     correlation=event.id, t_ms=at_ms, seq=0, user=event.user, text=f"#{n} at {at_ms}",
                     danmaku=(event.id,), routed_by="tally", seen=seen)


async def test_inputs_taken_in_past_the_ack_floor_are_rebuilt_and_not_handled_again(
    js: JetStreamContext, settings: Settings
) -> None:
    run_id = "floor"
    run = RunStarted(id="floor-start", run=run_id, show=load_show().to_dict(), seed=0, fps=25, resolution="360p",
                     started_at_ms=int(time.time() * 1000) - 5_000, config={}, duration_ms=600_000)
    kv = await lease_bucket(js)
    await kv.put(on_air_key(run_id), b"the show's process")
    start_ack = await js.publish(subject_for(run), codec.encode(run))
    comments = [DanmakuReceived(id=f"floor-d{i}", run=run_id, user=f"u{i}", text=f"hello {i}") for i in range(3)]
    seqs = [(await js.publish(subject_for(d), codec.encode(d))).seq for d in comments]

    # The last holder: it took in all three and answered each (its answers record what it had
    # taken in), acked the first alone, and died.
    dead = ActorRuntime(Tally(), js, settings, Metrics())
    specs = dead.consumer_specs()
    await provision_consumers(js, specs)
    for spec in specs:
        sub = await js.pull_subscribe_bind(spec.durable, spec.stream)
        for msg in await sub.fetch(1000, timeout=2):
            if msg.data not in {codec.encode(comments[1]), codec.encode(comments[2])}:  # the server's other runs too
                await msg.ack_sync()
        await sub.unsubscribe()
    for n, (d, seq) in enumerate(zip(comments, seqs, strict=True), 1):
        said = answer(d, 1000 * n, n, {"run": start_ack.seq, "danmaku": seq})
        await js.publish(subject_for(said), codec.encode(said))

    taker = await ActorRuntime(Tally(), js, settings, Metrics()).start()
    try:
        assert taker.takeover is not None and run_id in taker.takeover.runs  # (and the server's other runs on air)
        assert {k: v for k, v in taker.takeover.taken.items() if k[0] == run_id} == {(run_id, "danmaku"): seqs[-1]}
        # Its state holds all three, each handled once, at the show time its answer records.
        assert taker.kernel.state(run_id) == [d.id for d in comments]

        async def redelivered_and_acked() -> bool:
            info = await js.consumer_info(specs[-1].stream, specs[-1].durable)
            return int(info.ack_floor.stream_seq or 0) >= seqs[-1] and not info.num_ack_pending
        await wait_for(redelivered_and_acked, timeout_s=15)
        cues = [e for e in await collect(js, "cue", run_id) if isinstance(e, CueIssued)]
        assert sorted(c.text for c in cues) == ["#1 at 1000", "#2 at 2000", "#3 at 3000"]  # no second answer
        assert taker.kernel.state(run_id) == [d.id for d in comments]
        # The takeover is said, with its rebuild.
        owned = [e for e in await collect(js, "run", run_id) if isinstance(e, RunOwned)]
        assert [(e.kind, e.rebuilt, e.holder == taker.holder) for e in owned] == [("tally", True, True)]
    finally:
        await taker.stop()
