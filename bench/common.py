"""Shared pieces of the benchmarks: the machine description, percentiles, result files."""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(),
        "python": platform.python_version(),
    }


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, q in 0..100."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return float(ordered[k])


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def write_result(name: str, doc: dict[str, Any]) -> Path:
    """Write bench/results/<name>.json, stamped with the day (UTC) it is written unless ``doc`` states one."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    # The date goes in the file: the benchmarks page shows it, and a new file has no commit to date it by.
    stamped = {"date": datetime.now(UTC).date().isoformat(), **doc}
    path.write_text(json.dumps(stamped, indent=2, ensure_ascii=False) + "\n")
    return path


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain text table."""
    cells = [[str(h) for h in header]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(title)
    for i, row in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)
