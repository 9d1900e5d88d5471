"""A loopback YouTube Data API v3 for the YouTube connector's tests and the bridge benchmark.

It serves ``GET /videos`` (``part=liveStreamingDetails``) and ``GET /liveChat/messages`` in the
documented JSON (``kind``, ``etag``, ``nextPageToken``, ``pollingIntervalMillis``, ``offlineAt``,
``pageInfo``, ``items``), with page tokens that really resume, a first page of recent history (the
last ``history`` messages, as the API documents), quota per credential with the API's own
``quotaExceeded`` body once spent, the documented error bodies (``keyInvalid``, ``authError``,
``forbidden``, ``liveChatEnded``, ``liveChatNotFound``, ``invalidPageToken``), a chat that ends,
and ``drop()``: the next requests fail at the TCP level or with 503, then it recovers.
"""

from __future__ import annotations

import base64
import hashlib
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

QUOTA_MESSAGE = ('The request cannot be completed because you have exceeded your '
                 '<a href="/youtube/v3/getting-started#quota">quota</a>.')
CHAT_NOT_FOUND = ("The live chat that you are trying to retrieve cannot be found. Check the value of "
                  "the request's liveChatId parameter to ensure that it is correct.")
FORBIDDEN = "You do not have the permissions required to retrieve messages for the specified live chat."
AUTH_MESSAGE = ("Request had invalid authentication credentials. Expected OAuth 2 access token, login "
                "cookie or other valid authentication credential. See "
                "https://developers.google.com/identity/sign-in/web/devconsole-project.")


def api_error(code: int, reason: str, message: str, domain: str, **extra: str) -> dict[str, Any]:
    """An error body in the API's format: ``error.code``, ``error.message``, ``error.errors[]``."""
    return {"error": {"code": code, "message": message,
                      "errors": [{"message": message, "domain": domain, "reason": reason, **extra}]}}


def _rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass
class _Chat:
    chat_id: str
    video_id: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    offline_at: str = ""
    closed: str = ""                  # "", "liveChatEnded" (403) or "liveChatNotFound" (404)


class YouTubePeer:
    """The API on 127.0.0.1 (``await start()`` or ``async with``); ``url`` is its ``api_base``."""

    def __init__(
        self, *, polling_interval_ms: int = 20, api_keys: tuple[str, ...] = ("test-key",),
        oauth_tokens: tuple[str, ...] = ("test-token",), quota_units: int = 10_000,
        list_cost_units: int = 5, videos_cost_units: int = 1, history: int = 75,
    ) -> None:
        self.polling_interval_ms = polling_interval_ms
        self.api_keys, self.oauth_tokens = set(api_keys), set(oauth_tokens)
        self.quota_units, self.history = quota_units, history
        self._costs = {"/videos": videos_cost_units, "/liveChat/messages": list_cost_units}
        self.spent: dict[str, int] = {}          # units per credential
        self.forbidden: set[str] = set()         # credentials answered 403 forbidden
        self.videos: dict[str, dict[str, Any]] = {}
        self.chats: dict[str, _Chat] = {}
        self.list_call_times: list[float] = []   # time.monotonic() of each list call served or refused
        self._drops_left, self._drop_how = 0, "reset"
        self._token_epoch, self._seq = 0, 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    @property
    def list_calls(self) -> int:
        """liveChatMessages.list calls received (refused ones too, as the API charges them)."""
        return len(self.list_call_times)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/videos", self._videos)
        app.router.add_get("/liveChat/messages", self._messages)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> YouTubePeer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- what a test or a benchmark does to it ---

    def add_video(self, video_id: str, live_chat_id: str = "", *, broadcast: bool = True) -> None:
        """A video: live with ``live_chat_id``, a broadcast without a chat (""), or a plain upload."""
        details = {"actualStartTime": _rfc3339(int(time.time() * 1000)), "concurrentViewers": "12"}
        if live_chat_id:
            details["activeLiveChatId"] = live_chat_id
            self.chats.setdefault(live_chat_id, _Chat(live_chat_id, video_id))
        video: dict[str, Any] = {"kind": "youtube#video", "etag": _etag(video_id), "id": video_id}
        if broadcast:
            video["liveStreamingDetails"] = details
        self.videos[video_id] = video

    def post(self, live_chat_id: str, kind: str = "textMessageEvent", *, text: str = "hello",
             author: str = "Ada", channel_id: str = "", amount_micros: int = 1_000_000,
             currency: str = "USD", count: int = 1, level: str = "Stage Crew",
             published_at_ms: int | None = None, owner: bool = False, moderator: bool = False,
             member: bool = False, verified: bool = False) -> dict[str, Any]:
        """Add one message of ``kind`` (a ``snippet.type``) to a chat; returns the resource."""
        self._seq += 1
        channel = channel_id or "UC" + hashlib.sha1(author.encode()).hexdigest()[:22]
        snippet: dict[str, Any] = {
            "type": kind, "liveChatId": live_chat_id, "authorChannelId": channel,
            "publishedAt": _rfc3339(published_at_ms or int(time.time() * 1000)),
            "hasDisplayContent": kind not in ("tombstone", "chatEndedEvent", "messageDeletedEvent"),
        }
        snippet.update(_details(kind, text, amount_micros, currency, count, level, author))
        item = {"kind": "youtube#liveChatMessage", "etag": _etag(str(self._seq)),
                "id": f"LCC.{live_chat_id[:8]}.{self._seq:08d}", "snippet": snippet}
        if kind not in ("tombstone", "chatEndedEvent"):
            item["authorDetails"] = {
                "channelId": channel, "channelUrl": f"http://www.youtube.com/channel/{channel}",
                "displayName": author, "profileImageUrl": f"https://yt3.ggpht.com/{channel}=s88",
                "isVerified": verified, "isChatOwner": owner, "isChatSponsor": member,
                "isChatModerator": moderator,
            }
        self.chats[live_chat_id].messages.append(item)
        return item

    def end_chat(self, live_chat_id: str) -> None:
        """The stream ends: a chatEndedEvent, ``offlineAt`` in every response, the video no longer live."""
        chat = self.chats[live_chat_id]
        self.post(live_chat_id, "chatEndedEvent")
        chat.offline_at = _rfc3339(int(time.time() * 1000))
        details = self.videos[chat.video_id].get("liveStreamingDetails", {})
        details.pop("activeLiveChatId", None)
        details["actualEndTime"] = chat.offline_at

    def close_chat(self, live_chat_id: str, reason: str = "liveChatEnded") -> None:
        """From now on list calls on the chat fail: 403 liveChatEnded or 404 liveChatNotFound."""
        self.chats[live_chat_id].closed = reason

    def drop(self, requests: int | None = 2, how: str = "reset") -> None:
        """The next ``requests`` requests (all, until ``recover()``, for None) fail: ``"reset"``
        closes the connection unanswered, ``"503"`` answers 503.  aiohttp retries a GET once after
        a reset, so one failure its caller sees takes two requests here."""
        self._drops_left, self._drop_how = (-1 if requests is None else requests), how

    def recover(self) -> None:
        """Requests are served again."""
        self._drops_left = 0

    def expire_page_tokens(self) -> None:
        """Every page token given so far is refused (400 invalidPageToken) from now on."""
        self._token_epoch += 1

    # --- the API ---

    async def _videos(self, request: web.Request) -> web.StreamResponse:
        refused = await self._admit(request, "/videos")
        if refused is not None:
            return refused
        video = self.videos.get(request.query.get("id", ""))
        items = [video] if video is not None else []
        return web.json_response({"kind": "youtube#videoListResponse", "etag": _etag(str(items)),
                                  "items": items,
                                  "pageInfo": {"totalResults": len(items), "resultsPerPage": len(items)}})

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        self.list_call_times.append(time.monotonic())
        refused = await self._admit(request, "/liveChat/messages")
        if refused is not None:
            return refused
        query = request.query
        chat = self.chats.get(query.get("liveChatId", ""))
        if chat is None or chat.closed == "liveChatNotFound":
            return web.json_response(api_error(404, "liveChatNotFound", CHAT_NOT_FOUND,
                                               "youtube.liveChat"), status=404)
        if chat.closed:
            return web.json_response(api_error(403, "liveChatEnded", "The live chat is no longer live.",
                                               "youtube.liveChat"), status=403)
        size = int(query.get("maxResults", "500"))
        if not 200 <= size <= 2000:
            return web.json_response(api_error(400, "invalidValue", "Invalid value for maxResults.",
                                               "youtube.parameter"), status=400)
        start = self._position(chat, query.get("pageToken"))
        if start is None:
            return web.json_response(api_error(
                400, "invalidPageToken", "The request specifies an invalid page token.",
                "youtube.parameter", location="pageToken", locationType="parameter"), status=400)
        items = chat.messages[start:start + size]
        body: dict[str, Any] = {
            "kind": "youtube#liveChatMessageListResponse", "etag": _etag(f"{chat.chat_id}{start}"),
            "pollingIntervalMillis": self.polling_interval_ms,
            "pageInfo": {"totalResults": len(items), "resultsPerPage": len(items)},
            "nextPageToken": self._token(chat, start + len(items)), "items": items,
        }
        if chat.offline_at:
            body["offlineAt"] = chat.offline_at
        return web.json_response(body)

    async def _admit(self, request: web.Request, path: str) -> web.StreamResponse | None:
        """Drops, credentials and quota, in the order the API applies them; None to serve."""
        if self._drops_left != 0:
            self._drops_left -= 1 if self._drops_left > 0 else 0
            if self._drop_how == "503":
                return web.json_response(api_error(503, "backendError", "Backend Error", "global"),
                                         status=503)
            if request.transport is not None:
                request.transport.abort()     # a reset: the client reads no response at all
            raise web.HTTPServiceUnavailable()
        bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
        credential = request.query.get("key") or bearer
        if request.query.get("key") and credential not in self.api_keys:
            return web.json_response(api_error(400, "keyInvalid", "Bad Request", "usageLimits"), status=400)
        if bearer and not request.query.get("key") and credential not in self.oauth_tokens:
            body = api_error(401, "authError", AUTH_MESSAGE, "global", location="Authorization",
                             locationType="header")
            body["error"]["errors"][0]["message"] = "Invalid Credentials"
            body["error"]["status"] = "UNAUTHENTICATED"
            return web.json_response(body, status=401)
        if not credential or credential in self.forbidden:
            return web.json_response(api_error(403, "forbidden", FORBIDDEN, "youtube.liveChat"), status=403)
        cost = self._costs[path]
        if self.spent.get(credential, 0) + cost > self.quota_units:
            return web.json_response(api_error(403, "quotaExceeded", QUOTA_MESSAGE, "youtube.quota"),
                                     status=403)
        self.spent[credential] = self.spent.get(credential, 0) + cost
        return None

    def _token(self, chat: _Chat, position: int) -> str:
        raw = f"{self._token_epoch}:{chat.chat_id}:{position}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _position(self, chat: _Chat, token: str | None) -> int | None:
        if not token:
            return max(0, len(chat.messages) - self.history)
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
            epoch, chat_id, position = raw.split(":")
        except ValueError:
            return None
        if int(epoch) != self._token_epoch or chat_id != chat.chat_id:
            return None
        return int(position)


def _details(kind: str, text: str, micros: int, currency: str, count: int, level: str,
             author: str) -> dict[str, Any]:
    """The snippet fields of one message type, as the API documents them."""
    shown = f"{currency} {micros / 1e6:.2f}"
    paid = {"amountMicros": str(micros), "currency": currency, "amountDisplayString": shown, "tier": 1}
    table: dict[str, dict[str, Any]] = {
        "textMessageEvent": {"displayMessage": text, "textMessageDetails": {"messageText": text}},
        "superChatEvent": {"displayMessage": f"{shown} from {author}: {text}",
                           "superChatDetails": {**paid, "userComment": text}},
        "superStickerEvent": {"displayMessage": f"Super Sticker of {shown} from {author}",
                              "superStickerDetails": {**paid, "superStickerMetadata": {
                                  "stickerId": "sticker_1", "altText": text, "altTextLanguage": "en"}}},
        "newSponsorEvent": {"displayMessage": f"Welcome to {level}!",
                            "newSponsorDetails": {"memberLevelName": level, "isUpgrade": False}},
        "memberMilestoneChatEvent": {"displayMessage": f"Member for {count} months: {text}",
                                     "memberMilestoneChatDetails": {"userComment": text, "memberMonth": count,
                                                                    "memberLevelName": level}},
        "membershipGiftingEvent": {"displayMessage": f"{author} gifted {count} {level} memberships",
                                   "membershipGiftingDetails": {"giftMembershipsCount": count,
                                                                "giftMembershipsLevelName": level}},
        "giftMembershipReceivedEvent": {"displayMessage": f"{author} received a gift membership",
                                        "giftMembershipReceivedDetails": {"memberLevelName": level}},
        "messageDeletedEvent": {"messageDeletedDetails": {"deletedMessageId": text}},
    }
    return table.get(kind, {"displayMessage": text} if kind not in ("tombstone", "chatEndedEvent") else {})


def _etag(seed: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha1(seed.encode()).digest()).decode().rstrip("=")
