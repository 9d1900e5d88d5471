"""``troupe publish``: danmaku into a running show (one, a file, a Bilibili XML) and their outcomes."""

from __future__ import annotations

import argparse
import logging
import secrets
import time
from pathlib import Path

import nats.errors
import orjson

from app.bilibili import read_bilibili_xml
from app.cli.base import (
    Command,
    UsageError,
    show_nats,
)
from app.publish import DanmakuFileError, Sent, read_danmaku_file, send, tally
from events.danmaku import DanmakuReceived, viewer_problem
from events.errors import BusError
from events.subjects import is_token
from infra.bus import connect, masked_url
from infra.settings import Settings

log = logging.getLogger(__name__)
DANMAKU_KINDS = ("comment", "gift", "moderator")


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", nargs="?", help="the comment")
    parser.add_argument("--run", required=True, help="the run id (printed by troupe up)")
    parser.add_argument("--user", help="viewer name")
    parser.add_argument("--viewer", help="the viewer's platform-namespaced id (e.g. twitch:12345): the stage remembers them by it")
    parser.add_argument("--role", help="address one role")
    parser.add_argument("--kind", choices=DANMAKU_KINDS, help="comment (default), gift or moderator")
    parser.add_argument("--id", dest="danmaku_id", metavar="ID", help="the danmaku's id (default: a new one); resending it is a no-op")
    parser.add_argument("--file", type=Path,
                        help='JSON lines: {"user": ..., "text": ..., "to": ..., "kind": ..., "id": ...}')
    parser.add_argument("--bilibili", type=Path, metavar="FILE",
                        help='a Bilibili danmaku XML file (<d p="time,mode,...">text</d>), played at its pace')
    parser.add_argument("--speed", type=float, default=1.0,
                        help="with --bilibili: how many times faster than recorded (default 1)")
    parser.add_argument("--wait", type=float, default=10.0,
                        help="seconds to wait for the director's answers, all together (0: do not wait; default "
                          "10: a comment may wait for the floor up to 6 s after the line being spoken)")
    parser.add_argument("--json", action="store_true", help="one JSON object per danmaku")


def _danmaku_batch(args: argparse.Namespace) -> tuple[list[DanmakuReceived], list[float] | None]:
    """The danmaku to send, all validated before anything is sent, and when to send each
    (seconds after the first; None: at once)."""
    now = int(time.time() * 1000)
    if args.bilibili is not None:
        if args.file is not None or args.text is not None:
            raise UsageError("give the comment text, --file or --bilibili, one of them")
        if any(v is not None for v in (args.user, args.viewer, args.role, args.kind, args.danmaku_id)):
            raise UsageError("--user, --viewer, --role, --kind and --id are for one comment, not --bilibili")
        if not 0 < args.speed <= 10_000:  # also refuses nan
            raise UsageError("--speed must be above 0 (1: as recorded, 20: twenty times faster)")
        try:
            timed = read_bilibili_xml(args.bilibili, args.run, now)
        except DanmakuFileError as exc:
            raise UsageError(str(exc)) from None
        return [t.event for t in timed], [t.at_s / args.speed for t in timed]
    if args.speed != 1.0:
        raise UsageError("--speed is for --bilibili")
    return _one_or_file(args, now), None


def _one_or_file(args: argparse.Namespace, now: int) -> list[DanmakuReceived]:
    if args.file is None:
        if args.text is None:
            raise UsageError("give the comment text or --file")
        ident = args.danmaku_id or f"cli-{now}-{secrets.token_hex(3)}"
        one = DanmakuReceived(id=ident, run=args.run, user=args.user or "", text=args.text, to=args.role,
                              kind=args.kind or "comment", at_ms=now, viewer=args.viewer or "",
                              platform=(args.viewer or "").partition(":")[0])
        problem = viewer_problem(one)
        if problem is not None:
            raise UsageError(f"--viewer: {problem}")
        return [one]
    if args.text is not None:
        raise UsageError("give the comment text or --file, not both")
    if any(v is not None for v in (args.user, args.viewer, args.role, args.kind, args.danmaku_id)):
        raise UsageError("--user, --viewer, --role, --kind and --id are for one comment; in a --file each line has its own")
    try:
        return read_danmaku_file(args.file, args.run, now)
    except DanmakuFileError as exc:
        raise UsageError(str(exc)) from None


async def _publish(args: argparse.Namespace, settings: Settings) -> int:
    if not is_token(args.run):
        raise UsageError("--run must be letters, digits, _ or -")
    if not 0 <= args.wait < 3600:  # also refuses nan
        raise UsageError("--wait must be 0 or more seconds (under an hour)")
    batch, offsets = _danmaku_batch(args)  # validate everything before sending anything
    url = show_nats(settings)
    log.info("publishing %d danmaku to run %s on %s", len(batch), args.run, url)

    def sent_line(s: Sent) -> None:
        if not args.json:
            print(f"sent {s.id}" + (" (a duplicate)" if s.duplicate else ""), flush=True)

    nc = await connect(url, "troupe-publish")
    try:
        sent = await send(nc, args.run, batch, args.wait, sent_line, offsets)
    except (nats.errors.Error, TimeoutError) as exc:
        raise BusError(f"NATS at {masked_url(url)} failed: {exc or type(exc).__name__}") from None
    finally:
        await nc.close()
    for s in sent:
        if args.json:
            print(orjson.dumps({**s.to_dict(), "run": args.run}).decode())
        elif args.wait > 0 or s.duplicate:
            print(s.describe(args.wait))
    if not args.json and len(sent) > 1 and args.wait > 0:
        print(tally(sent, args.wait))
    return 0


COMMANDS = (Command("publish", "publish danmaku to a run and show what became of them", _options, _publish),)
