"""The Twitch connector: its parser on recorded Twitch lines, the connector against a loopback Twitch
peer over TLS, and against a real IRC server (Debian's ngircd, over TLS, stopped and restarted).

Of tests/bridges/data/twitch.irc, these lines are Twitch's own documented examples (dev.twitch.tv,
"IRC concepts": the command and tag reference): GLOBALUSERSTATE, the first USERSTATE and ROOMSTATE,
the PRIVMSGs of ronni (Kappa Keepo Kappa, cheer100), lovingt3s, abc and fun2bfun (its tags; the doc
cuts the line after them), the resub, subgift, raid, modiversary and viewermilestone USERNOTICEs,
the CLEARCHATs, CLEARMSG, NOTICE delete_message_success, ``@slow=10`` ROOMSTATE, PART, the untagged
"Hello, chat!" and RECONNECT.  The giftpaidupgrade and the jhmanar submysterygift are real lines
quoted in pajbot/pajbot#487; the Insanit13s subgift is a real 2024 line as a public client's tests
quote it.  The rest are made up in the same format: its gift bomb's header and second recipient,
Japanese, Russian and emoji text, a /me, escaped reply tags, a cheer with two cheermotes, an
anonymous gift, a Prime sub, an announcement, a bits badge tier.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.bridges.base import BridgeFatal, ChatMessage, ConnectionLost, Item, PlatformNotice
from app.bridges.twitch import SendWindow, TwitchChat
from app.bridges.twitch_irc import (
    MassGifts,
    item_of,
    item_of_line,
    message_id,
    parse_line,
    parse_tags,
    refusal_of,
    unescape_tag,
)
from bench.peers.twitch import LoopbackTls, TwitchPeer, recorded_lines
from tests.bridges.ircd import IrcPoster, Ngircd, needs_ngircd
from tests.conftest import wait_for

LINES = recorded_lines(Path(__file__).parent / "data" / "twitch.irc")
RECEIVED_MS = 1_718_000_000_000


def _line(fragment: str) -> str:
    """The one recorded line holding ``fragment``."""
    (found,) = [line for line in LINES if fragment in line]
    return found


# ---- the parser ------------------------------------------------------------------------------


def test_tag_values_are_unescaped() -> None:
    assert unescape_tag(r"a\sb\:c\\d\re\nf") == "a b;c\\d\re\nf"
    assert unescape_tag("plain") == "plain"
    assert unescape_tag(r"odd\q") == "oddq"            # an unknown escape is the character itself
    assert unescape_tag("trailing\\") == "trailing"    # a lone backslash at the end is dropped
    assert parse_tags(r"a=1;b=x\sy;c;d=;e=\:)") == {"a": "1", "b": "x y", "c": "", "d": "", "e": ";)"}


def test_a_line_is_taken_apart() -> None:
    msg = parse_line(_line("Kappa Keepo Kappa"))
    assert msg.tags["emotes"] == "25:0-4,12-16/1902:6-10"
    assert msg.tags["badge-info"] == ""
    assert (msg.prefix, msg.nick, msg.command) == ("ronni!ronni@ronni.tmi.twitch.tv", "ronni", "PRIVMSG")
    assert msg.params == ("#ronni", "Kappa Keepo Kappa")
    assert parse_line("PING :tmi.twitch.tv").params == ("tmi.twitch.tv",)
    assert parse_line(":tmi.twitch.tv CLEARCHAT #dallas").params == ("#dallas",)
    numeric = parse_line(":bar.tmi.twitch.tv 366 bar #twitchdev :End of /NAMES list")
    assert (numeric.command, numeric.params) == ("366", ("bar", "#twitchdev", "End of /NAMES list"))
    assert parse_line(":a!a@a PRIVMSG #c ::) :D").params == ("#c", ":) :D")
    assert parse_line(":a!a@a PRIVMSG #c :").params == ("#c", "")


@pytest.mark.parametrize("line", ["@badges=;mod=0", ":tmi.twitch.tv", "@a=b :tmi.twitch.tv ", "PRIV$MSG #c :x",
                                  "1234 x", ":a!a@a PRIVMSG #c", "@bits=lots :a!a@a PRIVMSG #c :cheer"])
def test_a_line_that_is_not_irc_is_unparsed(line: str) -> None:
    item = item_of_line(line, RECEIVED_MS)
    assert isinstance(item, PlatformNotice)
    assert item.name == "unparsed" and item.detail


def test_every_recorded_line_is_read() -> None:
    items = [item_of_line(line, RECEIVED_MS) for line in LINES]
    assert not [item for item in items if isinstance(item, PlatformNotice) and item.name == "unparsed"]
    messages = [item for item in items if isinstance(item, ChatMessage)]
    assert len(messages) == 21
    assert len({m.id for m in messages}) == 21
    assert sum(m.kind == "gift" for m in messages) == 12
    assert all(m.platform == "twitch" and m.id.startswith("twitch:") for m in messages)
    names = [item.name for item in items if isinstance(item, PlatformNotice)]
    assert names == ["GLOBALUSERSTATE", "USERSTATE", "ROOMSTATE", "PING", "USERNOTICE/modiversary",
                     "USERNOTICE/viewermilestone", "USERNOTICE/announcement", "USERNOTICE/bitsbadgetier",
                     "CLEARCHAT", "CLEARCHAT", "CLEARCHAT", "CLEARMSG", "NOTICE", "NOTICE", "ROOMSTATE",
                     "PART", "RECONNECT"]


def _message(fragment: str) -> ChatMessage:
    item = item_of_line(_line(fragment), RECEIVED_MS)
    assert isinstance(item, ChatMessage)
    return item


def test_comments_as_recorded() -> None:
    assert _message("Kappa Keepo Kappa") == ChatMessage(
        platform="twitch", id="twitch:b34ccfc7-4977-403a-8a94-33c6bac34fb8", viewer="twitch:1337", name="ronni",
        text="Kappa Keepo Kappa", badges=("turbo",), sent_at_ms=1507246572675, event="PRIVMSG")
    assert _message("こんにちは") == ChatMessage(
        platform="twitch", id="twitch:3f1e9b7c-2a44-4c61-9d0e-6b5f2c7a8e10", viewer="twitch:52345001",
        name="Kirara_Mod", text="こんにちは！今日の配信も楽しみ 🎉🔥", badges=("moderator", "subscriber"),
        sent_at_ms=1718000000123, event="PRIVMSG")
    assert _message("Привет").name == "Пётр"
    action = _message("waves at the whole cast")                 # /me: the CTCP ACTION wrapper is gone
    assert (action.text, action.kind) == ("Kappa waves at the whole cast", "comment")
    reply = _message("loud and clear")                           # escaped reply tags do not leak
    assert (reply.text, reply.name, reply.badges) == ("@lovingt3s yes, loud and clear :)", "ReplyGuy", ("subscriber",))
    assert parse_line(_line("loud and clear")).tags["reply-parent-msg-body"] == "is this a test; yes\\no"
    assert _message("VIP checking in").badges == ("vip", "partner")
    untagged = _message("Hello, chat!")                          # no tags: name from the prefix, no viewer
    assert (untagged.name, untagged.viewer, untagged.sent_at_ms) == ("ronni", "", 0)
    assert re.fullmatch(r"twitch:[0-9a-f]{32}", untagged.id)


def test_gifts_as_recorded() -> None:
    assert _message("cheer100") == ChatMessage(
        platform="twitch", id="twitch:b34ccfc7-4977-403a-8a94-33c6bac34fb9", viewer="twitch:12345678", name="ronni",
        text="cheer100", kind="gift", value=100.0, currency="bits", badges=("staff", "bits"),
        sent_at_ms=1507246572676, event="PRIVMSG")
    assert _message("Cheer200 Cheer50").value == 250.0
    assert _message("msg-id=resub") == ChatMessage(
        platform="twitch", id="twitch:db25007f-7a18-43eb-9379-80131e44d633", viewer="twitch:87654321", name="ronni",
        text="Great stream -- keep it up!", kind="gift", value=6.0, currency="subs",
        badges=("staff", "broadcaster", "turbo"), sent_at_ms=1507246572675, event="USERNOTICE/resub")
    assert _message("Mr_Woodchuck!") == ChatMessage(
        platform="twitch", id="twitch:e9176cd8-5e22-4684-ad40-ce53c2561c5e", viewer="twitch:87654321", name="TWW2",
        text="TWW2 gifted a Tier 1 sub to Mr_Woodchuck!", kind="gift", value=1.0, currency="subs",
        badges=("staff", "premium"), sent_at_ms=1521159445153, event="USERNOTICE/subgift")
    assert _message("msg-id=raid") == ChatMessage(
        platform="twitch", id="twitch:3d830f12-795c-447d-af3c-ea05e40fbddb", viewer="twitch:123456",
        name="TestChannel", text="15 raiders from TestChannel have joined !", kind="gift", value=15.0,
        currency="raiders", badges=("turbo",), sent_at_ms=1507246572675, event="USERNOTICE/raid")
    prime = _message("subscribed\\swith\\sPrime")              # no message of their own: Twitch's system-msg
    assert (prime.text, prime.value, prime.event) == ("NewFace subscribed with Prime.", 1.0, "USERNOTICE/sub")
    bomb = _message("gifting\\s5\\sTier")
    assert (bomb.value, bomb.currency, bomb.event) == (5.0, "subs", "USERNOTICE/submysterygift")
    anonymous = _message("AnAnonymousGifter")                  # Twitch's stand-in account is no viewer
    assert (anonymous.viewer, anonymous.value, anonymous.event) == ("", 3.0, "USERNOTICE/subgift")
    assert _message("giftpaidupgrade").value == 1.0


def test_a_gift_bombs_recipients_are_folded_into_it() -> None:
    gifts, kept = MassGifts(), []
    for line in (_line("gifting\\s2\\sTier"), _line("to\\sInsanit13s"), _line("to\\sLuckyLurker"), _line("TWW2")):
        msg = parse_line(line)
        kept.append(gifts.fold(msg, item_of(msg, RECEIVED_MS)))
    assert [(type(item).__name__, getattr(item, "event", getattr(item, "name", ""))) for item in kept] == [
        ("ChatMessage", "USERNOTICE/submysterygift"), ("PlatformNotice", "USERNOTICE/subgift"),
        ("PlatformNotice", "USERNOTICE/subgift"), ("ChatMessage", "USERNOTICE/subgift")]
    lone = parse_line(_line("to\\sLuckyLurker"))                # a community gift id nobody announced
    assert isinstance(MassGifts().fold(lone, item_of(lone, RECEIVED_MS)), ChatMessage)


def test_an_id_without_an_id_tag_is_a_digest_that_survives_a_reconnect() -> None:
    line = ":viewer!viewer@host PRIVMSG #troupe :same words"
    msg = parse_line(line)
    assert message_id(msg, "same words", 5) == message_id(parse_line(line), "same words", 5)
    assert message_id(msg, "same words", 5) != message_id(msg, "same words", 6)
    assert message_id(msg, "same words", 5) != message_id(parse_line(line.replace("viewer", "other")), "same words", 5)
    stamped = parse_line("@tmi-sent-ts=1718000000000 " + line)  # Twitch's timestamp wins over the receive time
    assert message_id(stamped, "same words", 5) == message_id(stamped, "same words", 99_999)


def test_refusals_are_named() -> None:
    def refusal(line: str) -> str | None:
        return refusal_of(parse_line(line))

    assert "Login authentication failed" in (refusal(":tmi.twitch.tv NOTICE * :Login authentication failed") or "")
    assert "Improperly formatted auth" in (refusal(":tmi.twitch.tv NOTICE * :Improperly formatted auth") or "")
    suspended = "@msg-id=msg_channel_suspended :tmi.twitch.tv NOTICE #gone :This channel does not exist or has been suspended."
    assert "msg_channel_suspended" in (refusal(suspended) or "")
    assert "msg_banned" in (refusal("@msg-id=msg_banned :tmi.twitch.tv NOTICE #x :You are permanently banned from talking in x.") or "")
    for code in ("403", "405", "471", "473", "474", "475"):
        assert code in (refusal(f":irc.example {code} me #locked :Cannot join channel") or "")
    assert "#locked" in (refusal(":irc.example 473 me #locked :Cannot join channel (+i)") or "")
    assert refusal(_line("delete_message_success")) is None
    assert refusal(":irc.example 366 me #ok :End of NAMES list") is None


def test_the_send_window_allows_so_many_in_any_30_seconds() -> None:
    window = SendWindow(limit=20)
    assert all(window.take(10.0 + i * 0.5) for i in range(20))
    assert not window.take(29.0)
    assert not window.take(39.99)                              # the first went at 10.0
    assert window.take(40.0)
    assert not window.take(40.1)                               # the second went at 10.5
    window.limit = 100
    assert window.take(40.2)


# ---- against the loopback Twitch peer --------------------------------------------------------


class Reading:
    """A connector read in a task: what it yielded so far, and the task (how it ended)."""

    def __init__(self, chat: TwitchChat) -> None:
        self.items: list[Item] = []
        self.task = asyncio.create_task(self._read(chat), name="test-twitch-read")

    async def _read(self, chat: TwitchChat) -> None:
        async for item in chat.read():
            self.items.append(item)

    def messages(self) -> list[ChatMessage]:
        return [item for item in self.items if isinstance(item, ChatMessage)]

    def notices(self, name: str) -> list[PlatformNotice]:
        return [item for item in self.items if isinstance(item, PlatformNotice) and item.name == name]

    async def finish(self) -> None:
        """Stop reading; a connection that ended on its own (closed, lost) is as good."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionLost):
            await self.task


@pytest.fixture
async def peer(tls: LoopbackTls) -> AsyncIterator[TwitchPeer]:
    async with TwitchPeer(tls=tls.server_context(), bad_tokens={"wrongtoken"}, moderators={"modbot"},
                          suspended={"#gone"}, silent={"#nowhere"}) as peer:
        yield peer


def _chat(peer: TwitchPeer, tls: LoopbackTls, channel: str = "lovingt3s", **options: object) -> TwitchChat:
    return TwitchChat(channel, host=peer.host, port=peer.port, ssl_context=tls.client_context(), **options)  # type: ignore[arg-type]


async def test_reads_recorded_chat_over_tls_until_twitch_asks_to_reconnect(peer: TwitchPeer, tls: LoopbackTls) -> None:
    chat = _chat(peer, tls)
    await chat.connect()
    assert peer.received[0] == "CAP REQ :twitch.tv/tags twitch.tv/commands"
    assert re.fullmatch(r"NICK justinfan\d+", peer.received[1])
    assert "JOIN #lovingt3s" in peer.received and not [line for line in peer.received if line.startswith("PASS")]
    reading = Reading(chat)
    assert await peer.send_many(LINES) == len(LINES)            # PING in the middle, RECONNECT last
    with pytest.raises(ConnectionLost, match="twitch asked to reconnect"):
        await asyncio.wait_for(reading.task, 10)
    await wait_for(lambda: "PONG :tmi.twitch.tv" in peer.received, timeout_s=5, what="the PONG")
    expected = [item for item in (item_of_line(line, RECEIVED_MS) for line in LINES) if isinstance(item, ChatMessage)]
    folded = {"twitch:bc2d37f2-c443-47b8-85a2-131e2b86e6eb", "twitch:f0a1b2c3-d4e5-4f60-8a7b-9c0d1e2f3a4b"}
    *tagged, untagged = reading.messages()                     # the untagged one's id holds its receive time
    assert tagged == [m for m in expected[:-1] if m.id not in folded]
    assert (untagged.text, untagged.name) == ("Hello, chat!", "ronni")
    assert len(reading.notices("USERNOTICE/subgift")) == 2     # the bomb's recipients, counted in its header
    assert not reading.notices("unparsed")
    await chat.close()
    await chat.close()                                         # idempotent


async def test_answers_ping_and_reports_an_unreadable_line(peer: TwitchPeer, tls: LoopbackTls) -> None:
    async with _chat(peer, tls) as chat:
        reading = Reading(chat)
        await peer.ping("tmi.twitch.tv:4711")
        await wait_for(lambda: "PONG :tmi.twitch.tv:4711" in peer.received, timeout_s=5, what="the PONG")
        await peer.send("@badge-info=;badges=;mod=0", _line("Kappa Keepo Kappa"))
        await wait_for(lambda: len(reading.messages()) == 1, timeout_s=5, what="the message after the bad line")
        (unparsed,) = reading.notices("unparsed")
        assert "no command" in unparsed.detail
        assert chat.missed() is None
        await peer.reconnect()
        with pytest.raises(ConnectionLost, match="asked to reconnect"):
            await asyncio.wait_for(reading.task, 5)


async def test_a_drop_is_a_lost_connection_and_a_restarted_peer_takes_a_new_one(peer: TwitchPeer, tls: LoopbackTls) -> None:
    chat = _chat(peer, tls)
    await chat.connect()
    reading = Reading(chat)
    await wait_for(lambda: peer.joined == 1, timeout_s=5, what="the join")
    peer.drop()
    with pytest.raises(ConnectionLost):
        await asyncio.wait_for(reading.task, 5)
    await peer.stop()
    with pytest.raises(OSError):                               # nothing listens: the bridge retries
        await chat.connect()
    await peer.start()
    await chat.connect()
    reading = Reading(chat)
    await peer.send(_line("Hello, chat!"))
    await wait_for(lambda: len(reading.messages()) == 1, timeout_s=5, what="a message after the restart")
    assert reading.messages()[0].text == "Hello, chat!"
    await chat.close()
    with pytest.raises(ConnectionLost):
        await asyncio.wait_for(reading.task, 5)


async def test_refused_logins_and_channels_are_fatal(peer: TwitchPeer, tls: LoopbackTls) -> None:
    with pytest.raises(BridgeFatal, match="Login authentication failed"):
        await _chat(peer, tls, nick="TroupeBot", token="oauth:wrongtoken").connect()
    assert "PASS oauth:wrongtoken" in peer.received and "NICK troupebot" in peer.received
    with pytest.raises(BridgeFatal, match="msg_channel_suspended"):
        await _chat(peer, tls, channel="#Gone").connect()
    with pytest.raises(ConnectionLost, match="not confirmed"):  # Twitch's silence for a channel that is not there
        await _chat(peer, tls, channel="nowhere", join_timeout_s=0.3).connect()
    for bad in ({"channel": "two words"}, {"nick": "troupebot"}, {"tls": False, "ssl_context": tls.client_context()}):
        with pytest.raises(BridgeFatal):
            TwitchChat(**{"channel": "lovingt3s", **bad})  # type: ignore[arg-type]
    with pytest.raises(BridgeFatal, match="anonymous"):         # unset settings ("") are no account
        await TwitchChat("lovingt3s", nick="", token="").say("hello")


async def test_silence_is_probed_with_a_ping_and_no_pong_is_a_lost_connection(peer: TwitchPeer, tls: LoopbackTls) -> None:
    async with _chat(peer, tls, idle_s=0.05, pong_timeout_s=0.5) as chat:
        reading = Reading(chat)
        await wait_for(lambda: peer.received.count("PING :troupe") >= 3, timeout_s=5, what="three answered PINGs")
        assert not reading.task.done()
        peer.answer_pings = False
        with pytest.raises(ConnectionLost, match="no PONG"):
            await asyncio.wait_for(reading.task, 5)


def _posted(peer: TwitchPeer) -> list[str]:
    return [line for line in peer.received if line.startswith("PRIVMSG")]


async def test_say_keeps_to_twitchs_rate_limit(peer: TwitchPeer, tls: LoopbackTls) -> None:
    with pytest.raises(BridgeFatal, match="anonymous"):
        await _chat(peer, tls).say("hello")
    now = [100.0]
    async with _chat(peer, tls, nick="troupebot", token="goodtoken", clock=lambda: now[0]) as chat:
        reading = Reading(chat)
        await wait_for(lambda: bool(reading.notices("USERSTATE")), timeout_s=5, what="the USERSTATE")
        assert await chat.say("line one\nline two\r\n\tand " + "x" * 600)
        assert all([await chat.say(f"hello {i}") for i in range(19)])
        assert not await chat.say("one too many")
        assert not await chat.say("   \n ")
        now[0] += 30.0
        assert await chat.say("after the window")
        await wait_for(lambda: len(_posted(peer)) == 21, timeout_s=5, what="21 posts")
        assert _posted(peer)[0] == "PRIVMSG #lovingt3s :" + ("line one line two and " + "x" * 600)[:500]
        assert _posted(peer)[-1] == "PRIVMSG #lovingt3s :after the window"
        assert "PASS oauth:goodtoken" in peer.received
    await reading.finish()


async def test_a_moderator_may_say_more(peer: TwitchPeer, tls: LoopbackTls) -> None:
    async with _chat(peer, tls, nick="modbot", token="goodtoken", clock=lambda: 5.0) as chat:
        reading = Reading(chat)
        await wait_for(lambda: bool(reading.notices("USERSTATE")), timeout_s=5, what="the USERSTATE")
        assert all([await chat.say(f"line {i}") for i in range(100)])
        assert not await chat.say("line 100")
        await wait_for(lambda: len(_posted(peer)) == 100, timeout_s=5, what="100 posts")
    await reading.finish()


async def test_plain_text_when_asked() -> None:
    async with TwitchPeer() as peer:
        async with TwitchChat("lovingt3s", host=peer.host, port=peer.port, tls=False) as chat:
            reading = Reading(chat)
            await peer.send(_line("Kappa Keepo Kappa"))
            await wait_for(lambda: len(reading.messages()) == 1, timeout_s=5, what="a plain-text message")
        await reading.finish()


# ---- against a real IRC server: Debian's ngircd (tests/bridges/ircd.py) ---------------------


def _irc_chat(server: Ngircd, tls: LoopbackTls, channel: str) -> TwitchChat:
    return TwitchChat(channel, host="127.0.0.1", port=server.tls_port, ssl_context=tls.client_context())


@needs_ngircd
async def test_a_real_irc_server_over_tls_its_chat_and_its_restart(ngircd: Ngircd, tls: LoopbackTls) -> None:
    chat = _irc_chat(ngircd, tls, "troupe")
    await chat.connect()                                       # justinfan<digits>, CAP NAKed, JOIN echoed
    reading = Reading(chat)
    poster = await IrcPoster.join(ngircd.plain_port, "poster", "#troupe")
    for text in ("hello from plain IRC", "hello from plain IRC", "\x01ACTION waves\x01", "日本語もOK ✨"):
        await poster.send(f"PRIVMSG #troupe :{text}")
    await wait_for(lambda: len(reading.messages()) == 4, timeout_s=10, what="four messages from ngircd")
    first, *_ = messages = reading.messages()
    assert first == ChatMessage(platform="twitch", id=first.id, viewer="", name="poster",
                                text="hello from plain IRC", event="PRIVMSG")
    assert [m.text for m in messages[2:]] == ["waves", "日本語もOK ✨"]
    assert all(re.fullmatch(r"twitch:[0-9a-f]{32}", m.id) for m in messages)   # no id tag: the digest
    await ngircd.stop()
    with pytest.raises(ConnectionLost):
        await asyncio.wait_for(reading.task, 10)
    await poster.close()
    await ngircd.start()
    await chat.connect()
    reading = Reading(chat)
    poster = await IrcPoster.join(ngircd.plain_port, "poster", "#troupe")
    await poster.send("PRIVMSG #troupe :after the restart")
    await wait_for(lambda: len(reading.messages()) == 1, timeout_s=10, what="a message after the restart")
    assert reading.messages()[0].text == "after the restart"
    await poster.close()
    await chat.close()
    await reading.finish()


@needs_ngircd
async def test_a_real_irc_server_refusing_the_channel_is_fatal(ngircd: Ngircd, tls: LoopbackTls) -> None:
    with pytest.raises(BridgeFatal, match="473"):              # invite-only from ngircd's config
        await _irc_chat(ngircd, tls, "locked").connect()
    owner = await IrcPoster.join(ngircd.plain_port, "owner", "#private")   # first in: its operator
    await owner.send("MODE #private +i")
    await owner.until("MODE #private +i")
    with pytest.raises(BridgeFatal, match="invite-only"):
        await _irc_chat(ngircd, tls, "private").connect()
    await owner.send("MODE #private -i", "MODE #private +b justinfan*!*@*")
    await owner.until("MODE #private +b")
    with pytest.raises(BridgeFatal, match="474"):               # banned
        await _irc_chat(ngircd, tls, "private").connect()
    await owner.close()
