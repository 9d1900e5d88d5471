"""YouTube live chat over the YouTube Data API v3: ``liveChatMessages.list`` polled with aiohttp.

What the API documents and this connector follows:

- ``connect()`` finds the chat: ``videos.list?part=liveStreamingDetails`` (1 unit) gives the video's
  ``activeLiveChatId`` (absent once the broadcast is over), unless a live chat id was given.  It
  then makes the first ``liveChatMessages.list`` call (5 units) itself, so that it returns only
  once the API has served the chat; ``read()`` yields that page first.
- Each ``list`` response carries ``nextPageToken`` (the next call resumes from it) and
  ``pollingIntervalMillis`` (how long to wait before it).  The token is kept across a
  ``ConnectionLost``: polling again from it returns what arrived during the disconnect, and
  ``missed()`` says so.  A token the API rejects (400 ``invalidPageToken``) is dropped; the next
  call starts afresh and ``missed()`` says messages during the gap may be lost.
- The first call without a token returns recent history (the docs: up to ~75 messages plus ticker
  and gift events).  Of that history only messages published at or after the connector's start
  less ``backfill_s`` are yielded (default 0: nothing older than the start); after a rejected
  token, those at or after the newest message already yielded (the bridge drops the duplicates).
- Quota: every call counts against the project's daily quota (10,000 units by default), which
  resets at midnight Pacific time.  The connector counts what it spends per Pacific day and never
  polls faster than the units left allow spread evenly over the stream's next ``stream_hours``
  (default 4; never past the reset):
  ``interval = max(pollingIntervalMillis, min(stream_hours, seconds_to_reset) / calls_left)``.
  Spread over the whole day instead, 10,000 units are one poll every 43 s: comments would reach
  the stage most of a minute late.  Over 4 hours it is one every 7.2 s, and a longer stream
  slows down gradually as the units run low rather than stopping.  When its budget or
  the API's quota (403 ``quotaExceeded``) is spent, nothing can be done until the reset: it raises
  ``BridgeFatal`` with a line that says when the quota resets, rather than polling into errors.
- The chat ends on ``offlineAt`` in a response, a ``chatEndedEvent``, or 403 ``liveChatEnded`` /
  404 ``liveChatNotFound`` once the chat was served: ``read()`` raises ``ChatEnded``.

Items (``chat_item``): ``textMessageEvent`` is a comment; ``superChatEvent``, ``superStickerEvent``
(and the retired ``fanFundingEvent``) a gift of ``amountMicros / 1e6`` in its currency; a new,
milestone or gifted membership a gift of 1 ``"members"``, ``membershipGiftingEvent`` one of its
``giftMembershipsCount``; anything else (deletions, bans, polls, tombstones, the chat's end, a
``giftEvent``) a ``PlatformNotice`` named by ``snippet.type``.  ``quota_units`` is this connector's
share of the project's quota: bridges sharing a project split it.  ``streamList`` is not used.
"""

from __future__ import annotations

import asyncio
import json
import re
import time as _time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as dt_time
from typing import Any

import aiohttp

from app.bridges.base import (
    BridgeFatal,
    ChatEnded,
    ChatMessage,
    ConnectionLost,
    Item,
    Missed,
    PlatformNotice,
)
from events.errors import ConfigError

PLATFORM = "youtube"
API_BASE = "https://www.googleapis.com/youtube/v3"
LIST_COST_UNITS = 5        # liveChatMessages.list, per the API's quota table
VIDEOS_COST_UNITS = 1      # videos.list
DEFAULT_POLL_S = 5.0       # used when a response carries no pollingIntervalMillis
_MEMBER_EVENTS = ("newSponsorEvent", "memberMilestoneChatEvent", "giftMembershipReceivedEvent")
_MEMBER_DETAILS = ("memberMilestoneChatDetails", "newSponsorDetails", "giftMembershipReceivedDetails")
_PAID_DETAILS = {"superChatEvent": "superChatDetails", "superStickerEvent": "superStickerDetails",
                 "fanFundingEvent": "fanFundingEventDetails"}
_BADGES = (("isChatOwner", "broadcaster"), ("isChatModerator", "moderator"),
           ("isChatSponsor", "member"), ("isVerified", "verified"))


# --- pure functions: items, times, errors, quota -------------------------------------------------


def published_ms(stamp: str) -> int:
    """An RFC 3339 time (``2025-03-14T19:02:03.123456Z``, any fraction, any offset) in epoch ms."""
    moment = datetime.fromisoformat(stamp)
    if moment.tzinfo is None:
        raise ValueError(f"no UTC offset in {stamp!r}")
    return round(moment.timestamp() * 1000)


def chat_item(raw: Mapping[str, Any]) -> Item:
    """One ``liveChatMessage`` resource as a ``ChatMessage`` or ``PlatformNotice``."""
    try:
        return _chat_item(raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return PlatformNotice(PLATFORM, "unparsed", f"liveChatMessage {raw.get('id', '?')}: {exc!r}")


def _chat_item(raw: Mapping[str, Any]) -> Item:
    snippet = raw["snippet"]
    kind = snippet["type"]
    shown = snippet.get("displayMessage") or ""
    if kind == "messageDeletedEvent":      # the detail is the deleted message's ChatMessage.id
        deleted = snippet["messageDeletedDetails"]["deletedMessageId"]
        return PlatformNotice(PLATFORM, kind, f"{PLATFORM}:{deleted}")
    if kind == "userBannedEvent":          # the detail is the banned viewer's ChatMessage.viewer
        banned = snippet["userBannedDetails"]["bannedUserDetails"]["channelId"]
        return PlatformNotice(PLATFORM, kind, f"yt:{banned}")
    if kind == "textMessageEvent":
        text = (snippet.get("textMessageDetails") or {}).get("messageText") or shown
        return _message(raw, text)
    if kind in _PAID_DETAILS:
        paid = snippet[_PAID_DETAILS[kind]]
        said = (paid.get("superStickerMetadata") or {}).get("altText") or paid.get("userComment")
        return _message(raw, said or shown, value=int(paid["amountMicros"]) / 1e6, currency=paid["currency"])
    if kind == "membershipGiftingEvent":
        count = int(snippet["membershipGiftingDetails"]["giftMembershipsCount"])
        return _message(raw, shown, value=float(count), currency="members")
    if kind in _MEMBER_EVENTS:
        details: dict[str, Any] = next((snippet[d] for d in _MEMBER_DETAILS if d in snippet), {})
        said = details.get("userComment") or shown or details.get("memberLevelName", "")
        return _message(raw, said, value=1.0, currency="members")
    return PlatformNotice(PLATFORM, kind, shown)


def _message(raw: Mapping[str, Any], text: str, *, value: float = 0.0, currency: str = "") -> ChatMessage:
    snippet, author = raw["snippet"], raw.get("authorDetails") or {}
    channel = author.get("channelId") or snippet.get("authorChannelId") or ""
    return ChatMessage(
        platform=PLATFORM, id=f"{PLATFORM}:{raw['id']}", viewer=f"yt:{channel}" if channel else "",
        name=author.get("displayName", ""), text=text, kind="gift" if currency else "comment",
        value=value, currency=currency, badges=tuple(b for flag, b in _BADGES if author.get(flag)),
        sent_at_ms=published_ms(snippet["publishedAt"]), event=snippet["type"],
    )


def error_reason(body: Any) -> tuple[str, str]:
    """``(error.errors[0].reason, error.message)`` of an API error body, tags stripped."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return "", ""
    errors = error.get("errors") or [{}]
    reason = errors[0].get("reason", "") if isinstance(errors[0], dict) else ""
    return str(reason), re.sub(r"<[^>]+>", "", str(error.get("message", "")))


def pacific_offset_s(at_s: float) -> int:
    """US Pacific time's UTC offset at an instant: PDT from the second Sunday of March at 02:00 to
    the first Sunday of November at 02:00 local, PST otherwise (the rule since 2007)."""
    year = datetime.fromtimestamp(at_s, UTC).year

    def sunday(month: int, nth: int) -> date:
        first = date(year, month, 1)
        return first + timedelta(days=(6 - first.weekday()) % 7 + 7 * (nth - 1))

    starts = datetime.combine(sunday(3, 2), dt_time(10), UTC).timestamp()    # 02:00 PST
    ends = datetime.combine(sunday(11, 1), dt_time(9), UTC).timestamp()      # 02:00 PDT
    return -7 * 3600 if starts <= at_s < ends else -8 * 3600


def quota_day(at_s: float) -> date:
    """The Pacific-time date whose quota a call at ``at_s`` counts against."""
    return datetime.fromtimestamp(at_s + pacific_offset_s(at_s), UTC).date()


def seconds_to_quota_reset(at_s: float) -> float:
    """Seconds from ``at_s`` to the next midnight Pacific time, when the daily quota resets."""
    offset = pacific_offset_s(at_s)
    reset = at_s + 86400 - (at_s + offset) % 86400
    return reset + offset - pacific_offset_s(reset) - at_s    # a DST change between now and then


def quota_interval_s(units_left: int, call_units: int, seconds_left: float) -> float:
    """The shortest wait between calls that spreads ``units_left`` over ``seconds_left``
    (infinite when not one call is left)."""
    calls_left = units_left // call_units
    return seconds_left / calls_left if calls_left > 0 else float("inf")


def _hours(seconds: float) -> str:
    minutes = int(seconds // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m"


# --- the connector -------------------------------------------------------------------------------


class _ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"HTTP {status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


@dataclass
class _Page:
    items: list[Any]
    fresh: bool                      # fetched without a page token: recent history
    offline: bool = False


@dataclass
class _Quota:
    """Units this connector spent on the current Pacific day."""

    budget_units: int
    day: date | None = None
    spent_units: int = 0

    def left(self, at_s: float) -> int:
        if quota_day(at_s) != self.day:
            self.day, self.spent_units = quota_day(at_s), 0
        return self.budget_units - self.spent_units

    def spend(self, at_s: float, units: int) -> None:
        self.left(at_s)
        self.spent_units += units


class YouTubeChat:
    """A YouTube live chat read by polling ``liveChatMessages.list`` (see the module docstring)."""

    platform = PLATFORM

    def __init__(
        self, *, video_id: str = "", live_chat_id: str = "", api_key: str = "", oauth_token: str = "",
        api_base: str = API_BASE, quota_units: int = 10_000, stream_hours: float = 4.0, list_cost_units: int = LIST_COST_UNITS,
        videos_cost_units: int = VIDEOS_COST_UNITS, page_size: int = 2000, backfill_s: float = 0.0,
        request_timeout_s: float = 15.0, clock: Callable[[], float] = _time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if bool(video_id) == bool(live_chat_id):
            raise ConfigError("youtube: give a video id or a live chat id (one of them)")
        if bool(api_key) == bool(oauth_token):
            raise ConfigError("youtube: give an API key or an OAuth token (one of them)")
        if not 200 <= page_size <= 2000:
            raise ConfigError(f"youtube: page_size {page_size} is outside the API's 200..2000")
        if not 0 < stream_hours <= 24:
            raise ConfigError(f"youtube: stream_hours {stream_hours} is not in (0, 24]")
        self.video_id, self.live_chat_id = video_id, live_chat_id
        self._stream_s = stream_hours * 3600
        self._auth_params = {"key": api_key} if api_key else {}
        self._headers = {"Authorization": f"Bearer {oauth_token}"} if oauth_token else {}
        self._base = api_base.rstrip("/")
        self.quota = _Quota(quota_units)
        self._list_units, self._videos_units = list_cost_units, videos_cost_units
        self._page_size, self._backfill_s = page_size, backfill_s
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._clock, self._sleep = clock, sleep
        self._session: aiohttp.ClientSession | None = None
        self._started_s: float | None = None
        self._token = ""                  # nextPageToken of the last page served
        self._chat_served = False         # a list call succeeded on this chat
        self._next_poll_s = 0.0
        self._newest_ms: int | None = None
        self._dropped = False
        self._token_rejected = False
        self._missed: Missed | None = None
        self._pending: _Page | None = None

    async def connect(self) -> None:
        """Find the live chat (once) and serve its first page; ``BridgeFatal`` if it cannot be."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        if self._started_s is None:
            self._started_s = self._clock()
        if not self.live_chat_id:
            self.live_chat_id = await self._find_chat()
        if self._pending is not None:
            return                        # connected already, its first page not yet read
        self._token_rejected, resumed = False, bool(self._token)
        self._pending = await self._poll()
        if self._dropped and (resumed or self._token_rejected):
            self._missed = self._gap() if self._token_rejected else Missed(0, "resumed from the page token")
        self._dropped = False

    async def read(self) -> AsyncIterator[Item]:
        """Yield each message as polled, at the pace the API and the quota allow, until the chat ends."""
        while True:
            page = self._pending or await self._poll()
            self._pending = None
            cutoff_ms = self._cutoff_ms() if page.fresh else None
            for raw in page.items:
                if cutoff_ms is not None and _published_before(raw, cutoff_ms):
                    continue
                item = chat_item(raw)
                if isinstance(item, ChatMessage):
                    self._newest_ms = max(self._newest_ms or 0, item.sent_at_ms)
                yield item
                if isinstance(item, PlatformNotice) and item.name == "chatEndedEvent":
                    raise ChatEnded("youtube: the live chat ended (chatEndedEvent)")
            if page.offline:
                raise ChatEnded("youtube: the stream went offline (offlineAt)")

    async def close(self) -> None:
        """Close the HTTP session (idempotent)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> YouTubeChat:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def missed(self) -> Missed | None:
        """After a drop: nothing (resumed from the page token), or a gap of unknown size."""
        return self._missed

    # --- polling ---

    async def _poll(self) -> _Page:
        wait_s = self._next_poll_s - self._clock()
        if wait_s > 0:
            await self._sleep(wait_s)
        params = {"liveChatId": self.live_chat_id, "part": "snippet,authorDetails",
                  "maxResults": str(self._page_size)}
        if self._token:
            params["pageToken"] = self._token
        try:
            body = await self._get("/liveChat/messages", params, self._list_units)
        except _ApiError as exc:
            if exc.reason in ("invalidPageToken", "pageTokenInvalid") and self._token:
                self._token, self._token_rejected, self._missed = "", True, self._gap()
                return await self._poll()
            raise self._list_error(exc) from None
        fresh, self._chat_served = not self._token, True
        self._token = body.get("nextPageToken") or self._token
        server_s = float(body.get("pollingIntervalMillis", DEFAULT_POLL_S * 1000)) / 1000
        now = self._clock()
        window_s = min(self._stream_s, seconds_to_quota_reset(now))
        pace_s = quota_interval_s(self.quota.left(now), self._list_units, window_s)
        self._next_poll_s = now + max(server_s, pace_s if pace_s != float("inf") else 0.0)
        return _Page(list(body.get("items") or []), fresh, offline=bool(body.get("offlineAt")))

    def _list_error(self, exc: _ApiError) -> Exception:
        if exc.reason == "liveChatEnded" or (exc.reason == "liveChatNotFound" and self._chat_served):
            return ChatEnded(f"youtube: the live chat ended ({exc.reason})")
        if exc.reason == "liveChatNotFound":
            return BridgeFatal(f"youtube: unknown live chat {self.live_chat_id!r} (liveChatNotFound)")
        if exc.reason == "rateLimitExceeded":
            self._dropped = True
            return ConnectionLost(f"youtube: polled too fast ({exc.reason}): {exc.message}")
        return self._fatal(exc, "live chat")

    async def _find_chat(self) -> str:
        try:
            body = await self._get("/videos", {"part": "liveStreamingDetails", "id": self.video_id},
                                   self._videos_units)
        except _ApiError as exc:
            raise self._fatal(exc, "videos.list") from None
        items = body.get("items") or []
        if not items:
            raise BridgeFatal(f"youtube: unknown video {self.video_id!r} (videos.list found nothing)")
        chat_id = (items[0].get("liveStreamingDetails") or {}).get("activeLiveChatId")
        if not chat_id:
            raise BridgeFatal(f"youtube: video {self.video_id!r} is not live / has no live chat")
        return str(chat_id)

    def _fatal(self, exc: _ApiError, what: str) -> BridgeFatal:
        if exc.reason == "quotaExceeded":
            return self._quota_fatal("the API says the project's daily quota is spent (quotaExceeded)")
        refused = {400: "refused the request", 401: "refused the OAuth token", 403: "forbade it"}
        return BridgeFatal(f"youtube: {what} {refused.get(exc.status, f'answered {exc.status}')}: "
                           f"{exc.reason or 'no reason'} ({exc.message})")

    def _quota_fatal(self, why: str) -> BridgeFatal:
        left = _hours(seconds_to_quota_reset(self._clock()))
        return BridgeFatal(f"youtube: {why}; nothing can be read until it resets at midnight "
                           f"Pacific time, in {left}")

    async def _get(self, path: str, params: dict[str, str], units: int) -> dict[str, Any]:
        now = self._clock()
        if self.quota.left(now) < units:
            budget = self.quota.budget_units
            raise self._quota_fatal(f"this connector's daily budget of {budget} units is spent")
        if self._session is None:
            raise RuntimeError("youtube: connect() before read()")
        self.quota.spend(now, units)     # the API charges a call that fails, too
        try:
            async with self._session.get(self._base + path, params={**params, **self._auth_params},
                                         headers=self._headers) as resp:
                status, text = resp.status, await resp.text()
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            self._dropped = True
            raise ConnectionLost(f"youtube: {path}: {type(exc).__name__}: {exc}") from exc
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        if status >= 500 or status == 429:
            self._dropped = True
            raise ConnectionLost(f"youtube: {path}: HTTP {status}")
        if status != 200:
            raise _ApiError(status, *error_reason(body))
        if not isinstance(body, dict):
            self._dropped = True
            raise ConnectionLost(f"youtube: {path}: a 200 whose body is not a JSON object")
        return body

    def _cutoff_ms(self) -> int:
        if self._newest_ms is not None:
            return self._newest_ms
        return round(((self._started_s or 0.0) - self._backfill_s) * 1000)

    def _gap(self) -> Missed:
        return Missed(count=None, detail="the API rejected the page token: polling began again from its "
                      "recent history, and messages during the gap may be lost")


def _published_before(raw: Any, cutoff_ms: int) -> bool:
    try:
        return published_ms(raw["snippet"]["publishedAt"]) < cutoff_ms
    except (KeyError, TypeError, ValueError):
        return False                     # chat_item reports it as unparsed
