"""A source (``[[sources]]``, or ``troupe bridge``'s options) and the settings' credentials
made into its platform's connector."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from app.bridges.base import Connector
from events.errors import ConfigError
from events.sources import Source
from infra.settings import Settings


def connector_for(source: Source, settings: Settings) -> Connector:
    """The connector that reads ``source``'s chat (ConfigError: credentials it needs are missing)."""
    if source.platform == "youtube":
        return _youtube(source, settings)
    if source.platform == "twitch":
        return _twitch(source, settings)
    return _bilibili(source, settings)


def _youtube(source: Source, settings: Settings) -> Connector:
    from app.bridges.youtube import API_BASE, YouTubeChat

    if not (settings.youtube_api_key or settings.youtube_oauth_token):
        raise ConfigError("youtube needs TROUPE_YOUTUBE_API_KEY (or TROUPE_YOUTUBE_OAUTH_TOKEN)")
    video, chat = (source.target, "") if source.key == "video" else ("", source.target)
    return YouTubeChat(video_id=video, live_chat_id=chat, api_key="" if settings.youtube_oauth_token else settings.youtube_api_key or "",
                       oauth_token=settings.youtube_oauth_token or "", api_base=source.server or API_BASE,
                       quota_units=settings.youtube_quota)


def _twitch(source: Source, settings: Settings) -> Connector:
    """Twitch's chat, or ``server``: ``ircs://host:port`` (TLS, trusting the system's CAs or
    ``SSL_CERT_FILE``) or ``irc://host:port`` (plain text), e.g. a self-hosted IRC server."""
    from app.bridges.twitch import TwitchChat

    if settings.twitch_post_replies and not (settings.twitch_nick and settings.twitch_token):
        raise ConfigError("TROUPE_TWITCH_POST_REPLIES needs an account: TROUPE_TWITCH_NICK and TROUPE_TWITCH_TOKEN")
    where: dict[str, Any] = {}
    if source.server:
        url = urlsplit(source.server if "://" in source.server else f"ircs://{source.server}")
        if url.scheme not in ("irc", "ircs") or not url.hostname:
            raise ConfigError(f"twitch server {source.server!r} is not irc://host:port or ircs://host:port")
        where = {"host": url.hostname, "port": url.port or (6697 if url.scheme == "ircs" else 6667),
                 "tls": url.scheme == "ircs"}
    return TwitchChat(source.target, nick=settings.twitch_nick, token=settings.twitch_token, **where)


def _bilibili(source: Source, settings: Settings) -> Connector:
    """A room on the web route (``room``), or the Open Live route (``code``); ``server`` an API's
    base URL whose ``/sub`` is the WebSocket (a loopback peer's)."""
    if source.key == "code":
        from app.bridges.bilibili_open import BilibiliOpenLive

        if not (settings.bilibili_app_id and settings.bilibili_key_id and settings.bilibili_key_secret):
            raise ConfigError("bilibili's Open Live route needs TROUPE_BILIBILI_APP_ID, TROUPE_BILIBILI_KEY_ID "
                              "and TROUPE_BILIBILI_KEY_SECRET")
        api: dict[str, Any] = {"api_base": source.server} if source.server else {}
        return BilibiliOpenLive(source.target, settings.bilibili_app_id, settings.bilibili_key_id,
                                settings.bilibili_key_secret, **api)
    from app.bridges.bilibili import BilibiliRoom

    where: dict[str, Any] = {}
    if source.server:
        url = urlsplit(source.server)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise ConfigError(f"bilibili server {source.server!r} is not an http(s):// URL")
        ws = "wss" if url.scheme == "https" else "ws"
        where = {"api_base": source.server, "nav_base": source.server, "ws_url": f"{ws}://{url.netloc}/sub"}
    return BilibiliRoom(int(source.target), settings.bilibili_cookie, **where)
