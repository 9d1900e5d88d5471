"""The reference pages of the docs site, generated from the code: ``python -m app.reference``
writes them under ``docs/reference/``, ``python -m app.reference --check`` exits 1 (one line
per stale page, with a short diff) when a page differs from what the code generates now.

Each page comes from the one place its facts live: the CLI from its argparse parser, the
settings from ``infra.settings``, the events from their registry (with JSON Schemas of what
producers send), the metrics from their registry, the NATS permissions from ``app.natsauth``
and the show file from the table of keys next to its parser.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from app.reference import cli, events, metrics, permissions, settings, show

ROOT = Path(__file__).resolve().parents[2] / "docs" / "reference"
PAGES: dict[str, Callable[[], str]] = {
    "cli.md": cli.page,
    "settings.md": settings.page,
    "events.md": events.page,
    "metrics.md": metrics.page,
    "nats-permissions.md": permissions.page,
    "show-file.md": show.page,
}
_DIFF_LINES = 20  # of each stale page's diff


def generate() -> dict[str, str]:
    """Every generated file, by its path under ``docs/reference``."""
    out = {name: page().rstrip("\n") + "\n" for name, page in PAGES.items()}
    for name, cls in events.PRODUCED.items():
        out[f"schemas/{name}"] = json.dumps(events.schema(cls), indent=2, ensure_ascii=False) + "\n"
    return out


def stale(root: Path = ROOT) -> list[str]:
    """One line per file that differs from what the code generates, each with a short diff, and
    one per CLI argument without help text; empty when the reference is current."""
    problems = []
    for name, text in generate().items():
        path = root / name
        try:
            current = path.read_text("utf-8")
        except FileNotFoundError:
            problems.append(f"docs/reference/{name}: missing (run python -m app.reference)")
            continue
        if current != text:
            diff = list(difflib.unified_diff(current.splitlines(), text.splitlines(), f"docs/reference/{name}",
                                             "generated", n=1, lineterm=""))
            more = f"\n  ... {len(diff) - _DIFF_LINES} more diff lines" if len(diff) > _DIFF_LINES else ""
            problems.append(f"docs/reference/{name}: stale (run python -m app.reference)\n"
                            + "\n".join("  " + line for line in diff[:_DIFF_LINES]) + more)
    problems += [f"{argument}: no help text (app/cli)" for argument in cli.missing_help()]
    return problems


def write(root: Path = ROOT) -> list[str]:
    """Write every generated file; the names of those that changed."""
    changed = []
    for name, text in generate().items():
        path = root / name
        if not path.exists() or path.read_text("utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, "utf-8")
            changed.append(name)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m app.reference [--check]``."""
    p = argparse.ArgumentParser(prog="python -m app.reference", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 when a page is stale")
    args = p.parse_args(argv)
    if args.check:
        problems = stale()
        for line in problems:
            print(line)
        return 1 if problems else 0
    changed = write()
    print(f"docs/reference: {len(changed)} of {len(PAGES) + len(events.PRODUCED)} files changed"
          + (f" ({', '.join(changed)})" if changed else ""))
    missing = cli.missing_help()
    for argument in missing:
        print(f"{argument}: no help text (app/cli)", file=sys.stderr)
    return 1 if missing else 0
