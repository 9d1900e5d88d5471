"""What every section of the benchmarks page is written with: a results file, the page being
written, the number formats, and the ``section`` decorator that gives a family of files its heading,
its introduction and its sources (bench.report assembles the page)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Result:
    """One results file: its name, what it holds, and the date it states."""

    name: str
    doc: dict[str, Any]
    date: str

    @property
    def machine(self) -> str:
        m = self.doc.get("machine", {})
        torch = f", torch {m['torch']}" if m.get("torch") else ""
        return f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, Python {m.get('python', '?')}{torch}"

    @property
    def source(self) -> str:
        return f"`bench/results/{self.name}`: {self.machine}; {self.date}"


@dataclass
class Page:
    """The page being written and the plots that go with it."""

    lines: list[str] = field(default_factory=list)
    plots: dict[str, str] = field(default_factory=dict)
    verdicts: list[tuple[str, str, str, bool]] = field(default_factory=list)

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def table(self, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        self.add("| " + " | ".join(header) + " |", "|" + " --- |" * len(header))
        self.add(*("| " + " | ".join(str(c) for c in row) + " |" for row in rows))
        self.add("")

    def plot(self, name: str, alt: str, svg: str) -> None:
        self.plots[f"{name}.svg"] = svg
        self.add(f"![{alt}](img/benchmarks/{name}.svg)", "")

    def target(self, what: str, goal: str, measured: str, met: bool) -> str:
        """Record a target for the summary; the verdict for a table cell."""
        self.verdicts.append((what, goal, measured, met))
        return "met" if met else "**missed**"


def ms(value: float | None) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.0f} ms"


def pct(share: float | None) -> str:
    return "—" if share is None else f"{share * 100:.1f}%"


def num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


# ---- Sections: one function per family of results files. ---------------------------------------
Section = Callable[[Page, Sequence[Result]], None]


def sources(page: Page, results: Sequence[Result]) -> None:
    page.add("Measured on:", "", *(f"- {r.source}" for r in results), "")


def section(heading: str, intro: str) -> Callable[[Section], Section]:
    """A family's section: its heading and what it measures, then what ``body`` adds, then its files."""
    def wrap(body: Section) -> Section:
        @functools.wraps(body)
        def render(page: Page, results: Sequence[Result]) -> None:
            page.add(f"## {heading}", "", intro, "")
            body(page, results)
            sources(page, results)
        return render
    return wrap
