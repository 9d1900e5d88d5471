"""Leases in a JetStream KV bucket on a real nats-server: one holder at a time, a standby
taking over when the holder dies or lets go, a holder told when it lost its lease."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from nats.js.kv import KeyValue

from infra.bus import connect
from infra.lease import Lease, lease_bucket
from infra.natsserver import EmbeddedNats
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def kv(nats_server: EmbeddedNats) -> AsyncIterator[KeyValue]:
    """The lease bucket (a 1 s lease time) on a connection of the test's own."""
    nc = await connect(nats_server.url, "lease-test")
    try:
        yield await lease_bucket(nc.jetstream(), ttl_s=1.0)
    finally:
        await nc.close()


async def test_one_holder_at_a_time_and_a_standby_takes_over_a_dead_one(kv: KeyValue) -> None:
    first = Lease(kv, "t-dead", holder="a", ttl_s=1.0, renew_s=0.3)
    second = Lease(kv, "t-dead", holder="b", ttl_s=1.0, renew_s=0.3)
    assert await first.acquire()
    told: list[str] = []
    waiting = asyncio.create_task(second.acquire(on_wait=told.append))
    await wait_for(lambda: told == ["a"], timeout_s=5, what="the standby told who holds it")
    await asyncio.sleep(0)
    assert not waiting.done()  # renewed: the lease outlives its TTL while its holder lives
    await wait_for(lambda: first.acquired_at is not None and time.time() - first.acquired_at > 2.0,
                   timeout_s=5, what="two lease times")
    assert not waiting.done() and await second.current_holder() == "a"
    first.abandon()  # the holder dies: no renewal, no release
    died = time.monotonic()
    await asyncio.wait_for(waiting, 10)
    took = time.monotonic() - died
    assert took < 1.0 + 2.0, took  # the TTL, a poll and the server's expiry timer
    assert await second.current_holder() == "b"
    await second.release()
    assert await second.current_holder() is None


async def test_a_released_lease_is_taken_at_once_and_a_holder_learns_it_lost_its_lease(kv: KeyValue) -> None:
    first = Lease(kv, "t-release", holder="a", ttl_s=1.0, renew_s=0.3)
    second = Lease(kv, "t-release", holder="b", ttl_s=1.0, renew_s=0.3)
    assert await first.acquire()
    waiting = asyncio.create_task(second.acquire())
    await first.release()
    began = time.monotonic()
    await asyncio.wait_for(waiting, 5)
    assert time.monotonic() - began < 1.0
    # Someone else writes the key (a partition healed the wrong way): the holder learns it.
    await kv.put("t-release", b"c")
    await asyncio.wait_for(second.lost.wait(), 5)
    stop = asyncio.Event()
    stop.set()
    assert not await Lease(kv, "t-release", holder="d").acquire(stop)  # stopped while standing by


async def test_a_lease_knows_its_own_entry_and_two_of_one_process_are_told_apart(kv: KeyValue) -> None:
    first = Lease(kv, "t-own", ttl_s=1.0, renew_s=0.3)
    assert await first.acquire()
    # A renewal that went through but whose reply was lost: the key is at a revision the
    # holder never heard of, with its own value.  It goes on holding it.
    await kv.put("t-own", first.value)
    renewed = (await kv.get("t-own")).revision
    assert renewed is not None
    await wait_for(lambda: first.revision is not None and first.revision > renewed, 5, "a renewal after it")
    assert not first.lost.is_set()
    # A second lease of the same process (another stage) is another holder: it stands by.
    second = Lease(kv, "t-own", ttl_s=1.0, renew_s=0.3)
    assert second.holder == first.holder
    stop = asyncio.Event()
    told: list[str] = []
    waiting = asyncio.create_task(second.acquire(stop, on_wait=told.append))
    await wait_for(lambda: told == [first.holder], 5, "the second told who holds it")
    assert not waiting.done()
    stop.set()
    assert not await waiting
    await first.release()


async def test_a_release_never_hangs_on_a_renewal_in_flight(kv: KeyValue) -> None:
    # A lease renewed as often as it can be, released at every phase of a renewal: a cancel
    # landing as a renewal's reply arrives must not leave the renewal (and the release) going on.
    for i in range(150):
        lease = Lease(kv, f"t-inflight-{i}", ttl_s=1.0, renew_s=0.0005)
        assert await lease.acquire()
        await asyncio.sleep(0.002 + (i % 7) * 0.0007)
        await asyncio.wait_for(lease.release(), 10)
        assert await lease.current_holder() is None
