"""Runs owned and spread: which process of a stateful kind holds each run's state.

With ``TROUPE_SPREAD=on``, several processes of a kind (director, lipsync, render, sink) share
the runs on air, and each run's state lives in exactly one of them at a time: the holder of the
run's key ``own.<kind>.<run>`` in the lease bucket (``infra.lease``), renewed by compare-and-set
like any lease, and read from consumers of that run alone (``<kind>_<family>_<run>``), so that
its inputs reach its holder in stream order and no other process.

- Each process announces itself (``member.<kind>.<name>``, written every renewal with how many
  runs it holds).
- A run on air (its show holds ``onair.<run>``) that nobody holds is claimed by the least loaded
  member first: each member waits its rank (by runs held, then name) times the renewal period
  before it tries, so the least loaded takes it unless it is gone.  A process that joins holds
  nothing: it takes the next new runs.
- A holder that dies stops renewing: its keys expire after the lease time, and its runs are on
  air with nobody holding them: claimed as above, each run's state rebuilt from the streams
  first (``actors.runtime.takeover``).
- A process stopped (SIGTERM) hands its runs over: it stops taking their inputs, says so, and
  deletes their keys, and the others claim them at once.

Every change is a ``run.owned`` event with its reason; ``troupe inspect`` lists them.

Why leases in a bucket and a consumer per run, rather than subject-mapped partitions or
consumer priority groups: a partition holds whatever runs hash to it, so 6 runs on 2 processes
land 5 and 1 (or 6 and 0) about one time in five, and moving one run means moving all of its
partition's; a priority group moves a consumer's whole traffic to one client at a time.  A key
per run places each new run on the least loaded process, moves one run at a time, and is the
lease mechanism the single-holder mode already uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import nats.errors
import orjson
from nats.js import JetStreamContext
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from nats.js.kv import KeyValue

from infra.lease import Lease, holder_of, keys_under, runs_on_air

log = logging.getLogger(__name__)
OWN, MEMBER = "own", "member"
Claim = Callable[[str, str, str], Awaitable[bool]]   # (run, previous holder, reason) -> taken
Drop = Callable[[str, str], Awaitable[None]]         # (run, reason)
# A member of rank k waits k times this many renewal periods before it claims a run nobody holds:
# long enough for the others to have heard of its last claim (each announces every round).
PATIENCE_ROUNDS = 2


def member_name() -> str:
    """This process's name among the members: host, process and a token (a key-safe string)."""
    raw = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"
    return re.sub(r"[^A-Za-z0-9_-]", "-", raw)


def own_key(kind: str, run: str) -> str:
    return f"{OWN}.{kind}.{run}"


def member_key(kind: str, name: str) -> str:
    return f"{MEMBER}.{kind}.{name}"


async def key_value(kv: KeyValue, key: str) -> bytes | None:
    """A key's value now (None: absent, deleted or expired)."""
    try:
        entry = await kv.get(key)
    except (KeyNotFoundError, KeyDeletedError):
        return None
    return entry.value


@dataclass(slots=True)
class RunOwners:
    """One process's share of a kind's runs: it claims, renews and lets go of run keys; the
    runtime is told (``claim``: take the run's state and inputs; ``drop``: stop)."""

    js: JetStreamContext
    kv: KeyValue
    kind: str
    claim: Claim
    drop: Drop
    ttl_s: float
    renew_s: float
    name: str = field(default_factory=member_name)
    leases: dict[str, Lease] = field(default_factory=dict)      # run -> its key, held
    unheld_since: dict[str, float] = field(default_factory=dict)  # run on air nobody holds -> seen since
    last_holder: dict[str, str] = field(default_factory=dict)   # run -> the holder last seen
    stopping: bool = False
    _lost: set[str] = field(default_factory=set)

    @property
    def held(self) -> list[str]:
        return sorted(self.leases)

    async def round(self) -> None:
        """One round: announce this member, let go of lost keys, claim runs nobody holds."""
        await self._announce()
        for run in [r for r, lease in self.leases.items() if lease.lost.is_set()]:
            self.leases.pop(run)
            await self.drop(run, "lost: another process took its key while this one stalled")
        if self.stopping:
            return
        on_air = await runs_on_air(self.js)
        for run in list(self.unheld_since):
            if run not in on_air:
                self.unheld_since.pop(run)
        waiting = []
        for run in sorted(on_air - set(self.leases)):
            holder = await key_value(self.kv, own_key(self.kind, run))
            if holder is not None:
                self.last_holder[run] = holder_of(holder)
                self.unheld_since.pop(run, None)
                continue
            waiting.append(run)
            self.unheld_since.setdefault(run, time.monotonic())
        if not waiting:
            return
        # The oldest first; at most this member's share of them in one round, each only while it
        # is the least loaded (or the ones before it have had their turn and let it pass).
        waiting.sort(key=lambda r: (self.unheld_since[r], r))
        rank, members = await self._rank()
        share = -(-len(waiting) // members)
        due = [run for run in waiting[:share]
               if time.monotonic() - self.unheld_since[run] >= rank * PATIENCE_ROUNDS * self.renew_s]
        if due:  # side by side: a dead holder's runs come back together
            await asyncio.gather(*(self._claim(run) for run in due))
            await self._announce()

    async def _announce(self) -> None:
        await self.kv.put(member_key(self.kind, self.name), orjson.dumps({"runs": len(self.leases)}))

    async def _rank(self) -> tuple[int, int]:
        """This member's place among the kind's members, least loaded first (then by name), and
        how many members there are."""
        loads = []
        for name in await keys_under(self.js, f"{MEMBER}.{self.kind}"):
            if name == self.name:
                loads.append((len(self.leases), name))
                continue
            value = await key_value(self.kv, member_key(self.kind, name))
            if value is None:
                continue
            try:
                loads.append((int(orjson.loads(value).get("runs", 0)), name))
            except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
                continue
        if (len(self.leases), self.name) not in loads:
            loads.append((len(self.leases), self.name))
        return sorted(loads).index((len(self.leases), self.name)), len(loads)

    async def _claim(self, run: str) -> None:
        lease = Lease(self.kv, own_key(self.kind, run), holder=self.name, ttl_s=self.ttl_s, renew_s=self.renew_s)
        if not await lease.try_acquire():
            return
        previous = self.last_holder.pop(run, "")
        self.unheld_since.pop(run, None)
        self.leases[run] = lease
        reason = (f"taken over: {previous} stopped renewing its key" if previous else
                  f"placed on the least loaded {self.kind} ({len(self.leases)} runs with it)")
        try:
            taken = await self.claim(run, previous, reason)
        except Exception:
            log.exception("%s: taking run %s failed; letting it go", self.kind, run)
            taken = False
        if not taken:
            self.leases.pop(run, None)
            await lease.release()

    async def let_go(self, run: str) -> None:
        """Delete a run's key (its state is gone from here): nobody holds it now."""
        lease = self.leases.pop(run, None)
        if lease is not None:
            await lease.release()

    async def close(self) -> None:
        """Stop announcing; what is still held is let go (the keys expire by themselves anyway)."""
        for run in list(self.leases):
            await self.let_go(run)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await self.kv.delete(member_key(self.kind, self.name))


async def run_rounds(owners: RunOwners, stop: asyncio.Event) -> None:
    """Rounds every renewal period until ``stop``; a failed round (NATS away) is tried again."""
    failing = False
    while not stop.is_set():
        try:
            await owners.round()
            failing = False
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            if not failing:
                log.warning("%s: a round of run ownership failed: %s; trying again", owners.kind, exc)
            failing = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), owners.renew_s)
