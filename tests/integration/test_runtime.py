"""The actor runtime on a real nats-server: acks, retries, dead letters, sharing, provisioning."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nats.js import JetStreamContext

from actors.base import Actor, ClockedActor, Context, HandlerError, Input
from actors.runtime import ActorRuntime
from app.shows import load_show
from events import codec
from events.base import Event
from events.cue import CueIssued
from events.danmaku import DanmakuReceived
from events.error import DeadLettered
from events.run import RunEnded, RunStarted
from events.subjects import stream_name, subject_for
from infra.bus import ConsumerSpec, connect, provision_consumers, provision_streams
from infra.metrics import Metrics
from infra.natsserver import EmbeddedNats
from infra.settings import Settings
from tests.conftest import wait_for

_ids = itertools.count()


def echo_actor(run: str, fail_times: int = 0, permanent: bool = False) -> Actor:
    """A pass-through actor for one run: each danmaku becomes one cue."""

    class Echo(Actor):
        name = f"echo{next(_ids)}"
        inputs = (Input("danmaku", (f"troupe.{run}.danmaku.received",)),)
        accepts_unknown_runs = True

        def __init__(self) -> None:
            self.calls = 0

        def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
            self.calls += 1
            if permanent and "poison" in getattr(event, "text", ""):
                raise HandlerError("poison pill")
            if self.calls <= fail_times:
                raise RuntimeError("transient trouble")
            assert isinstance(event, DanmakuReceived)
            return [CueIssued(
                id=event.derive("cue"), run=event.run, role="host", causation=event.id,
                correlation=event.id, seq=0, user=event.user, text=event.text,
                danmaku=(event.id,), routed_by="echo",
            )]

    return Echo()


async def publish_danmaku(js: JetStreamContext, run: str, texts: Sequence[str]) -> list[str]:
    ids = []
    for i, text in enumerate(texts):
        event = DanmakuReceived(id=f"{run}-d{i}", run=run, text=text)
        await js.publish(f"troupe.{run}.danmaku.received", codec.encode(event), headers={"Nats-Msg-Id": event.id})
        ids.append(event.id)
    return ids


async def collect(js: JetStreamContext, family: str, run: str) -> list[Event]:
    """Every event of one family and run currently in its stream."""
    sub = await js.subscribe(f"troupe.{run}.{family}.>", ordered_consumer=True)
    try:
        info = await js.stream_info(stream_name(family), subjects_filter=f"troupe.{run}.{family}.>")
        expected = sum((info.state.subjects or {}).values()) if info.state.subjects else 0
        out: list[Event] = []
        while len(out) < expected:
            msg = await sub.next_msg(timeout=5)
            out.append(codec.decode(msg.data))
        return out
    finally:
        await sub.unsubscribe()


async def count(js: JetStreamContext, family: str, run: str) -> int:
    info = await js.stream_info(stream_name(family), subjects_filter=f"troupe.{run}.{family}.>")
    return sum((info.state.subjects or {}).values()) if info.state.subjects else 0


async def test_provisioning_twice_changes_nothing(js: JetStreamContext) -> None:
    await provision_streams(js)
    before = {s.config.name: (s.config, s.created) for s in await js.streams_info()}
    assert await provision_streams(js) == []
    after = {s.config.name: (s.config, s.created) for s in await js.streams_info()}
    assert before == after
    spec = ConsumerSpec("prov_test", "cue")
    assert await provision_consumers(js, [spec]) == ["prov_test"]
    info = await js.consumer_info("TROUPE_CUE", "prov_test")
    assert await provision_consumers(js, [spec]) == []
    again = await js.consumer_info("TROUPE_CUE", "prov_test")
    assert (info.config, info.created) == (again.config, again.created)


async def test_each_input_yields_its_outputs_once(js: JetStreamContext, settings: Settings) -> None:
    run = "rt-pass"
    async with ActorRuntime(echo_actor(run), js, settings, Metrics()):
        ids = await publish_danmaku(js, run, [f"hello {i}" for i in range(50)])
        await wait_for(lambda: count(js, "cue", run), what="cues")
        await wait_for(lambda: _eq(count(js, "cue", run), 50), what="50 cues")
    cues = await collect(js, "cue", run)
    assert sorted(c.causation for c in cues) == sorted(ids)  # type: ignore[type-var]


async def _eq(value: Any, expected: int) -> bool:
    return (await value) == expected


async def test_transient_failures_are_retried(js: JetStreamContext, settings: Settings) -> None:
    run = "rt-retry"
    actor = echo_actor(run, fail_times=2)
    metrics = Metrics()
    async with ActorRuntime(actor, js, settings, metrics):
        await publish_danmaku(js, run, ["once"])
        await wait_for(lambda: _eq(count(js, "cue", run), 1), what="the retried cue")
    assert actor.calls == 3  # type: ignore[attr-defined]
    assert metrics.registry.get_sample_value("troupe_redelivered_total", {"actor": actor.name}) == 2


async def test_poison_and_garbage_are_dead_lettered_with_their_bytes(js: JetStreamContext, settings: Settings) -> None:
    run = "rt-dead"
    actor = echo_actor(run, permanent=True)
    async with ActorRuntime(actor, js, settings, Metrics()):
        await publish_danmaku(js, run, ["poison", "fine"])
        await js.publish(f"troupe.{run}.danmaku.received", b"\xff\x00 not json")
        await wait_for(lambda: _eq(count(js, "error", run), 2), what="two dead letters")
        await wait_for(lambda: _eq(count(js, "cue", run), 1), what="the good cue")
    letters = [e for e in await collect(js, "error", run) if isinstance(e, DeadLettered)]
    reasons = sorted(letter.reason for letter in letters)
    assert reasons[0] == "poison pill" and reasons[1].startswith("undecodable")
    assert any(letter.raw == b"\xff\x00 not json" for letter in letters)


async def test_always_failing_input_stops_at_max_deliver(js: JetStreamContext, settings: Settings) -> None:
    run = "rt-max"
    actor = echo_actor(run, fail_times=10**6)
    async with ActorRuntime(actor, js, settings, Metrics()):
        await publish_danmaku(js, run, ["never works"])
        await wait_for(lambda: _eq(count(js, "error", run), 1), timeout_s=20, what="dead letter")
    [letter] = await collect(js, "error", run)
    assert isinstance(letter, DeadLettered)
    assert letter.deliveries == settings.max_deliver
    assert "transient trouble" in letter.reason


async def test_two_processes_of_one_kind_share_the_work(js: JetStreamContext, settings: Settings) -> None:
    run = "rt-share"
    first = echo_actor(run)
    second = type(first)()  # same class: same durable consumer
    async with ActorRuntime(first, js, settings.replace(fetch_batch=4), Metrics()), \
            ActorRuntime(second, js, settings.replace(fetch_batch=4), Metrics()):
        await publish_danmaku(js, run, [f"m{i}" for i in range(400)])
        await wait_for(lambda: _eq(count(js, "cue", run), 400), timeout_s=30, what="400 cues")
    assert first.calls > 0 and second.calls > 0  # type: ignore[attr-defined]
    assert first.calls + second.calls == 400  # type: ignore[attr-defined]
    cues = await collect(js, "cue", run)
    assert len({c.id for c in cues}) == 400


async def test_a_crashed_loop_is_restarted_then_given_up(js: JetStreamContext, settings: Settings) -> None:
    class Flaky(ClockedActor):
        name = "flaky"
        inputs = (Input("danmaku", ("troupe.flaky.danmaku.received",)),)

        def tick(self, ctx: Context) -> Sequence[Event]:
            return ()

    def flaky_clock(rt: ActorRuntime, crashes: int) -> list[int]:
        """A bug in the clock: the kernel's next_tick raises its first ``crashes`` calls."""
        calls = [0]

        def next_tick() -> None:
            calls[0] += 1
            if calls[0] <= crashes:
                raise RuntimeError("bug in the actor")

        rt.kernel.next_tick = next_tick  # type: ignore[method-assign,assignment]
        return calls

    metrics = Metrics()
    recovering = ActorRuntime(Flaky(), js, settings, metrics)
    calls = flaky_clock(recovering, crashes=2)
    async with recovering as rt:
        await wait_for(lambda: calls[0] > 2, what="the restarted tick loop")
        assert rt.healthy
    assert metrics.registry.get_sample_value("troupe_failed_total", {"actor": "flaky", "reason": "crash"}) == 2
    rt = ActorRuntime(Flaky(), js, settings, Metrics())
    flaky_clock(rt, crashes=10**6)
    await rt.start()
    await wait_for(lambda: not rt.healthy, timeout_s=20, what="the runtime to give up")
    reason = await asyncio.wait_for(rt.failed(), 5)
    assert reason.startswith("flaky:tick crashed 6 times within a minute") and "bug in the actor" in reason
    await rt.stop()


async def test_a_blocking_actors_thread_runs_at_its_niceness(js: JetStreamContext, settings: Settings) -> None:
    class Background(Actor):
        name = "background"
        inputs = (Input("danmaku", ("troupe.nice.danmaku.received",)),)
        accepts_unknown_runs = True
        blocking = True
        nice = 5  # as the sink's encoding thread is (TROUPE_SINK_NICE)

        def __init__(self) -> None:
            self.seen: int | None = None

        def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
            self.seen = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
            return ()

    actor = Background()
    async with ActorRuntime(actor, js, settings, Metrics()):
        await publish_danmaku(js, "nice", ["hello"])
        await wait_for(lambda: actor.seen is not None, what="the handler to run")
    assert actor.seen == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 5)  # this thread's, and 5 lower


async def test_ticks_go_on_while_their_outputs_wait_to_be_stored(tmp_path: Path, settings: Settings) -> None:
    """A clocked actor does not wait for each tick's outputs to be acked before its next tick:
    with the server frozen (SIGSTOP), ticks due every 20 ms go on (a renderer's frames are drawn
    on time while the server is slow), and once it is back every output is stored."""
    show = load_show()
    run = RunStarted(id="tk-start", run="tk", show=show.to_dict(), seed=0, fps=50, resolution="360p",
                     started_at_ms=int(time.time() * 1000), config={}, duration_ms=60_000)

    class Metronome(ClockedActor):
        name = "metronome"
        consumes = (RunStarted,)
        emits = (CueIssued,)

        def __init__(self) -> None:
            self.n = 0  # ticks, of every run

        def open_run(self, run: RunStarted, settings: Settings) -> list[int]:
            return [0]  # the run's ticks

        def next_tick(self, state: list[int]) -> int | None:
            return state[0] * 20

        def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
            return ()

        def tick(self, ctx: Context) -> Sequence[Event]:
            ctx.state[0] += 1
            self.n += 1
            return [CueIssued(id=f"tk-c{self.n}", run="tk", role="host", correlation=f"tk-c{self.n}", seq=0,
                              user="u", text="tick", danmaku=(), routed_by="test")]

    server = await EmbeddedNats(tmp_path / "own-nats").start()
    nc = await connect(server.url, "test-ticks")
    try:
        js = nc.jetstream()
        await provision_streams(js)
        actor = Metronome()
        async with ActorRuntime(actor, js, settings, Metrics()):
            await js.publish(subject_for(run), codec.encode(run), headers={"Nats-Msg-Id": run.id})
            await wait_for(lambda: _at_least(count(js, "cue", "tk"), 5), what="the first ticks stored")
            assert server.pid is not None
            os.kill(server.pid, signal.SIGSTOP)
            try:
                frozen_at = actor.n
                await wait_for(lambda: actor.n >= frozen_at + 25, timeout_s=10, what="ticks while the server is frozen")
            finally:
                os.kill(server.pid, signal.SIGCONT)
            ticked = actor.n
            await wait_for(lambda: _at_least(count(js, "cue", "tk"), ticked), timeout_s=20, what="every tick's output stored")
    finally:
        await nc.close()
        await server.stop()


async def _at_least(value: Any, expected: int) -> bool:
    return (await value) >= expected


async def test_an_input_fetched_while_its_runs_start_is_built_waits_for_the_start(
        js: JetStreamContext, settings: Settings) -> None:
    """A run's start is built ahead (``Actor.prepare``: a renderer's sprites) before it is taken
    in; an input of that run fetched meanwhile by another family's loop waits for the start and
    is then handled in the run (it was let go, the run not held yet: the renderer drew the show's
    first line without its lips moving, and its re-execution, which feeds the start first, did)."""
    run_id = f"rt-starting-{time.time_ns()}"
    release = threading.Event()

    class Builder(Actor):
        name = f"builder{next(_ids)}"
        consumes = (RunStarted, DanmakuReceived)
        # This run's alone: the session's server holds other tests' runs and comments.
        inputs = (Input("run", (f"troupe.{run_id}.run.started",)),
                  Input("danmaku", (f"troupe.{run_id}.danmaku.received",)))
        emits = (CueIssued,)
        blocking = True

        def prepare(self, event: Event, ctx: Context) -> Any:
            if event.run == run_id:
                assert release.wait(30), "the test never let the start be built"
            return "built"

        def open_run(self, run: RunStarted, settings: Settings) -> list[str]:
            return []

        def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
            if ctx.state is None or not isinstance(event, DanmakuReceived):  # a run not held: let go
                return ()
            return [CueIssued(id=event.derive("cue"), run=event.run, role="host", causation=event.id,
                              correlation=event.id, seq=0, user=event.user, text=event.text,
                              danmaku=(event.id,), routed_by="test")]

    show = load_show()
    run = RunStarted(id=f"{run_id}-start", run=run_id, show=show.to_dict(), seed=0, fps=25, resolution="360p",
                     started_at_ms=int(time.time() * 1000), config={}, duration_ms=60_000)
    actor = Builder()
    async with ActorRuntime(actor, js, settings, Metrics()):
        await js.publish(subject_for(run), codec.encode(run), headers={"Nats-Msg-Id": run.id})
        comment = DanmakuReceived(id=f"{run_id}-d0", run=run_id, text="hello while you build")
        sent = await js.publish(subject_for(comment), codec.encode(comment), headers={"Nats-Msg-Id": comment.id})

        async def fetched() -> bool:  # the danmaku's loop has it (and, without the wait, had let it go)
            info = await js.consumer_info(stream_name("danmaku"), f"{actor.name}_danmaku")
            return info.delivered.stream_seq >= sent.seq
        await wait_for(fetched, what="the danmaku fetched while the start is built")
        release.set()
        await wait_for(lambda: _eq(count(js, "cue", run_id), 1), what="the danmaku handled in its run")
        # Over: the session's server is shared, and a renderer started by a later test joins a live run.
        ended = RunEnded(id=f"{run_id}-end", run=run_id, reason="test over", duration_ms=0)
        await js.publish(subject_for(ended), codec.encode(ended), headers={"Nats-Msg-Id": ended.id})
