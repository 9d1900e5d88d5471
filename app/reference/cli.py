"""The CLI page, from the ``troupe`` command's own argparse parser."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Iterator
from typing import TypeGuard

from app.cli import parser as troupe_parser
from app.reference.markdown import block, cell, code, header, table

_GLOBAL = frozenset({"nats", "store", "state_dir", "verbose"})  # app.cli.base.global_options
_WIDTH = 88  # the synopsis is wrapped here, whatever the terminal


def arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """A parser's arguments, --help left out."""
    # argparse has no public list of a parser's arguments.
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]  # noqa: SLF001


def commands(parser: argparse.ArgumentParser, path: str = "troupe"
             ) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """Each command and subcommand below ``parser``, depth first in ``--help`` order: its full name
    ("troupe show new"), its parser and its one-line help."""
    for action in arguments(parser):
        if _is_commands(action):
            helps = {c.dest: c.help or "" for c in action._get_subactions()}  # noqa: SLF001
            for name, sub in action.choices.items():
                yield f"{path} {name}", sub, helps.get(name, "")
                yield from commands(sub, f"{path} {name}")


def missing_help() -> list[str]:
    """Every argument of the ``troupe`` command without help text ("troupe up --resolution")."""
    top = troupe_parser()
    return [f"{path} {_name(a)}" for path, p in [("troupe", top), *((n, s) for n, s, _ in commands(top))]
            for a in arguments(p) if not a.help and not _is_commands(a)]


def page() -> str:
    """``docs/reference/cli.md``."""
    top = troupe_parser()
    lines = header("The troupe command", "the parser in `app/cli`",
                   "Every command, its synopsis and each argument with its help text and default. The global "
                   "options come before the command's name or, for the commands that take them, after it.")
    lines += ["## Global options", "", *block(_usage(top)), *_arguments([a for a in arguments(top) if not _is_commands(a)])]
    for name, sub, help_ in commands(top):
        own = [a for a in arguments(sub) if a.dest not in _GLOBAL and not _is_commands(a)]
        nested = any(_is_commands(a) for a in arguments(sub))
        takes_global = any(a.dest in _GLOBAL for a in arguments(sub))
        lines += [f"{'#' * name.count(' ')}# {name}", "", cell(help_) + ".", "", *block(_usage(sub))]
        if not takes_global and name.count(" ") == 1:
            lines += ["It takes no global options after its name: give them before it.", ""]
        if own or not nested:
            lines += _arguments(own) if own else ["It takes no arguments of its own.", ""]
    return "\n".join(lines)


def _is_commands(action: argparse.Action) -> TypeGuard[argparse._SubParsersAction[argparse.ArgumentParser]]:  # noqa: SLF001
    return isinstance(action, argparse._SubParsersAction)  # noqa: SLF001 (argparse has no public name for it)


def _usage(parser: argparse.ArgumentParser) -> str:
    """The synopsis, as ``--help`` prints it on a terminal ``_WIDTH`` wide."""
    wide = argparse.ArgumentParser(prog=parser.prog, add_help=False,
                                   formatter_class=functools.partial(argparse.HelpFormatter, width=_WIDTH))
    formatter = wide._get_formatter()  # noqa: SLF001 (the width is the formatter's)
    formatter.add_usage(parser.usage, arguments(parser), parser._mutually_exclusive_groups, prefix="")  # noqa: SLF001
    return formatter.format_help().strip()


def _name(action: argparse.Action) -> str:
    return ", ".join(action.option_strings) if action.option_strings else str(action.metavar or action.dest)


def _arguments(actions: Iterator[argparse.Action] | list[argparse.Action]) -> list[str]:
    rows = []
    for a in actions:
        default = a.default
        shown = "" if default in (None, argparse.SUPPRESS, False) or a.nargs == 0 else code(default)
        if a.choices is not None and not isinstance(a.choices, dict):
            shown = (shown + " " if shown else "") + "one of " + ", ".join(code(c) for c in a.choices)
        help_ = cell(a.help % {**vars(a), "prog": "troupe"} if "%" in a.help else a.help) if a.help else "**no help text**"
        required = " (required)" if a.required and a.option_strings else ""
        rows.append([code(_name(a)) + required, help_, shown])
    return table(["argument", "what it is", "default"], rows)
