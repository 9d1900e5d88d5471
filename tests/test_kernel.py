"""The kernel on its own: what it decides for an input (refuse, skip, queue, handle), the runs it
holds, and the store feed (inputs at recorded times, then the clock)."""

from __future__ import annotations

import dataclasses

from actors.director import Director
from actors.kernel import REFUSE, SKIP, Kernel, replay
from actors.lipsync import LipsyncActor
from actors.llm import LLMActor
from events.cue import CueIssued
from events.danmaku import DanmakuReceived
from infra.settings import load_settings, run_config
from tests.showkit import demo_run

RUN = demo_run()


def cue(id_: str, run: str = "r1") -> CueIssued:
    return CueIssued(id=id_, run=run, role="host", text="hello there", causation="d1", correlation="d1", t_ms=10,
                     deadline_ms=9000, seq=1, user="ann", danmaku=("d1",), routed_by="keyword")


def test_an_input_of_an_unknown_run_is_refused_and_a_playback_s_skipped() -> None:
    kernel: Kernel[object] = Kernel(LipsyncActor())
    refused = kernel.take(cue("c", run="nope"), None, 0)
    assert refused.admission.action == REFUSE and not refused.handled and "unknown run" in refused.admission.reason
    playback = dataclasses.replace(RUN, replay_of="r0")
    skipped = Kernel(Director(load_settings(environ={}))).take(DanmakuReceived(id="d", run="r1", text="hi"), playback, 0)
    assert skipped.admission.action == SKIP and skipped.ctx is None


def test_a_run_is_held_from_its_start_until_it_is_released() -> None:
    kernel: Kernel[object] = Kernel(Director(load_settings(environ={})))
    taken = kernel.take(RUN, None, 0)
    assert taken.handled and kernel.holds("r1")
    list(taken.handle())
    assert kernel.next_tick() is not None  # the director's clock runs for the run
    kernel.release("r1")
    assert not kernel.holds("r1") and kernel.next_tick() is None


def test_a_scheduled_actor_s_work_waits_in_the_kernel_s_queue() -> None:
    kernel: Kernel[str] = Kernel(LLMActor(load_settings(environ={})))
    list(kernel.take(RUN, RUN, 0).handle())
    c1 = cue("c1")
    taken = kernel.take(c1, RUN, 10, payload="delivery-1")
    assert taken.queued and not taken.handled and kernel.waiting == 1
    assert list(kernel.queued()) == ["delivery-1"]
    batch = kernel.next_batch(RUN.started_at_ms + 20)
    assert batch is not None and batch.payloads == ["delivery-1"] and batch.events == [c1]
    outputs = [e.type for out in kernel.handle_batch(batch, 20) for e in out]
    assert "utterance.chunk" in outputs and "utterance.completed" in outputs


def test_the_store_feed_hands_each_input_at_its_time_then_runs_the_clock() -> None:
    run = dataclasses.replace(RUN, config=run_config(load_settings(environ={}, merge_window_ms=0)))
    inputs = [(0, run), (500, DanmakuReceived(id="d1", run="r1", text="what game tonight?", user="ann"))]
    seen = list(replay(Kernel(Director(load_settings(environ={}))), run, inputs, clock_to_ms=20_000))
    assert [e.id if e is not None else None for e, _ in seen] == ["r1-start", "d1", None]  # None: the clock
    emitted = [e for _, out in seen for e in out]
    assert any(isinstance(e, CueIssued) and e.danmaku == ("d1",) for e in emitted)
