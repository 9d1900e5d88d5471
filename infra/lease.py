"""Leases in a JetStream key-value bucket: which process runs a single-per-deployment actor.

A lease is one key (``director``, ``render``...) in the ``troupe_leases`` bucket, whose
entries expire ``ttl_s`` after they were last written.  The holder writes it again
every ``renew_s`` with the revision it last wrote (a compare-and-set): while it lives,
nobody else can create the key; when it dies, the key expires and the first standby
whose ``create`` succeeds holds it.  A holder that could not renew within the lease time
(stalled, or cut off) has lost it if another process took it meanwhile, and must stop at
once; when nobody has, it takes it again (a stalled process is not a dead one).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import socket
import time

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

log = logging.getLogger(__name__)
BUCKET = "troupe_leases"
TTL_S = 1.5      # a dead holder's lease is taken over this long after its last renewal
RENEW_S = 0.5    # how often a holder writes its lease again
POLL_S = 0.2     # how often a standby tries to create the key
RELEASE_S = 2.0  # the longest a release waits for NATS (the key expires by itself anyway)


ON_AIR = "onair"  # ``onair.<run>``: held by the process driving a show while it is on air


def on_air_key(run: str) -> str:
    return f"{ON_AIR}.{run}"


async def runs_on_air(js: JetStreamContext) -> set[str]:
    """The runs whose show process holds its on-air key now (one request: the bucket's subjects)."""
    return await keys_under(js, ON_AIR)


async def keys_under(js: JetStreamContext, prefix: str) -> set[str]:
    """The last tokens of the bucket's keys ``<prefix>.*`` (one request: the bucket's subjects; a
    key deleted a moment ago may still be listed until its marker expires)."""
    try:
        info = await js.stream_info(f"KV_{BUCKET}", subjects_filter=f"$KV.{BUCKET}.{prefix}.*")
    except NotFoundError:
        return set()
    subjects = (info.state.subjects or {}) if info.state is not None else {}
    return {subject.rsplit(".", 1)[1] for subject in subjects}


def holder_of(value: bytes | None) -> str:
    """Who wrote a lease's value (the holder's name, without the lease's own token); "" for none."""
    return (value or b"").decode(errors="replace").rsplit("#", 1)[0]


def holder_name() -> str:
    """Who holds a lease, as written in it: host and process (for people and logs)."""
    return f"{socket.gethostname()}:{os.getpid()}"


async def lease_bucket(js: JetStreamContext, ttl_s: float = TTL_S, replicas: int = 1) -> KeyValue:
    """The lease bucket, created when missing (one revision per key, entries expiring after
    ``ttl_s``); a bucket made with another lease time is given this one (the deployment's)."""
    stream = f"KV_{BUCKET}"
    try:
        info = await js.stream_info(stream)
    except NotFoundError:
        config = KeyValueConfig(bucket=BUCKET, history=1, ttl=ttl_s, storage=StorageType.FILE, replicas=replicas,
                                description="which process runs each single-per-deployment actor")
        with contextlib.suppress(nats.js.errors.BadRequestError):  # another process created it just now
            return await js.create_key_value(config)
        return await js.key_value(BUCKET)
    if info.config.max_age is not None and abs(info.config.max_age - ttl_s) > 1e-3:
        window = min(info.config.duplicate_window or ttl_s, ttl_s)  # no longer than entries live
        await js.update_stream(dataclasses.replace(info.config, max_age=ttl_s, duplicate_window=window))
        log.info("the lease bucket's lease time is now %.2f s", ttl_s)
    return await js.key_value(BUCKET)


class Lease:
    """One lease: ``acquire`` waits until this process holds it, then it is renewed in the
    background until ``release``; ``lost`` is set if a renewal could not be made in time."""

    def __init__(self, kv: KeyValue, key: str, holder: str | None = None, ttl_s: float = TTL_S,
                 renew_s: float = RENEW_S) -> None:
        self.kv = kv
        self.key = key
        self.holder = holder or holder_name()
        # Written with a token of this lease's own: two leases of one process (two stages) are
        # told apart, and a renewal whose reply was lost is known as this lease's by its value.
        self.value = f"{self.holder}#{secrets.token_hex(4)}".encode()
        self.ttl_s = ttl_s
        self.renew_s = renew_s
        self.lost = asyncio.Event()
        self.revision: int | None = None
        self.acquired_at: float | None = None   # time.time() when it was taken
        self.waited_s = 0.0                      # how long acquire waited for a previous holder to go
        self._renewing: asyncio.Task[None] | None = None
        # Set to stop renewing.  Cancelling alone is not enough: on Python 3.11 a cancel that
        # lands as a renewal's reply arrives is swallowed by the client's wait_for, and the
        # renewal would go on for ever (a release awaiting it with it).
        self._done = asyncio.Event()

    async def current_holder(self) -> str | None:
        """Who holds the lease now (None: nobody)."""
        entry = await self._entry()
        return None if entry is None else holder_of(entry.value) or None

    async def _entry(self) -> KeyValue.Entry | None:
        """The key's entry now (None: absent)."""
        try:
            return await self.kv.get(self.key)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return None

    async def acquire(self, stop: asyncio.Event | None = None, on_wait: object = None) -> bool:
        """Wait until this process holds the lease (True), or until ``stop`` is set (False).
        ``on_wait`` (a callable taking the holder's name) is told once when someone else holds it."""
        began = time.monotonic()
        told = False
        while stop is None or not stop.is_set():
            try:
                self.revision = await self.kv.create(self.key, self.value)
            except KeyWrongLastSequenceError:
                revision = await self._own_revision()  # not None: created here, its reply lost
                if revision is None:
                    if not told and callable(on_wait):
                        told = True
                        on_wait(await self.current_holder() or "another process")
                    await _sleep(POLL_S, stop)
                    continue
                self.revision = revision
            except nats.js.errors.KeyNotFoundError:
                # The key was there when the create was refused and expired before the client
                # looked again (nats-py's create checks for a tombstone): free now, tried at once.
                continue
            except (nats.errors.TimeoutError, nats.errors.ConnectionClosedError, nats.errors.NoRespondersError,
                    nats.js.errors.ServiceUnavailableError, nats.js.errors.NoStreamResponseError) as exc:
                log.warning("lease %s: %s; trying again", self.key, type(exc).__name__)
                await _sleep(POLL_S, stop)
                continue
            self.acquired_at = time.time()
            self.waited_s = time.monotonic() - began
            self._done.clear()
            self._renewing = asyncio.create_task(self._renew(), name=f"lease:{self.key}")
            return True
        return False

    async def try_acquire(self) -> bool:
        """Take the lease if nobody holds it (one try): True when this process holds it now."""
        try:
            self.revision = await self.kv.create(self.key, self.value)
        except KeyWrongLastSequenceError:
            revision = await self._own_revision()  # not None: created here, its reply lost
            if revision is None:
                return False
            self.revision = revision
        except nats.js.errors.KeyNotFoundError:
            return False  # it expired as the client looked: tried again next round
        self.acquired_at = time.time()
        self._done.clear()
        self._renewing = asyncio.create_task(self._renew(), name=f"lease:{self.key}")
        return True

    async def _renew(self) -> None:
        failing_since: float | None = None
        while True:
            await _sleep(self.renew_s, self._done)
            if self._done.is_set():
                return
            try:
                self.revision = await self._write_again()
            except _Lost:
                log.error("lease %s was taken over by %s", self.key, await _quiet(self.current_holder()))
                self.lost.set()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the bucket unreachable (a cluster electing a leader)
                # Nobody can take the lease while nobody can write the bucket: keep trying; once it
                # answers again, the write says whether the lease is still this process's.
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.warning("lease %s could not be renewed (%s); trying again", self.key, type(exc).__name__)
                continue
            if failing_since is not None:
                log.warning("lease %s renewed again after %.1f s", self.key, time.monotonic() - failing_since)
                failing_since = None

    async def _write_again(self) -> int:
        """Renew: write the lease over the revision this process wrote last.  Where that entry has
        expired (this process stalled past the lease time, or the bucket was away), take it again,
        unless another process has (``_Lost``)."""
        try:
            return await self.kv.update(self.key, self.value, last=self.revision)
        except KeyWrongLastSequenceError:
            pass
        # Either the last write went through but its reply was lost (the entry is this lease's,
        # at a newer revision), or the entry expired (created again here, unless another took it).
        if (revision := await self._own_revision()) is not None:
            return revision
        try:
            revision = await self.kv.create(self.key, self.value)
        except KeyWrongLastSequenceError:
            if (revision := await self._own_revision()) is not None:
                return revision
            raise _Lost from None
        log.warning("lease %s lapsed before it was renewed and was taken again", self.key)
        return revision

    async def _own_revision(self) -> int | None:
        """The revision of the key's entry when it is this lease's own (None: absent or another's)."""
        entry = await self._entry()
        return entry.revision if entry is not None and entry.value == self.value else None

    def abandon(self) -> None:
        """Stop renewing without a word, as a holder that died would (for tests and drills)."""
        self._stop_renewing()

    async def release(self) -> None:
        """Stop renewing and delete the key, so that a standby takes over at once."""
        renewing = self._stop_renewing()
        if renewing is not None:
            await asyncio.wait({renewing}, timeout=RELEASE_S)  # a renewal in flight answers, or is let go
        if self.revision is not None and not self.lost.is_set():
            # Bounded: with NATS away (a process stopping with it) the key expires by itself.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RELEASE_S):
                    await self._delete()
        self.revision = None

    async def _delete(self) -> None:
        # At the revision of the entry as it is: a renewal cut off by the cancel may still be
        # written, without this lease hearing its revision (then asked again).
        for _ in range(3):
            with contextlib.suppress(Exception):
                revision = await self._own_revision()
                if revision is not None:
                    await self.kv.delete(self.key, last=revision)
                return

    def _stop_renewing(self) -> asyncio.Task[None] | None:
        self._done.set()
        renewing, self._renewing = self._renewing, None
        if renewing is not None:
            renewing.cancel()
        return renewing


class _Lost(Exception):
    """Another process holds the lease."""


async def _sleep(seconds: float, stop: asyncio.Event | None) -> None:
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _quiet(coro: object) -> object:
    try:
        return await coro  # type: ignore[misc]
    except Exception:  # noqa: BLE001 - only for a log line
        return "another process"
