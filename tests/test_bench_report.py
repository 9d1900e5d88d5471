"""The benchmarks page is rendered from bench/results/*.json and kept current (bench.report)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import common, report
from bench.common import RESULTS


def test_the_page_and_its_plots_are_current() -> None:
    assert report.main(["--check"]) == 0, "docs/benchmarks.md is stale: run python -m bench.report"


def test_every_results_file_is_rendered_with_its_machine_and_date() -> None:
    results = report.load()
    page = report.PAGE.read_text("utf-8")
    assert {r.name for r in results} == {p.name for p in RESULTS.glob("*.json")}
    for result in results:
        assert report.family(result), f"{result.name}: no section of bench/report.py renders it"
        assert result.date != report.NO_DATE, (
            f"{result.name} states no date: bench.common.write_result should stamp one ('date')")
        assert f"- {result.source}" in page, f"{result.name} is not on the page with its machine and date"


def test_the_numbers_are_the_files_numbers() -> None:
    store = json.loads((RESULTS / "store.json").read_text())
    page, _ = report.build(report.load())
    assert f"| {store['playback']['ratio']:.2f} " in page
    assert f"{store['reexec']['x_realtime']:g}× real time" in page


def test_the_output_depends_only_on_the_results(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    first = report.outputs(report.load())
    monkeypatch.chdir(tmp_path)
    assert report.outputs(report.load()) == first


def test_a_stale_page_fails_the_check_and_is_written_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(report, "PAGE", tmp_path / "benchmarks.md")
    monkeypatch.setattr(report, "PLOTS", tmp_path / "img")
    assert report.main(["--check"]) == 1  # nothing written yet
    assert report.main([]) == 0
    assert report.main(["--check"]) == 0
    report.PAGE.write_text(report.PAGE.read_text("utf-8").replace("| met |", "| **missed** |", 1), "utf-8")
    (report.PLOTS / "old.svg").write_text("<svg/>")
    assert report.main(["--check"]) == 1
    assert report.main([]) == 0
    assert report.main(["--check"]) == 0 and not (report.PLOTS / "old.svg").exists()


def test_a_file_states_its_date_else_the_commit_that_holds_it_dates_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    days = {datetime.now(UTC).date().isoformat()}
    common.write_result("new", {"value": 1})
    days.add(datetime.now(UTC).date().isoformat())  # the day may turn while it writes
    common.write_result("dated", {"date": "2027-01-02", "value": 2})
    old = tmp_path / "old.json"  # written before write_result stamped a date, and committed
    old.write_text('{"value": 3}\n')
    digest = hashlib.sha256(old.read_bytes()).hexdigest()[:12]
    monkeypatch.setattr(report, "COMMITTED", {"old.json": ("2026-11-30", digest)})
    (tmp_path / "edited.json").write_text('{"value": 4}\n')  # no date, and no commit holds it
    results = report.load(tmp_path)
    dates = {r.name: r.date for r in results}
    assert dates.pop("new.json") in days
    assert dates == {"dated.json": "2027-01-02", "old.json": "2026-11-30", "edited.json": report.NO_DATE}
    page, _ = report.build(results)
    assert "- `bench/results/dated.json`: ?, ? cores, Python ?; 2027-01-02\n" in page
    assert all(f"- {r.source}\n" in page for r in results)
