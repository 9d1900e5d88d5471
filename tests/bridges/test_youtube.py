"""The YouTube connector: recorded API bodies mapped to exact items, and the connector against a
loopback API (bench.peers.youtube): the chat lookup and its errors, the polling pace, the quota
pace, the chat's end, and a drop resumed from the page token."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import aiohttp
import pytest

from app.bridges.base import (
    BridgeFatal,
    ChatEnded,
    ChatMessage,
    ConnectionLost,
    Missed,
    PlatformNotice,
)
from app.bridges.youtube import (
    YouTubeChat,
    chat_item,
    error_reason,
    pacific_offset_s,
    published_ms,
    quota_interval_s,
    seconds_to_quota_reset,
)
from bench.peers.youtube import YouTubePeer
from events.errors import ConfigError
from tests.conftest import wait_for

DATA = Path(__file__).parent / "data" / "youtube"
VIDEO, CHAT = "h_LveRFwIHk", "Cg0KC2hfTHZlUkZ3SUhr"
MARCH_14_23H_PDT = 1742018400.0          # 2025-03-15T06:00:00Z: an hour before the quota resets
GAP = ("the API rejected the page token: polling began again from its recent history, and messages "
       "during the gap may be lost")


def recorded(name: str) -> Any:
    return json.loads((DATA / name).read_text())


class FakeTime:
    """An injected clock and sleep: the sleep records what it was asked, moves the clock on by it,
    and yields to the loop for a moment so that the loopback peer and the test run."""

    def __init__(self, start: float) -> None:
        self.now = start
        self.asked: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.asked.append(seconds)
        self.now += seconds
        await asyncio.sleep(0.002)


class Reader:
    """``read()`` consumed in a task: what it yielded, and how it ended."""

    def __init__(self, chat: YouTubeChat) -> None:
        self.items: list[Any] = []
        self.error: BaseException | None = None
        self.task = asyncio.create_task(self._run(chat), name="youtube-test-reader")

    async def _run(self, chat: YouTubeChat) -> None:
        try:
            async for item in chat.read():
                self.items.append(item)
        except (ConnectionLost, ChatEnded, BridgeFatal) as exc:
            self.error = exc

    def messages(self) -> list[ChatMessage]:
        return [i for i in self.items if isinstance(i, ChatMessage)]

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@pytest.fixture
async def peer() -> AsyncIterator[YouTubePeer]:
    async with YouTubePeer(polling_interval_ms=20) as running:
        running.add_video(VIDEO, CHAT)
        yield running


class Connectors:
    """Makes connectors on the peer (the loopback API by default) and closes them all at the end."""

    def __init__(self, peer: YouTubePeer) -> None:
        self.peer = peer
        self.made: list[YouTubeChat] = []

    def __call__(self, fake: FakeTime | None = None, **kwargs: Any) -> YouTubeChat:
        # A quota that never paces the polls of a test on the real clock (10,000 units a day are
        # one poll every 7 s): the tests of the quota's pace give their own.
        args: dict[str, Any] = {"video_id": VIDEO, "api_key": "test-key", "api_base": self.peer.url,
                                "quota_units": 10**9}
        if fake is not None:
            args.update(clock=fake.clock, sleep=fake.sleep)
        chat = YouTubeChat(**(args | kwargs))
        self.made.append(chat)
        return chat


@pytest.fixture
async def connector(peer: YouTubePeer) -> AsyncIterator[Connectors]:
    made = Connectors(peer)
    yield made
    for chat in made.made:
        await chat.close()


# --- pure: items, times, errors, quota -----------------------------------------------------------


def test_recorded_items_map_to_exact_fields() -> None:
    def gift(id_: str, viewer: str, name: str, text: str, value: float, currency: str,
             badges: tuple[str, ...], ms: int, event: str) -> ChatMessage:
        return ChatMessage("youtube", f"youtube:{id_}", f"yt:{viewer}", name, text, "gift", value,
                           currency, badges, ms, event)

    expected = [
        ChatMessage("youtube", "youtube:LCC.text0001", "yt:UC" + "a" * 22, "Ada", "hello from the chat",
                    "comment", 0.0, "", ("moderator", "member"), 1741978923123, "textMessageEvent"),
        gift("LCC.superchat0002", "UC" + "b" * 22, "Bo", "keep it up!", 5.0, "USD", (),
             1741978924500, "superChatEvent"),
        gift("LCC.sticker0003", "UC" + "c" * 22, "Chie", "A hamster giving a thumbs up", 200.0, "JPY",
             ("verified",), 1741978925988, "superStickerEvent"),
        gift("LCC.sponsor0004", "UC" + "d" * 22, "Dev", "Welcome to Stage Crew!", 1.0, "members",
             ("member",), 1741978926000, "newSponsorEvent"),
        gift("LCC.milestone0005", "UC" + "e" * 22, "Eun", "six months already!", 1.0, "members",
             ("member",), 1742004127250, "memberMilestoneChatEvent"),
        gift("LCC.gifting0006", "UC" + "f" * 22, "Fen", "Fen gifted 5 Stage Crew memberships", 5.0,
             "members", ("member",), 1741978928000, "membershipGiftingEvent"),
        gift("LCC.received0007", "UC" + "g" * 22, "Gus", "Gus received a gift membership by Fen", 1.0,
             "members", ("member",), 1741978928500, "giftMembershipReceivedEvent"),
        PlatformNotice("youtube", "messageDeletedEvent", "youtube:LCC.text0001"),
        PlatformNotice("youtube", "userBannedEvent", "yt:UC" + "i" * 22),
        PlatformNotice("youtube", "tombstone", ""),
    ]
    assert [chat_item(raw) for raw in recorded("messages_list.json")["items"]] == expected
    ended = recorded("messages_list_offline.json")["items"][0]
    assert chat_item(ended) == PlatformNotice("youtube", "chatEndedEvent", "")


def test_an_item_that_cannot_be_parsed_is_a_notice_that_says_why() -> None:
    superchat = recorded("messages_list.json")["items"][1]
    bad_amount = {**superchat, "snippet": {**superchat["snippet"], "superChatDetails": {
        **superchat["snippet"]["superChatDetails"], "amountMicros": "lots"}}}
    no_offset = {**superchat, "snippet": {**superchat["snippet"], "publishedAt": "2025-03-14T19:02:04"}}
    for raw in (bad_amount, no_offset, {"id": "LCC.x"}):
        item = chat_item(raw)
        assert isinstance(item, PlatformNotice) and item.name == "unparsed"
        assert item.detail.startswith("liveChatMessage LCC.") and "\n" not in item.detail


def test_published_at_is_rfc3339_with_any_fraction_and_offset() -> None:
    assert published_ms("2025-03-14T19:02:03Z") == 1741978923000
    assert published_ms("2025-03-14T19:02:03.1Z") == 1741978923100
    assert published_ms("2025-03-14T19:02:03.123456789Z") == 1741978923123
    assert published_ms("2025-03-14T12:02:03.5-07:00") == 1741978923500


@pytest.mark.parametrize(("name", "reason"), [
    ("error_quota_exceeded.json", "quotaExceeded"), ("error_key_invalid.json", "keyInvalid"),
    ("error_auth.json", "authError"), ("error_forbidden.json", "forbidden"),
    ("error_live_chat_ended.json", "liveChatEnded"), ("error_live_chat_not_found.json", "liveChatNotFound"),
    ("error_invalid_page_token.json", "invalidPageToken"),
])
def test_error_bodies_name_their_reason(name: str, reason: str) -> None:
    got, message = error_reason(recorded(name))
    assert got == reason and message and "<" not in message
    assert error_reason("not json") == ("", "")


def test_the_quota_resets_at_midnight_pacific_across_daylight_saving() -> None:
    assert seconds_to_quota_reset(MARCH_14_23H_PDT) == pytest.approx(3600)
    assert seconds_to_quota_reset(1741510800.0) == pytest.approx(22 * 3600)    # 03-09 01:00 PST, 23 h day
    assert seconds_to_quota_reset(1762072200.0) == pytest.approx(23.5 * 3600)  # 11-02 01:30 PDT, 25 h day
    dst_edges = [1741514399.0, 1741514400.0, 1762073999.0, 1762074000.0]   # 2025's changes, either side
    assert [pacific_offset_s(at) / 3600 for at in dst_edges] == [-8, -7, -7, -8]
    try:
        pacific = ZoneInfo("America/Los_Angeles")
    except ZoneInfoNotFoundError:
        pytest.skip("no time zone database here to compare with")
    for at in [*dst_edges, *(1735689600.0 + hour * 3600 for hour in range(0, 2 * 366 * 24, 7))]:
        offset = datetime.fromtimestamp(at, pacific).utcoffset()
        assert offset is not None and pacific_offset_s(at) == offset.total_seconds(), at


def test_the_quota_interval_spreads_the_calls_left_over_the_hours_left() -> None:
    assert quota_interval_s(100, 5, 3600) == pytest.approx(180)
    assert quota_interval_s(9_999, 5, 86400) == pytest.approx(86400 / 1999)
    assert quota_interval_s(4, 5, 3600) == float("inf")


def test_the_arguments_are_checked() -> None:
    with pytest.raises(ConfigError, match="one of them"):
        YouTubeChat(video_id="v", live_chat_id="c", api_key="k")
    with pytest.raises(ConfigError, match="one of them"):
        YouTubeChat(video_id="v", api_key="k", oauth_token="t")
    with pytest.raises(ConfigError, match="200..2000"):
        YouTubeChat(video_id="v", api_key="k", page_size=50)


# --- against the loopback API --------------------------------------------------------------------


async def test_the_peer_answers_in_the_recorded_error_shapes(peer: YouTubePeer) -> None:
    peer.add_video("ended", "ended-chat")
    peer.close_chat("ended-chat")
    peer.api_keys.add("forbidden-key")
    peer.forbidden.add("forbidden-key")
    peer.api_keys.add("spent-key")
    peer.spent["spent-key"] = peer.quota_units
    messages = f"{peer.url}/liveChat/messages?part=snippet&liveChatId="
    cases = {
        f"{messages}{CHAT}&key=spent-key": "error_quota_exceeded.json",
        f"{messages}{CHAT}&key=bad-key": "error_key_invalid.json",
        f"{messages}{CHAT}&key=forbidden-key": "error_forbidden.json",
        f"{messages}ended-chat&key=test-key": "error_live_chat_ended.json",
        f"{messages}nowhere&key=test-key": "error_live_chat_not_found.json",
        f"{messages}{CHAT}&key=test-key&pageToken=stale": "error_invalid_page_token.json",
    }
    async with aiohttp.ClientSession() as session:
        for url, name in cases.items():
            async with session.get(url) as resp:
                assert (resp.status, await resp.json()) == (recorded(name)["error"]["code"], recorded(name))
        async with session.get(f"{messages}{CHAT}", headers={"Authorization": "Bearer stale"}) as resp:
            assert (resp.status, await resp.json()) == (401, recorded("error_auth.json"))


async def test_connect_finds_the_chat_and_yields_nothing_from_before_its_start(
    peer: YouTubePeer, connector: Connectors,
) -> None:
    hour_ago_ms = int((time.time() - 3600) * 1000)
    old = [peer.post(CHAT, text=f"old {n}", published_at_ms=hour_ago_ms + n) for n in range(3)]
    chat = connector(oauth_token="test-token", api_key="")
    await chat.connect()
    assert chat.live_chat_id == CHAT and chat.missed() is None
    reader = Reader(chat)
    new = peer.post(CHAT, "superChatEvent", text="now", author="Bo", amount_micros=2_500_000)
    await wait_for(lambda: len(reader.messages()) == 1, 5, "the new message")
    await reader.stop()
    assert [m.id for m in reader.messages()] == [f"youtube:{new['id']}"]
    assert (reader.messages()[0].kind, reader.messages()[0].value) == ("gift", 2.5)

    backfilled = connector(backfill_s=7200)
    await backfilled.connect()
    reader = Reader(backfilled)
    await wait_for(lambda: len(reader.messages()) == 4, 5, "the backfill and the new message")
    await reader.stop()
    assert [m.id for m in reader.messages()] == [f"youtube:{m['id']}" for m in [*old, new]]


@pytest.mark.parametrize(("setup", "args", "words"), [
    ("", {"video_id": "no-such-video"}, "unknown video 'no-such-video'"),
    ("no-chat", {"video_id": "no-chat"}, "is not live / has no live chat"),
    ("upload", {"video_id": "upload"}, "is not live / has no live chat"),
    ("", {"api_key": "bad-key"}, "refused the request: keyInvalid (Bad Request)"),
    ("", {"api_key": "", "oauth_token": "expired"}, "refused the OAuth token: authError"),
    ("forbid", {}, "forbade it: forbidden (You do not have the permissions"),
    ("spend", {}, "quotaExceeded); nothing can be read until it resets at midnight Pacific time"),
    ("", {"video_id": "", "live_chat_id": "no-such-chat"}, "unknown live chat 'no-such-chat'"),
])
async def test_what_connect_refuses_is_one_fatal_line(
    peer: YouTubePeer, connector: Connectors, setup: str, args: dict[str, Any], words: str,
) -> None:
    peer.add_video("no-chat", "")
    peer.add_video("upload", broadcast=False)
    if setup == "forbid":
        peer.forbidden.add("test-key")
    if setup == "spend":
        peer.spent["test-key"] = peer.quota_units
    chat = connector(**args)
    with pytest.raises(BridgeFatal) as refused:
        await chat.connect()
    line = str(refused.value)
    assert words in line and line.startswith("youtube: ") and "\n" not in line and "<" not in line


@pytest.mark.parametrize("how", ["reset", "503"])
async def test_a_server_or_network_failure_on_connect_is_retried(
    peer: YouTubePeer, connector: Connectors, how: str,
) -> None:
    chat = connector()
    peer.drop(None, how)
    for _ in range(2):
        with pytest.raises(ConnectionLost):
            await chat.connect()
    peer.recover()
    await chat.connect()
    assert chat.live_chat_id == CHAT and chat.missed() is None


async def test_polling_waits_the_interval_the_api_asks_for(
    peer: YouTubePeer, connector: Connectors,
) -> None:
    fake = FakeTime(time.time())
    peer.polling_interval_ms = 250
    chat = connector(fake)
    await chat.connect()
    reader = Reader(chat)
    await wait_for(lambda: peer.list_calls >= 5, 5, "five list calls")
    peer.polling_interval_ms = 1500
    seen = peer.list_calls
    await wait_for(lambda: peer.list_calls >= seen + 3, 5, "three more list calls")
    await reader.stop()
    asked = fake.asked
    assert asked[:3] == pytest.approx([0.25] * 3)
    assert asked[-2:] == pytest.approx([1.5] * 2)
    assert set(round(s, 6) for s in asked) == {0.25, 1.5}
    assert len(asked) in (peer.list_calls - 1, peer.list_calls)   # one wait before each call but the first


@pytest.mark.parametrize("hours", [24.0, 4.0])
async def test_polling_never_outruns_the_quota_left_for_the_day(
    peer: YouTubePeer, connector: Connectors, hours: float,
) -> None:
    """The units left are spread over the stream's next hours (never past the reset)."""
    fake = FakeTime(MARCH_14_23H_PDT)
    chat = connector(fake, quota_units=101, stream_hours=hours)
    await chat.connect()                  # 1 unit for videos.list, 5 for the first page: 95 left
    reader = Reader(chat)
    await wait_for(lambda: any(s > 400 for s in fake.asked), 10, "the pace of a new day")
    await reader.stop()
    assert reader.error is None
    first_day = [s for s in fake.asked if s < 400]
    assert first_day[:18] == pytest.approx([3600 / 19] * 18, rel=1e-6)   # 19 calls left for the hour
    assert len(first_day) in (19, 20)
    # 96 units a new day, over the next `hours`
    assert fake.asked[len(first_day)] == pytest.approx(hours * 3600 / 19, rel=1e-3)


async def test_a_spent_budget_or_quota_is_one_fatal_line_that_says_when_it_resets(
    peer: YouTubePeer, connector: Connectors,
) -> None:
    fake = FakeTime(MARCH_14_23H_PDT)
    chat = connector(fake, quota_units=6)
    await chat.connect()
    reader = Reader(chat)
    await wait_for(lambda: reader.error is not None, 5, "the budget to run out")
    assert isinstance(reader.error, BridgeFatal)
    assert "daily budget of 6 units is spent" in str(reader.error)
    assert "midnight Pacific time, in 0h59m" in str(reader.error)

    peer.quota_units = peer.spent["test-key"] + 6       # the API's own quota: one list call left
    chat = connector()
    await chat.connect()
    reader = Reader(chat)
    await wait_for(lambda: reader.error is not None, 5, "the API's quotaExceeded")
    assert isinstance(reader.error, BridgeFatal) and "(quotaExceeded)" in str(reader.error)


async def test_the_chat_ending_ends_read(peer: YouTubePeer, connector: Connectors) -> None:
    chat = connector()
    await chat.connect()
    reader = Reader(chat)
    posted = [peer.post(CHAT, text=f"bye {n}") for n in range(2)]
    peer.end_chat(CHAT)
    await wait_for(lambda: reader.task.done(), 5, "read() to end")
    assert isinstance(reader.error, ChatEnded)
    assert [m.id for m in reader.messages()] == [f"youtube:{p['id']}" for p in posted]
    assert reader.items[-1] == PlatformNotice("youtube", "chatEndedEvent", "")


@pytest.mark.parametrize("reason", ["liveChatEnded", "liveChatNotFound"])
async def test_a_chat_closed_after_it_was_found_ends_read(
    peer: YouTubePeer, connector: Connectors, reason: str,
) -> None:
    chat = connector()
    await chat.connect()
    reader = Reader(chat)
    peer.close_chat(CHAT, reason)
    await wait_for(lambda: reader.task.done(), 5, "read() to end")
    assert isinstance(reader.error, ChatEnded) and reason in str(reader.error)


@pytest.mark.parametrize("how", ["reset", "503"])
async def test_a_drop_resumes_from_the_page_token_and_misses_nothing(
    peer: YouTubePeer, connector: Connectors, how: str,
) -> None:
    chat = connector()
    await chat.connect()
    reader = Reader(chat)
    before = [peer.post(CHAT, text=f"before {n}") for n in range(3)]
    await wait_for(lambda: len(reader.messages()) == 3, 5, "the first messages")
    assert chat.missed() is None
    peer.drop(None, how)
    await wait_for(lambda: reader.error is not None, 5, "the drop")
    assert isinstance(reader.error, ConnectionLost)
    during = [peer.post(CHAT, "superChatEvent", text=f"during {n}") for n in range(5)]
    with pytest.raises(ConnectionLost):
        await chat.connect()
    peer.recover()
    await chat.connect()
    assert chat.missed() == Missed(count=0, detail="resumed from the page token")
    second = Reader(chat)
    after = [peer.post(CHAT, text=f"after {n}") for n in range(2)]
    await wait_for(lambda: len(second.messages()) == 7, 5, "the gap's and the later messages")
    await second.stop()
    ids = [m.id for m in reader.messages() + second.messages()]
    assert ids == [f"youtube:{p['id']}" for p in before + during + after]


async def test_a_rejected_page_token_is_reported_as_a_gap(
    peer: YouTubePeer, connector: Connectors,
) -> None:
    chat = connector()
    await chat.connect()
    reader = Reader(chat)
    now_ms = int(time.time() * 1000)
    before = [peer.post(CHAT, text=f"before {n}", published_at_ms=now_ms + 10 * n) for n in range(2)]
    await wait_for(lambda: len(reader.messages()) == 2, 5, "the first messages")
    peer.drop(None)
    await wait_for(lambda: reader.error is not None, 5, "the drop")
    during = [peer.post(CHAT, text=f"during {n}", published_at_ms=now_ms + 100 + n) for n in range(3)]
    peer.recover()
    peer.expire_page_tokens()
    await chat.connect()
    assert chat.missed() == Missed(None, GAP)
    second = Reader(chat)
    await wait_for(lambda: len(second.messages()) >= 3, 5, "the gap's messages from the history")
    await second.stop()
    # afresh from the API's recent history: what is at or after the newest message already read
    # (the last one before the drop comes again, for the bridge to drop as a duplicate)
    assert [m.id for m in second.messages()] == [f"youtube:{p['id']}" for p in [before[-1], *during]]


async def test_a_page_token_rejected_while_reading_is_a_gap_too(
    peer: YouTubePeer, connector: Connectors,
) -> None:
    chat = connector()
    await chat.connect()
    reader = Reader(chat)
    first = peer.post(CHAT, text="first")
    await wait_for(lambda: len(reader.messages()) == 1, 5, "the first message")
    peer.expire_page_tokens()
    second = peer.post(CHAT, text="second", published_at_ms=int(time.time() * 1000) + 10)
    await wait_for(lambda: f"youtube:{second['id']}" in [m.id for m in reader.messages()], 5, "the second")
    await reader.stop()
    assert reader.error is None and chat.missed() == Missed(None, GAP)
    assert [m.id for m in reader.messages()][-1] == f"youtube:{second['id']}"
    assert f"youtube:{first['id']}" in [m.id for m in reader.messages()]
