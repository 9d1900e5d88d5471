"""The benchmarks page, rendered from ``bench/results/*.json``: ``python -m bench.report`` writes
``docs/benchmarks.md`` and its plots (SVG, under ``docs/img/benchmarks/``); ``--check`` writes
nothing and exits 1 when any of them differs from what the results give.

The page is never edited by hand: each results file is rendered with the machine and the date it
states, a family of files by one function of ``bench.report_shows`` or ``bench.report_parts``
(a file of no known family gets a plain table of its values, below), and the targets are judged
there, from the numbers.  The output depends only on the files: no clock, no randomness, fixed
number formats, so a check on another machine agrees.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bench.common import RESULTS
from bench.report_page import Page, Result, Section, sources
from bench.report_parts import (
    bridges,
    gpu_check,
    memory,
    models,
    render,
    replies,
    runtime,
    scheduler,
    store,
)
from bench.report_shows import (
    chat,
    glass,
    latency,
    recorded,
    scale,
    show,
    soak,
    spread,
    standby,
    takeovers,
)

ROOT = RESULTS.parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
PLOTS = ROOT / "docs" / "img" / "benchmarks"
# Files written before bench.common stamped a date: the day the commit that holds this very
# content was made (a file whose content changed since gets no date from here).
COMMITTED = {
    "chat-llama_cpp-espeak.json": ("2026-12-05", "fcbcc0f3229b"), "chat-llama_cpp-onnx.json": ("2026-12-03", "e374c08316d4"),
    "chat-transformers-onnx.json": ("2026-11-30", "89c311b0091a"), "chat.json": ("2026-12-05", "46bdf7d38625"),
    "glass.json": ("2026-11-30", "d1b39fecef85"), "gpu_check-latency-cpu.json": ("2026-11-30", "a8c957861c12"),
    "gpu_check.json": ("2026-11-30", "fdb90de9181a"), "latency-ab-after.json": ("2026-12-05", "b59e91c61a53"),
    "latency-ab-before.json": ("2026-12-05", "f1581556b629"), "latency-llama_cpp-onnx.json": ("2026-12-03", "0bd05348a9ba"),
    "latency-one-process.json": ("2026-12-03", "8589e0932315"), "latency-transformers-onnx.json": ("2026-11-30", "db97d5b27ddb"),
    "latency.json": ("2026-12-03", "e7373a7b1b7e"), "models.json": ("2026-12-02", "6ee73cf18b08"),
    "models_vllm.json": ("2026-11-30", "90f6c4384973"), "recorded-llama_cpp-onnx.json": ("2026-12-03", "307f5be37bd3"),
    "recorded-scripted-espeak-2pct.json": ("2026-12-05", "0c8f8551db11"),
    "recorded-scripted-espeak.json": ("2026-12-05", "f87fa7c47780"), "render.json": ("2026-12-04", "500021d0c8ca"),
    "replies.json": ("2026-12-02", "86634906c17c"), "runtime.json": ("2026-12-03", "7cb19309b86c"),
    "scale-2026-12-03.json": ("2026-12-03", "90735350ff61"), "scale-2026-12-03b.json": ("2026-12-03", "73e52d803471"),
    "scale.json": ("2026-12-03", "ce5916e5eab8"), "scheduler.json": ("2026-11-30", "54395197a831"),
    "scheduler_vllm.json": ("2026-11-30", "957b7e70bfdb"), "show-llama_cpp.json": ("2026-12-02", "ec9d678f8211"),
    "show-transformers.json": ("2026-12-01", "d63e3028627a"), "show.json": ("2026-12-05", "b18306477c21"),
    "soak-30m.json": ("2026-12-03", "b0123d698dc8"), "soak-8m.json": ("2026-12-03", "4d4d1cc4c8b5"),
    "standby.json": ("2026-12-03", "024977b9fa24"), "store.json": ("2026-11-30", "d85192e6a728"),
}
NO_DATE = "not recorded"


def load(folder: Path = RESULTS) -> list[Result]:
    """Every results file, by name."""
    out = []
    for path in sorted(folder.glob("*.json")):
        raw = path.read_bytes()
        doc = json.loads(raw)
        stamped, digest = COMMITTED.get(path.name, (NO_DATE, ""))
        date = doc.get("date") or (stamped if hashlib.sha256(raw).hexdigest()[:12] == digest else NO_DATE)
        out.append(Result(path.name, doc, str(date)))
    return out


def generic(page: Page, results: Sequence[Result]) -> None:
    for r in results:
        page.add(f"## `{r.name}`", "", "No section of this page knows this file yet: its values as they are.", "")
        page.table(("value", ""), ((k, json.dumps(v, ensure_ascii=False)) for k, v in _flat(r.doc)))
        sources(page, [r])


def _flat(doc: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k != "machine":
                yield from _flat(v, f"{prefix}{k}.")
    elif not isinstance(doc, list):
        yield prefix.rstrip("."), doc


# Family by file name (the latency files by what they hold), in the page's order.
SECTIONS: tuple[tuple[str, Section], ...] = (
    ("latency", latency), ("chat", chat), ("recorded", recorded), ("show", show), ("glass", glass),
    ("scale", scale), ("soak", soak), ("standby", standby), ("takeovers", takeovers), ("spread", spread), ("runtime", runtime), ("store", store),
    ("memory", memory),
    ("scheduler", scheduler), ("render", render), ("models", models), ("replies", replies), ("bridges", bridges),
    ("gpu_check", gpu_check),
)


def family(result: Result) -> str:
    if "hop_median_ms" in result.doc:
        return "latency"
    stem = result.name.removesuffix(".json")
    return next((name for name, _ in SECTIONS if stem == name or stem.startswith((f"{name}-", f"{name}_"))), "")


def build(results: Sequence[Result]) -> tuple[str, dict[str, str]]:
    """The page and its plots (name -> SVG text)."""
    body = Page()
    for name, section in (*SECTIONS, ("", generic)):
        members = [r for r in results if family(r) == name]
        if members:
            section(body, members)
    head = Page()
    head.add("# Benchmarks", "",
             "<!-- Generated by `python -m bench.report` from bench/results/*.json: do not edit by hand. -->", "",
             "Every number on this page is read from a results file in `bench/results/`, which each benchmark "
             "(`python -m bench.NAME`) writes; each section says the machine and the date its files state. "
             "`python -m bench.report` renders the page again, and the test suite fails when it is stale. How "
             "the figures moved over time, before and after each change, is in the [changelog](changelog.md). "
             "The development machines have 2 shared cores and no GPU: their speed changes by the hour, so a "
             "figure is one run unless it says otherwise.", "",
             "## Targets at a glance", "")
    head.table(("what", "target", "measured", ""), ((w, g, m, "met" if ok else "**missed**")
                                                    for w, g, m, ok in body.verdicts))
    files = Page()
    files.add("## The results files", "")
    files.table(("file", "machine", "platform", "date"),
                ((f"`{r.name}`", r.machine, r.doc.get("machine", {}).get("platform", "?"), r.date) for r in results))
    files.add("A date is the one the file states, else the day the commit holding the file was made.")
    return "\n".join([*head.lines, *body.lines, *files.lines]) + "\n", body.plots


def outputs(results: Sequence[Result]) -> dict[Path, str]:
    """Every file the report writes, with its text."""
    page, plots = build(results)
    return {PAGE: page, **{PLOTS / name: svg for name, svg in plots.items()}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the page or a plot differs from what the results give")
    args = parser.parse_args(argv)
    wanted = outputs(load())
    stale = sorted(p for p, text in wanted.items() if not p.exists() or p.read_text("utf-8") != text)
    extra = sorted(set(PLOTS.glob("*.svg")) - set(wanted)) if PLOTS.exists() else []
    if args.check:
        for path in [*stale, *extra]:
            print(f"bench.report: {_shown(path)} is stale: run python -m bench.report", file=sys.stderr)
        return 1 if stale or extra else 0
    PLOTS.mkdir(parents=True, exist_ok=True)
    for path in stale:
        path.write_text(wanted[path], "utf-8")
    for path in extra:
        path.unlink()
    print(f"bench.report: {len(stale) + len(extra)} of {len(wanted)} files written or removed "
          f"({_shown(PAGE)}, {_shown(PLOTS)}/)")
    return 0


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


if __name__ == "__main__":
    sys.exit(main())
