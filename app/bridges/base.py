"""What every platform connector gives the bridge, whatever the platform speaks.

A connector (``app.bridges.twitch``, ``.bilibili``, ``.youtube``) knows one platform's protocol:
it connects, reads, and turns what the platform sends into ``ChatMessage`` (a viewer's comment,
gift or paid message) and ``PlatformNotice`` (anything else the platform sent, kept by name so
the bridge counts it).  It knows nothing of NATS or of a show: the bridge (``app.bridges.run``)
connects it again after a drop, with backoff and jitter, records the gap, drops a message it
already published (the platform's own id), caps the rate and publishes ``danmaku.received``.

The contract a connector keeps:

- ``connect()`` opens the connection and returns once the platform has accepted it (joined the
  channel, authenticated to the room, found the live chat).  Credentials the platform refuses,
  a room or channel it does not know, or a banned token raise ``BridgeFatal`` (the bridge exits
  with its one line); a network failure raises ``OSError`` or ``ConnectionLost`` (the bridge
  tries again).
- ``read()`` yields what arrives until the connection ends: it raises ``ConnectionLost`` when
  the peer drops it or goes silent past its heartbeat, or returns when the platform says the
  chat itself has ended (``ChatEnded`` raised is the same).  A message is yielded once it is
  complete and parsed; a line or packet that cannot be parsed is yielded as a
  ``PlatformNotice`` with ``name="unparsed"`` and its reason, never dropped silently.
- ``connect()`` after a ``ConnectionLost`` connects again, putting away what is left of the old
  connection itself: the bridge does not call ``close()`` between the two, since ``close()`` is
  final (the Open Live route ends its game there, and a new one takes the platform ~10 s).
- ``close()`` closes it for good (idempotent).
- ``missed()``: after a drop, what the platform says was missed while disconnected, where it
  says so (None where it cannot say).

Ids: ``ChatMessage.id`` is the platform's own message id (Twitch's ``id`` tag, YouTube's
message id, Bilibili's ``id_str``/``msg_id``/a digest of the packet where it gives none), with
the platform as its prefix, so that a reconnect, a resend, or a second bridge on the same room
never publishes a message twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from events.errors import ConfigError

PLATFORMS = ("twitch", "bilibili", "youtube")


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One viewer's message as the platform sent it, in the platform's terms made common."""

    platform: str                     # one of PLATFORMS
    id: str                           # "<platform>:<the platform's own message id>"
    viewer: str                       # "twitch:<user-id>", "bili:<uid>", "yt:<channel id>"; "" when the
                                      # platform did not identify the viewer (anonymous, masked, uid 0)
    name: str                         # the display name, kept apart from the id
    text: str                         # what they wrote (a gift's message, else what it was)
    kind: str = "comment"             # "comment" or "gift" (bits, Super Chat, a membership, a sub)
    value: float = 0.0                # a gift's value in ``currency`` (0 for a comment)
    currency: str = ""                # "USD", "CNY", "bits", "gold", ... as the platform counts it
    badges: tuple[str, ...] = ()      # "moderator", "subscriber", "broadcaster", "member", ...
    sent_at_ms: int = 0               # the platform's timestamp (ms since the epoch), 0 if none
    event: str = ""                   # the platform's name for it ("PRIVMSG", "USERNOTICE/sub",
                                      # "SEND_GIFT", "superChatEvent", ...)


@dataclass(frozen=True, slots=True)
class PlatformNotice:
    """Something the platform sent that is not a viewer's message (a room's viewer count, a
    ROOMSTATE, a like), or could not be parsed: counted by name, never published as danmaku."""

    platform: str
    name: str                         # the platform's name for it, or "unparsed"
    detail: str = ""                  # for "unparsed": why (one line)


Item = ChatMessage | PlatformNotice


@dataclass(frozen=True, slots=True)
class Missed:
    """What the platform says was missed during a disconnect (where it says so)."""

    count: int | None = None          # messages the platform says were not delivered
    detail: str = ""


class BridgeFatal(ConfigError):
    """The platform refused for good: bad credentials, an unknown room or channel, a banned
    token.  The bridge prints it as one line and exits non-zero; it does not retry."""


class ConnectionLost(ConnectionError):
    """The connection ended (dropped, closed by the peer, silent past its heartbeat, or the
    platform asked the client to reconnect): the bridge connects again."""


class ChatEnded(Exception):
    """The platform says the chat is over (the stream ended): the bridge stops reading."""


class Connector(Protocol):
    platform: str

    async def connect(self) -> None: ...

    def read(self) -> AsyncIterator[Item]: ...

    async def close(self) -> None: ...

    def missed(self) -> Missed | None: ...


@dataclass
class Backoff:
    """Waits between reconnects: doubling from ``first_s`` up to ``max_s``, each with up to
    ``jitter`` of itself added at random, and back to ``first_s`` once a connection held."""

    first_s: float = 1.0
    max_s: float = 60.0
    jitter: float = 0.3
    _next: float = field(default=0.0, repr=False)

    def delay(self, rand: float) -> float:
        """The next wait (``rand`` in [0, 1)), and the one after it doubled."""
        base = self._next or self.first_s
        self._next = min(base * 2, self.max_s)
        return base * (1 + self.jitter * rand)

    def reset(self) -> None:
        self._next = 0.0
