"""``troupe bridge twitch|bilibili|youtube``: a platform's live chat into a running show, every
message accounted for (``app.bridges.run``); ``--dry-run`` prints what the chat sends, parsed,
without a show."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from dataclasses import asdict
from typing import Any

import nats.errors
import orjson

from app.bridges.base import BridgeFatal, ChatEnded, ChatMessage, ConnectionLost, Connector
from app.bridges.connectors import connector_for
from app.bridges.replies import post_replies
from app.bridges.run import Bridge, BridgeConfig
from app.cli.base import Command, UsageError, show_nats, stop_on_signals
from events.errors import BusError
from events.sources import TARGETS, Source, SourceError, source_from
from events.subjects import is_token
from infra.bus import connect, masked_url
from infra.metrics import Metrics
from infra.settings import Settings

log = logging.getLogger(__name__)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("platform", choices=tuple(TARGETS), help="the platform whose chat is read")
    what = parser.add_argument_group("what to read (one of them, by platform)")
    what.add_argument("--channel", help="twitch: the channel's name")
    what.add_argument("--room", help="bilibili: the live room's number (the web route)")
    what.add_argument("--code", help="bilibili: the streamer's identity code (the Open Live route)")
    what.add_argument("--video", help="youtube: the live stream's video id")
    what.add_argument("--chat", help="youtube: a live chat's id")
    parser.add_argument("--run", help="the run to publish to (default: the run on air, followed from show to show)")
    parser.add_argument("--to", metavar="ROLE", help="address every message to this role")
    parser.add_argument("--rate", type=float, default=20.0,
                        help="comments a second published at most; the rest are danmaku.skipped (rate_cap), gifts "
                             "always pass (0: no cap; default 20)")
    parser.add_argument("--server", default="", help="another endpoint than the platform's: twitch, an IRC server "
                                                     "as ircs://host:port (TLS) or irc://host:port; bilibili and "
                                                     "youtube, an API's base URL")
    parser.add_argument("--dry-run", action="store_true",
                        help="print each message parsed, one JSON object a line, and publish nothing (no show needed)")
    parser.add_argument("--count", type=int, default=0, help="with --dry-run: stop after this many messages")


def source_of(args: argparse.Namespace) -> Source:
    """The source the options name, checked as a show file's ``[[sources]]`` entry is."""
    doc: dict[str, Any] = {"platform": args.platform, "rate": args.rate, "server": args.server}
    for key in ("channel", "room", "code", "video", "chat"):
        value = getattr(args, key)
        if value is not None:
            if key not in TARGETS[args.platform]:
                raise UsageError(f"--{key} is not for {args.platform} (it takes --{' or --'.join(TARGETS[args.platform])})")
            doc[key] = value
    if args.to is not None:
        doc["to"] = args.to
    try:
        return source_from(doc, "bridge", roles=None)
    except SourceError as exc:
        raise UsageError(str(exc).replace("bridge.", "--").replace("bridge: ", "")) from None


async def _bridge(args: argparse.Namespace, settings: Settings) -> int:
    source = source_of(args)
    if args.run is not None and not is_token(args.run):
        raise UsageError("--run must be letters, digits, _ or -")
    if args.count < 0 or (args.count and not args.dry_run):
        raise UsageError("--count is a number of messages for --dry-run")
    connector = connector_for(source, settings)
    if args.dry_run:
        return await _dry_run(connector, args.count)
    url = show_nats(settings)
    nc = await connect(url, f"troupe-bridge-{source.platform}")
    metrics = Metrics()
    if settings.metrics_port >= 0:
        port = metrics.serve(settings.metrics_port, settings.metrics_host)
        print(f"troupe: bridge metrics on http://{settings.metrics_host}:{port}/metrics", file=sys.stderr, flush=True)
    stop = stop_on_signals()
    bridge = Bridge(connector, nc.jetstream(), BridgeConfig(source.label, args.run, source.to, source.rate),
                    metrics)
    print(f"troupe: bridging {source.label} into {args.run or 'the run on air'}", file=sys.stderr, flush=True)
    poster = (asyncio.create_task(post_replies(nc, connector, bridge), name="bridge-post-replies")
              if settings.twitch_post_replies and source.platform == "twitch" else None)
    try:
        totals = await bridge.run(stop)
    except (nats.errors.Error, TimeoutError) as exc:
        raise BusError(f"NATS at {masked_url(url)} failed: {exc or type(exc).__name__}") from None
    finally:
        if poster is not None:
            poster.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poster
        await nc.close()
        metrics.close()
    gaps = f"; {len(totals.gaps)} gaps recorded" if totals.gaps else ""
    print(f"troupe: {source.label}: {totals.line()}{gaps}", file=sys.stderr)
    return 0


async def _dry_run(connector: Connector, count: int) -> int:
    """Connect, print what arrives parsed (one JSON object a line), stop after ``count`` messages."""
    stop = stop_on_signals()
    seen = 0
    try:
        await connector.connect()
        print(f"troupe: connected to {connector.platform}; printing what arrives (Ctrl-C stops)",
              file=sys.stderr, flush=True)
        reading = connector.read().__aiter__()
        while not stop.is_set():
            waiting = asyncio.ensure_future(reading.__anext__())
            stopping = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if waiting not in done:
                waiting.cancel()
                break
            item = waiting.result()
            if isinstance(item, ChatMessage):
                seen += 1
                print(orjson.dumps(asdict(item)).decode(), flush=True)
                if count and seen >= count:
                    break
            else:
                print(orjson.dumps({"notice": item.name, **({"detail": item.detail} if item.detail else {})}).decode(),
                      flush=True)
    except (StopAsyncIteration, ChatEnded):
        print("troupe: the chat has ended", file=sys.stderr)
    except (ConnectionLost, OSError) as exc:
        print(f"troupe: error: {connector.platform}: connection lost: {exc}", file=sys.stderr)
        return 1
    except BridgeFatal:
        raise
    finally:
        await connector.close()
    return 0


COMMANDS = (Command("bridge", "a platform's live chat (Twitch, Bilibili, YouTube) into a running show", _options,
                    _bridge),)
