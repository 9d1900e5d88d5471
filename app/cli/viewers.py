"""``troupe viewers``: what the stage remembers of its viewers (the read model ``store.viewers``),
following the store, rebuilt from it, and a viewer forgotten."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import nats.errors
import orjson
from sqlalchemy import Engine, update

from app.cli.base import (
    Command,
    UsageError,
    global_options,
    show_nats,
    stop_on_signals,
    store_engine,
)
from events.errors import BusError
from events.viewer import remembered
from infra.bus import connect, erase_messages, masked_url
from infra.natsserver import EmbeddedNats, announcement_path, running_server
from infra.settings import Settings
from store.forget import forget_in
from store.schema import redactions
from store.viewers import Projector, follow, listing, profile


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="as JSON")
    parser.add_argument("--limit", type=int, default=100, help="list at most this many viewers, the last seen first")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    show = actions.add_parser("show", help="one viewer's profile, with the comment each fact came from")
    show.add_argument("viewer", help="the viewer's id, e.g. twitch:12345 (troupe viewers lists them)")
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="as JSON")
    for name, what in (("rebuild", "empty the read model and project it again from the whole store"),
                       ("follow", "keep the read model up with the store until stopped (troupe up runs one)")):
        action = actions.add_parser(name, help=what)
        action.add_argument("--partition", default="0/1", metavar="K/N",
                            help="project the viewers of partition K of N (several followers share the work)")
    forget = actions.add_parser("forget", help="erase a viewer: the read model's rows, and their text in the "
                                "stored events and in JetStream's retained messages")
    forget.add_argument("viewer", help="the viewer's id, e.g. twitch:12345")
    forget.add_argument("--store-only", action="store_true",
                        help="erase from the store only, with no NATS to reach (the streams keep their "
                             "messages until these age out)")
    forget.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="as JSON")
    for action in actions.choices.values():  # --nats, --store, --state-dir after the action too
        global_options(action, suppress=True)
    follow = actions.choices["follow"]
    follow.add_argument("--interval", type=float, default=0.5, help="seconds between two looks at the store")


def _partition(text: str) -> tuple[int, int]:
    k, sep, n = text.partition("/")
    if not sep or not k.isdigit() or not n.isdigit() or not 0 <= int(k) < int(n):
        raise UsageError(f"--partition must be K/N with 0 <= K < N, not {text!r}")
    return int(k), int(n)


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000))


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    engine = store_engine(settings)
    action = args.action or "list"
    if action == "list":
        rows = listing(engine, args.limit)
        if args.json:
            print(orjson.dumps(rows).decode())
            return 0
        width = max([16, *(len(r["id"]) for r in rows)])
        print(f"{'viewer':<{width}} {'name':<16} {'shows':>5} {'comments':>8} {'gifts':>5} {'facts':>5}  last seen")
        for r in rows:
            print(f"{r['id']:<{width}} {r['name'][:16]:<16} {r['shows']:>5} {r['comments']:>8} {r['gifts']:>5} "
                  f"{r['facts']:>5}  {_when(r['last_seen_at_ms'])}")
        if not rows:
            print("(no viewers remembered yet)")
        return 0
    if action == "show":
        found = profile(engine, args.viewer)
        if found is None:
            raise UsageError(f"no viewer {args.viewer!r} is remembered (troupe viewers lists them)")
        if args.json:
            print(orjson.dumps(found.to_dict()).decode())
            return 0
        print(f"{found.id}  {found.name}  ({found.platform})")
        print(f"  seen {_when(found.first_seen_at_ms)} to {_when(found.last_seen_at_ms)}, {found.shows} shows: "
              f"{', '.join(found.runs)}")
        print(f"  {found.comments} comments, {found.gifts} gifts ({found.gift_value:g})")
        for f in found.facts:
            what = f"{f['kind']} ({f['detail']})" if f["detail"] else f["kind"]
            print(f"  fact  {what}: {f['value']}  <- {f['said']!r} ({f['run']}, {f['danmaku']})")
        for t in found.topics:
            print(f"  topic {t['topic']}  ({t['run']}, {t['danmaku']})")
        for role, n in found.roles:
            print(f"  answered by {role}: {n}")
        return 0
    if action == "forget":
        return await _forget(args, settings, engine)
    k, n = _partition(args.partition)
    projector = Projector(engine, k, n, settings.viewer_retention_days)
    if action == "rebuild":
        progress = await asyncio.to_thread(projector.rebuild)
        print(f"viewers: rebuilt from {progress.applied} events, {len(progress.viewers)} viewers "
              f"({progress.expired} expired by retention)")
        return 0
    stop = stop_on_signals()
    await follow(projector, stop, args.interval)
    return 0


async def _forget(args: argparse.Namespace, settings: Settings, engine: Engine) -> int:
    """Blank the viewer's chains in the store and erase their messages from JetStream in one go:
    the store's transaction commits only once the messages are erased, so a NATS that cannot be
    reached leaves everything as it was (and says so)."""
    if not remembered(args.viewer):
        raise UsageError(f"{args.viewer!r} is not a viewer id the stage remembers (platform:id, e.g. twitch:12345)")
    nc = None
    embedded: EmbeddedNats | None = None
    try:
        if not args.store_only:
            url = settings.nats_url or running_server(announcement_path(settings.state_dir))
            if url is None and (streams := Path(settings.state_dir) / "nats").is_dir():
                # troupe up's embedded server is not running: its streams, kept in the state dir,
                # are opened by a server of the command's own for the erase
                embedded = EmbeddedNats(streams)
                await embedded.start()
                url = embedded.url
            url = url or show_nats(settings)  # (none: one line, nothing erased)
            try:
                nc = await connect(url, "troupe-viewers")
            except (nats.errors.Error, OSError, TimeoutError) as exc:
                raise BusError(f"cannot reach NATS at {masked_url(url)} to erase the viewer's messages "
                               f"({exc or type(exc).__name__}); nothing was erased (--store-only erases the store's "
                               "copy alone)") from None
        return await _forget_with(args, engine, nc)
    finally:
        if nc is not None:
            await nc.close()
        if embedded is not None:
            await embedded.stop()


async def _forget_with(args: argparse.Namespace, engine: Engine, nc: nats.NATS | None) -> int:
    with engine.begin() as conn:
        done = forget_in(conn, args.viewer, "cli")
        if nc is not None:
            try:
                erased, gone = await erase_messages(nc.jetstream(), done.messages)
            except (nats.errors.Error, TimeoutError) as exc:
                raise BusError(f"erasing the viewer's messages from JetStream failed "
                               f"({exc or type(exc).__name__}); nothing was erased") from None
            done.deleted = erased
            conn.execute(update(redactions).where(redactions.c.id == done.redaction).values(messages=erased))
    if args.json:
        print(orjson.dumps(done.to_dict()).decode())
        return 0
    streams = (f"{done.deleted} JetStream messages erased ({len(done.messages) - done.deleted} had aged out)"
               if nc is not None else f"JetStream not touched: {len(done.messages)} messages stay until they age out")
    print(f"forgot {args.viewer}: {'their profile and ' if done.known else ''}{done.events} events of "
          f"{done.chains} comments blanked in the store; {streams} (redaction {done.redaction})")
    return 0


COMMANDS = (
    Command("viewers", "what the stage remembers of its viewers: list, show ID, forget ID, rebuild, follow",
            _options, _run),
)
