"""The service commands: ``troupe serve`` (the HTTP endpoint), ``provision``, ``nats-config``, ``avatar``."""

from __future__ import annotations

import argparse
import logging
import sys

import nats.errors

from app.cli.base import (
    Command,
    UsageError,
    page_options,
    show_nats,
    stop_on_signals,
)
from app.web import WebServer
from events.errors import BusError
from infra.bus import connect, masked_url, provision_streams
from infra.settings import Settings

log = logging.getLogger(__name__)


def _serve_options(parser: argparse.ArgumentParser) -> None:
    page_options(parser)


async def _serve(args: argparse.Namespace, settings: Settings) -> int:
    url = show_nats(settings)
    nc = await connect(url, "troupe-serve")
    server = WebServer(nc, settings)
    try:
        try:
            port = await server.start()
        except OSError as exc:
            raise UsageError(f"cannot listen on {settings.http_host}:{settings.http_port}: {exc.strerror}") from None
        who = "token required" if settings.preview_token else "sending off: no TROUPE_PREVIEW_TOKEN"
        print(f"troupe: serving POST http://{settings.http_host}:{port}/runs/RUN/danmaku ({who}), NATS {masked_url(url)}",
              file=sys.stderr, flush=True)
        await stop_on_signals().wait()
    finally:
        await server.close()
        await nc.close()
    return 0


async def _provision(args: argparse.Namespace, settings: Settings) -> int:
    if settings.nats_url is None:
        raise UsageError("troupe provision needs a NATS server: --nats URL or TROUPE_NATS_URL")
    nc = await connect(settings.nats_url, "troupe-provision")
    try:
        changed = await provision_streams(nc.jetstream(timeout=10.0), settings.frame_max_age_s, settings.stream_replicas)
    except nats.errors.Error as exc:
        raise BusError(f"NATS at {masked_url(settings.nats_url)} refused to create the streams: {exc}") from None
    finally:
        await nc.close()
    what = f"created or updated: {', '.join(changed)}" if changed else "unchanged"
    print(f"troupe: streams ready on {masked_url(settings.nats_url)} ({what})")
    return 0


def _config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", dest="nats_port", type=int, default=4222, help="the port clients connect to")
    parser.add_argument("--monitor-port", type=int, default=8222, help="the HTTP monitoring port (/healthz, /varz)")
    parser.add_argument("--store-dir", default="/data", help="JetStream's store directory on the server")


async def _nats_config(args: argparse.Namespace, settings: Settings) -> int:
    from app.natsauth import server_config

    sys.stdout.write(server_config(args.nats_port, args.monitor_port, args.store_dir))
    return 0


def _avatar_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", help="an avatar folder (layered PNGs and avatar.toml)")
    parser.add_argument("--sample", action="store_true", help="write the sample avatar (Pip) into the folder first")
    parser.add_argument("--sheet", metavar="PNG", help="also draw every layer of the folder, named, into this picture")


async def _avatar(args: argparse.Namespace, settings: Settings) -> int:
    from actors.backends.avatar import AvatarError, check, contact_sheet, digest, make_sample

    try:
        if args.sample:
            make_sample(args.folder)
        avatar = check(args.folder)
    except AvatarError as exc:
        raise UsageError(str(exc)) from None
    if args.sheet:
        try:
            contact_sheet(avatar).save(args.sheet, format="PNG")
        except (OSError, ValueError) as exc:
            raise UsageError(f"{args.sheet}: cannot write the sheet ({exc})") from None
    pupils = f", pupils moving {avatar.pupil_travel} px" if avatar.pupil_travel else ""
    print(f"{args.folder}: {avatar.size[0]}x{avatar.size[1]}, mouths {', '.join(avatar.mouths)}, expressions "
          f"{', '.join(avatar.expressions) or 'none'}{pupils}; sha256 {digest(args.folder)}")
    return 0


def _no_options(parser: argparse.ArgumentParser) -> None:
    """The command takes the global options only."""


COMMANDS = (
    Command("serve", "the HTTP endpoint for platform bridges: POST /runs/RUN/danmaku", _serve_options, _serve,
            settings={"host": "http_host", "port": "http_port"}),
    Command("provision", "create or update the JetStream streams on TROUPE_NATS_URL, then exit", _no_options, _provision),
    Command("nats-config", "print the nats-server config with a user per service and its permissions",
            _config_options, _nats_config, common=False),
    Command("avatar", "check an avatar folder (look.avatar), or write the sample one with --sample",
            _avatar_options, _avatar, common=False),
)
