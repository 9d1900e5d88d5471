"""The ``troupe`` command: one module per command (``up``, ``actor``, ``publish``, the store's
``runs``/``inspect``/``replay``/``export``, the operator's ``say``/``segment``/``hold``/``resume``,
``serve``, ``provision``, ``nats-config``), each a ``Command`` that declares its options and the
settings they override (``app.cli.base``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Sequence

from app.cli import actor, operator, publish, services, store, up
from app.cli.base import Command, Parser, UsageError, global_options
from app.publish import RunError
from events.errors import ConfigError, TroupeError
from infra.logs import FORMATS as LOG_FORMATS
from infra.logs import configure as configure_logs

__all__ = ["COMMANDS", "UsageError", "main", "parser"]

# In the order ``troupe --help`` lists them.
COMMANDS: tuple[Command, ...] = (*up.COMMANDS, *actor.COMMANDS, *publish.COMMANDS, *operator.COMMANDS,
                                 *services.COMMANDS[:1], *store.COMMANDS[:3], *services.COMMANDS[1:],
                                 *store.COMMANDS[3:])


def parser() -> argparse.ArgumentParser:
    """The command line: the global options, then one subcommand per ``Command``."""
    p = Parser(prog="troupe", description="Multi-role AI live streams on NATS JetStream")
    global_options(p, suppress=False)
    common = Parser(add_help=False)
    global_options(common, suppress=True)
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.options(sub.add_parser(command.name, parents=[common] if command.common else [],
                                       help=command.help, **command.parser))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``troupe`` command."""
    args = parser().parse_args(argv)
    log_format = os.environ.get("TROUPE_LOG_FORMAT") or "text"
    if log_format not in LOG_FORMATS:
        print(f"troupe: error: TROUPE_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}", file=sys.stderr)
        return 2
    configure_logs(logging.INFO if vars(args).get("verbose") else logging.WARNING, log_format)
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)  # a line per plug-in: noise
    command = next(c for c in COMMANDS if c.name == args.command)
    try:
        return asyncio.run(command.run(args, command.settings_for(args)))
    except TroupeError as exc:
        # What the user asked for is wrong (2), or something it needs failed (1).
        print(f"troupe: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) and not isinstance(exc, RunError) else 1
    except (KeyboardInterrupt, asyncio.CancelledError):  # a second signal: stopped at once
        print("troupe: stopped", file=sys.stderr)
        return 130


def run() -> None:
    """``python -m app.cli``."""
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
