"""A show whose ``[[sources]]`` names a Twitch channel, on a real IRC server (ngircd) where another
IRC client chats: the show bridges the channel into its run, every line gets an outcome, and the
replies name the viewers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.inspect import format_report, report
from app.supervisor import Stage, run_show
from events.base import Event
from events.cue import CueIssued, CueMerged
from events.danmaku import DanmakuReceived, DanmakuRejected, DanmakuSkipped
from events.errors import ConfigError
from events.show import show_from_dict
from events.utterance import UtteranceCompleted
from infra.natsserver import EmbeddedNats
from infra.settings import load_settings
from store.recorder import read_events
from tests.bridges.ircd import IrcPoster, Ngircd, needs_ngircd
from tests.conftest import wait_for

ROLES = [{"id": "mika", "name": "Mika", "persona": "A cheerful host.", "language": "en"},
         {"id": "rex", "name": "Rex", "persona": "A grumpy dragon.", "language": "en"}]


def _show(port: int) -> dict[str, object]:
    return {"title": "bridged", "roles": ROLES,
            "sources": [{"platform": "twitch", "channel": "#troupe", "server": f"irc://127.0.0.1:{port}"}]}


@pytest.mark.slow
@needs_ngircd
async def test_a_shows_twitch_source_brings_the_channels_chat_into_the_run(
        ngircd: Ngircd, nats_server: EmbeddedNats, tmp_path: Path) -> None:
    settings = load_settings(environ={}, nats_url=nats_server.url, state_dir=tmp_path / "state",
                             out_dir=tmp_path / "out", metrics_port=-1)
    show = show_from_dict(_show(ngircd.plain_port))
    said = {"ann": "hello @mika, what game is on tonight?", "bo": "@rex do you hoard gold?",
            "cy": "what is everyone drinking?"}
    async with Stage(settings) as stage:
        names = ["director", "llm", "tts", "lipsync", "qos", "recorder"]
        running = asyncio.create_task(run_show(stage, show, 24.0, names=names, run_id="bridged"))
        posters = []
        try:
            for nick in said:
                posters.append(await IrcPoster.join(ngircd.plain_port, nick, "#troupe"))
            # The show's bridge joins once the run has started (it is in the channel's names then).
            await wait_for(lambda: _bridge_joined(posters[0]), timeout_s=60, what="the show's bridge in the channel")
            for poster, text in zip(posters, said.values(), strict=True):
                await poster.send(f"PRIVMSG #troupe :{text}")
            result = await asyncio.wait_for(running, 120)
        finally:
            for poster in posters:
                await poster.close()
        events = read_events(stage.engine, result.run)
        inspected = format_report(report(stage.engine, result.run))
    received = [e for e in events if isinstance(e, DanmakuReceived)]
    assert sorted(e.user for e in received) == sorted(said) and {e.platform for e in received} == {"twitch"}
    outcomes = _outcomes(events)
    assert {e.id for e in received} <= set(outcomes), "every line gets an outcome"
    cued = {e.id for e in received if isinstance(outcomes[e.id], CueIssued)}
    replies = [e for e in events if isinstance(e, UtteranceCompleted) and e.correlation in cued]
    assert replies and all(_names_its_viewer(r, received) for r in replies), [r.text for r in replies]
    # troupe inspect names where the chat came from (a plain IRC server: no Twitch user ids)
    assert "chat by platform:\n  twitch: 3 danmaku from 0 identified viewers, 0 gifts" in inspected


async def _bridge_joined(poster: IrcPoster) -> bool:
    await poster.send("NAMES #troupe")
    line = await poster.until(" 353 ")
    return "justinfan" in line


def _outcomes(events: list[Event]) -> dict[str, Event]:
    out: dict[str, Event] = {}
    for e in events:
        if isinstance(e, CueIssued | DanmakuSkipped | DanmakuRejected) and e.correlation:
            out.setdefault(e.correlation, e)
        elif isinstance(e, CueMerged):
            out.setdefault(e.causation or "", e)
    return out


def _names_its_viewer(reply: UtteranceCompleted, received: list[DanmakuReceived]) -> bool:
    viewer = next(e.user for e in received if e.id == reply.correlation)
    return viewer.lower() in reply.text.lower()


def test_a_source_without_its_credentials_stops_the_show_before_it_starts() -> None:
    from app.bridges.live import connectors

    show = show_from_dict({"roles": ROLES, "sources": [{"platform": "youtube", "video": "abc"}]})
    with pytest.raises(ConfigError, match="TROUPE_YOUTUBE_API_KEY"):
        connectors(show.sources, load_settings(environ={}))
