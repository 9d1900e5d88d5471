"""The operator's commands: ``troupe say``, ``troupe segment``, ``troupe hold``, ``troupe resume``.

Each publishes one ``danmaku.control`` (a moderator's subject: with NATS users, only the
moderator's credentials may publish it) and waits for the director's answer: what it did, or
why it refused.
"""

from __future__ import annotations

import argparse
import secrets
import time
from collections.abc import Callable

import nats.errors
import orjson

from app.cli.base import Command, UsageError, show_nats
from app.publish import send
from events.danmaku import OperatorControl
from events.errors import BusError
from events.subjects import is_token
from infra.bus import connect, masked_url
from infra.settings import Settings

HELP = {
    "say": "say a line word for word, next on the floor (after the sentence being spoken)",
    "segment": "move the rundown on: to the next segment, or to the one with this title",
    "hold": "stop the show's own speech (an ad break, a technical pause); the chat is still answered unless --all",
    "resume": "let the show speak by itself again after a hold",
}


def _options(name: str) -> Callable[[argparse.ArgumentParser], None]:
    """A control's options: ``--run``, ``--wait``, ``--json`` and its own."""
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--run", required=True, help="the run id (printed by troupe up)")
        if name == "say":
            parser.add_argument("--role", help="the role that says it (default: the segment's lead)")
            parser.add_argument("text", help="the line")
        elif name == "segment":
            parser.add_argument("target", help="'next', or a segment's title")
        elif name == "hold":
            parser.add_argument("--all", action="store_true", help="let the chat go too (comments and gifts)")
        parser.add_argument("--user", default="", help="the operator's name, recorded with the control")
        parser.add_argument("--wait", type=float, default=5.0, help="seconds to wait for the director's answer")
        parser.add_argument("--json", action="store_true", help="the answer as one JSON object")
    return options


def control_from(args: argparse.Namespace) -> OperatorControl:
    """The control the arguments ask for (checked here for what needs no show; the director checks the rest)."""
    if not is_token(args.run):
        raise UsageError("--run must be letters, digits, _ or -")
    if not 0 <= args.wait < 3600:
        raise UsageError("--wait must be 0 or more seconds (under an hour)")
    now = int(time.time() * 1000)
    fields: dict[str, object] = {}
    if args.command == "say":
        if not args.text.strip():
            raise UsageError("say: the line is empty")
        fields = {"text": args.text, "target": args.role or ""}
    elif args.command == "segment":
        fields = {"target": args.target.strip()}
    elif args.command == "hold":
        fields = {"all": bool(args.all)}
    return OperatorControl(id=f"op-{now}-{secrets.token_hex(3)}", run=args.run, action=args.command,
                           user=args.user, at_ms=now, **fields)  # type: ignore[arg-type]


async def run_control(args: argparse.Namespace, settings: Settings) -> int:
    """Send the control, print the director's answer; exit 1 when it was refused."""
    control = control_from(args)
    url = show_nats(settings)
    nc = await connect(url, "troupe-operator")
    try:
        [sent] = await send(nc, args.run, [control], args.wait)
    except (nats.errors.Error, TimeoutError) as exc:
        raise BusError(f"NATS at {masked_url(url)} failed: {exc or type(exc).__name__}") from None
    finally:
        await nc.close()
    print(orjson.dumps({**sent.to_dict(), "run": args.run}).decode() if args.json else sent.describe(args.wait))
    return 1 if sent.to_dict()["outcome"] == "rejected" else 0


COMMANDS = tuple(Command(name, text, _options(name), run_control, parser={"description": text})
                 for name, text in HELP.items())
