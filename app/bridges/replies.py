"""Replies posted back into the platform's chat (opt-in: ``TROUPE_TWITCH_POST_REPLIES``): each
reply to a comment this bridge published, as ``[role] @viewer text``, within the platform's
rate limits (the connector's ``say`` refuses past them: that reply is not posted, and logged)."""

from __future__ import annotations

import logging
from typing import Protocol

from nats.aio.client import Client
from nats.aio.msg import Msg

from app.bridges.run import Bridge
from events import codec
from events.errors import DecodeError
from events.subjects import PREFIX
from events.utterance import UtteranceCompleted

log = logging.getLogger(__name__)


class Speaks(Protocol):
    async def say(self, text: str) -> bool: ...


def reply_line(role: str, viewer: str, text: str) -> str:
    """What is posted: who answers whom, then the reply."""
    return f"[{role}] @{viewer} {text}" if viewer else f"[{role}] {text}"


async def post_replies(nc: Client, connector: object, bridge: Bridge) -> None:
    """Post each completed reply to a comment ``bridge`` published, until cancelled."""
    say = getattr(connector, "say", None)
    if say is None:
        log.warning("%s cannot post into its chat", bridge.platform)
        return
    sub = await nc.subscribe(f"{PREFIX}.*.{UtteranceCompleted.type}.*")
    try:
        async for msg in sub.messages:
            await _post(msg, say, bridge)
    finally:
        await sub.unsubscribe()


async def _post(msg: Msg, say: object, bridge: Bridge) -> None:
    try:
        event = codec.decode(msg.data)
    except DecodeError:
        return
    if not isinstance(event, UtteranceCompleted) or event.correlation is None \
            or event.correlation not in bridge.published:
        return
    line = reply_line(event.role or "", bridge.published[event.correlation], event.text)
    if not await say(line):  # type: ignore[operator]
        log.warning("%s: over the chat's rate limit: reply %s not posted", bridge.platform, event.utterance)
