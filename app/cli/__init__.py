"""The ``troupe`` command: one module per command (``up``, ``show``, ``actor``, ``publish``, ``bridge``, the store's
``runs``/``inspect``/``replay``/``export``, the operator's ``say``/``segment``/``hold``/``resume``,
``serve``, ``provision``, ``nats-config``), each a ``Command`` that declares its options and the
settings they override (``app.cli.base``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from app.cli import actor, bridge, operator, publish, services, show, store, up, viewers
from app.cli.base import Command, Parser, UsageError, global_options
from app.publish import RunError
from events.errors import ConfigError, TroupeError
from infra.logs import configure as configure_logs

__all__ = ["COMMANDS", "UsageError", "main", "parser"]

# In the order ``troupe --help`` lists them.
COMMANDS: tuple[Command, ...] = (*up.COMMANDS, *show.COMMANDS, *actor.COMMANDS, *publish.COMMANDS, *bridge.COMMANDS,
                                 *operator.COMMANDS,
                                 *services.COMMANDS[:1], *store.COMMANDS[:3], *services.COMMANDS[1:],
                                 *store.COMMANDS[3:], *viewers.COMMANDS)


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
    command = next(c for c in COMMANDS if c.name == args.command)
    try:
        settings = command.settings_for(args)  # a bad setting (TROUPE_LOG_FORMAT too): one line, exit 2
        configure_logs(logging.INFO if vars(args).get("verbose") else logging.WARNING, settings.log_format)
        logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)  # a line per plug-in: noise
        code = asyncio.run(command.run(args, settings))
        sys.stdout.flush()  # here, not at exit: a reader that left early is met inside this try
        return code
    except BrokenPipeError:  # ``troupe inspect RUN | head -1``: the reader has what it wanted
        return _reader_gone()
    except TroupeError as exc:
        # What the user asked for is wrong (2), or something it needs failed (1).
        print(f"troupe: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) and not isinstance(exc, RunError) else 1
    except (KeyboardInterrupt, asyncio.CancelledError):  # a second signal: stopped at once
        print("troupe: stopped", file=sys.stderr)
        return 130


def _reader_gone() -> int:
    """Stdout's reader closed it early: no traceback, and exit 1 as Python's docs and click do."""
    # Python flushes stdout again at exit: what is left in its buffer goes to devnull, not to a second error.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 1


def run() -> None:
    """``python -m app.cli``."""
    sys.exit(main())
