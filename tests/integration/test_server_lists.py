"""A NATS URL may list several servers (a cluster's nodes), everywhere a URL is taken; a bad
one is one line, never a traceback; a publish that fails while a cluster fails over is tried
again, within its window."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from events.errors import BusError, ConfigError
from infra.bus import RetryWindow, connect, masked_url, nats_servers
from infra.natsserver import EmbeddedNats, free_port
from tests.test_cli import one_line_error, troupe


def test_a_list_of_servers_is_read_and_a_bad_one_named() -> None:
    assert nats_servers("nats://127.0.0.1:4222, nats://127.0.0.1:4223,127.0.0.1:4224") == [
        "nats://127.0.0.1:4222", "nats://127.0.0.1:4223", "nats://127.0.0.1:4224"]
    with pytest.raises(ConfigError, match=r"not a NATS URL: 'nats://127.0.0.1:58283nats:' \(its port"):
        nats_servers("nats://127.0.0.1:58283nats:")
    with pytest.raises(ConfigError, match="not a NATS URL: 'http://example.org'"):
        nats_servers("nats://a:1,http://example.org")
    assert masked_url("nats://u:secret@a:1,nats://b:2") == "nats://u:***@a:1,nats://b:2"


async def test_clients_connect_through_a_list_whose_first_server_is_down(nats_server: EmbeddedNats) -> None:
    dead = f"nats://127.0.0.1:{free_port()}"
    nc = await connect(f"{dead},{nats_server.url}", "lists")
    try:
        assert nc.is_connected and nc.connected_url is not None
        assert nc.connected_url.port == int(nats_server.url.rsplit(":", 1)[1])
    finally:
        await nc.close()
    with pytest.raises(BusError, match=r"cannot connect to NATS at nats://127\.0\.0\.1:\d+: .*; nats://127"):
        await connect(f"{dead},nats://127.0.0.1:{free_port()}", "lists")


def test_the_command_line_takes_a_list_and_refuses_a_bad_url_in_one_line(nats_server: EmbeddedNats,
                                                                          tmp_path: Path) -> None:
    dead = f"nats://127.0.0.1:{free_port()}"
    ok = troupe("--nats", f"{dead},{nats_server.url}", "provision")
    assert ok.returncode == 0 and "streams ready" in ok.stdout, ok.stderr
    bad = troupe("--state-dir", str(tmp_path), "--nats", "nats://127.0.0.1:58283,nats:", "up", "--duration", "2")
    assert bad.returncode == 2 and "not a NATS URL" in one_line_error(bad)
    env = troupe("provision", env={"TROUPE_NATS_URL": f"{dead},{nats_server.url}"})
    assert env.returncode == 0, env.stderr


async def test_a_publish_is_tried_again_only_for_passing_failures_and_within_its_window() -> None:
    from nats.js.errors import NoStreamResponseError

    passing, lasting = NoStreamResponseError(), ValueError("a stream refused it")
    window = RetryWindow(retry_s=0.5)
    tries = 0
    while await window.wait([passing]):  # 0.1, 0.2: a third wait would end past 0.5 s
        tries += 1
    assert tries == 2
    assert not await RetryWindow(retry_s=30).wait([passing, lasting])  # a lasting failure: never again
    stop = asyncio.Event()
    stop.set()
    assert not await RetryWindow(retry_s=30, stop=stop).wait([passing])  # stopping: never again
