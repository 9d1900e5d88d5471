"""The kernel on its own: what it decides for an input (refuse, skip, queue, handle), the runs it
holds, the store feed (inputs at recorded times, then the clock), and cancellation: the Cancel
tokens of a scheduled actor's inputs, cancelled as the actor's hooks say."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence

from actors.base import DROPPED, Cancel, Context, Handled, ScheduledActor, Work
from actors.director import Director
from actors.kernel import REFUSE, SKIP, Kernel, replay
from actors.lipsync import LipsyncActor
from actors.llm import LLMActor
from events.base import Event
from events.cue import CueIssued
from events.danmaku import DanmakuReceived
from events.utterance import UtteranceDropped
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


class Cues(ScheduledActor):
    """A scheduled actor that declares what gives way: a cue of priority 4 is urgent, an earlier
    cue of its run gives way to it, and a whole drop cancels its cue; it handles nothing."""

    name = "cues"
    consumes = (CueIssued, UtteranceDropped)

    def work(self, event: Event, ctx: Context) -> Work | None:
        return Work("host") if isinstance(event, CueIssued) else None

    def handle_batch(self, events: Sequence[Event], ctx: Context) -> list[Handled]:
        return [() for _ in events]

    def handle(self, event: Event, ctx: Context) -> Handled:
        return ()

    def urgent(self, event: Event, ctx: Context) -> bool:
        return isinstance(event, CueIssued) and event.priority >= 4

    def gives_way(self, working: Event, urgent: Event) -> str | None:
        assert isinstance(working, CueIssued) and isinstance(urgent, CueIssued)
        return f"{urgent.id} first" if working.run == urgent.run and working.seq < urgent.seq else None

    def cancels(self, event: Event) -> str | None:
        return event.utterance if isinstance(event, UtteranceDropped) and event.from_seq == 0 else None


def numbered(seq: int, priority: float = 2.0) -> CueIssued:
    return dataclasses.replace(cue(f"c{seq}"), seq=seq, priority=priority)


def handed_out(kernel: Kernel[object], *cues: CueIssued) -> dict[str, Cancel]:
    """The cues queued, then handed out in one batch: each one's Cancel."""
    for c in cues:
        assert kernel.take(c, RUN, 10).queued
    batch = kernel.next_batch(RUN.started_at_ms + 20)
    assert batch is not None and batch.events == list(cues)
    return batch.cancels


def test_an_urgent_input_cancels_a_handling_in_progress_that_gives_way_and_not_one_that_does_not() -> None:
    kernel: Kernel[object] = Kernel(Cues())
    cancels = handed_out(kernel, numbered(3), numbered(5))
    assert not any(c.cancelled for c in cancels.values())
    stopped: list[str] = []
    cancels["c3"].on_cancel(lambda: stopped.append("c3"))  # a writer told to stop
    kernel.notice(numbered(4, priority=4))  # issued after c3, before c5
    assert cancels["c3"].reason == "c4 first" and stopped == ["c3"]
    assert not cancels["c5"].cancelled
    kernel.notice(numbered(9, priority=4))
    assert cancels["c5"].reason == "c9 first" and cancels["c3"].reason == "c4 first"  # the first reason stays
    assert stopped == ["c3"]  # called once


def test_an_urgent_input_in_progress_gives_way_to_none_and_a_served_batch_is_let_go() -> None:
    kernel: Kernel[object] = Kernel(Cues())
    assert kernel.take(numbered(3, priority=4), RUN, 10).queued
    batch = kernel.next_batch(RUN.started_at_ms + 20)
    assert batch is not None
    kernel.notice(numbered(4, priority=4))
    assert not batch.cancels["c3"].cancelled  # urgent itself
    kernel.served(batch, RUN.started_at_ms + 30)
    [(_, token)] = handed_out(kernel, numbered(2)).items()
    assert token.reason == "c4 first"  # c4 is still to be taken up: c2 gives way before it is handled
    later = handed_out(kernel, numbered(4, priority=4), numbered(1))
    assert not later["c4"].cancelled and not later["c1"].cancelled  # taken up with it: c1 goes on


def test_a_cue_dropped_whole_before_it_is_handed_out_gets_a_cancelled_token() -> None:
    kernel: Kernel[object] = Kernel(Cues())
    c7 = numbered(7)
    assert kernel.take(c7, RUN, 10).queued
    kernel.notice(UtteranceDropped(id="x", run="r1", utterance="c7", reason="superseded"))
    kernel.notice(UtteranceDropped(id="y", run="r1", utterance="c8", from_seq=2, reason="cut"))  # its rest only
    batch = kernel.next_batch(RUN.started_at_ms + 20)
    assert batch is not None and batch.cancels["c7"].reason == DROPPED
    [(_, kept)] = handed_out(kernel, numbered(8)).items()
    assert not kept.cancelled
    kernel.notice(UtteranceDropped(id="z", run="r1", utterance="c8", reason="superseded"))  # while it is handled
    assert kept.reason == DROPPED


def test_a_token_s_after_fires_on_the_kernel_s_timer_unless_disarmed() -> None:
    started: list[tuple[float, Callable[[], object]]] = []

    def timer(seconds: float, fn: Callable[[], object]) -> Callable[[], None]:
        started.append((seconds, fn))
        return lambda: None

    kernel: Kernel[object] = Kernel(Cues(), timer=timer)
    [(_, token)] = handed_out(kernel, numbered(1)).items()
    token.after(250, "too slow")
    [(seconds, fire)] = started
    assert seconds == 0.25 and not token.cancelled
    fire()
    assert token.reason == "too slow"
    # The default timer (a daemon thread), the same in the runtime and the list feed.
    fired = threading.Event()
    real = Cancel()
    real.on_cancel(fired.set)
    real.after(20, "late")
    assert fired.wait(5) and real.reason == "late"
    disarmed = Cancel()
    disarm = disarmed.after(20, "late")
    disarm()  # before it fired: it never will
    time.sleep(0.1)
    assert not disarmed.cancelled


def test_a_scope_cancelled_alone_leaves_its_parent_and_one_cancelled_with_its_parent_gets_its_reason() -> None:
    parent = Cancel()
    attempt = parent.scope()
    attempt.cancel("budget")
    assert attempt.reason == "budget" and not parent.cancelled
    second = parent.scope()
    told: list[str] = []
    second.on_cancel(lambda: told.append("second"))
    unregistered = second.on_cancel(lambda: told.append("gone"))
    unregistered()
    closed = parent.scope()
    closed.close()  # done with: the parent's cancel no longer reaches it
    parent.cancel("urgent")
    assert second.reason == "urgent" and attempt.reason == "budget" and told == ["second"]
    assert not closed.cancelled
    assert parent.scope().reason == "urgent"  # a scope of a cancelled token is cancelled at once
    late: list[str] = []
    parent.on_cancel(lambda: late.append("at once"))
    assert late == ["at once"]
