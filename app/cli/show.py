"""``troupe show new FILE`` writes a commented two-role show to start from (``app/shows/starter.toml``),
and ``troupe show check FILE`` validates a show file without running anything.

A check reports what ``troupe up --show FILE`` would stop on (the show file's parser, which stops
at its first error, then the avatar and background files) and, once the file parses, every
mistake the run would otherwise meet only later, one line each, naming the field: a backend name
no table holds, an espeak voice variant that does not exist, a scripted comment addressed to no
role of the show or of a kind the director turns away."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tomllib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from actors.backends.protocols import BackendError, Voice
from actors.backends.registry import BACKENDS, UnknownBackendError
from actors.director import KINDS
from actors.floor import sparse
from app.cli.base import Command, UsageError
from app.shows import load_show
from events.show import Show, ShowError
from infra.settings import Settings

STARTER = "starter.toml"


def starter_text() -> str:
    """The show ``troupe show new`` writes."""
    return resources.files("app.shows").joinpath(STARTER).read_text("utf-8")


def _options(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="{new,check}",
                                    help="new: write a show file; check: validate one")
    new = actions.add_parser("new", help="write a commented two-role show file to start from",
                             description="Write a commented two-role show file that troupe up --show FILE runs as it is.")
    new.add_argument("file", type=Path, help="the show file to write (TOML)")
    new.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    check = actions.add_parser("check", help="validate a show file without running it: one line per error",
                               description="Validate a show file without running anything: prints "
                                           "'ok: TITLE, N roles, M segments', or one line per error naming "
                                           "the field (exit status 1).")
    check.add_argument("file", type=Path, help="the show file to check (TOML)")


async def _show(args: argparse.Namespace, settings: Settings) -> int:
    return _new(args.file, args.force) if args.action == "new" else _check(args.file, settings)


def _new(path: Path, force: bool) -> int:
    if path.exists() and not force:
        raise UsageError(f"{path} exists: give --force to overwrite it")
    text = starter_text()
    try:
        path.write_text(text, "utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    show = load_show(path)
    print(f"wrote {path}: {_counts(show)}; check it with `troupe show check {path}`, "
          f"run it with `troupe up --show {path}`")
    return 0


def _check(path: Path, settings: Settings) -> int:
    show, errors = check_show(path, settings)
    for error in errors:
        print(f"troupe: error: {path}: {error}", file=sys.stderr)
    if show is None or errors:
        return 1
    if settings.self_driven == "on" and sparse(show, settings):
        print(f"troupe: warning: {path}: no role has material and no segment has points: the show's own "
              "lines will be few", file=sys.stderr)
    print(f"ok: {show.title}, {_counts(show)}")
    return 0


def _counts(show: Show) -> str:
    roles, segments = len(show.roles), len(show.segments)
    return f"{roles} role{'' if roles == 1 else 's'}, {segments} segment{'' if segments == 1 else 's'}"


def check_show(path: Path, settings: Settings) -> tuple[Show | None, list[str]]:
    """The show in ``path`` and what is wrong with it, one message per error, each naming the
    field; no show when the file cannot be read or parsed (then one message: the first error)."""
    if not path.exists():
        return None, ["no such file"]
    try:
        show = load_show(path)
        doc = tomllib.loads(path.read_text("utf-8"))  # the danmaku in file order (the show sorts them)
    except ShowError as exc:
        return None, [str(exc)]
    except UnicodeDecodeError as exc:
        return None, [f"not UTF-8 text (byte {exc.start})"]
    scripted = doc.get("danmaku", doc.get("script", []))
    return show, [*_role_errors(show, settings), *_script_errors(show, scripted)]


def _role_errors(show: Show, settings: Settings) -> Iterator[str]:
    """Per role, the backend names no table holds, and a voice espeak cannot speak (an unknown
    variant: espeak itself checks, as on the role's first line; other TTS backends load models to
    check, so they are left be).  A wrong backend in the settings is one line for all the roles."""
    try:
        BACKENDS.check(settings)
    except UnknownBackendError as exc:
        yield str(exc)
        return
    espeak = None
    for i, role in enumerate(show.roles):
        try:
            BACKENDS.check(settings, dataclasses.replace(show, roles=(role,)))
        except UnknownBackendError as exc:
            yield f"roles[{i}]: {exc}"
        if (role.voice_backend or settings.tts_backend) != "espeak":
            continue
        espeak = espeak or BACKENDS.speaker("espeak")
        try:
            espeak.speak("", Voice(role.language, role.voice_variant, role.voice_pitch, role.voice_rate))
        except BackendError as exc:
            yield f"roles[{i}].voice: {exc}"


def _script_errors(show: Show, scripted: list[Any]) -> Iterator[str]:
    """Scripted comments the director would turn away whatever happens on stage."""
    for i, line in enumerate(scripted):
        if not isinstance(line, dict):
            continue
        to, kind = line.get("to"), line.get("kind", "comment")
        if to is not None and show.role(to) is None:
            yield f"danmaku[{i}].to: {to!r} is not a role of the show ({', '.join(r.id for r in show.roles)})"
        if kind not in KINDS:
            yield f"danmaku[{i}].kind: {kind!r} is not one of {', '.join(KINDS)}"


COMMANDS = (Command("show", "write a show file to start from (new), or validate one (check)", _options, _show,
                    common=False),)
