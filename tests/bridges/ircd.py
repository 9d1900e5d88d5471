"""A real IRC server for the Twitch connector's tests: Debian's ngircd in the foreground on free
loopback ports (one plain, one TLS), and a minimal plain IRC client that chats into a channel."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from bench.peers.twitch import LoopbackTls
from tests.conftest import wait_for

NGIRCD = shutil.which("ngircd") or shutil.which("ngircd", path="/usr/sbin:/sbin") or ""   # sbin: off a user's PATH


def _ngircd_problem() -> str | None:
    if not NGIRCD:
        return "Debian's ngircd is not installed (apt-get install ngircd)"
    version = subprocess.run([NGIRCD, "--version"], capture_output=True, text=True, check=False).stdout
    return None if "+SSL" in version else f"this ngircd has no TLS (+SSL): {version.splitlines()[:1]}"


NGIRCD_PROBLEM = _ngircd_problem()
needs_ngircd = pytest.mark.skipif(NGIRCD_PROBLEM is not None, reason=str(NGIRCD_PROBLEM))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Ngircd:
    """ngircd in the foreground on free loopback ports: one plain, one TLS."""

    def __init__(self, folder: Path, tls: LoopbackTls) -> None:
        self.plain_port, self.tls_port = _free_port(), _free_port()
        self.log = folder / "ngircd.log"
        self.conf = folder / "ngircd.conf"
        self.conf.write_text(f"""[Global]
    Name = irc.troupe.test
    Info = Troupe test server
    AdminInfo1 = Troupe tests
    AdminInfo2 = loopback
    AdminEMail = tests@troupe.invalid
    Listen = 127.0.0.1
    Ports = {self.plain_port}
    MotdPhrase = "troupe test"
    PidFile = {folder / 'ngircd.pid'}
[Limits]
    MaxNickLength = 30
    MaxConnectionsIP = 0
    MaxPenaltyTime = 0
[Options]
    DNS = no
    Ident = no
    PAM = no
[SSL]
    CertFile = {tls.cert_path}
    KeyFile = {tls.key_path}
    Ports = {self.tls_port}
[Channel]
    Name = #locked
    Modes = +i
""")
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with self.log.open("ab") as log:
            self._process = await asyncio.create_subprocess_exec(
                NGIRCD, "-n", "-f", str(self.conf), stdout=log, stderr=subprocess.STDOUT)
        await wait_for(self._listening, timeout_s=20, what="ngircd listening")

    async def _listening(self) -> bool:
        if self._process is None or self._process.returncode is not None:
            raise AssertionError(f"ngircd exited: {self.log.read_text(errors='replace')[-2000:]}")
        try:
            for port in (self.plain_port, self.tls_port):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                await writer.wait_closed()
        except OSError:
            return False
        return True

    async def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


class IrcPoster:
    """A minimal plain IRC client that joins a channel and posts to it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def join(cls, port: int, nick: str, channel: str) -> IrcPoster:
        poster = cls(*await asyncio.open_connection("127.0.0.1", port))
        await poster.send(f"NICK {nick}", f"USER {nick} 0 * :{nick}")
        await poster.until(" 001 ")
        await poster.send(f"JOIN {channel}")
        await poster.until(" 366 ")
        return poster

    async def send(self, *lines: str) -> None:
        self.writer.write("".join(f"{line}\r\n" for line in lines).encode())
        await self.writer.drain()

    async def until(self, marker: str) -> str:
        """Read (answering PINGs) up to the line holding ``marker``; fail on a refusal or EOF."""
        while True:
            line = (await asyncio.wait_for(self.reader.readuntil(b"\n"), 10)).decode().rstrip("\r\n")
            if line.startswith("PING"):
                await self.send("PONG" + line[4:])
            elif marker in line:
                return line
            elif re.match(r"^:\S+ [45]\d\d ", line):
                raise AssertionError(f"ngircd refused the poster: {line}")

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):                      # the server may have gone first
            await self.writer.wait_closed()


