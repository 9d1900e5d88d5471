"""Twitch chat over IRC: ``TwitchChat`` reads one channel (anonymously or as an account) and posts.

Twitch speaks RFC 1459 IRC with IRCv3 message tags (dev.twitch.tv/docs/chat/irc).  What this relies on:

- Login: ``PASS oauth:<token>`` + ``NICK <login>``, or ``NICK justinfan<digits>`` alone to read
  anonymously; a refusal is ``NOTICE * :Login authentication failed`` (or ``Improperly formatted
  auth``).  ``USER`` and ``CAP END`` go too: Twitch ignores them, a plain IRC server needs them.
- Ids: the ``id`` tag is a UUID per message, and Twitch "may send a message multiple times if it
  doesn't think the chatbot received it": the bridge's dedupe on ``twitch:<id>`` keeps resends out.
  Without the tag (a plain IRC server) the id is a digest of (channel, nick, text, ``tmi-sent-ts``
  or the receive time in ms): a per-connection counter restarts at each reconnect, giving one id to
  two messages; the digest does not (one nick's same words in the same ms are one message).
- Twitch drops a JOIN of a channel that does not exist without a word (``ConnectionLost`` when the
  JOIN is not confirmed in time); IRC servers refuse with 403/471/473/474/475 (``BridgeFatal``).
- Posting: 20 messages per 30 s, 100 as a moderator or the broadcaster (USERSTATE's badges); over
  it Twitch drops messages and may lock the account out for 30 minutes.  Twitch refills on its own
  schedule, so ``SendWindow`` allows that many in any 30 s (a token bucket could let twice through).
- A gift bomb is a ``submysterygift`` (the count) and one ``subgift`` per recipient with the same
  ``msg-param-community-gift-id``: ``MassGifts`` makes those notices (a bomb of 5 counts 5, not 10).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from app.bridges.base import BridgeFatal, ChatMessage, ConnectionLost, Item, Missed, PlatformNotice
from app.bridges.twitch_irc import (
    PLATFORM,
    IrcMessage,
    MassGifts,
    badges_of,
    item_of,
    parse_line,
    refusal_of,
)
from events.errors import DecodeError

DEFAULT_HOST = "irc.chat.twitch.tv"
DEFAULT_PORT = 6697                   # TLS; 6667 is plain text
MAX_TEXT_CHARS = 500                  # Twitch's limit on one chat message
USER_SENDS_PER_30S = 20
MODERATOR_SENDS_PER_30S = 100
_LINE_LIMIT = 1 << 20                 # a line longer than this ends the connection (tags are < 8 KiB)
_NAME = re.compile(r"[a-z0-9_]{1,25}")  # Twitch logins, and what a channel or nick may be here
_TOKEN = re.compile(r"[!-~]+")          # printable ASCII without spaces: nothing to inject a line
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


@dataclass
class SendWindow:
    """At most ``limit`` sends in any ``per_s`` seconds (Twitch's chat rate limit)."""

    limit: int = USER_SENDS_PER_30S
    per_s: float = 30.0
    _sent: deque[float] = field(default_factory=deque, repr=False)

    def take(self, now_s: float) -> bool:
        """Count a send at ``now_s`` if the window has room; False (nothing counted) if not."""
        while self._sent and now_s - self._sent[0] >= self.per_s:
            self._sent.popleft()
        if len(self._sent) >= self.limit:
            return False
        self._sent.append(now_s)
        return True


class TwitchChat:
    """One Twitch channel's chat over IRC: read it (anonymously or as an account), post to it."""

    platform = PLATFORM

    def __init__(
        self, channel: str, *, nick: str | None = None, token: str | None = None,
        host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, ssl_context: ssl.SSLContext | None = None,
        tls: bool = True, idle_s: float = 60.0, pong_timeout_s: float = 10.0, join_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        nick, token = nick or None, token or None       # an unset setting ("") is no account
        self._channel, self._nick = channel.removeprefix("#").lower(), nick.lower() if nick else None
        self._token = token.removeprefix("oauth:") if token is not None else None
        if not _NAME.fullmatch(self._channel):
            raise BridgeFatal(f"twitch: {channel!r} is not a channel name (a login: a-z, 0-9, _)")
        if (nick is None) != (token is None):
            raise BridgeFatal("twitch: give both a nick and an OAuth token, or neither (read-only)")
        if self._nick is not None and not _NAME.fullmatch(self._nick):
            raise BridgeFatal(f"twitch: {nick!r} is not a login name")
        if self._token is not None and not _TOKEN.fullmatch(self._token):
            raise BridgeFatal("twitch: the OAuth token is empty or holds spaces")
        if ssl_context is not None and not tls:
            raise BridgeFatal("twitch: an SSL context was given with tls=False")
        self._host, self._port = host, port
        self._ssl = ssl_context or (ssl.create_default_context() if tls else None)
        self._idle_s, self._pong_timeout_s, self._join_timeout_s = idle_s, pong_timeout_s, join_timeout_s
        self._clock, self._wall_ms = clock, wall_ms
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: deque[Item] = deque()
        self._ping_deadline: float | None = None
        self._sends = SendWindow()
        self._gifts = MassGifts()

    async def __aenter__(self) -> TwitchChat:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Log in and join the channel; returns once the JOIN is confirmed."""
        await self.close()
        nick = self._nick or f"justinfan{10_000 + secrets.randbelow(90_000_000)}"
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self._host, self._port, ssl=self._ssl, limit=_LINE_LIMIT),
                self._join_timeout_s)
        except TimeoutError as exc:
            raise ConnectionLost(f"twitch: no connection to {self._host}:{self._port} "
                                 f"in {self._join_timeout_s} s") from exc
        self._pending.clear()
        self._ping_deadline = None
        self._sends.limit = USER_SENDS_PER_30S
        hello = ["CAP REQ :twitch.tv/tags twitch.tv/commands"]
        if self._token is not None:
            hello.append(f"PASS oauth:{self._token}")
        hello += [f"NICK {nick}", f"USER {nick} 8 * :{nick}", "CAP END"]
        try:
            await self._send(*hello)
            await asyncio.wait_for(self._join(nick), self._join_timeout_s)
        except TimeoutError as exc:
            await self.close()
            raise ConnectionLost(
                f"twitch: JOIN #{self._channel} not confirmed in {self._join_timeout_s} s "
                "(Twitch ignores a JOIN of a channel that does not exist)") from exc
        except BaseException:
            await self.close()
            raise

    async def _join(self, nick: str) -> None:
        """Read the login's replies, JOIN after the welcome (001), return once the JOIN is echoed
        or the names (366) end."""
        while True:
            msg, item = self._take(await self._read_line())
            if isinstance(item, ChatMessage) or (item is not None and item.name == "unparsed"):
                self._pending.append(item)    # the login's numerics are protocol, not the platform's news
            if msg is None:
                continue
            if msg.command == "001":
                await self._send(f"JOIN #{self._channel}")
            on_channel = len(msg.params) > 1 and msg.params[1].lower() == f"#{self._channel}"
            if (msg.command == "JOIN" and msg.nick.lower() == nick and msg.params
                    and msg.params[0].lower() == f"#{self._channel}") or (msg.command == "366" and on_channel):
                return

    async def read(self) -> AsyncIterator[Item]:
        """What arrives, until the connection ends (``ConnectionLost``) or is refused (``BridgeFatal``)."""
        if self._reader is None:
            raise ConnectionLost("twitch: not connected")
        while self._pending:
            yield self._pending.popleft()
        try:
            while True:
                _, item = self._take(await self._next_line())
                if item is not None:
                    yield item
        except (ConnectionLost, BridgeFatal):
            await self.close()
            raise

    async def say(self, text: str) -> bool:
        """Post ``text`` to the channel as one line of at most 500 characters; False, and nothing
        sent, when the rate limit has no room or the text is empty."""
        if self._token is None:
            raise BridgeFatal("twitch: an anonymous (justinfan) connection cannot post: "
                              "give a nick and an OAuth token with the chat:edit scope")
        if self._writer is None:
            raise ConnectionLost("twitch: not connected")
        line = _CONTROL.sub(" ", text).strip()[:MAX_TEXT_CHARS].rstrip()
        if not line or not self._sends.take(self._clock()):
            return False
        await self._send(f"PRIVMSG #{self._channel} :{line}")
        return True

    def missed(self) -> Missed | None:
        """None: Twitch does not say what was sent while a reader was away."""
        return None

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        writer, self._writer, self._reader = self._writer, None, None
        if writer is None:
            return
        writer.close()
        # The peer may be gone already (reset, TLS without close_notify): closed is all we need.
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), 2.0)

    def _take(self, raw: bytes) -> tuple[IrcMessage | None, Item | None]:
        """A received line parsed and acted on (PING answered, refusals and RECONNECT raised)."""
        received_ms = self._wall_ms()
        try:
            line = raw.rstrip(b"\r\n").decode("utf-8")
            if not line:
                return None, None
            msg = parse_line(line)
            return msg, self._act_on(msg, received_ms)
        except UnicodeDecodeError as exc:
            return None, PlatformNotice(PLATFORM, "unparsed", f"not UTF-8: {exc.reason}")
        except DecodeError as exc:
            return None, PlatformNotice(PLATFORM, "unparsed", str(exc))

    def _act_on(self, msg: IrcMessage, received_ms: int) -> Item | None:
        if msg.command == "PING":
            if self._writer is not None:      # one whole line per write: never interleaved with say()
                self._writer.write(f"PONG :{msg.params[-1] if msg.params else ''}\r\n".encode())
            return None
        if msg.command == "PONG":
            return None
        if msg.command == "RECONNECT":
            raise ConnectionLost("twitch asked to reconnect")
        if msg.command == "ERROR":
            raise ConnectionLost(f"twitch closed the connection: {msg.params[-1] if msg.params else ''}")
        reason = refusal_of(msg)
        if reason is not None:
            raise BridgeFatal(reason)
        if msg.command == "USERSTATE":
            lead = {"moderator", "broadcaster"} & set(badges_of(msg.tags))
            self._sends.limit = MODERATOR_SENDS_PER_30S if lead else USER_SENDS_PER_30S
        return self._gifts.fold(msg, item_of(msg, received_ms))

    async def _next_line(self) -> bytes:
        """The next line; after ``idle_s`` of silence a PING, and ``ConnectionLost`` when nothing
        answers it within ``pong_timeout_s``."""
        loop = asyncio.get_running_loop()
        while True:
            deadline = self._ping_deadline
            wait_s = self._idle_s if deadline is None else max(0.0, deadline - loop.time())
            try:
                async with asyncio.timeout(wait_s):     # no task per line, as wait_for makes one
                    raw = await self._read_line()
            except TimeoutError:
                if deadline is not None:
                    raise ConnectionLost(f"twitch: no PONG within {self._pong_timeout_s} s") from None
                await self._send("PING :troupe")
                self._ping_deadline = loop.time() + self._pong_timeout_s
                continue
            self._ping_deadline = None        # anything arriving shows the connection is alive
            return raw

    async def _read_line(self) -> bytes:
        if self._reader is None:
            raise ConnectionLost("twitch: not connected")
        try:
            return await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            raise ConnectionLost("twitch closed the connection") from exc
        except (asyncio.LimitOverrunError, OSError) as exc:
            raise ConnectionLost(f"twitch: the connection failed: {exc}") from exc

    async def _send(self, *lines: str) -> None:
        if self._writer is None:
            raise ConnectionLost("twitch: not connected")
        self._writer.write("".join(f"{line}\r\n" for line in lines).encode())
        try:
            await self._writer.drain()
        except OSError as exc:
            raise ConnectionLost(f"twitch: the connection failed: {exc}") from exc
