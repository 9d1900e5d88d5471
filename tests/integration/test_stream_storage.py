"""The streams' storage: JetStream reserves each stream's byte limit up front, so a server whose
file store is smaller than the streams' limits refuses them, whatever the disk really holds."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from events.errors import BusError
from events.subjects import file_store_bytes, stream_specs
from infra.bus import connect, provision_streams
from infra.natsserver import EmbeddedNats, free_port, server_binary


@contextlib.contextmanager
def small_disk(path: Path, size: str = "300m") -> Iterator[Path]:
    """A filesystem of ``size`` (a tmpfs): a machine with little disk free."""
    path.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_the_file_store_asked_for_covers_every_streams_limit() -> None:
    reserved = sum(spec.max_bytes for spec in stream_specs())
    assert reserved < file_store_bytes() <= reserved + 4 * 2**30


async def test_the_embedded_server_takes_every_stream_with_300_mb_of_disk_free(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        async with EmbeddedNats(disk / "nats") as server:
            nc = await connect(server.url, "tests")
            try:
                js = nc.jetstream()
                made = await provision_streams(js)
                assert sorted(made) == sorted(spec.name for spec in stream_specs())
                await js.publish("troupe.r1.danmaku.received", b"{}")  # and it stores messages
                assert (await js.stream_info("TROUPE_DANMAKU")).state.messages == 1
            finally:
                await nc.close()


async def test_a_server_with_too_small_a_file_store_is_one_clear_error(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "nats.conf"
    config.write_text(f'listen: "127.0.0.1:{port}"\njetstream {{ store_dir: "{tmp_path / "js"}", max_file_store: 1GB }}\n')
    server = await asyncio.create_subprocess_exec(str(server_binary()), "-c", str(config),
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        nc = None
        for _ in range(200):  # until it listens (at most 10 s)
            try:
                nc = await connect(f"nats://127.0.0.1:{port}", "tests")
                break
            except BusError:
                await asyncio.sleep(0.05)
        assert nc is not None, "nats-server did not start"
        try:
            with pytest.raises(BusError) as caught:
                await provision_streams(nc.jetstream())
        finally:
            await nc.close()
    finally:
        server.terminate()
        await server.wait()
    message = str(caught.value)
    assert "\n" not in message
    assert f"max_file_store: {file_store_bytes()}" in message and "GiB for stream TROUPE_" in message
