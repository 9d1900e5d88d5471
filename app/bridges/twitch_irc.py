"""Twitch's IRC parsed, without I/O: a line into an ``IrcMessage``, a message into the bridge's
``Item``, a refusal of the login or channel into its reason, a gift bomb folded (``MassGifts``).
What Twitch sends, and why a message without an ``id`` tag gets a digest and not a counter, is in
``app.bridges.twitch``'s docstring.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from app.bridges.base import ChatMessage, Item, PlatformNotice
from events.errors import DecodeError

PLATFORM = "twitch"
ANONYMOUS_GIFTER_ID = "274598607"     # the account "AnAnonymousGifter" that anonymous gifts come from
_COMMAND = re.compile(r"[A-Za-z]+|[0-9]{3}")
_TAG_ESCAPE = re.compile(r"\\(.?)", re.S)
_TAG_ESCAPES = {":": ";", "s": " ", "\\": "\\", "r": "\r", "n": "\n"}

# Numerics by which an IRC server refuses for good (Twitch itself sends none of them).
_FATAL_NUMERICS = {
    "403": "no such channel", "405": "joined too many channels", "432": "erroneous nickname",
    "464": "password incorrect", "465": "banned from the server", "471": "channel is full",
    "473": "channel is invite-only", "474": "banned from the channel", "475": "channel needs a key",
}
_FATAL_NOTICE_IDS = frozenset({"msg_banned", "msg_channel_suspended", "tos_ban"})
_FATAL_NOTICE_TEXTS = ("login authentication failed", "improperly formatted auth", "login unsuccessful")

# USERNOTICE msg-ids that are gifts: (currency, the tags holding the count, first present wins).
# A sub's value is its months (cumulative), a gift's the subs (or months) given, a raid's the raiders:
# a raid brings viewers the show should thank as it thanks a gift.
_MONTHS = ("msg-param-cumulative-months", "msg-param-months")
_GIFTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sub": ("subs", _MONTHS), "resub": ("subs", _MONTHS),
    "subgift": ("subs", ("msg-param-gift-months",)), "anonsubgift": ("subs", ("msg-param-gift-months",)),
    "submysterygift": ("subs", ("msg-param-mass-gift-count",)),
    "anonsubmysterygift": ("subs", ("msg-param-mass-gift-count",)),
    "giftpaidupgrade": ("subs", ()), "anongiftpaidupgrade": ("subs", ()), "primepaidupgrade": ("subs", ()),
    "raid": ("raiders", ("msg-param-viewerCount",)),
}


@dataclass(frozen=True, slots=True)
class IrcMessage:
    """One IRC line taken apart: its IRCv3 tags (unescaped), prefix, command and parameters."""

    tags: Mapping[str, str]
    prefix: str
    command: str
    params: tuple[str, ...]

    @property
    def nick(self) -> str:
        """The sender's nick (``nick!user@host``), or the server's name."""
        return self.prefix.partition("!")[0]


def unescape_tag(value: str) -> str:
    r"""A tag value with IRCv3's escapes undone (``\:`` ``\s`` ``\\`` ``\r`` ``\n``)."""
    if "\\" not in value:
        return value
    return _TAG_ESCAPE.sub(lambda m: _TAG_ESCAPES.get(m.group(1), m.group(1)), value)


def parse_tags(raw: str) -> dict[str, str]:
    """``a=1;b=x\\sy;c`` as ``{"a": "1", "b": "x y", "c": ""}``."""
    pairs = (pair.partition("=") for pair in raw.split(";") if pair)
    return {key: unescape_tag(value) for key, _, value in pairs}


def parse_line(line: str) -> IrcMessage:
    """An IRC line (without its CR LF) taken apart; ``DecodeError`` when it is not one."""
    rest, prefix = line, ""
    tags: dict[str, str] = {}
    if rest.startswith("@"):
        raw_tags, _, rest = rest[1:].partition(" ")
        tags = parse_tags(raw_tags)
        rest = rest.lstrip(" ")
    if rest.startswith(":"):
        prefix, _, rest = rest[1:].partition(" ")
        rest = rest.lstrip(" ")
    middle, colon, trailing = rest.partition(" :")
    params = middle.split()
    if not params:
        raise DecodeError(f"no command in {line[:80]!r}")
    command = params.pop(0)
    if not _COMMAND.fullmatch(command):
        raise DecodeError(f"not an IRC command: {command[:40]!r}")
    if colon:
        params.append(trailing)
    return IrcMessage(tags, prefix, command.upper(), tuple(params))


def badges_of(tags: Mapping[str, str]) -> tuple[str, ...]:
    """The badge names (``broadcaster/1,subscriber/12`` → broadcaster, subscriber), and moderator
    when ``mod=1``."""
    names = [badge.partition("/")[0] for badge in tags.get("badges", "").split(",")]
    if tags.get("mod") == "1":
        names.append("moderator")
    return tuple(dict.fromkeys(name for name in names if name))


def message_id(msg: IrcMessage, text: str, received_ms: int) -> str:
    """``twitch:<id tag>``; without one, ``twitch:<digest>`` of what identifies the message (see
    the module's docstring for why not a counter)."""
    own = msg.tags.get("id")
    if own:
        return f"{PLATFORM}:{own}"
    channel = msg.params[0].lower() if msg.params else ""
    sender = (msg.tags.get("login") or msg.nick).lower()
    stamp = msg.tags.get("tmi-sent-ts") or str(received_ms)
    digest = hashlib.sha256("\0".join((channel, sender, text, stamp)).encode()).hexdigest()
    return f"{PLATFORM}:{digest[:32]}"


def item_of(msg: IrcMessage, received_ms: int) -> Item:
    """What a message is to the bridge: a PRIVMSG or a gift USERNOTICE is a ``ChatMessage``,
    anything else a ``PlatformNotice`` named by its command.  ``DecodeError`` on bad values."""
    if msg.command == "PRIVMSG":
        return _privmsg(msg, received_ms)
    if msg.command == "USERNOTICE":
        return _usernotice(msg, received_ms)
    return PlatformNotice(PLATFORM, msg.command)


def item_of_line(line: str, received_ms: int) -> Item:
    """``item_of`` for a raw line; a line that cannot be read is a notice named "unparsed"."""
    try:
        return item_of(parse_line(line), received_ms)
    except DecodeError as exc:
        return PlatformNotice(PLATFORM, "unparsed", str(exc))


def refusal_of(msg: IrcMessage) -> str | None:
    """The one-line reason when ``msg`` refuses the login or the channel for good, else None."""
    text = msg.params[-1] if msg.params else ""
    if msg.command in _FATAL_NUMERICS:
        about = " ".join(msg.params[1:-1])
        return f"twitch: the server refused {about or 'us'}: {msg.command} {_FATAL_NUMERICS[msg.command]} ({text})"
    if msg.command == "NOTICE":
        notice_id = msg.tags.get("msg-id", "")
        if notice_id in _FATAL_NOTICE_IDS or text.lower().startswith(_FATAL_NOTICE_TEXTS):
            return f"twitch refused: {text}" + (f" ({notice_id})" if notice_id else "")
    return None


def _int_tag(tags: Mapping[str, str], name: str) -> int:
    value = tags.get(name, "")
    if not value:
        return 0
    if not value.isdigit():
        raise DecodeError(f"tag {name}={value[:40]!r} is not a number")
    return int(value)


def _strip_action(text: str) -> str:
    """The text of a ``/me`` (CTCP ACTION) message, else the text as it is."""
    if not text.startswith("\x01ACTION") or text[7:8] not in ("", " ", "\x01"):
        return text
    return text[8:].removesuffix("\x01")


def _privmsg(msg: IrcMessage, received_ms: int) -> ChatMessage:
    if len(msg.params) < 2:
        raise DecodeError("PRIVMSG without a channel and a text")
    tags, raw_text = msg.tags, msg.params[1]
    bits = _int_tag(tags, "bits")
    user_id = tags.get("user-id", "")
    return ChatMessage(
        platform=PLATFORM, id=message_id(msg, raw_text, received_ms),
        viewer=f"{PLATFORM}:{user_id}" if user_id else "",
        name=tags.get("display-name", "").strip() or msg.nick, text=_strip_action(raw_text),
        kind="gift" if bits else "comment", value=float(bits), currency="bits" if bits else "",
        badges=badges_of(tags), sent_at_ms=_int_tag(tags, "tmi-sent-ts"), event="PRIVMSG",
    )


def _usernotice(msg: IrcMessage, received_ms: int) -> Item:
    tags = msg.tags
    notice_id = tags.get("msg-id", "")
    event = f"USERNOTICE/{notice_id}" if notice_id else "USERNOTICE"
    gift = _GIFTS.get(notice_id)
    if gift is None:
        return PlatformNotice(PLATFORM, event)
    currency, count_tags = gift
    count = next((_int_tag(tags, name) for name in count_tags if tags.get(name)), 1)
    if currency == "subs":
        count = max(count, 1)         # sub/resub send msg-param-months=0 nowadays
    said = msg.params[1] if len(msg.params) > 1 else ""
    anonymous = notice_id.startswith("anon") or tags.get("user-id") == ANONYMOUS_GIFTER_ID
    user_id = "" if anonymous else tags.get("user-id", "")
    return ChatMessage(
        platform=PLATFORM, id=message_id(msg, said or notice_id, received_ms),
        viewer=f"{PLATFORM}:{user_id}" if user_id else "",
        name=tags.get("display-name", "").strip() or tags.get("login", "") or msg.nick,
        text=said or " ".join(tags.get("system-msg", "").split()),
        kind="gift", value=float(count), currency=currency, badges=badges_of(tags),
        sent_at_ms=_int_tag(tags, "tmi-sent-ts"), event=event,
    )


@dataclass
class MassGifts:
    """Folds the per-recipient ``subgift`` notices of a gift bomb into its ``submysterygift``."""

    keep: int = 64
    _announced: OrderedDict[str, None] = field(default_factory=OrderedDict, repr=False)

    def fold(self, msg: IrcMessage, item: Item) -> Item:
        """``item``, or a notice when it is one recipient of a bomb already counted."""
        if not isinstance(item, ChatMessage):
            return item
        bomb = msg.tags.get("msg-param-community-gift-id") or msg.tags.get("msg-param-origin-id")
        kind = item.event.removeprefix("USERNOTICE/").removeprefix("anon")
        if bomb and kind == "submysterygift":
            self._announced[bomb] = None
            while len(self._announced) > self.keep:
                self._announced.popitem(last=False)
        elif bomb and kind == "subgift" and bomb in self._announced:
            return PlatformNotice(PLATFORM, item.event)
        return item
