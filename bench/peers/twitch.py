"""A loopback Twitch IRC server (``TwitchPeer``) for the connector's tests and the bridge benchmark.

It does what a Twitch chat client meets: CAP ACK, PASS/NICK with the welcome numerics (or
``Login authentication failed`` for a refused token, then it hangs up), JOIN confirmed as Twitch
confirms it (JOIN, 353, 366, USERSTATE, ROOMSTATE), PING/PONG.  A test replays recorded lines to
every joined client (``send``; ``send_many`` writes them in batches, for throughput), asks for a
reconnect, drops every connection, stops and starts again on the same port, and reads back what
the clients sent (``received``).  ``loopback_tls`` makes a self-signed certificate for 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import shutil
import ssl
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

SERVER = "tmi.twitch.tv"


@dataclass(frozen=True)
class LoopbackTls:
    """A self-signed certificate for 127.0.0.1 and localhost, its files, and contexts for both ends."""

    cert_path: Path
    key_path: Path

    def server_context(self) -> ssl.SSLContext:
        """What the peer (or ngircd) serves."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_path, self.key_path)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts only this certificate (and checks the host name)."""
        return ssl.create_default_context(cafile=str(self.cert_path))


def loopback_tls(folder: Path) -> LoopbackTls:
    """A fresh self-signed certificate in ``folder``: made with ``cryptography`` where it is
    installed, else with the ``openssl`` command."""
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    try:
        cert_pem, key_pem = _made_with_cryptography()
        cert_path.write_bytes(cert_pem)
        key_path.write_bytes(key_pem)
    except ImportError:
        openssl = shutil.which("openssl")
        if openssl is None:
            raise RuntimeError("neither the cryptography package nor openssl is installed") from None
        subprocess.run(
            [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(key_path), "-out", str(cert_path), "-days", "2", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
            check=True, capture_output=True)
    # ngircd drops root for "nobody" after reading them; readable keeps a restart simple.
    key_path.chmod(0o644)
    return LoopbackTls(cert_path, key_path)


def _made_with_cryptography() -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@dataclass(eq=False)
class _Client:
    writer: asyncio.StreamWriter
    nick: str = ""
    token: str | None = None
    joined: set[str] = field(default_factory=set)


class TwitchPeer:
    """An IRC server on 127.0.0.1 that answers as Twitch's chat server does."""

    def __init__(
        self, *, port: int = 0, tls: ssl.SSLContext | None = None,
        bad_tokens: Iterable[str] = (), moderators: Iterable[str] = (),
        suspended: Iterable[str] = (), silent: Iterable[str] = (),
    ) -> None:
        self.host = "127.0.0.1"
        self.port = port
        self.answer_pings = True                  # False: a server gone quiet
        self.received: list[str] = []             # every line any client sent, in order
        self._tls = tls
        self._bad_tokens = frozenset(bad_tokens)  # PASS oauth:<one of these> is refused
        self._moderators = frozenset(moderators)  # nicks whose USERSTATE carries moderator/1
        self._suspended = frozenset(suspended)    # "#channel"s answered with msg_channel_suspended
        self._silent = frozenset(silent)          # "#channel"s whose JOIN is ignored (as Twitch does)
        self._server: asyncio.Server | None = None
        self._clients: set[_Client] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> TwitchPeer:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def joined(self) -> int:
        """How many connections have joined a channel."""
        return sum(1 for client in self._clients if client.joined)

    async def start(self) -> None:
        """Listen (again, on the same port once it has one)."""
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, ssl=self._tls, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and drop every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        self.drop()
        await server.wait_closed()
        if self._handlers:                        # each connection's handler, done closing
            await asyncio.wait(self._handlers, timeout=5)

    def drop(self) -> None:
        """Cut every connection at once (no QUIT, no TLS close)."""
        for client in list(self._clients):
            client.writer.transport.abort()
        self._clients.clear()

    async def send(self, *lines: str) -> None:
        """Send recorded lines to every client that joined a channel."""
        await self.send_many(lines)

    async def send_many(self, lines: Iterable[str], batch: int = 2000) -> int:
        """Send ``lines`` to every joined client, ``batch`` lines to a write; how many were sent."""
        sent, chunk = 0, []
        for line in lines:
            chunk.append(line)
            if len(chunk) >= batch:
                await self._broadcast(chunk)
                sent, chunk = sent + len(chunk), []
        if chunk:
            await self._broadcast(chunk)
        return sent + len(chunk)

    async def ping(self, token: str = SERVER) -> None:
        """Send ``PING :<token>`` as Twitch does every few minutes."""
        await self.send(f"PING :{token}")

    async def reconnect(self) -> None:
        """Ask every client to reconnect (Twitch's maintenance notice)."""
        await self.send(f":{SERVER} RECONNECT")

    async def _broadcast(self, lines: list[str]) -> None:
        data = "".join(f"{line}\r\n" for line in lines).encode()
        targets = [client for client in self._clients if client.joined]
        for client in targets:
            client.writer.write(data)
        for client in targets:
            with contextlib.suppress(ConnectionError):   # a client that went away meanwhile
                await client.writer.drain()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = _Client(writer)
        self._clients.add(client)
        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
        try:
            # A client that goes away (EOF, reset, an endless line) leaves nothing to answer.
            with contextlib.suppress(asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
                while True:
                    raw = await reader.readuntil(b"\n")
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    self.received.append(line)
                    if not self._answer(client, line):
                        await writer.drain()
                        break
        finally:
            client.joined.clear()                 # sent nothing more while it closes
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            self._clients.discard(client)         # drop() can still abort a close that hangs
            if handler is not None:
                self._handlers.discard(handler)

    def _answer(self, client: _Client, line: str) -> bool:
        """Answer one client line; False when the server hangs up after it."""
        command, _, rest = line.partition(" ")
        command, arg = command.upper(), rest.removeprefix(":")
        reply = client.writer.write
        if command == "CAP" and rest.startswith("REQ"):
            reply(f":{SERVER} CAP * ACK :{rest.partition(':')[2]}\r\n".encode())
        elif command == "PASS":
            client.token = arg
        elif command == "NICK":
            return self._login(client, arg.strip().lower())
        elif command == "JOIN":
            for channel in arg.lower().split(","):
                self._join(client, channel)
        elif command == "PING" and self.answer_pings:
            reply(f":{SERVER} PONG {SERVER} :{arg}\r\n".encode())
        elif command == "QUIT":
            return False
        elif command not in ("PING", "PONG", "PRIVMSG", "USER", "CAP", "PART"):
            reply(f":{SERVER} 421 {client.nick or '*'} {command} :Unknown command\r\n".encode())
        return True

    def _login(self, client: _Client, nick: str) -> bool:
        write = client.writer.write
        token = client.token
        if (token is None and not nick.startswith("justinfan")) or (token and not token.startswith("oauth:")):
            write(f":{SERVER} NOTICE * :Improperly formatted auth\r\n".encode())
            return False
        if token is not None and token.removeprefix("oauth:") in self._bad_tokens:
            write(f":{SERVER} NOTICE * :Login authentication failed\r\n".encode())
            return False
        client.nick = nick
        welcome = [(1, "Welcome, GLHF!"), (2, f"Your host is {SERVER}"), (3, "This server is rather new"),
                   (4, "-"), (375, "-"), (372, "You are in a maze of twisty passages, all alike."), (376, ">")]
        lines = [f":{SERVER} {code:03d} {nick} :{text}" for code, text in welcome]
        if token is not None:
            lines.append(f"@badge-info=;badges=;color=;display-name={nick};emote-sets=0;user-id=1;user-type= "
                         f":{SERVER} GLOBALUSERSTATE")
        write("".join(f"{line}\r\n" for line in lines).encode())
        return True

    def _join(self, client: _Client, channel: str) -> None:
        nick, write = client.nick, client.writer.write
        if channel in self._suspended:
            write(f"@msg-id=msg_channel_suspended :{SERVER} NOTICE {channel} "
                  ":This channel does not exist or has been suspended.\r\n".encode())
            return
        if channel in self._silent or not nick:
            return
        client.joined.add(channel)
        badges, mod = ("moderator/1", 1) if nick in self._moderators else ("", 0)
        lines = [
            f":{nick}!{nick}@{nick}.{SERVER} JOIN {channel}",
            f":{nick}.{SERVER} 353 {nick} = {channel} :{nick}",
            f":{nick}.{SERVER} 366 {nick} {channel} :End of /NAMES list",
            f"@badge-info=;badges={badges};color=;display-name={nick};emote-sets=0;mod={mod};subscriber=0;"
            f"user-type= :{SERVER} USERSTATE {channel}",
            f"@emote-only=0;followers-only=-1;r9k=0;room-id=12345678;slow=0;subs-only=0 :{SERVER} ROOMSTATE {channel}",
        ]
        write("".join(f"{line}\r\n" for line in lines).encode())


def recorded_lines(path: Path) -> list[str]:
    """The IRC lines of a recording, without its blank and ``#`` comment lines (an IRC line begins
    with ``@``, ``:`` or a command, never with ``#``)."""
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
