"""Builds actors and runs them, all in one process (``troupe up``) or one per process, and runs a show.

``Stage`` holds what a process's actors share: NATS (an embedded server, else the one given, with
the family streams provisioned), metrics, the store, and the actors' runtimes.  An actor that is
one per deployment (``takes_over``: director, lipsync, render, sink) runs only while this process
holds its lease, a key of the ``troupe_leases`` bucket (``infra.lease``).  While another process
holds it, this one stands by, and takes over when that lease lapses, rebuilding the live runs'
state first (``actors.runtime.takeover``); a lease lost while running stops the actor at once,
so that two never run side by side.

A run's lifecycle (``run_show``):

1. The actors are started, and the process takes the run's on-air lease (``onair.<run>``), which
   it holds while it drives the show: a standby takes over only the runs whose show still lives.
2. ``run.started`` (id ``<run>-start``, the run's root) carries everything the run is made of:
   the show as plain data, the seed, fps and resolution, the run-scoped settings (``run_config``:
   re-execution follows them) and the planned duration.  Its ``started_at_ms`` is
   ``START_LEAD_MS`` ahead, the actors' time to get ready: show time 0.  Each actor opens its
   state for the run as it handles it.
3. ``role.declared`` for each role, then the scripted chat, each comment at its show time
   (``<run>-script-<i>``), while the actors carry the show themselves.
4. At the planned duration, or when ``stop`` is set (a signal: the run ends at the show time it
   reached, reason ``stopped (SIGTERM)``), ``run.ended`` (``<run>-end``) gives the duration and
   the reason, and the on-air lease is let go.
5. ``run_show`` returns (``ShowResult``) once every actor kind has handled everything (their
   durable consumers hold nothing pending) and, where the sink runs here, the video is closed.
   Each actor lets the run's state go a grace period after it learns that the run ended
   (``actors.runtime.runs.RunLifecycle``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from sqlalchemy import Engine

from actors.base import Actor
from actors.runtime import OBSERVE_PERIOD_S, ActorRuntime, RunDirectory
from app.bridges.live import bridged, connectors
from app.registry import SHOW, Wiring, actor_class, entry, show_actors
from events.base import Event
from events.danmaku import DanmakuReceived
from events.role import RoleDeclared
from events.run import RunEnded, RunStarted
from events.show import Show
from events.subjects import stream_name
from infra.bus import connect, erase_messages, masked_url, provision_streams, publish_events
from infra.lease import Lease, lease_bucket, on_air_key
from infra.logs import log_context
from infra.metrics import Metrics
from infra.natsserver import EmbeddedNats, announcement_path
from infra.settings import Settings, run_config
from store.database import default_url, open_engine
from store.viewers import Projector, follow

log = logging.getLogger(__name__)
ACTOR_NAMES = SHOW  # the actors a show is made of (the preview watches it)


class Stage:
    """The shared resources of a process: NATS (embedded or remote), metrics, the store."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.embedded: EmbeddedNats | None = None
        self.nc: Client | None = None
        self._engine: Engine | None = None
        self.runtimes: list[ActorRuntime] = []
        self.runs: RunDirectory | None = None
        self.leases: list[Lease] = []
        self._watches: list[asyncio.Task[None]] = []
        self._standing: set[str] = set()  # the kinds standing by for a lease held elsewhere
        self.on_air: set[str] = set()  # the runs whose show this process drives now

    @property
    def js(self) -> JetStreamContext:
        assert self.nc is not None
        return self.nc.jetstream(timeout=10.0)

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = open_engine(self.settings.store_url or default_url(self.settings.state_dir))
        return self._engine

    async def __aenter__(self) -> Stage:
        try:
            await self._open()
        except BaseException:
            # __aexit__ is not called when __aenter__ fails: stop what did start (the server, its announcement).
            await self.__aexit__(None, None, None)
            raise
        return self

    async def _open(self) -> None:
        url = self.settings.nats_url
        if url is None:
            state_dir = self.settings.state_dir
            self.embedded = EmbeddedNats(state_dir / "nats", announce=announcement_path(state_dir))
            await self.embedded.start()
            url = self.embedded.url
        else:
            log.info("NATS at %s", masked_url(url))
        self.nc = await connect(url, "troupe")
        await provision_streams(self.js, self.settings.frame_max_age_s, self.settings.stream_replicas)
        self.runs = RunDirectory(self.js)
        if self.settings.metrics_port >= 0:
            port = self.metrics.serve(self.settings.metrics_port, self.settings.metrics_host)
            log.info("metrics on http://%s:%d/metrics", self.settings.metrics_host, port)

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for task in self._watches:
            task.cancel()
        for rt in reversed(self.runtimes):
            await rt.stop()
        self.runtimes.clear()
        for lease in self.leases:  # after the runtimes stopped: a standby takes over at once
            await lease.release()
        self.leases.clear()
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.drain()
        if self.embedded is not None:
            await self.embedded.stop()
            log.info("embedded nats-server stopped")
        self.metrics.close()
        if self._engine is not None:
            self._engine.dispose()

    @property
    def running(self) -> set[str]:
        """The actor kinds this stage runs now (or stands by for), none of them given up."""
        return {rt.actor.name for rt in self.runtimes if not rt.stopped} | self._standing

    def build(self, name: str) -> Actor:
        """A new actor of a kind, wired to this stage's settings and store."""
        return entry(name).build(Wiring(self.settings, self.metrics, lambda: self.engine))

    async def start_actors(
        self, names: Sequence[str], standing_by: Callable[[str, str], None] | None = None,
        stop: asyncio.Event | None = None, wait: bool = False,
    ) -> list[ActorRuntime]:
        """Start one runtime per actor name.  An actor that is one per deployment (``takes_over``)
        runs once this process holds its lease.  While another process holds it, this one stands
        by (``standing_by(name, holder)`` is told) and takes over when that lease lapses: in the
        background (the other actors start now), or, with ``wait``, before the next actor starts
        (``stop`` set meanwhile, the actors started so far are returned)."""
        started: list[ActorRuntime] = []
        for name in names:
            # Built first, so that a standby is ready to go (models, sprites); in a thread, so that
            # the leases already held are renewed meanwhile.
            actor = await asyncio.to_thread(self.build, name)
            if actor.takes_over and self.settings.spread == "on":  # the kind's processes share the runs
                started.append(await self._start(actor, None, spread=True))
                continue
            if actor.takes_over and not wait and await self._held_elsewhere(name):
                self._standing.add(name)
                self._watches.append(asyncio.create_task(self._stand_by(actor, standing_by)))
                continue
            lease = None
            if actor.takes_over:
                lease = await self._lease(name, standing_by, stop)
                if lease is None:
                    return started
            started.append(await self._start(actor, lease))
            if name == "memory":  # what it recalls is the viewers read model: kept up with the store here
                projector = Projector(self.engine, retention_days=self.settings.viewer_retention_days)
                self._watches.append(asyncio.create_task(follow(projector, erase=partial(erase_messages, self.js))))
        return started

    async def _start(self, actor: Actor, lease: Lease | None, spread: bool = False) -> ActorRuntime:
        rt = ActorRuntime(actor, self.js, self.settings, self.metrics, self.runs, spread=spread)
        await rt.start()
        self.runtimes.append(rt)
        if lease is not None:
            self._watches.append(asyncio.create_task(_watch(lease, rt)))
        return rt

    async def _held_elsewhere(self, name: str) -> bool:
        kv = await lease_bucket(self.js, self.settings.lease_ttl_s, self.settings.stream_replicas)
        return await Lease(kv, name).current_holder() is not None

    async def _stand_by(self, actor: Actor, standing_by: Callable[[str, str], None] | None) -> None:
        lease = await self._lease(actor.name, standing_by, None)
        assert lease is not None
        await self._start(actor, lease)
        self._standing.discard(actor.name)

    async def lease(self, key: str) -> Lease:
        """A lease of this process's that nobody else asks for (a run's on-air key), held now."""
        ttl = self.settings.lease_ttl_s
        lease = Lease(await lease_bucket(self.js, ttl, self.settings.stream_replicas), key, ttl_s=ttl, renew_s=ttl / 3)
        await lease.acquire()
        self.leases.append(lease)  # let go with the stage, at the latest
        return lease

    async def _lease(self, name: str, standing_by: Callable[[str, str], None] | None,
                     stop: asyncio.Event | None) -> Lease | None:
        ttl = self.settings.lease_ttl_s
        kv = await lease_bucket(self.js, ttl, self.settings.stream_replicas)
        lease = Lease(kv, name, ttl_s=ttl, renew_s=ttl / 3)

        def told(holder: str) -> None:
            log.warning("%s: standing by (its lease is held by %s)", name, holder)
            if standing_by is not None:
                standing_by(name, holder)

        if not await lease.acquire(stop, on_wait=told):
            return None
        if lease.waited_s > 0.5:
            log.warning("%s: took the lease after %.1f s", name, lease.waited_s)
        self.leases.append(lease)
        return lease

    async def publish(self, events: Sequence[Event]) -> None:
        """Publish events and wait until JetStream stored them all."""
        await publish_events(self.js, events, at_ms=int(time.time() * 1000))
        for event in events:
            self.metrics.show(event)

    async def drain(self, names: Sequence[str], timeout_s: float = 60.0) -> bool:
        """Wait until these actor kinds have handled everything published so far."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while await self.pending(names) > 0:
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def pending(self, names: Sequence[str]) -> int:
        """Unhandled messages on the durable consumers of these actor kinds."""
        total = 0
        for name in names:
            for inp in actor_class(name).inputs:
                try:
                    info = await self.js.consumer_info(stream_name(inp.family), f"{name}_{inp.family}")
                except NotFoundError:
                    continue
                total += int(info.num_pending or 0) + int(info.num_ack_pending or 0)
        return total


async def _watch(lease: Lease, rt: ActorRuntime) -> None:
    """A lost lease (another process took it while this one stalled) fails and stops the runtime."""
    await lease.lost.wait()
    rt.fail(f"its lease {lease.key!r} was lost: another process runs it now")
    await rt.stop()  # never beside the process that took it over


# How long after run.started is published its show time begins: the actors' time to get ready
# (a renderer builds the run's sprites, ~0.1 s a show at 480p and more for art it has not loaded).
START_LEAD_MS = 500


def new_run_id() -> str:
    """A fresh run id (a subject token)."""
    return f"r{time.strftime('%Y%m%d%H%M%S')}{secrets.token_hex(2)}"


@dataclass(frozen=True, slots=True)
class ShowResult:
    """What a finished show left behind."""

    run: str
    mp4: Path | None
    started_at_ms: int
    duration_ms: int                 # of show time: shorter than planned when the run was stopped
    end_reason: str = "duration reached"


async def run_show(
    stage: Stage, show: Show, duration_s: float, names: Sequence[str] | None = None,
    run_id: str | None = None, drain_timeout_s: float = 60.0,
    on_started: Callable[[RunStarted], None] | None = None, stop: asyncio.Event | None = None,
) -> ShowResult:
    """Run one show for ``duration_s`` seconds of show time and wait until it is fully handled.

    ``stop`` set (a signal) ends the run early: ``run.ended`` at the show time reached, with the
    reason, and the show is drained as at its planned end (the video closed with what was shown).
    """
    settings = stage.settings
    run_id = run_id or new_run_id()
    sources = connectors(show.sources, settings)  # missing credentials: one line, before anything starts
    names = show_actors(settings) if names is None else names
    # A kind this stage runs already (for an earlier show of this process) serves this run too:
    # started again, it would stand by for itself, or run twice beside itself.
    await stage.start_actors([n for n in names if n not in stage.running])
    with log_context(run=run_id):  # this process's lines about the show say which run
        # Everything built so far (models, sprites, voices) lives for the whole show: keep it
        # out of the garbage collector's scans, whose pauses would land on the reply latency.
        # Collected only while no other show of this process is on air: a full collection of a
        # big heap takes a few hundred ms, which the shows on air would lose as frames.
        if not stage.on_air:
            gc.collect()
        gc.freeze()
        stage.on_air.add(run_id)
        started = RunStarted(
            id=f"{run_id}-start", run=run_id, show=show.to_dict(), seed=settings.seed, fps=settings.fps,
            resolution=settings.resolution, started_at_ms=int(time.time() * 1000) + START_LEAD_MS,
            config=run_config(settings), duration_ms=int(duration_s * 1000),
        )
        # On air while this process drives the show: a standby takes over only runs whose show lives.
        on_air = await stage.lease(on_air_key(run_id))
        await stage.publish([started])
        log.info("run %s started: %d roles, actors %s", run_id, len(show.roles), ", ".join(names))
        if on_started is not None:
            on_started(started)
        await stage.publish([RoleDeclared.of(run_id, r) for r in show.roles])
        start_s = started.started_at_ms / 1000
        async with bridged(stage.js, run_id, sources, stage.metrics):
            stopped = await _play_script(stage, show, run_id, start_s, duration_s, stop)
        duration_ms = int(duration_s * 1000)
        reason = "duration reached"
        if stopped:
            # At least one frame: a run stopped as it started still has a (one-frame) video.
            duration_ms = min(duration_ms, max(-(-1000 // settings.fps), int((time.time() - start_s) * 1000)))
            reason = f"stopped ({getattr(stop, 'reason', None) or 'asked'})"
            log.warning("run %s: %s at %.1f s of show time; ending it", run_id, reason, duration_ms / 1000)
        await stage.publish([RunEnded(id=f"{run_id}-end", run=run_id, t_ms=duration_ms, reason=reason, duration_ms=duration_ms)])
        await on_air.release()
        stage.on_air.discard(run_id)
        mp4 = await _drain(stage, run_id, drain_timeout_s, video="sink" in names)
    return ShowResult(run_id, mp4, started.started_at_ms, duration_ms, reason)


async def _play_script(stage: Stage, show: Show, run_id: str, start_s: float, duration_s: float,
                       stop: asyncio.Event | None) -> bool:
    """The show's danmaku script, each line at its time, until the show's end; True: stopped."""
    for i, line in enumerate(show.script):
        if line.at_s >= duration_s:
            break
        if await _wait_until(start_s + line.at_s, stop):
            return True
        await stage.publish([DanmakuReceived(
            id=f"{run_id}-script-{i}", run=run_id, user=line.user, text=line.text, to=line.to,
            kind=line.kind, t_ms=int(line.at_s * 1000), at_ms=int(time.time() * 1000), viewer=line.viewer,
            platform=line.viewer.partition(":")[0],
        )])
    return await _wait_until(start_s + duration_s, stop)


async def _wait_until(wall_s: float, stop: asyncio.Event | None) -> bool:
    """Sleep until a wall-clock time; True when ``stop`` was set first."""
    if stop is not None and stop.is_set():
        return True
    delay = wall_s - time.time()
    if delay <= 0:
        return False
    if stop is None:
        await asyncio.sleep(delay)
        return False
    try:
        await asyncio.wait_for(stop.wait(), delay)
    except TimeoutError:
        return False
    return True


class DrainWatch:
    """When a show's drain is over: done once nothing has been pending (and the video is closed)
    for ``quiet_s`` (runtimes publish their last observations up to a period after their last
    input); given up after ``timeout_s`` without progress, a new low of what is pending.  A sink
    behind on a loaded machine still drains, and its video is closed whole; a stuck actor is
    given up on."""

    def __init__(self, timeout_s: float, quiet_s: float, now: float) -> None:
        self.timeout_s, self.quiet_s = timeout_s, quiet_s
        self.low: int | None = None
        self.progress_at = now
        self.quiet_since: float | None = None

    def step(self, now: float, pending: int, closed: bool) -> bool | None:
        """True: drained; False: given up; None: wait on."""
        if self.low is None or pending < self.low:
            self.low, self.progress_at = pending, now
        if pending == 0 and closed:
            self.quiet_since = self.quiet_since if self.quiet_since is not None else now
            if now - self.quiet_since > self.quiet_s:
                return True
        else:
            self.quiet_since = None
        return None if now - self.progress_at < self.timeout_s else False


async def _drain(stage: Stage, run_id: str, timeout_s: float, video: bool = True) -> Path | None:
    """Wait until every actor kind has handled everything and (when the sink runs here) the
    video is closed, or until ``timeout_s`` pass without progress (``DrainWatch``)."""
    loop = asyncio.get_running_loop()
    path = Path(stage.settings.out_dir) / f"{run_id}.mp4"
    watch = DrainWatch(timeout_s, OBSERVE_PERIOD_S + 0.3, loop.time())
    while True:
        pending = await stage.pending(show_actors(stage.settings))
        done = watch.step(loop.time(), pending, path.exists() or not video)
        if done:
            return path
        if done is False:
            break
        await asyncio.sleep(0.1)
    log.warning("the show did not drain: %d inputs still pending, none handled for %.0f s", pending, timeout_s)
    return path if path.exists() else None
