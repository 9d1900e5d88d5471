"""A running show stays live: comments wait for the floor, a moderator line takes it at once,
every danmaku gets exactly one outcome, and re-execution reproduces the waiting room."""

from __future__ import annotations

import time

import pytest

from app import reexec
from app.reexec import format_verification
from app.shows import load_show
from app.supervisor import Stage
from events.cue import CueIssued
from events.danmaku import DanmakuReceived
from events.role import RoleDeclared
from events.run import RunEnded, RunStarted
from events.viseme import VisemeCut, VisemeTrack
from infra.settings import Settings, run_config
from store.recorder import read_events
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(180)
OUTCOMES = ("cue.issued", "cue.merged", "danmaku.skipped", "danmaku.rejected")
COMMENTS = [
    ("ann", "@rex how do I learn to code"), ("bo", "@host what game is next"),
    ("cy", "tell us about your favourite food"), ("di", "what music do you like"),
    ("ed", "is it raining where you are"), ("fu", "@小鹿 推荐一个旅行的地方"),
]


async def test_a_moderator_line_takes_the_floor_of_a_running_show(settings: Settings) -> None:
    show = load_show()
    run = f"live{int(time.time() * 1000)}"
    duration_ms = 40_000
    async with Stage(settings) as stage:
        await stage.start_actors(["director", "llm", "tts", "lipsync", "recorder"])
        start = RunStarted(id=f"{run}-start", run=run, show=show.to_dict(), seed=5,
                           started_at_ms=int(time.time() * 1000), config=run_config(settings),
                           duration_ms=duration_ms)
        await stage.publish([start])
        await stage.publish([RoleDeclared.of(run, r) for r in show.roles])
        engine = stage.engine
        # A chat faster than the stage: six comments at once (one is answered, the rest wait).
        await stage.publish([DanmakuReceived(id=f"{run}-c{i}", run=run, user=u, text=t)
                             for i, (u, t) in enumerate(COMMENTS)])

        def on_air() -> bool:
            return any(isinstance(e, VisemeTrack) for e in read_events(engine, run, ["viseme.track"]))

        await wait_for(on_air, timeout_s=30, what="the first reply on the stage")
        await stage.publish([DanmakuReceived(id=f"{run}-mod", run=run, user="mod", kind="moderator",
                                             text="please keep the chat friendly")])

        def moderator_spoken() -> bool:
            return any(e.correlation == f"{run}-mod" for e in read_events(engine, run, ["viseme.track"]))

        await wait_for(moderator_spoken, timeout_s=30, what="the moderator's reply on the stage")
        ids = [f"{run}-c{i}" for i in range(len(COMMENTS))] + [f"{run}-mod"]

        def accounted() -> bool:
            return {e.correlation for e in read_events(engine, run, OUTCOMES)} >= set(ids)

        await wait_for(accounted, timeout_s=30, what="an outcome for every danmaku")
        await stage.publish([RunEnded(id=f"{run}-end", run=run, t_ms=duration_ms, reason="test",
                                      duration_ms=duration_ms)])
        assert await stage.drain(["director", "llm", "tts", "lipsync", "recorder"], timeout_s=120)
        recorded = read_events(engine, run)

    outcomes: dict[str, list[str]] = {}
    for e in recorded:
        if e.type in OUTCOMES and e.correlation:
            outcomes.setdefault(e.correlation, []).append(e.type)
    assert {d: len(v) for d, v in outcomes.items() if d in ids} == dict.fromkeys(ids, 1)

    [mod_cue] = [e for e in recorded if isinstance(e, CueIssued) and e.correlation == f"{run}-mod"]
    assert mod_cue.priority >= settings.interrupt_priority
    mod_tracks = [e for e in recorded if isinstance(e, VisemeTrack) and e.correlation == f"{run}-mod"]
    cuts = [e for e in recorded if isinstance(e, VisemeCut)]
    assert cuts and all(c.by == mod_cue.id for c in cuts), "the speech in progress was cut"
    first = min(t.start_ms for t in mod_tracks)
    # It took the floor at once: its speech starts where the cut is, not after the queued replies.
    assert first == min(c.at_ms for c in cuts)
    assert first - mod_cue.t_ms < 3000  # the moderator's cue -> its speech: writing and synthesis only

    verification = reexec.verify(engine, run, actors=("director", "lipsync"))
    assert verification.divergence is None, format_verification(verification)
