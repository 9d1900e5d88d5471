"""The bridges' shared fixtures: the loopback TLS certificate and a real IRC server (ngircd)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench.peers.twitch import LoopbackTls, loopback_tls
from tests.bridges.ircd import Ngircd


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> LoopbackTls:
    return loopback_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def ngircd(tmp_path: Path, tls: LoopbackTls) -> AsyncIterator[Ngircd]:
    server = Ngircd(tmp_path, tls)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


