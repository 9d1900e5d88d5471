"""The only place actors touch NATS: fetch, decode, handle, publish, ack, retry, dead-letter.

One ``ActorRuntime`` runs one actor.  For every input family it binds a durable
pull consumer and fetches only as many messages as the actor has room for.  An
input is acked only after JetStream has stored every event its handler caused;
output ids are deterministic and double as ``Nats-Msg-Id``, so a redelivered
input publishes duplicates that JetStream drops.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import datetime
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from actors.base import Actor, Context, HandlerError, ScheduledActor
from events import codec
from events.base import DecodeError, Event, derive_id
from events.error import DeadLettered
from events.qos import QosObserved
from events.run import RunEnded, RunStarted
from events.subjects import is_token, run_of, stream_name, type_of
from infra.bus import ConsumerSpec, provision_consumers, publish_event
from infra.metrics import Metrics
from infra.settings import Settings
from schedulers.baseline import nearest_rank
from schedulers.batching import Job, RoleScheduler
from schedulers.priority import PriorityPolicy

log = logging.getLogger(__name__)
Clock = Callable[[], float]
RESTARTS = 5
FAILED = object()  # what _call returns when the handler raised
OBSERVE_PERIOD_S = 1.0  # how often a runtime publishes its observations (qos.observed)
_INSTANCE = f"{os.getpid()}-{time.time_ns()}"  # tells apart the observations of two processes
# A message published this long before a lookup that found no run.started / run.ended is
# covered by that lookup: room for the NATS server's clock against this process's clock.
CLOCK_MARGIN_US = 1_000_000
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(slots=True)
class Delivery:
    """One fetched message and what became of it."""

    msg: Msg
    meta: AckMetadata | None = None
    event: Event | None = None
    outputs: list[Event] = field(default_factory=list)
    futures: list[asyncio.Future[Any]] = field(default_factory=list)
    error: str | None = None
    permanent: bool = False
    queued: bool = False      # waiting in the actor's scheduler
    progress_ms: int = 0      # when JetStream was last told it is still being worked on
    hop_ms: float | None = None  # from its emission to its fetch (observed once it is handled)


@dataclass(frozen=True, slots=True)
class AckMetadata:
    """What the runtime needs from a JetStream message's reply subject."""

    delivered: int
    stream_seq: int
    timestamp_ns: int


def ack_metadata(msg: Msg) -> AckMetadata:
    """Parse ``$JS.ACK.[domain.hash.]stream.consumer.delivered.sseq.cseq.ts.pending``.

    Cheaper than ``msg.metadata``, which also builds datetimes and sequence objects.
    """
    tokens = (msg.reply or "").split(".")
    if len(tokens) == 9:
        base = 4
    elif len(tokens) >= 11:
        base = 6
    else:
        meta = msg.metadata
        ts = int(meta.timestamp.timestamp() * 1e9) if meta.timestamp else 0
        return AckMetadata(meta.num_delivered or 1, meta.sequence.stream, ts)
    return AckMetadata(int(tokens[base]), int(tokens[base + 1]), int(tokens[base + 3]))


def _message_key(spec: ConsumerSpec, meta: AckMetadata) -> str:
    """A deterministic name for a message: its family and stream sequence."""
    return f"{spec.family}-{meta.stream_seq}"


def _message_id(msg: Msg, fallback: str) -> str:
    """The id an undecodable message would have had: its JSON's ``id``, its Nats-Msg-Id, else ``fallback``."""
    try:
        doc = orjson.loads(codec.split(msg.data)[0])
    except (orjson.JSONDecodeError, DecodeError):
        doc = None
    ident = doc.get("id") if isinstance(doc, dict) else None
    if isinstance(ident, str) and ident:
        return ident
    return (msg.headers or {}).get("Nats-Msg-Id") or fallback


@dataclass(frozen=True, slots=True)
class Arrival:
    """One decoded message of a batch handed whole to a ``BatchActor``."""

    event: Event
    msg: Msg
    meta: AckMetadata
    # The run (None: unknown) and, for a producer event, whether it came after the run ended.
    ctx: Context


class BatchActor(Actor):
    """An actor that takes each fetched batch whole, in one call (the recorder)."""

    # Event types that producers outside Troupe publish (the danmaku).  The actor whose input
    # they are (the director) validates them and dead-letters the undecodable ones; a batch
    # actor leaves those to it (one dead letter per bad message) and gets, for each producer
    # event, whether its run existed and had not ended when it was published.
    producer_types: ClassVar[frozenset[str]] = frozenset()

    def consume_batch(self, items: Sequence[Arrival]) -> None:
        """Take one fetched batch; the runtime acks it after this returns."""
        raise NotImplementedError


def _failure(future: asyncio.Future[Any]) -> BaseException | None:
    if future.cancelled():
        return asyncio.CancelledError("publish cancelled")
    return future.exception()


@dataclass(slots=True)
class _Miss:
    """A lookup that found nothing: when it was sent, and when to look again at the latest."""

    sent_us: int       # wall clock
    retry_at: float    # the directory's clock


class RunDirectory:
    """Looks up and caches each run's ``run.started`` and ``run.ended`` from the run stream.

    A found event is kept (a run never un-starts or un-ends).  A lookup that found
    nothing answers for ``retry_s``: a flood of inputs for a missing (or still running)
    run must not become a flood of lookups.  It answers for good for a message
    published before it was sent; ``precise`` callers (the recorder) look again for
    a newer one instead of trusting it.
    """

    def __init__(
        self, js: JetStreamContext, clock: Clock = time.monotonic, retry_s: float = 1.0, wall: Clock = time.time,
    ) -> None:
        self._js = js
        self._runs: dict[str, RunStarted] = {}
        self._ends: dict[str, int] = {}        # run -> stream time (us) of its run.ended
        self._missing: dict[str, _Miss] = {}   # runs without a run.started
        self._running: dict[str, _Miss] = {}   # runs without a run.ended
        self._clock = clock
        self._wall = wall
        self._retry_s = retry_s

    def known(self, run: str) -> RunStarted | None:
        """The run's start event if it is already cached (no I/O)."""
        return self._runs.get(run)

    def remember(self, run: RunStarted) -> None:
        self._runs[run.run] = run
        self._missing.pop(run.run, None)

    def remember_end(self, run: str, ended_us: int) -> None:
        """The run ended: its run.ended was stored at ``ended_us`` (stream time)."""
        if len(self._ends) > 10_000:
            self._ends.clear()
        self._ends[run] = ended_us
        self._running.pop(run, None)

    def _answers(self, miss: _Miss | None, published_us: int | None, precise: bool) -> bool:
        """Whether a lookup that found nothing still answers for a message published at ``published_us``."""
        if miss is None:
            return False
        if published_us is not None and published_us < miss.sent_us - CLOCK_MARGIN_US:
            return True  # the message is older than the lookup: what was not there then was not there before
        return not precise and miss.retry_at > self._clock()

    def _missed(self, misses: dict[str, _Miss], run: str, sent_us: int) -> None:
        if len(misses) > 10_000:
            misses.clear()
        misses[run] = _Miss(sent_us, self._clock() + self._retry_s)

    async def get(self, run: str, published_us: int | None = None, precise: bool = False) -> RunStarted | None:
        """The run's start event, or None when the run does not exist."""
        known = self._runs.get(run)
        if known is not None or not is_token(run):
            return known
        if self._answers(self._missing.get(run), published_us, precise):
            return None
        sent_us = int(self._wall() * 1_000_000)
        try:
            raw = await self._js.get_last_msg(stream_name("run"), f"troupe.{run}.run.started")
        except NotFoundError:
            self._missed(self._missing, run, sent_us)
            return None
        try:
            event = codec.decode(raw.data or b"")
        except DecodeError as exc:
            log.warning("the run.started of %s cannot be read: %s", run, exc)
            return None
        if isinstance(event, RunStarted):
            self._runs[run] = event
            return event
        return None

    async def ended_at(self, run: str, published_us: int | None = None, precise: bool = False) -> int | None:
        """The stream time (us) of the run's ``run.ended``, or None while it has not ended."""
        ended = self._ends.get(run)
        if ended is not None or not is_token(run):
            return ended
        if self._answers(self._running.get(run), published_us, precise):
            return None
        sent_us = int(self._wall() * 1_000_000)
        try:
            raw = await self._js.get_last_msg(stream_name("run"), f"troupe.{run}.run.ended")
        except NotFoundError:
            self._missed(self._running, run, sent_us)
            return None
        if raw.time is None:  # every stored message has a time; be safe: treat it as just now
            ended = sent_us
        else:
            ended = (raw.time - _EPOCH) // datetime.timedelta(microseconds=1)
        self.remember_end(run, ended)
        return ended


class ActorRuntime:
    """Runs one actor against JetStream until stopped; an async context manager."""

    def __init__(
        self, actor: Actor, js: JetStreamContext, settings: Settings, metrics: Metrics,
        runs: RunDirectory | None = None, clock: Clock = time.time, durable: str | None = None,
    ) -> None:
        self.actor = actor
        self.js = js
        self.settings = settings
        self.metrics = metrics
        self.runs = runs or RunDirectory(js)
        self.clock = clock
        self.durable = durable or actor.name
        self._lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._inflight = 0
        self._subs: list[Any] = []
        self._tick_wakeup = asyncio.Event()
        # One worker thread: an actor's blocking code never runs beside itself.
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"troupe-{actor.name}")
        self._threads: set[concurrent.futures.Future[Any]] = set()
        name = actor.name
        self._processed = metrics.processed.labels(name)
        self._redelivered = metrics.redelivered.labels(name)
        self._handler_seconds = metrics.handler_seconds.labels(name)
        self._published: dict[str, Any] = {}
        self._hops: dict[str, Any] = {}
        # Scheduled actors: inputs wait here and are handled in batches of one role.
        self._sched: RoleScheduler | None = None
        if isinstance(actor, ScheduledActor):
            self._sched = RoleScheduler(
                PriorityPolicy(), actor.max_batch, actor.token_budget, fifo=settings.scheduler == "fifo",
            )
        self._working = 0
        self._work_ready = asyncio.Event()
        self._observed = 0
        self._samples: dict[tuple[str, str], list[float]] = {}  # (run, input type | "handler") -> ms
        self._queued_runs: set[str] = set()
        self._started_ms = int(clock() * 1000)  # set again by start()

    def consumer_specs(self) -> list[ConsumerSpec]:
        """The durable consumers this actor needs, one per input family."""
        return [
            ConsumerSpec(
                durable=f"{self.durable}_{inp.family}", family=inp.family, filters=inp.filters,
                max_deliver=self.settings.max_deliver, ack_wait_s=self.settings.ack_wait_s,
                max_ack_pending=max(self.settings.max_inflight * 4, 1024),
            )
            for inp in self.actor.inputs
        ]

    async def start(self) -> ActorRuntime:
        """Provision consumers and start the fetch loops (and the tick loop)."""
        self._started_ms = int(self.clock() * 1000)
        specs = self.consumer_specs()
        await provision_consumers(self.js, specs)
        for spec in specs:
            sub = await self.js.pull_subscribe_bind(spec.durable, spec.stream)
            self._subs.append(sub)
            self._spawn(functools.partial(self._fetch_loop, sub, spec), f"{self.actor.name}:fetch:{spec.family}")
        if type(self.actor).tick is not Actor.tick:
            self._spawn(self._tick_loop, f"{self.actor.name}:tick")
        if self._sched is not None:
            self._spawn(self._work_loop, f"{self.actor.name}:work")
        if self.actor.observed:
            self._spawn(self._observe_loop, f"{self.actor.name}:observe")
        self._spawn(functools.partial(self._depth_loop, specs), f"{self.actor.name}:depth")
        return self

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run blocking actor code in a worker thread, remembering it until it finishes."""
        future = self._executor.submit(fn, *args)
        self._threads.add(future)
        future.add_done_callback(self._threads.discard)
        return await asyncio.wrap_future(future)

    def _spawn(self, loop: Callable[[], Awaitable[None]], name: str) -> None:
        self._tasks.append(asyncio.create_task(self._supervise(loop, name), name=name))

    async def _supervise(self, loop: Callable[[], Awaitable[None]], name: str) -> None:
        """Run a loop; restart it if it crashes, at most ``RESTARTS`` times a minute."""
        crashes: list[float] = []
        while not self._stopping.is_set():
            try:
                await loop()
                return  # a loop returns only when the actor stops
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a crash, told apart from a shutdown and restarted
                now = time.monotonic()
                crashes = [t for t in crashes if now - t < 60.0] + [now]
                self.metrics.failed.labels(self.actor.name, "crash").inc()
                if len(crashes) > RESTARTS:
                    log.exception("%s crashed %d times within a minute; giving up", name, len(crashes))
                    raise
                log.exception("%s crashed; restarting", name)
                await asyncio.sleep(0.1 * len(crashes))

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Finish in-flight work (or nak it), then stop every loop."""
        self._stopping.set()
        self._tick_wakeup.set()
        done, pending = await asyncio.wait(self._tasks, timeout=timeout_s) if self._tasks else (set(), set())
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error("%s ended with %r", task.get_name(), task.exception())
        if self._sched is not None:  # work that waited in the scheduler goes back to JetStream
            for job in list(self._sched):
                with contextlib.suppress(Exception):
                    await job.payload.msg.nak()
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
        await self._in_thread(self.actor.close)
        self._executor.shutdown(wait=False)

    async def __aenter__(self) -> ActorRuntime:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def healthy(self) -> bool:
        """True while every loop of this actor is running."""
        return bool(self._tasks) and not any(t.done() for t in self._tasks)

    async def pending(self) -> int:
        """Messages not yet handled and acked across this actor's consumers."""
        total = 0
        for spec in self.consumer_specs():
            info = await self.js.consumer_info(spec.stream, spec.durable)
            total += int(info.num_pending or 0) + int(info.num_ack_pending or 0)
        return total

    # -- fetching and handling ------------------------------------------------

    async def _fetch_loop(self, sub: Any, spec: ConsumerSpec) -> None:
        while not self._stopping.is_set():
            room = min(self.settings.fetch_batch, self.settings.max_inflight - self._inflight - self._waiting())
            if room <= 0:
                await asyncio.sleep(0.005)
                continue
            try:
                msgs = await sub.fetch(batch=room, timeout=0.5)
            except (NatsTimeoutError, TimeoutError):
                continue
            except Exception as exc:  # noqa: BLE001 - connection trouble: log, back off, retry
                log.warning("%s fetch failed: %s", spec.durable, exc)
                await asyncio.sleep(0.2)
                continue
            self._inflight += len(msgs)
            try:
                await self._process(msgs, spec)
            finally:
                self._inflight -= len(msgs)

    async def _process(self, msgs: list[Msg], spec: ConsumerSpec) -> None:
        deliveries = [Delivery(m) for m in msgs]
        async with self._lock:
            for d in deliveries:
                error = self._decode(d, spec)
                if error is not None:
                    await self._undecodable(d, spec, error)
            batch = [d for d in deliveries if d.error is None and d.event is not None]
            if batch and isinstance(self.actor, BatchActor):
                await self._consume_batch(batch)
            else:
                for d in batch:
                    if self._sched is not None and await self._enqueue(d):
                        continue
                    await self._handle(d)
            for d in deliveries:
                if d.outputs and not d.queued:
                    await self._publish(d, d.outputs)
        await self._complete([d for d in deliveries if not d.queued])

    async def _complete(self, deliveries: list[Delivery]) -> None:
        """Wait until the deliveries' outputs are stored, then ack (or retry) each."""
        futures = [f for d in deliveries for f in d.futures]
        if futures:
            await asyncio.wait(futures)
        acked = 0
        for d in deliveries:
            failure = next((e for e in map(_failure, d.futures) if e is not None), None)
            if failure is not None and d.error is None:
                d.error = f"publish failed: {failure}"
            acked += await self._settle(d)
        if acked:
            self._processed.inc(acked)

    def _decode(self, d: Delivery, spec: ConsumerSpec) -> DecodeError | None:
        """Decode a delivery (synchronously: the hot path); the error when it cannot be decoded."""
        meta = d.meta = ack_metadata(d.msg)
        if meta.delivered > 1:
            self._redelivered.inc()
        run = run_of(d.msg.subject) or "_"
        defaults = {
            "id": (d.msg.headers or {}).get("Nats-Msg-Id") or _message_key(spec, meta),
            "run": run,
            "at_ms": meta.timestamp_ns // 1_000_000,
        }
        try:
            event = codec.decode(d.msg.data, defaults)
            if event.run != run:
                raise DecodeError(f"run {event.run!r} does not match the subject's run {run!r}", "run")
            if event.type != type_of(d.msg.subject):  # e.g. a cue.issued sent as a danmaku
                raise DecodeError(f"wrong event type {event.type!r} for this subject", "type")
        except DecodeError as exc:
            d.error, d.permanent = f"undecodable: {exc}", True
            return exc
        d.event = event
        hop = self._hops.get(event.type)
        if hop is None:
            hop = self._hops[event.type] = self.metrics.hop_latency.labels(f"{event.type}>{self.actor.name}")
        if event.at_ms:
            seconds = max(0.0, self.clock() - event.at_ms / 1000)
            hop.observe(seconds)
            d.hop_ms = seconds * 1000
        return None

    def _observe_input(self, d: Delivery) -> None:
        """Count an input the actor is given in its run's observations (never one it is not given:
        a playback, a run it does not join, a late input: nothing is observed into those)."""
        if self.actor.observed and d.hop_ms is not None and d.event is not None:
            self._samples.setdefault((d.event.run, d.event.type), []).append(d.hop_ms)

    async def _undecodable(self, d: Delivery, spec: ConsumerSpec, error: DecodeError) -> None:
        assert d.meta is not None
        if isinstance(self.actor, BatchActor) and type_of(d.msg.subject) in self.actor.producer_types:
            d.error = None  # the director, whose input it is, answers it and dead-letters it
            return
        run = run_of(d.msg.subject) or "_"
        ctx = await self.context(run)
        if ctx.run is not None and await self._late(run, d.meta):
            ctx = dataclasses.replace(ctx, ended=True)
        key = _message_id(d.msg, _message_key(spec, d.meta))
        d.outputs.extend(self.actor.undecodable(key, d.msg.data, str(error), ctx))

    async def _late(self, run: str, meta: AckMetadata, precise: bool = False) -> bool:
        """Whether a message was published after its run's run.ended."""
        published_us = meta.timestamp_ns // 1000
        try:
            ended_us = await self.runs.ended_at(run, published_us, precise)
        except Exception as exc:  # noqa: BLE001 - a failed lookup: the run is taken as still running
            log.warning("run.ended lookup %s failed: %s", run, exc)
            return False
        return ended_us is not None and published_us > ended_us

    async def _joins(self, run: RunStarted) -> bool:
        """Whether the actor is given a run's start (and so opens the run): never for a run that has
        already ended, nor for a playback that began before this runtime did (a new show's sink must
        not write an earlier ``troupe replay`` whose messages were left in the stream)."""
        if run.replay_of is not None and run.started_at_ms < self._started_ms:
            return False
        try:
            return await self.runs.ended_at(run.run) is None
        except Exception as exc:  # noqa: BLE001 - a failed lookup: the run is taken as still running
            log.warning("run.ended lookup %s failed: %s", run.run, exc)
            return True

    async def _lookup_run(self, run: str) -> RunStarted | None:
        try:
            return await self.runs.get(run)
        except Exception as exc:  # noqa: BLE001 - a broken run record is treated as unknown
            log.warning("run lookup %s failed: %s", run, exc)
            return None

    async def context(self, run_id: str) -> Context:
        """The handler context for a run at the current show time."""
        run = self.runs.known(run_id)  # the common case, without a lookup
        if run is None:
            run = await self._lookup_run(run_id)
        now = int(self.clock() * 1000) - run.started_at_ms if run is not None else 0
        return Context(run, now)

    async def _handle(self, d: Delivery) -> None:
        assert d.event is not None and d.meta is not None
        event = d.event
        ctx = await self.context(event.run)
        if ctx.run is None and not self.actor.accepts_unknown_runs and not isinstance(event, RunStarted):
            d.error, d.permanent = f"unknown run {event.run!r}", True
            return
        if isinstance(event, RunStarted):
            self.runs.remember(event)
            ctx = Context(event, int(self.clock() * 1000) - event.started_at_ms)
            if not await self._joins(event):
                return
        elif isinstance(event, RunEnded):
            self.runs.remember_end(event.run, d.meta.timestamp_ns // 1000)
        elif ctx.run is not None and event.causation is None and await self._late(event.run, d.meta):
            ctx = dataclasses.replace(ctx, ended=True)  # an outside input after the end: a late one
        if ctx.run is not None and ctx.run.replay_of is not None and not self.actor.plays_replays:
            return
        if not ctx.ended:
            self._observe_input(d)
        outputs = await self._call([d], f"{event.type} {event.id}", self.actor.handle, event, ctx, observed=not ctx.ended)
        if outputs is not FAILED:
            d.outputs.extend(outputs)
            self._tick_wakeup.set()

    async def _call(
        self, deliveries: list[Delivery], what: str, fn: Callable[..., Any], *args: Any, observed: bool = True,
    ) -> Any:
        """Run a handler (on the actor's worker thread when it blocks) and time it (in the run's
        observations unless not ``observed``); when it raises, mark the deliveries failed (for good
        on a HandlerError, else for a retry) and return FAILED."""
        started = time.perf_counter()
        result: Any = FAILED
        try:
            result = await self._in_thread(fn, *args) if self.actor.blocking else fn(*args)
        except HandlerError as exc:
            for d in deliveries:
                d.error, d.permanent = str(exc), True
        except Exception as exc:  # noqa: BLE001 - any handler failure is retried, then dead-lettered
            log.exception("%s failed on %s", self.actor.name, what)
            for d in deliveries:
                d.error = f"{type(exc).__name__}: {exc}"
        elapsed = time.perf_counter() - started
        self._handler_seconds.observe(elapsed)
        if self.actor.observed and observed:
            run = deliveries[0].event.run if deliveries[0].event is not None else "_"
            self._samples.setdefault((run, "handler"), []).append(elapsed * 1000)
        return result

    # -- scheduled actors -----------------------------------------------------

    def _waiting(self) -> int:
        return len(self._sched) + self._working if self._sched is not None else 0

    async def _enqueue(self, d: Delivery) -> bool:
        """Queue a delivery in the scheduler; False when it is to be handled at once."""
        assert d.event is not None and self._sched is not None and isinstance(self.actor, ScheduledActor)
        event = d.event
        ctx = await self.context(event.run)
        if ctx.run is None or isinstance(event, RunStarted):
            return False
        if ctx.run.replay_of is not None and not self.actor.plays_replays:
            return False
        work = self.actor.work(event, ctx)
        if work is None:
            return False
        now = int(self.clock() * 1000)
        deadline = ctx.run.started_at_ms + work.deadline_ms if work.deadline_ms else 0
        self._sched.add(Job(
            key=id(d), role=work.role, arrival_ms=now, tokens=work.tokens,
            weight=self._sched.policy.weight(work.weight), deadline_ms=deadline,
            batch_key=(event.run, work.role, work.batch_key), payload=d,
        ))
        d.queued, d.progress_ms = True, now
        self._observe_input(d)
        self._work_ready.set()
        return True

    async def _work_loop(self) -> None:
        """Run the scheduler's batches; priorities are looked at again at least every 50 ms."""
        assert self._sched is not None and isinstance(self.actor, ScheduledActor)
        sched, actor = self._sched, self.actor
        while not self._stopping.is_set():
            if not len(sched):
                self._work_ready.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._work_ready.wait(), 0.05)
            now = int(self.clock() * 1000)
            for job in sched.expired(now):
                d: Delivery = job.payload
                assert d.event is not None
                async with self._lock:
                    ctx = await self.context(d.event.run)
                    d.outputs.extend(actor.expired(d.event, ctx))
                    await self._publish(d, d.outputs)
                await self._complete([d])
            batch = sched.next_batch(now)
            if not batch:
                continue
            deliveries: list[Delivery] = [job.payload for job in batch]
            self._working = len(deliveries)
            try:
                await self._run_batch(deliveries)
            finally:
                self._working = 0
            sched.served(batch[0].role, int(self.clock() * 1000))

    async def _run_batch(self, deliveries: list[Delivery]) -> None:
        assert isinstance(self.actor, ScheduledActor)
        events = [d.event for d in deliveries if d.event is not None]
        # Not under the lock: fetching and queueing go on while a batch runs.  The actor's
        # state is still touched by one caller at a time: blocking actors run everything on
        # their one worker thread, the others on the event loop.
        ctx = await self.context(events[0].run)
        outputs = await self._call(deliveries, f"a batch of {len(events)}", self.actor.handle_batch, events, ctx)
        if outputs is not FAILED:
            for d, out in zip(deliveries, outputs, strict=True):
                d.outputs.extend(out)
        async with self._lock:
            for d in deliveries:
                if d.outputs:
                    await self._publish(d, d.outputs)
        await self._complete(deliveries)

    async def _observe_loop(self) -> None:
        """Every second, per run: hop latency and handler time p99, and for scheduled actors the
        queue depth, buffer fill and each role's oldest wait, as ``qos.observed`` events."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), OBSERVE_PERIOD_S)
            await self._observe(int(self.clock() * 1000))

    async def _observe(self, now_ms: int) -> None:
        samples, self._samples = self._samples, {}
        rows: list[tuple[str, str, float, str]] = []  # run, metric, value, source
        for (run, what), values in samples.items():
            p99 = nearest_rank(sorted(values), 99)
            if what == "handler":
                rows.append((run, "handler_ms", p99, self.actor.name))
            else:
                rows.append((run, "hop_latency_ms", p99, f"{what}>{self.actor.name}"))
        if self._sched is not None:
            depth: dict[str, int] = {}
            oldest: dict[tuple[str, str], int] = {}
            keep_alive = []
            for job in self._sched:
                d: Delivery = job.payload
                run = d.event.run if d.event is not None else "_"
                depth[run] = depth.get(run, 0) + 1
                oldest[run, job.role] = min(oldest.get((run, job.role), job.arrival_ms), job.arrival_ms)
                if now_ms - d.progress_ms > self.settings.ack_wait_s * 1000 / 3:
                    d.progress_ms = now_ms
                    keep_alive.append(d.msg)
            for msg in keep_alive:  # long waits in the queue must not be redelivered
                with contextlib.suppress(Exception):
                    await msg.in_progress()
            capacity = max(1, self.settings.max_inflight)
            for run in depth.keys() | self._queued_runs:  # and once more at 0 when a queue empties
                n = depth.get(run, 0)
                rows += [(run, "queue_depth", float(n), self.actor.name), (run, "buffer_fill", n / capacity, self.actor.name)]
            rows += [(run, "role_wait_ms", float(now_ms - at), f"{self.actor.name}:{role}") for (run, role), at in oldest.items()]
            self._queued_runs = set(depth)
        out: list[Event] = []
        self._observed += 1
        for run, metric, value, source in rows:
            known = self.runs.known(run)
            if known is None or not is_token(run) or known.replay_of is not None:
                continue  # a playback is what was recorded: nothing is observed into it
            out.append(QosObserved(
                id=derive_id(f"{self.durable}:{run}:{_INSTANCE}", f"{metric}:{source}:{self._observed}"), run=run,
                t_ms=now_ms - known.started_at_ms, metric=metric, value=round(value, 3), source=source,
            ))
        if out:
            await asyncio.gather(*await self._publish(None, out), return_exceptions=True)

    async def _arrivals(self, batch: list[Delivery]) -> list[Arrival]:
        """The batch with each event's run; a producer event also learns whether its run existed and
        had not ended when it was published (one lookup per run and batch at most, never trusting
        a cached "not there" for a message newer than the lookup: what the director answers
        "late" must never be stored)."""
        assert isinstance(self.actor, BatchActor)
        newest: dict[str, int] = {}
        for d in batch:
            assert d.event is not None and d.meta is not None
            if isinstance(d.event, RunStarted):
                self.runs.remember(d.event)
            elif isinstance(d.event, RunEnded):
                self.runs.remember_end(d.event.run, d.meta.timestamp_ns // 1000)
            elif d.event.type in self.actor.producer_types:
                newest[d.event.run] = max(newest.get(d.event.run, 0), d.meta.timestamp_ns // 1000)
        lifecycle: dict[str, tuple[RunStarted | None, int | None]] = {}
        for run, published_us in newest.items():  # a failed lookup fails the batch: it is retried
            started = await self.runs.get(run, published_us, precise=True)
            # A playback re-publishes what its run's recorder already judged, in store order.
            judged = started is not None and started.replay_of is None
            ended = await self.runs.ended_at(run, published_us, precise=True) if judged else None
            lifecycle[run] = (started, ended)
        out = []
        for d in batch:
            assert d.event is not None and d.meta is not None
            run = d.event.run
            if run in lifecycle and d.event.type in self.actor.producer_types:
                started, ended = lifecycle[run]
                late = ended is not None and d.meta.timestamp_ns // 1000 > ended
                ctx = Context(started, 0, ended=late)
            else:
                ctx = Context(self.runs.known(run), 0)
            out.append(Arrival(d.event, d.msg, d.meta, ctx))
        return out

    async def _consume_batch(self, batch: list[Delivery]) -> None:
        assert isinstance(self.actor, BatchActor)
        try:
            items = await self._arrivals(batch)
            await self._in_thread(self.actor.consume_batch, items)
        except Exception as exc:  # noqa: BLE001 - the whole batch is retried
            log.exception("%s batch failed", self.actor.name)
            for d in batch:
                d.error = f"{type(exc).__name__}: {exc}"

    async def _publish(self, d: Delivery | None, outputs: Sequence[Event]) -> list[asyncio.Future[Any]]:
        futures = []
        for event in outputs:
            future = await publish_event(self.js, event, at_ms=int(self.clock() * 1000))
            futures.append(future)
            counter = self._published.get(event.type)
            if counter is None:
                counter = self._published[event.type] = self.metrics.published.labels(self.actor.name, event.type)
            counter.inc()
        if d is not None:
            d.futures = futures
        return futures

    async def _settle(self, d: Delivery) -> int:
        """Ack a delivery whose outputs are stored (returns 1); nak it for a retry, or dead-letter it."""
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
        futures = await self._publish(None, [letter])
        results = await asyncio.gather(*futures, return_exceptions=True)
        if any(isinstance(r, BaseException) for r in results):
            await d.msg.nak(delay=self.settings.nak_backoff_s)  # keep it: nothing may be lost
            return
        await d.msg.term()
        self.metrics.dead_lettered.labels(self.actor.name).inc()

    # -- clocked actors -------------------------------------------------------

    async def _tick_loop(self) -> None:
        while not self._stopping.is_set():
            due = self._next_due()
            now = self.clock()
            if due is None or due[0] > now:
                wait = 0.5 if due is None else min(0.5, due[0] - now)
                self._tick_wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._tick_wakeup.wait(), wait)
                continue
            run = due[1]
            async with self._lock:
                ctx = Context(run, int(self.clock() * 1000) - run.started_at_ms)
                try:
                    if self.actor.blocking or self.actor.blocking_tick:
                        outputs = await self._in_thread(self.actor.tick, ctx)
                    else:
                        outputs = self.actor.tick(ctx)
                except Exception:  # noqa: BLE001 - a failed tick is logged; the clock goes on
                    log.exception("%s tick failed", self.actor.name)
                    outputs = []
                futures = await self._publish(None, outputs)
            for result in await asyncio.gather(*futures, return_exceptions=True):
                if isinstance(result, BaseException):
                    log.error("%s: a ticked event was not stored: %s", self.actor.name, result)

    def _next_due(self) -> tuple[float, RunStarted] | None:
        best: tuple[float, RunStarted] | None = None
        for run in self.actor.active_runs():
            show_ms = self.actor.next_tick(run.run)
            if show_ms is None:
                continue
            wall = (run.started_at_ms + show_ms) / 1000
            if best is None or wall < best[0]:
                best = (wall, run)
        return best

    async def _depth_loop(self, specs: list[ConsumerSpec]) -> None:
        while not self._stopping.is_set():
            for spec in specs:
                with contextlib.suppress(Exception):
                    info = await self.js.consumer_info(spec.stream, spec.durable)
                    self.metrics.queue_depth.labels(self.actor.name, spec.stream).set(info.num_pending or 0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), 2.0)
