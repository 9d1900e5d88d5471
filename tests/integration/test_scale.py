"""The scale benchmark's smallest trial: two 360p shows at once on shared workers, measured as
``python -m bench.scale`` measures each number of shows."""

from __future__ import annotations

import pytest

from bench.scale import trial

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


async def test_two_shows_at_once_are_measured_show_by_show() -> None:
    t = await trial("360p", "one", 2, 8.0, 1.0)
    shows = t["per_show"]
    assert len(shows) == 2 and t["shows"] == 2
    for s in shows:
        # Exactly the frames of an 8 s show are due; a starved renderer may skip a few.
        assert s["expected"] == 200 and s["frames"] >= 200 * 0.95, s
        # Every cue of each show was answered or dropped with its reason: none left without an end.
        assert s["cues"] > 0 and s["unended"] == 0, s
        assert s["answered"] + s["dropped"] == s["cues"], s
    # The cost figures are measured, not left empty: CPU over the show time, memory of the stage.
    assert t["cpu_s_per_show_s"] > 0 and t["rss_mb_per_show"] > 50, t
    assert t["held"] == all(s["frames"] == 200 and s["late_p99_ms"] <= t["budget_ms"] and s["dropped_late"] == 0
                            for s in shows)
