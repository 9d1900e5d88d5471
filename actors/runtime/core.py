"""The only place actors touch NATS: fetch, decode, publish, ack, retry, dead-letter.

One ``ActorRuntime`` runs one actor: it is the JetStream feed of the actor's kernel
(``actors.kernel``), which admits each input, queues or handles it, and ticks the clock.  For every input family it binds a durable
pull consumer and fetches only as many messages as the actor has room for.  An
input is acked only after JetStream has stored every event its handler caused;
output ids are deterministic and double as ``Nats-Msg-Id``, so a redelivered
input publishes duplicates that JetStream drops.

The kernel says what an input is for (each on its own, a scheduled actor's queue, a
clocked actor's ticks); a batch actor (the recorder) takes whole fetched batches
(``batch``); ``runs`` knows the runs and when to release one, ``observe`` what is
published for QoS, ``delivery`` one message's way through.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import ctypes
import dataclasses
import functools
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import nats.errors
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext

from actors.base import (
    Actor,
    BatchActor,
    ClockedActor,
    Context,
    HandlerError,
)
from actors.kernel import REFUSE, Batch, Kernel
from actors.runtime.batch import arrivals
from actors.runtime.delivery import (
    Delivery,
    decode,
    message_id,
    message_key,
)
from actors.runtime.observe import OBSERVE_PERIOD_S, Observations
from actors.runtime.owners import RunOwners, member_name, run_rounds
from actors.runtime.runs import Clock, RunDirectory, RunLifecycle, RunView
from actors.runtime.takeover import Takeover, rebuild, rebuild_run, restart_from_floor, run_filters
from events.base import Event, derive_id
from events.error import DeadLettered
from events.errors import DecodeError
from events.run import RunEnded, RunOwned, RunStarted
from events.subjects import family_filter, family_of, is_token, run_of, type_of
from infra.bus import (
    ConsumerSpec,
    RetryWindow,
    acks,
    failure,
    provision_consumers,
    publish_event,
    transient,
)
from infra.lease import lease_bucket, runs_on_air
from infra.logs import LOG_CONTEXT, log_context_of
from infra.metrics import Metrics
from infra.settings import Settings

log = logging.getLogger(__name__)
RESTARTS = 5
HOUSEKEEPING_S = 1.0  # how often held runs are checked for release
TICK_STORES = 64  # a clocked actor's ticks whose outputs may wait for their acks at once
RUN_CONSUMER_IDLE_S = 3600.0  # a run's own consumer nobody read this long goes (its run long over)
OUTAGE_BACKOFF_S = 5.0  # the longest wait between tries of a batch held by an outage (the store down)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


class ActorRuntime:
    """Runs one actor against JetStream until stopped; an async context manager."""

    def __init__(
        self, actor: Actor, js: JetStreamContext, settings: Settings, metrics: Metrics,
        runs: RunDirectory | None = None, clock: Clock = time.time, durable: str | None = None,
        spread: bool = False,
    ) -> None:
        self.actor = actor
        self.js = js
        self.settings = settings
        self.metrics = metrics
        self.runs = runs or RunDirectory(js)
        self.clock = clock
        self.durable = durable or actor.name
        self.view = RunView(self.runs)
        self.lifecycle = RunLifecycle(settings.run_grace_s, settings.run_idle_s)
        self.failure: str | None = None  # why the runtime gave up (a loop kept crashing)
        self._failed = asyncio.Event()
        self._lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._inflight = 0
        self._subs: list[Any] = []
        self._tick_wakeup = asyncio.Event()
        self._storing: set[asyncio.Task[None]] = set()  # ticks' outputs being seen stored
        # Runs whose start is being taken in (built ahead first: a renderer's sprites, a few hundred
        # ms): their other inputs, fetched meanwhile by the other families' loops, wait for it.
        self._starting: dict[str, asyncio.Event] = {}
        # One worker thread: an actor's blocking code never runs beside itself.
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"troupe-{actor.name}", initializer=lower_priority, initargs=(actor.nice,))
        self._threads: set[concurrent.futures.Future[Any]] = set()
        name = actor.name
        self._processed = metrics.processed.labels(name)
        self._redelivered = metrics.redelivered.labels(name)
        metrics.dead_lettered.labels(name)  # bounded label sets start at 0 (a dashboard shows "none yet")
        for reason in ("permanent", "transient", "crash"):
            metrics.failed.labels(name, reason)
        self._handler_seconds = metrics.handler_seconds.labels(name)
        self._runs_held = metrics.runs_held.labels(name)
        self._published: dict[str, Any] = {}
        self._hops: dict[str, Any] = {}
        # Admission, dispatch, the run's settings, a scheduled actor's queue, a clocked actor's ticks.
        # ``clock``: a handler's show time goes on while it runs (``Context.now``).
        self.kernel: Kernel[Delivery] = Kernel(actor, fifo=settings.scheduler == "fifo", clock=clock)
        self._queue = self.kernel.queue  # scheduled actors: inputs wait here, handled in batches of one role
        self._work_ready = asyncio.Event()
        self._batch_runs: set[str] = set()  # the runs of the batch being handled
        self.observations = Observations(name, self.durable)
        self._started_ms = int(clock() * 1000)  # set again by start()
        self.takeover: Takeover | None = None  # what start() rebuilt (an actor that takes over)
        # (run, family) -> the last position a rebuild took in past the ack floor (``Takeover.taken``)
        self._taken_before: dict[tuple[str, str], int] = {}
        # TROUPE_SPREAD=on: this process holds some of the kind's runs (``owners``), each read
        # through consumers of its own, their fetch loops stopped when the run is let go.
        self.spread = spread and actor.takes_over
        self.owners: RunOwners | None = None
        self._run_loops: dict[str, tuple[asyncio.Event, list[asyncio.Task[None]], list[Any]]] = {}
        self._owned_seq = 0
        self.holder = member_name()  # this process, as run.owned names it
        self.spares: dict[str, str] = {}  # runs held elsewhere -> the id of their start, built ahead here
        self._claims_pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"troupe-{actor.name}-claims", initializer=lower_priority, initargs=(10,))

    def consumer_specs(self, run: str | None = None) -> list[ConsumerSpec]:
        """The durable consumers this actor needs, one per input family (of one run's subjects
        alone when ``run`` is given: a spread actor's consumers of a run it holds)."""
        return [
            ConsumerSpec(
                durable=f"{self.durable}_{inp.family}" + (f"_{run}" if run else ""), family=inp.family,
                filters=tuple(run_filters(inp.filters or (family_filter(inp.family),), run)) if run else inp.filters,
                max_deliver=self.settings.max_deliver, ack_wait_s=self.settings.ack_wait_s,
                max_ack_pending=max(self.settings.max_inflight * 4, 1024),
                inactive_threshold_s=RUN_CONSUMER_IDLE_S if run else None,
            )
            for inp in self.actor.inputs
        ]

    async def start(self) -> ActorRuntime:
        """Provision consumers and start the loops the actor's kind needs."""
        self._started_ms = int(self.clock() * 1000)
        if self.spread:
            await self._start_spread()
            return self
        specs = self.consumer_specs()
        await provision_consumers(self.js, specs)
        if self.actor.takes_over:  # shows on air: their state rebuilt from the streams first
            since_ms = int(self.clock() * 1000)
            self.takeover = await rebuild(self.js, self.kernel, specs, self.runs, self.clock(),
                                          self.settings.run_grace_s, self._in_thread, self._published_now)
            self._taken_before.update(self.takeover.taken)
            for run_id in self.takeover.runs:
                self.lifecycle.touch(run_id)
                if (run := self.runs.known(run_id)) is not None:
                    await self._owned(run, self.holder, "", "taken over: started while it was on air", since_ms,
                                      rebuilt=True, resumed=self.takeover.resumed.get(run_id, ""),
                                      runs_held=len(self.takeover.runs))
            if self.takeover.runs:
                log.warning("%s took over %d runs on air (%s): %d inputs handled again in %.2f s", self.actor.name,
                            len(self.takeover.runs), ", ".join(self.takeover.runs), self.takeover.inputs,
                            self.takeover.seconds)
        for spec in specs:
            sub = await self.js.pull_subscribe_bind(spec.durable, spec.stream)
            self._subs.append(sub)
            self._spawn(functools.partial(self._fetch_loop, sub, spec), f"{self.actor.name}:fetch:{spec.family}")
        self._start_loops(specs)
        return self

    def _start_loops(self, specs: list[ConsumerSpec]) -> None:
        """The loops of the actor's kind besides fetching."""
        if isinstance(self.actor, ClockedActor):
            self._spawn(functools.partial(self._tick_loop, self.actor), f"{self.actor.name}:tick")
        if self._queue is not None:
            self._spawn(self._work_loop, f"{self.actor.name}:work")
        if self.actor.observed:
            self._spawn(self._observe_loop, f"{self.actor.name}:observe")
        if not isinstance(self.actor, BatchActor):
            self._spawn(self._housekeeping_loop, f"{self.actor.name}:runs")
        if specs:
            self._spawn(functools.partial(self._depth_loop, specs), f"{self.actor.name}:depth")

    # -- runs spread over the kind's processes (TROUPE_SPREAD=on) ---------------------

    async def _start_spread(self) -> None:
        ttl = self.settings.lease_ttl_s
        kv = await lease_bucket(self.js, ttl, self.settings.stream_replicas)
        self.owners = RunOwners(self.js, kv, self.actor.name, self._claim, self._let_go_of, ttl, ttl / 3,
                                 name=self.holder)
        self._start_loops([])
        owners = self.owners
        self._spawn(lambda: run_rounds(owners, self._stopping), f"{self.actor.name}:owners")
        if type(self.actor).prepare is not Actor.prepare:
            self._spawn(self._spares_loop, f"{self.actor.name}:spares")
        log.info("%s: sharing the runs on air with the kind's other processes as %s", self.actor.name, owners.name)

    async def _spares_loop(self) -> None:
        """A spread actor that builds ahead (a renderer's sprites) builds it for the runs on air
        that other processes hold, one run a round at a low priority, so that taking one over
        starts drawing at once instead of after its build; what was built for a run no longer on
        air, or taken here, is let go."""
        assert self.owners is not None
        owners, loop = self.owners, asyncio.get_running_loop()
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), owners.renew_s)
            try:
                elsewhere = await runs_on_air(self.js) - set(owners.leases)
            except (nats.errors.Error, OSError, TimeoutError):
                continue  # NATS away: the next round tries again
            for run_id in [r for r in self.spares if r not in elsewhere]:
                self.kernel.prepared.pop(self.spares.pop(run_id), None)
            for run_id in sorted(elsewhere - set(self.spares)):
                run = await self.runs.get(run_id)
                if run is None or run.replay_of is not None or run_id in owners.leases:
                    continue
                await loop.run_in_executor(self._claims_pool, self._prepare, run)
                if run_id in owners.leases:  # claimed here while it was built: the claim takes it,
                    if self.kernel.holds(run_id):  # unless the run's start was taken already
                        self.kernel.prepared.pop(run.id, None)
                elif run.id in self.kernel.prepared:
                    self.spares[run_id] = run.id
                break

    async def _claim(self, run_id: str, previous: str, reason: str) -> bool:
        """Take a run this process now holds the key of: its consumers (re-made from their ack
        floor when another process read them before), its state rebuilt from the streams, its
        fetch loops; False when the run cannot be taken yet (its start not found)."""
        assert self.owners is not None
        self.spares.pop(run_id, None)  # held here now: what was built ahead is taken with its start
        run = await self.runs.get(run_id)
        if run is None:
            return False
        began, since_ms = time.perf_counter(), int(self.clock() * 1000)
        specs = self.consumer_specs(run_id)
        await provision_consumers(self.js, specs)
        report = Takeover()
        for spec in specs:
            report.floors[spec.durable] = await restart_from_floor(self.js, spec)
        if any(report.floors.values()):  # another process read this run before: its state rebuilt
            if type(self.actor).prepare is not Actor.prepare and run.id not in self.kernel.prepared:
                # what takes long (sprites), off the actor's thread, one run at a time and at a
                # lower priority than the shows it already draws
                await asyncio.get_running_loop().run_in_executor(self._claims_pool, self._prepare, run)
            await rebuild_run(self.js, self.kernel, specs, run, report, self._locked, self._published_now)
            self._taken_before.update(report.taken)
        self.lifecycle.touch(run_id)
        stop = asyncio.Event()
        tasks, subs = [], []
        for spec in specs:
            sub = await self.js.pull_subscribe_bind(spec.durable, spec.stream)
            subs.append(sub)
            name = f"{self.actor.name}:fetch:{spec.family}:{run_id}"
            tasks.append(asyncio.create_task(
                self._supervise(functools.partial(self._fetch_loop, sub, spec, stop), name), name=name))
        self._run_loops[run_id] = (stop, tasks, subs)
        log.warning("%s: run %s is held here (%s): %d inputs handled again in %.2f s", self.actor.name, run_id, reason,
                    report.inputs, time.perf_counter() - began)
        await self._owned(run, self.owners.name, previous, reason, since_ms, rebuilt=any(report.floors.values()),
                          resumed=report.resumed.get(run_id, ""))
        return True

    async def _stop_run_loops(self, run_id: str, wait_s: float = 5.0) -> None:
        """Stop a held run's fetch loops (each ends after its current batch; one still running
        after ``wait_s`` is cancelled) and unsubscribe from its consumers."""
        loops = self._run_loops.pop(run_id, None)
        if loops is None:
            return
        stop, tasks, subs = loops
        stop.set()
        if wait_s > 0:
            _, tasks_left = await asyncio.wait(tasks, timeout=wait_s)
        else:
            tasks_left = set(tasks)
        for task in tasks_left:
            task.cancel()
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _locked(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Actor code run on its worker thread while nothing else touches the actor (the shows it
        already holds go on between such calls)."""
        async with self._lock:
            return await self._in_thread(fn, *args)

    async def _let_go_of(self, run_id: str, reason: str) -> None:
        """Stop reading a run's inputs and forget its state (its key is let go by the caller)."""
        await self._stop_run_loops(run_id)
        for d in [d for d in self.kernel.queued() if d.run == run_id]:  # waiting work goes back
            with contextlib.suppress(Exception):
                await d.msg.nak()
        async with self._lock:
            await self._release(run_id)
        run = self.runs.known(run_id)
        if run is not None and self.owners is not None:
            await self._owned(run, "", self.owners.name, reason)
        log.warning("%s: run %s let go: %s", self.actor.name, run_id, reason)

    async def _owned(self, run: RunStarted, holder: str, previous: str, reason: str, since_ms: int | None = None,
                     rebuilt: bool = False, resumed: str = "", runs_held: int | None = None) -> None:
        """Say who holds the run's state now, since when (``since_ms``, wall time: now when not
        given) and whether it was rebuilt (best effort: a lost one is a missing line in inspect,
        and a takeover re-execution cannot rebuild where it happened)."""
        self._owned_seq += 1
        now_ms = int(self.clock() * 1000) if since_ms is None else since_ms
        if runs_held is None:
            runs_held = len(self.owners.leases) if self.owners is not None else 0
        event = RunOwned(
            id=derive_id(run.run, f"owned:{self.actor.name}:{holder or previous}:{now_ms}:{self._owned_seq}"),
            run=run.run, t_ms=max(0, now_ms - run.started_at_ms), kind=self.actor.name, holder=holder,
            previous=previous, reason=reason, runs_held=runs_held, rebuilt=rebuilt, resumed=resumed,
        )
        with contextlib.suppress(Exception):
            await acks(await self._publish([event]))

    async def hand_over(self) -> None:
        """Let every held run go, saying so, so that the kind's other processes take them at once
        (a process asked to stop: SIGTERM)."""
        owners = self.owners
        if owners is None:
            return
        owners.stopping = True
        for run_id in owners.held:
            await self._let_go_of(run_id, f"handed over: {owners.name} is stopping")
            await owners.let_go(run_id)

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run blocking actor code in a worker thread, remembering it until it finishes."""
        future = self._executor.submit(contextvars.copy_context().run, fn, *args)  # the log context too
        self._threads.add(future)
        future.add_done_callback(self._threads.discard)
        return await asyncio.wrap_future(future)

    def _spawn(self, loop: Callable[[], Awaitable[None]], name: str) -> None:
        self._tasks.append(asyncio.create_task(self._supervise(loop, name), name=name))

    async def _supervise(self, loop: Callable[[], Awaitable[None]], name: str) -> None:
        """Run a loop; restart it if it crashes, at most ``RESTARTS`` times a minute, then give up:
        the runtime is failed (``failure`` says why) and its process should exit."""
        crashes: list[float] = []
        while not self._stopping.is_set():
            try:
                await loop()
                return  # a loop returns only when the actor stops
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a crash, told apart from a shutdown and restarted
                now = time.monotonic()
                crashes = [t for t in crashes if now - t < 60.0] + [now]
                self.metrics.failed.labels(self.actor.name, "crash").inc()
                if len(crashes) > RESTARTS:
                    log.exception("%s crashed %d times within a minute; giving up", name, len(crashes))
                    self.failure = f"{name} crashed {len(crashes)} times within a minute: {type(exc).__name__}: {exc}"
                    self._failed.set()
                    raise
                log.exception("%s crashed; restarting", name)
                await asyncio.sleep(0.1 * len(crashes))

    @property
    def stopped(self) -> bool:
        """Stopped (or stopping), or given up."""
        return self._stopping.is_set() or self.failure is not None

    def fail(self, reason: str) -> None:
        """Give up from outside (the lease this actor ran under was lost): ``failed`` answers."""
        self.failure = reason
        self._failed.set()

    async def failed(self) -> str:
        """Wait until the runtime gives up on a crashing loop; the reason."""
        await self._failed.wait()
        return self.failure or "failed"

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Finish in-flight work (or nak it), then stop every loop.  A spread actor hands its runs
        over first."""
        if self.owners is not None:
            with contextlib.suppress(Exception):
                await self.hand_over()
        self._stopping.set()
        self._tick_wakeup.set()
        done, pending = await asyncio.wait(self._tasks, timeout=timeout_s) if self._tasks else (set(), set())
        for task in pending:
            task.cancel()
        if pending:  # waited for with a limit: on 3.11 a cancel can be swallowed (wait_for)
            _, stuck = await asyncio.wait(pending, timeout=timeout_s)
            for task in stuck:
                log.error("%s did not stop when cancelled", task.get_name())
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error("%s ended with %r", task.get_name(), task.exception())
        if self._storing:  # the last ticks' outputs: stored, or said not to be
            _, unstored = await asyncio.wait(set(self._storing), timeout=timeout_s)
            for task in unstored:
                task.cancel()
        for waiting in list(self.kernel.queued()):  # work that waited in the scheduler goes back to JetStream
            with contextlib.suppress(Exception):
                await waiting.msg.nak()
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._tasks.clear()
        self._subs.clear()
        # A cancelled task does not stop a handler already running in a thread: wait for it,
        # so that close() never runs beside a handler (media writers are not thread-safe).
        running = list(self._threads)
        if running:
            await asyncio.to_thread(concurrent.futures.wait, running, timeout_s * 4)
        for run_id in list(self._run_loops):  # a spread actor's runs not handed over
            await self._stop_run_loops(run_id, wait_s=0)
        if self.owners is not None:
            await self.owners.close()
        await self._in_thread(self.kernel.close)  # the runs still held: their files finished
        await self._in_thread(self.actor.close)
        self._executor.shutdown(wait=False)
        self._claims_pool.shutdown(wait=False)

    async def __aenter__(self) -> ActorRuntime:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def healthy(self) -> bool:
        """True while every loop of this actor is running."""
        return bool(self._tasks) and not any(t.done() for t in self._tasks)

    @property
    def waiting(self) -> int:
        """Inputs of a scheduled actor waiting in its queue or being handled (0 for the others)."""
        return self._queue.waiting if self._queue is not None else 0

    @property
    def working(self) -> int:
        """Inputs of a scheduled actor in the batch being handled now."""
        return self._queue.working if self._queue is not None else 0

    async def pending(self) -> int:
        """Messages not yet handled and acked across this actor's consumers."""
        total = 0
        for spec in self.consumer_specs():
            info = await self.js.consumer_info(spec.stream, spec.durable)
            total += int(info.num_pending or 0) + int(info.num_ack_pending or 0)
        return total

    # -- fetching and handling ------------------------------------------------

    async def _fetch_loop(self, sub: Any, spec: ConsumerSpec, stop: asyncio.Event | None = None) -> None:
        failing_since: float | None = None  # fetches failing (a consumer without a leader, NATS away)
        while not self._stopping.is_set() and (stop is None or not stop.is_set()):
            room = min(self.actor.fetch_most or self.settings.fetch_batch,
                       self.settings.max_inflight - self._inflight - self.waiting)
            if room <= 0:
                await asyncio.sleep(0.005)
                continue
            try:
                msgs = await sub.fetch(batch=room, timeout=0.5)
            except (NatsTimeoutError, TimeoutError):
                continue
            except Exception as exc:  # noqa: BLE001 - connection trouble: log once, back off, retry
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.warning("%s fetch failed: %s; trying again", spec.durable, one_line(exc))
                await asyncio.sleep(0.2)
                continue
            if failing_since is not None:
                log.warning("%s fetches again after %.1f s", spec.durable, time.monotonic() - failing_since)
                failing_since = None
            self._inflight += len(msgs)
            try:
                await self._process(msgs, spec)
            finally:
                self._inflight -= len(msgs)

    async def _process(self, msgs: list[Msg], spec: ConsumerSpec) -> None:
        deliveries = [Delivery(m) for m in msgs]
        # Decoded before the lock (decoding touches no actor state), so that the kernel notices
        # urgent work (and cancels what gives way to it) while a handler holds the lock on the
        # actor's worker thread.
        errors = [self._decode(d, spec) for d in deliveries]
        for d in deliveries:
            if d.event is not None:
                self.kernel.notice(d.event)
        starting = self._starts_of(deliveries)
        try:
            for d in deliveries:
                # Whether a run is joined is decided as its start arrives: a run that ends while the
                # actor gets ready for it (a renderer building its sprites) is still its own.
                if isinstance(d.event, RunStarted):
                    d.joins = await self.view.joins(d.event, self._started_ms)
            if type(self.actor).prepare is not Actor.prepare:  # side by side: shows starting together
                await asyncio.gather(*(asyncio.to_thread(self._prepare, d.event) for d in deliveries
                                       if d.event is not None and d.joins is not False and self.actor.prepares(d.event)))
            await self._after_starts(deliveries, starting)
            async with self._lock:
                for d, error in zip(deliveries, errors, strict=True):
                    if error is not None:
                        await self._undecodable(d, spec, error)
                batch = [d for d in deliveries if d.error is None and d.event is not None]
                if batch and isinstance(self.actor, BatchActor):
                    await self._consume_batch(self.actor, batch, spec)
                else:
                    for d in batch:
                        await self._take(d)
                for d in deliveries:
                    if d.outputs and not d.queued:
                        d.futures += await self._publish(d.outputs)
        finally:
            for run_id in starting:
                self._starting.pop(run_id).set()
        await self._complete([d for d in deliveries if not d.queued])

    def _starts_of(self, deliveries: list[Delivery]) -> list[str]:
        """The runs whose start these deliveries bring and the kernel does not hold yet, now
        marked as starting (``_after_starts``)."""
        runs = []
        for d in deliveries:
            run_id = d.event.run if isinstance(d.event, RunStarted) else None
            if run_id is not None and run_id not in self._starting and not self.kernel.holds(run_id):
                self._starting[run_id] = asyncio.Event()
                runs.append(run_id)
        return runs

    async def _after_starts(self, deliveries: list[Delivery], own: list[str]) -> None:
        """Wait until the runs these inputs belong to are no longer starting: an input taken in
        while its run's start was built ahead found the run not held, and the actor let it go (the
        renderer drew the show's first line without its lips moving), while re-execution, which
        feeds a run's start first, drew them: the live show and its replay differed."""
        waits = {self._starting[d.event.run] for d in deliveries
                 if d.event is not None and d.event.run in self._starting and d.event.run not in own}
        if waits:
            await asyncio.gather(*(w.wait() for w in waits))

    def _prepare(self, event: Event) -> None:
        if event.id in self.kernel.prepared:  # built ahead already (a spare)
            return
        try:
            self.kernel.prepare(event)
        except Exception as exc:  # noqa: BLE001 - handle builds it then, or says what is wrong
            log.warning("%s: preparing %s %s failed: %s", self.actor.name, event.type, event.id, one_line(exc))

    async def _complete(self, deliveries: list[Delivery]) -> None:
        """Wait until the deliveries' outputs are stored, then ack (or retry) each.  Outputs that
        failed for a passing reason (a stream electing a new leader: a cluster lost a node) are
        published again, as they were (the dedupe ids keep them once), for up to PUBLISH_RETRY_S,
        without spending the input's deliveries."""
        await acks([f for d in deliveries for f in d.futures])
        window = RetryWindow(stop=self._stopping)
        again = [d for d in deliveries if d.error is None and self._to_publish_again(d)]
        while again and await window.wait(()):  # only passing failures are published again
            for d in again:
                d.futures = await self._publish([*d.streamed, *d.outputs])
            await acks([f for d in again for f in d.futures])
            again = [d for d in again if self._to_publish_again(d)]
        acked = 0
        for d in deliveries:
            why = next((e for e in map(failure, d.futures) if e is not None), None)
            if why is not None and d.error is None:
                d.fail(f"publish failed: {why}")
            acked += await self._settle(d)
        if acked:
            self._processed.inc(acked)

    def _decode(self, d: Delivery, spec: ConsumerSpec) -> DecodeError | None:
        error = decode(d, spec)
        assert d.meta is not None
        if d.meta.delivered > 1:
            self._redelivered.inc()
        event = d.event
        if event is not None and event.at_ms:
            hop = self._hops.get(event.type)
            if hop is None:
                hop = self._hops[event.type] = self.metrics.hop_latency.labels(f"{event.type}>{self.actor.name}")
            seconds = max(0.0, self.clock() - event.at_ms / 1000)
            hop.observe(seconds)
            d.hop_ms = seconds * 1000
        return error

    def _observe_input(self, d: Delivery) -> None:
        """Count an input the actor is given in its run's observations (never one it is not given:
        a playback, a run it does not join, a late input: nothing is observed into those)."""
        if self.actor.observed and d.hop_ms is not None and d.event is not None:
            self.observations.hop(d.event.run, d.event.type, d.hop_ms)

    async def _undecodable(self, d: Delivery, spec: ConsumerSpec, error: DecodeError) -> None:
        assert d.meta is not None
        if isinstance(self.actor, BatchActor) and type_of(d.msg.subject) in self.actor.producer_types:
            d.error = None  # the director, whose input it is, answers it and dead-letters it
            return
        run = run_of(d.msg.subject) or "_"
        ctx = await self.context(run)
        if ctx.run is not None and await self.view.late(run, d.meta.timestamp_ns // 1000):
            ctx = dataclasses.replace(ctx, ended=True)
        key = message_id(d.msg, message_key(spec, d.meta))
        d.outputs.extend(self.actor.undecodable(key, d.msg.data, str(error), ctx))

    async def context(self, run_id: str) -> Context:
        """The handler context for a run at the current show time."""
        return await self.view.context(run_id, self.clock())

    async def _take(self, d: Delivery) -> None:
        """Hand one input to the kernel, with what it needs looked up (the run's start, whether the
        actor joins it, whether the input came after the run's end); queue it, or run its handler."""
        assert d.event is not None and d.meta is not None
        event = d.event
        if self._taken_before and self._rebuilt_already(event, d.meta.stream_seq):
            return  # acked: handled in the rebuild
        ctx = await self.context(event.run)
        run, now_ms, joins = ctx.run, ctx.now_ms, True
        if isinstance(event, RunStarted):
            self.runs.remember(event)
            run, now_ms = event, int(self.clock() * 1000) - event.started_at_ms
            joins = bool(d.joins)  # looked up as it arrived (``_process``)
        elif isinstance(event, RunEnded):
            self.runs.remember_end(event.run, d.meta.timestamp_ns // 1000)
            self.lifecycle.ended(event.run)
        late = (run is not None and event.causation is None and not isinstance(event, RunStarted | RunEnded)
                and await self.view.late(event.run, d.meta.timestamp_ns // 1000))
        wall_ms = int(self.clock() * 1000)
        taken = self.kernel.take(event, run, now_ms, joins=joins, late=late, payload=d, wall_ms=wall_ms,
                                 seq=d.meta.stream_seq)
        if taken.admission.action == REFUSE:
            d.fail(taken.admission.reason, permanent=True)
            return
        if taken.ctx is None:  # skipped: not the actor's
            return
        if not taken.ctx.ended:
            if run is not None:
                self.lifecycle.touch(event.run)
            self._observe_input(d)
        if taken.queued:
            d.queued, d.progress_ms = True, wall_ms
            self._work_ready.set()
            return
        await self._call([d], f"{event.type} {event.id}", taken.handle, observed=not taken.ctx.ended)
        self._tick_wakeup.set()

    def _rebuilt_already(self, event: Event, seq: int) -> bool:
        """An input the last holder had taken in before it died, handled again in this process's
        rebuild of the run, and now redelivered (it had not acked it)."""
        key = (event.run, family_of(event.type))
        upto = self._taken_before.get(key)
        if upto is None:
            return False
        if seq > upto:  # past what the rebuild took in: from here on, inputs are new
            del self._taken_before[key]
            return False
        log.info("%s: %s %s was taken in by the last holder and rebuilt here: not handled again",
                 self.actor.name, event.type, event.id)
        return True

    async def _call(
        self, deliveries: list[Delivery], what: str, fn: Callable[..., Any], *args: Any,
        observed: bool = True, batch: bool = False,
    ) -> None:
        """Run a handler (on the actor's worker thread when it blocks), take its outputs into the
        deliveries (one iterable per delivery when ``batch``) and time it (in the run's observations
        unless not ``observed``); when it raises, mark the deliveries failed: for good on a
        HandlerError, else for a retry (what a generator published before it raised is published
        again with the same ids on the retry, and dropped as a duplicate)."""
        started = time.perf_counter()
        ids = log_context_of(self.actor.name, deliveries[0].run, deliveries[0].event)
        try:
            try:
                result = await self._in_thread(fn, *args) if self.actor.blocking else fn(*args)
                for d, outputs in zip(deliveries, result if batch else [result], strict=True):
                    await self._collect(d, outputs)
            finally:
                LOG_CONTEXT.reset(ids)
        except HandlerError as exc:
            for d in deliveries:
                d.fail(str(exc), permanent=True)
        except Exception as exc:  # noqa: BLE001 - any handler failure is retried, then dead-lettered
            log.exception("%s failed on %s", self.actor.name, what)
            for d in deliveries:
                d.fail(f"{type(exc).__name__}: {exc}")
        elapsed = time.perf_counter() - started
        self._handler_seconds.observe(elapsed)
        if self.actor.observed and observed:
            self.observations.handler(deliveries[0].run, elapsed * 1000)

    async def _collect(self, d: Delivery, outputs: Iterable[Event]) -> None:
        """Collect a handler's outputs; a generator's are published one by one as it yields them."""
        if isinstance(outputs, list | tuple):
            d.outputs.extend(outputs)
            return
        it = iter(outputs)
        while True:
            event = await self._in_thread(next, it, None) if self.actor.blocking else next(it, None)
            if event is None:
                return
            d.streamed.append(event)
            d.futures += await self._publish([event])

    # -- scheduled actors -----------------------------------------------------

    async def _work_loop(self) -> None:
        """Run the scheduler's batches; priorities are looked at again at least every 50 ms."""
        assert self._queue is not None
        queue, kernel = self._queue, self.kernel
        while not self._stopping.is_set():
            if not len(queue):
                self._work_ready.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._work_ready.wait(), 0.05)
            now = int(self.clock() * 1000)
            async with self._lock:
                expired = kernel.expired(now)
            for d, outputs in expired:
                async with self._lock:
                    d.outputs.extend(outputs)
                    d.futures += await self._publish(d.outputs)
                await self._complete([d])
            batch = kernel.next_batch(now)
            if batch is None:
                continue
            queue.working = len(batch.payloads)
            self._batch_runs = {d.run for d in batch.payloads}
            try:
                await self._run_batch(batch)
            finally:
                queue.working = 0
                self._batch_runs = set()
            kernel.served(batch, int(self.clock() * 1000))

    async def _run_batch(self, batch: Batch[Delivery]) -> None:
        deliveries = batch.payloads
        # Not under the lock: fetching and queueing go on while a batch runs.  The actor's
        # state is still touched by one caller at a time: blocking actors run everything on
        # their one worker thread, the others on the event loop.
        ctx = await self.context(batch.events[0].run)
        if batch.run is None:  # released while it waited: the run as looked up
            batch.run = ctx.run
        await self._call(deliveries, f"a batch of {len(batch.events)}", self.kernel.handle_batch, batch, ctx.now_ms,
                         batch=True)
        async with self._lock:
            for d in deliveries:
                if d.outputs:
                    d.futures += await self._publish(d.outputs)
        await self._complete(deliveries)

    # -- observations ---------------------------------------------------------

    async def _observe_loop(self) -> None:
        """Every second, per run: hop latency and handler time p99, and for scheduled actors the
        queue depth, buffer fill and each role's oldest wait, as ``qos.observed`` events."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), OBSERVE_PERIOD_S)
            await self._observe(int(self.clock() * 1000))

    async def _observe(self, now_ms: int) -> None:
        rows = self.observations.rows()
        if self._queue is not None:
            waiting = []
            keep_alive = []
            for job in self._queue.jobs():
                d: Delivery = job.payload[0]
                waiting.append((d.run, job.role, job.arrival_ms))
                if now_ms - d.progress_ms > self.settings.ack_wait_s * 1000 / 3:
                    d.progress_ms = now_ms
                    keep_alive.append(d.msg)
            for msg in keep_alive:  # long waits in the queue must not be redelivered
                with contextlib.suppress(Exception):
                    await msg.in_progress()
            rows += self.observations.queue_rows(now_ms, waiting, self.settings.max_inflight)
        known = {run: self.runs.known(run) for run, *_ in rows}
        out = self.observations.events(rows, known, now_ms)
        if out:  # best effort: one missed is followed by the next a period later
            await acks(await self._publish(out))

    # -- whole batches (the recorder) -----------------------------------------

    async def _consume_batch(self, actor: BatchActor, batch: list[Delivery], spec: ConsumerSpec) -> None:
        """Hand a batch to the actor (the caller holds the actor's lock).  While the actor says it
        failed for an outage (its store away), the batch is held: the lock is let go, its messages
        are kept from redelivery, and it is tried again with a backoff up to OUTAGE_BACKOFF_S, as
        long as the runtime runs (stopped, the messages are left unacked for the next recorder)."""
        waited_from: float | None = None
        delay = self.settings.nak_backoff_s
        items: list[Any] | None = None
        while True:
            try:
                if items is None:
                    items = await arrivals(self.runs, actor, batch, spec)
                await self._in_thread(actor.consume_batch, items)
            except Exception as exc:  # noqa: BLE001 - the whole batch is retried
                if items is not None and actor.outage(exc) and not self._stopping.is_set():
                    now = time.monotonic()
                    if waited_from is None:
                        waited_from = now
                        log.warning("%s: %s; holding %d events and trying again", self.actor.name,
                                    one_line(exc), len(batch))
                    self.metrics.outage_retries.labels(self.actor.name).inc()
                    self._lock.release()
                    try:
                        await self._hold(batch, delay)
                    finally:
                        await self._lock.acquire()
                    delay = min(delay * 2, OUTAGE_BACKOFF_S)
                    continue
                if self._stopping.is_set() and waited_from is not None:
                    log.info("%s stopped while its store was away: %d events left for redelivery",
                             self.actor.name, len(batch))
                    for d in batch:
                        d.left = True
                    return
                log.exception("%s batch failed", self.actor.name)
                for d in batch:
                    d.fail(f"{type(exc).__name__}: {exc}")
                return
            if waited_from is not None:
                log.warning("%s: the batch went through after %.1f s", self.actor.name, time.monotonic() - waited_from)
            return

    async def _hold(self, batch: list[Delivery], delay_s: float) -> None:
        """Wait ``delay_s`` (or until stopped), telling JetStream the batch is still being worked on."""
        for d in batch:
            with contextlib.suppress(Exception):
                await d.msg.in_progress()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), delay_s)

    # -- publishing and settling ----------------------------------------------

    async def _stored(self, outputs: Sequence[Event], futures: list[asyncio.Future[Any]]) -> BaseException | None:
        """Wait until published events are stored, publishing again for up to PUBLISH_RETRY_S those
        that failed for a passing reason; the first lasting failure (None: all stored)."""
        await acks(futures)
        window = RetryWindow(stop=self._stopping)
        while True:
            failed = [(e, why) for e, f in zip(outputs, futures, strict=True) if (why := failure(f)) is not None]
            if not failed:
                return None
            if not await window.wait(why for _, why in failed):
                return failed[0][1]
            outputs = [e for e, _ in failed]
            futures = await self._publish(outputs)
            await acks(futures)

    def _to_publish_again(self, d: Delivery) -> bool:
        errors = [e for e in map(failure, d.futures) if e is not None]
        if errors and all(transient(e) for e in errors) and (d.outputs or d.streamed):
            if not d.republished:
                log.warning("%s: %d outputs not stored (%s); publishing them again", self.actor.name,
                            len(errors), type(errors[0]).__name__)
            d.republished += 1
            return True
        return False

    async def _published_now(self, outputs: Sequence[Event]) -> None:
        """Publish and wait until every one is stored."""
        await asyncio.gather(*await self._publish(outputs))

    async def _publish(self, outputs: Sequence[Event], at_ms: int | None = None) -> list[asyncio.Future[Any]]:
        futures = []
        at_ms = at_ms or int(self.clock() * 1000)
        for event in outputs:
            futures.append(await publish_event(self.js, event, at_ms=at_ms))
            counter = self._published.get(event.type)
            if counter is None:
                counter = self._published[event.type] = self.metrics.published.labels(self.actor.name, event.type)
            counter.inc()
            self.metrics.show(event)
        return futures

    async def _settle(self, d: Delivery) -> int:
        """Ack a delivery whose outputs are stored (returns 1); nak it for a retry, or dead-letter it."""
        if d.left:
            return 0
        if d.error is None:
            await d.msg.ack()
            return 1
        self.metrics.failed.labels(self.actor.name, "permanent" if d.permanent else "transient").inc()
        assert d.meta is not None  # every delivery is decoded before it is settled
        deliveries = d.meta.delivered
        if d.permanent or deliveries >= self.settings.max_deliver:
            await self._dead_letter(d, deliveries)
        else:
            delay = self.settings.nak_backoff_s * (2 ** (deliveries - 1))
            await d.msg.nak(delay=delay)
        return 0

    async def _dead_letter(self, d: Delivery, deliveries: int) -> None:
        assert d.meta is not None
        seq = d.meta.stream_seq
        run = run_of(d.msg.subject)
        letter = DeadLettered(
            id=derive_id(f"{d.msg.subject}#{seq}", f"dead:{self.actor.name}"),
            run=run if run and is_token(run) else "_",
            causation=d.event.id if d.event else None,
            correlation=d.event.correlation if d.event else None,
            actor=self.actor.name, subject=d.msg.subject, reason=d.error or "unknown",
            deliveries=deliveries, stream_seq=seq, raw=d.msg.data,
        )
        if await self._stored([letter], await self._publish([letter])) is not None:
            await d.msg.nak(delay=self.settings.nak_backoff_s)  # keep it: nothing may be lost
            return
        await d.msg.term()
        self.metrics.dead_lettered.labels(self.actor.name).inc()

    # -- clocked actors -------------------------------------------------------

    async def _tick_loop(self, actor: ClockedActor) -> None:
        kernel = self.kernel
        while not self._stopping.is_set():
            due = kernel.next_tick()
            now = self.clock()
            if due is None or due[0] > now * 1000:
                wait = 0.5 if due is None else min(0.5, due[0] / 1000 - now)
                self._tick_wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._tick_wakeup.wait(), wait)
                continue
            run = due[1]
            async with self._lock:
                now_ms = int(self.clock() * 1000) - run.started_at_ms
                try:
                    if actor.blocking or actor.blocking_tick:
                        outputs = await self._in_thread(_ticked, kernel, run, now_ms)
                    else:
                        outputs = _ticked(kernel, run, now_ms)
                except Exception:  # noqa: BLE001 - a failed tick is logged; the clock goes on
                    log.exception("%s tick failed", actor.name)
                    outputs = []
                futures = await self._publish(outputs)
            if outputs:
                await self._store_ticked(outputs, futures)

    async def _store_ticked(self, outputs: Sequence[Event], futures: list[asyncio.Future[Any]]) -> None:
        """See a tick's outputs stored beside the next ticks: waiting for each frame's ack before
        drawing the next one put a NATS round trip (and the server's turn on a busy core) in
        every frame's way.  At most TICK_STORES of them wait at once."""
        while len(self._storing) >= TICK_STORES:
            await asyncio.wait(self._storing, return_when=asyncio.FIRST_COMPLETED)

        async def store() -> None:
            why = await self._stored(outputs, futures)
            if why is not None:
                log.error("%s: a ticked event was not stored: %s", self.actor.name, why)

        task = asyncio.create_task(store(), name=f"{self.actor.name}:store")
        self._storing.add(task)
        task.add_done_callback(self._storing.discard)

    # -- runs held, queue depth -------------------------------------------------

    def _busy(self, run: str) -> bool:
        """Whether the actor still has work for a run: queued inputs, or a tick to come."""
        if run in self._batch_runs:
            return True
        if any(d.run == run for d in self.kernel.queued()):
            return True
        return self.kernel.ticks_ahead(run)

    async def _housekeeping_loop(self) -> None:
        """Release the state of runs that ended (a grace period ago) or went idle."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), HOUSEKEEPING_S)
            await self.housekeeping()

    async def housekeeping(self) -> list[str]:
        """One round of run releases; the runs released."""
        for run in self.lifecycle.open_runs():
            try:
                if await self.runs.ended_at(run) is not None:
                    self.lifecycle.ended(run)
            except Exception as exc:  # noqa: BLE001 - a failed lookup: asked again next round
                log.warning("run.ended lookup %s failed: %s", run, exc)
        released = []
        async with self._lock:
            for run in self.lifecycle.due(self._busy):
                await self._release(run)
                released.append(run)
        for run in released:
            if self.owners is not None and run in self.owners.leases and await self._over(run):
                await self._retire(run)
            self.runs.forget(run)
        self._runs_held.set(len(self.lifecycle))
        if released:
            trim_heap()
        return released

    async def _release(self, run: str) -> None:
        """The actor and the kernel forget a run (the caller holds the lock)."""
        if self.actor.blocking or isinstance(self.actor, ClockedActor) and self.actor.blocking_tick:
            await self._in_thread(self.kernel.release, run)
        else:
            self.kernel.release(run)
        self.lifecycle.release(run)
        self.observations.forget(run)

    async def _over(self, run: str) -> bool:
        try:
            return await self.runs.ended_at(run) is not None
        except Exception:  # noqa: BLE001 - a failed lookup: still held, asked again next round
            return False

    async def _retire(self, run: str) -> None:
        """A held run is over: its fetch loops stop, its key and its consumers go."""
        assert self.owners is not None
        await self._stop_run_loops(run)
        await self.owners.let_go(run)
        for spec in self.consumer_specs(run):
            with contextlib.suppress(Exception):
                await self.js.delete_consumer(spec.stream, spec.durable)

    async def _depth_loop(self, specs: list[ConsumerSpec]) -> None:
        while not self._stopping.is_set():
            for spec in specs:
                with contextlib.suppress(Exception):
                    info = await self.js.consumer_info(spec.stream, spec.durable)
                    self.metrics.queue_depth.labels(self.actor.name, spec.stream).set(info.num_pending or 0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), 2.0)


def lower_priority(nice: int) -> None:
    """Raise the calling thread's niceness by ``nice`` (Linux schedules threads one by one;
    elsewhere, or refused, it stays as it is)."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError as exc:
        log.warning("thread niceness not raised by %d: %s", nice, exc)


def _ticked(kernel: Kernel[Delivery], run: RunStarted, now_ms: int) -> list[Event]:
    return list(kernel.tick(run, now_ms))


def _libc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None  # not glibc: nothing to trim


_TRIM = _libc_trim()


def trim_heap() -> None:
    """Give freed memory back to the system (glibc keeps the pages of freed blocks, so a worker's
    size would stay at its busiest moment's after the runs it served were released)."""
    if _TRIM is not None:
        _TRIM(0)
