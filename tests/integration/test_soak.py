"""The soak benchmark's short version: a 2-minute show at 5 comments a second from four producers,
the self-driven stage on, 360p.  ``python -m bench.soak --minutes 30`` is the long one."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import soak

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


async def test_two_minutes_on_air_hold_memory_frames_and_every_comment(tmp_path: Path) -> None:
    doc = await soak(2.0, 5.0, 4, "360p", root=tmp_path)
    # Every comment sent arrived and got exactly one outcome; every cue's reply ended (spoken
    # or dropped with its reason).
    d = doc["danmaku"]
    assert doc["sent"] == d["received"] >= 550, (doc["sent"], d)
    assert d["none"] == 0 and d["twice"] == 0, d
    assert doc["cues"] > 20 and doc["cues_without_an_end"] == 0, doc["cues"]
    # Exactly the frames of the show are due; a few may be skipped when the renderer is starved.
    assert doc["frames"]["expected"] == 3000
    assert doc["frames"]["drawn"] >= 3000 * 0.97, doc["frames"]
    # Memory after warm-up (the first 30 s) stays within 10%.
    assert doc["memory"]["growth"] < 0.10, doc["memory"]
    # Frame lateness p99 in each minute within the 40 ms budget at 360p (with an honest margin for
    # a loaded machine: the renderer is not alone on two cores).
    assert max(doc["lateness_p99_ms_by_minute"].values()) < 80, doc["lateness_p99_ms_by_minute"]
