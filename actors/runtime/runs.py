"""Runs as a runtime sees them: each run's start and end (looked up and cached), and how long an
actor keeps a run's state (opened by its first input, released after it ended or went idle)."""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError

from actors.base import Context
from events import codec
from events.base import Event
from events.errors import DecodeError
from events.run import RunEnded, RunStarted
from events.subjects import is_token, stream_name

log = logging.getLogger(__name__)
Clock = Callable[[], float]
# A message published this long before a lookup that found no run.started / run.ended is
# covered by that lookup: room for the NATS server's clock against this process's clock.
CLOCK_MARGIN_US = 1_000_000
LOOKUP_SCAN = 64  # messages on a lifecycle subject looked through for a readable one
MAX_RUNS = 10_000  # run starts cached at most (the ends and misses have their own bound)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


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
        self._keep(run)
        self._missing.pop(run.run, None)

    def _keep(self, run: RunStarted) -> None:
        """Cache a start; the oldest go first past ``MAX_RUNS`` (a recorder releases no run, and
        a forgotten start is only looked up again)."""
        self._runs.pop(run.run, None)
        self._runs[run.run] = run
        while len(self._runs) > MAX_RUNS:
            del self._runs[next(iter(self._runs))]

    def forget(self, run: str) -> None:
        """Drop a released run's start (looked up again if it is ever asked for); its end is kept,
        bounded, to answer late inputs."""
        self._runs.pop(run, None)

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
        found = await self._lookup(run, "run.started", RunStarted)
        if found is None:
            self._missed(self._missing, run, sent_us)
            return None
        event = found[1]
        assert isinstance(event, RunStarted)
        self._keep(event)
        return event

    async def _lookup(self, run: str, type_: str, cls: type[Event]) -> tuple[RawStreamMsg, Event] | None:
        """The run's lifecycle event of a type from the run stream: the last one on its subject,
        or, when that is not one (a malformed or forged message published there), the first
        that is, looking forward from the stream's start; None when there is none."""
        subject = f"troupe.{run}.{type_}"
        stream = stream_name("run")
        try:
            raw = await self._js.get_last_msg(stream, subject)
        except NotFoundError:
            return None
        event = self._valid(raw, run, cls)
        seq = 1
        for _ in range(LOOKUP_SCAN):
            if event is not None:
                return raw, event
            try:
                raw = await self._js.get_msg(stream, seq=seq, subject=subject, next=True)
            except NotFoundError:
                return None
            event = self._valid(raw, run, cls)
            seq = (raw.seq or seq) + 1
        log.warning("no readable %s of %s in the first %d messages on its subject", type_, run, LOOKUP_SCAN)
        return None

    @staticmethod
    def _valid(raw: RawStreamMsg, run: str, cls: type[Event]) -> Event | None:
        try:
            event = codec.decode(raw.data or b"")
        except DecodeError as exc:
            log.warning("a message on %s cannot be read (skipped): %s", raw.subject, exc)
            return None
        return event if isinstance(event, cls) and event.run == run else None

    async def ended_at(self, run: str, published_us: int | None = None, precise: bool = False) -> int | None:
        """The stream time (us) of the run's ``run.ended``, or None while it has not ended."""
        ended = self._ends.get(run)
        if ended is not None or not is_token(run):
            return ended
        if self._answers(self._running.get(run), published_us, precise):
            return None
        sent_us = int(self._wall() * 1_000_000)
        found = await self._lookup(run, "run.ended", RunEnded)
        if found is None:
            self._missed(self._running, run, sent_us)
            return None
        raw = found[0]
        if raw.time is None:  # every stored message has a time; be safe: treat it as just now
            ended = sent_us
        else:
            ended = (raw.time - _EPOCH) // datetime.timedelta(microseconds=1)
        self.remember_end(run, ended)
        return ended


@dataclass(slots=True)
class _Held:
    last_s: float                  # when an input of the run was last handled (lifecycle clock)
    ended_s: float | None = None   # when the runtime learnt that the run ended


class RunLifecycle:
    """Which runs an actor holds state for, and when to release each.

    A run is opened by its first input and released ``grace_s`` after the runtime
    learns that it ended (late inputs and the actor's own last work still find its
    state), or once it has been idle for ``idle_s`` (a run that never ended).  The
    clock is a parameter: the rule is tested without NATS or waiting.
    """

    def __init__(self, grace_s: float, idle_s: float, clock: Clock = time.monotonic) -> None:
        self.grace_s = grace_s
        self.idle_s = idle_s
        self._clock = clock
        self._held: dict[str, _Held] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, run: str) -> bool:
        return run in self._held

    def touch(self, run: str) -> None:
        """An input of the run was handled (opens the run the first time)."""
        held = self._held.get(run)
        if held is None:
            self._held[run] = _Held(self._clock())
        else:
            held.last_s = self._clock()

    def ended(self, run: str) -> None:
        held = self._held.get(run)
        if held is not None and held.ended_s is None:
            held.ended_s = self._clock()

    def open_runs(self) -> list[str]:
        """Held runs not yet known to have ended."""
        return [run for run, held in self._held.items() if held.ended_s is None]

    def due(self, busy: Callable[[str], bool] = lambda run: False) -> list[str]:
        """Runs to release now: ended ``grace_s`` ago, or idle ``idle_s``; never one still ``busy``
        (with queued work or a tick to come), unless it has been idle for ``idle_s``."""
        now = self._clock()
        out = []
        for run, held in self._held.items():
            idle = now - held.last_s >= self.idle_s
            ended = held.ended_s is not None and now - held.ended_s >= self.grace_s
            if idle or (ended and not busy(run)):
                out.append(run)
        return out

    def release(self, run: str) -> None:
        self._held.pop(run, None)


class RunView:
    """The run lookups one runtime makes, which never raise: a failed lookup is logged and the
    run taken as unknown (``context``) or as still running (``late``, ``joins``)."""

    def __init__(self, directory: RunDirectory) -> None:
        self.directory = directory

    async def context(self, run_id: str, now_s: float) -> Context:
        """The handler context for a run at wall time ``now_s``."""
        run = self.directory.known(run_id)  # the common case, without a lookup
        if run is None:
            try:
                run = await self.directory.get(run_id)
            except Exception as exc:  # noqa: BLE001 - a broken run record is treated as unknown
                log.warning("run lookup %s failed: %s", run_id, exc)
        now = int(now_s * 1000) - run.started_at_ms if run is not None else 0
        return Context(run, now)

    async def late(self, run: str, published_us: int, precise: bool = False) -> bool:
        """Whether a message published at ``published_us`` came after its run's run.ended."""
        try:
            ended_us = await self.directory.ended_at(run, published_us, precise)
        except Exception as exc:  # noqa: BLE001 - a failed lookup: the run is taken as still running
            log.warning("run.ended lookup %s failed: %s", run, exc)
            return False
        return ended_us is not None and published_us > ended_us

    async def joins(self, run: RunStarted, since_ms: int) -> bool:
        """Whether an actor (started at ``since_ms``) is given a run's start and so opens the run:
        never for a run that has already ended, nor for a playback that began before the actor did
        (a new show's sink must not write an earlier ``troupe replay`` left in the stream)."""
        if run.replay_of is not None and run.started_at_ms < since_ms:
            return False
        try:
            return await self.directory.ended_at(run.run) is None
        except Exception as exc:  # noqa: BLE001 - a failed lookup: the run is taken as still running
            log.warning("run.ended lookup %s failed: %s", run.run, exc)
            return True
