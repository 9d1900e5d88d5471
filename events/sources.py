"""A show's live chat sources (``[[sources]]`` in the show file): which platform's chat
``troupe up`` bridges into the show's run, as ``troupe bridge`` does on its own.

Credentials never stand in a show file: they are settings (``TROUPE_TWITCH_TOKEN``,
``TROUPE_BILIBILI_COOKIE``, ``TROUPE_YOUTUBE_API_KEY``, ..., each also readable from a
``_FILE``), so a show file can be shared and is carried whole in ``run.started``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from events.errors import ConfigError

# platform -> the keys that name what to read (one of them), in the show file's words
TARGETS = {"twitch": ("channel",), "bilibili": ("room", "code"), "youtube": ("video", "chat")}
MAX_RATE = 1000.0


class SourceError(ConfigError):
    """A ``[[sources]]`` entry that cannot be used (``sources[i].key: reason``)."""


@dataclass(frozen=True, slots=True)
class Source:
    """One platform chat bridged into the show."""

    platform: str                 # twitch, bilibili or youtube
    key: str                      # what ``target`` is: channel, room, code, video or chat
    target: str                   # the channel's name, the room's id, the identity code, the video's id
    to: str | None = None         # address every message to this role (None: the director reads the text)
    rate: float = 20.0            # comments a second published at most (gifts always are); 0: no cap
    server: str = ""              # another endpoint than the platform's (a self-hosted or loopback peer)

    @property
    def label(self) -> str:
        """How logs and gaps name it: ``twitch #channel``, ``bilibili room 123``."""
        return f"{self.platform} {'#' if self.key == 'channel' else self.key + ' '}{self.target}"

    def to_dict(self) -> dict[str, Any]:
        return {"platform": self.platform, self.key: self.target, **({"to": self.to} if self.to else {}),
                "rate": self.rate, **({"server": self.server} if self.server else {})}


def source_from(doc: Any, where: str, roles: set[str] | None) -> Source:
    """One ``[[sources]]`` table, checked (``to`` against ``roles``, where known)."""
    if not isinstance(doc, Mapping):
        raise SourceError(f"{where}: wrong type {type(doc).__name__} (a table)")
    platform = doc.get("platform")
    if platform not in TARGETS:
        raise SourceError(f"{where}.platform: {platform!r} is not one of {', '.join(TARGETS)}")
    allowed = {"platform", "to", "rate", "server", *TARGETS[platform]}
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise SourceError(f"{where}.{unknown[0]}: not a key of a {platform} source ({', '.join(sorted(allowed))})")
    given = [k for k in TARGETS[platform] if k in doc]
    if len(given) != 1:
        raise SourceError(f"{where}: a {platform} source names one of {', '.join(TARGETS[platform])}")
    key = given[0]
    target = doc[key]
    if isinstance(target, int) and not isinstance(target, bool) and key == "room":
        target = str(target)
    if not isinstance(target, str) or not target.strip() or any(c.isspace() for c in target.strip()):
        raise SourceError(f"{where}.{key}: a name or id without spaces")
    target = target.strip()
    if key == "channel":
        target = target.lstrip("#").lower()
    if key == "room" and not target.isdigit():
        raise SourceError(f"{where}.room: {target!r} is not a room number")
    to = doc.get("to")
    if to is not None and (not isinstance(to, str) or (roles is not None and to not in roles)):
        raise SourceError(f"{where}.to: no role {to!r} in the show")
    rate = doc.get("rate", 20.0)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= MAX_RATE:
        raise SourceError(f"{where}.rate: comments a second from 0 (no cap) to {MAX_RATE:g}")
    server = doc.get("server", "")
    if not isinstance(server, str):
        raise SourceError(f"{where}.server: wrong type {type(server).__name__}")
    return Source(platform, key, target, to, float(rate), server.strip())


def sources_from(items: Any, roles: set[str]) -> tuple[Source, ...]:
    """Every ``[[sources]]`` entry, checked; the same chat twice is refused."""
    if not isinstance(items, list):
        raise SourceError(f"sources: wrong type {type(items).__name__} (an array of tables)")
    out = tuple(source_from(doc, f"sources[{i}]", roles) for i, doc in enumerate(items))
    seen: dict[tuple[str, str, str], int] = {}
    for i, s in enumerate(out):
        first = seen.setdefault((s.platform, s.key, s.target), i)
        if first != i:
            raise SourceError(f"sources[{i}]: the same chat as sources[{first}]")
    return out
