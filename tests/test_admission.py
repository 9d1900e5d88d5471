"""The one admission decision of the kernel, whatever feeds it (JetStream, the store, a list)."""

from __future__ import annotations

import dataclasses

from actors.director import Director
from actors.kernel import HANDLE, REFUSE, SKIP, admit
from actors.lipsync import LipsyncActor
from actors.preview import PreviewActor
from events.danmaku import DanmakuReceived
from events.run import RunEnded
from tests.showkit import demo_run

RUN = demo_run()
PLAYBACK = dataclasses.replace(demo_run(), replay_of="r0")
DANMAKU = DanmakuReceived(id="d1", run="r1", text="hi")
CHUNK = DanmakuReceived(id="x1", run="r1", text="caused", causation="c1")  # an input of the run's own chain


def test_an_unknown_run_is_refused_unless_the_actor_takes_those() -> None:
    assert admit(LipsyncActor, CHUNK, None).action == REFUSE
    assert admit(Director, DANMAKU, None).action == HANDLE  # it answers with a rejection


def test_a_run_s_start_is_taken_only_by_an_actor_that_joins() -> None:
    assert admit(LipsyncActor, RUN, None).action == HANDLE
    assert admit(LipsyncActor, RUN, None, joins=False).action == SKIP


def test_a_playback_goes_only_to_the_actors_that_play_playbacks() -> None:
    assert admit(Director, DANMAKU, PLAYBACK).action == SKIP
    assert admit(Director, PLAYBACK, None).action == SKIP
    assert admit(PreviewActor, DANMAKU, PLAYBACK).action == HANDLE


def test_an_outside_input_after_the_end_is_late_but_a_caused_one_or_the_end_is_not() -> None:
    assert admit(Director, DANMAKU, RUN, late=True).ended
    assert not admit(LipsyncActor, CHUNK, RUN, late=True).ended  # caused by the run's own chain
    assert not admit(Director, RunEnded(id="e", run="r1", reason="", duration_ms=0), RUN, late=True).ended
