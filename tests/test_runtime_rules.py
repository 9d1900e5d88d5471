"""The runtime's rules without NATS: run lifecycle, derived subject filters, and the in-memory
feed running a scheduled actor's queue and a clocked actor's clock."""

from __future__ import annotations

from actors.base import Actor, inputs_for
from actors.director import Director
from actors.kernel import ListFeed
from actors.llm import LLMActor
from actors.runtime.runs import RunLifecycle
from app.registry import ACTORS
from app.shows import load_show
from events.cue import CueIssued
from events.danmaku import DanmakuReceived
from events.qos import QosObserved
from events.run import RunEnded, RunStarted
from events.utterance import UtteranceChunk
from infra.settings import load_settings
from tests.showkit import demo_run

ROLES = [r.id for r in load_show().roles]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_run_is_released_a_grace_after_it_ended_or_once_idle() -> None:
    clock = FakeClock()
    life = RunLifecycle(grace_s=5, idle_s=60, clock=clock)
    life.touch("a")
    life.touch("b")
    life.touch("c")
    life.ended("a")
    clock.now = 4.9
    assert life.due() == []
    clock.now = 5.0
    assert life.due() == ["a"]
    assert life.due(busy=lambda run: run == "a") == []  # a tick or queued work still to come
    life.release("a")
    clock.now = 30.0
    life.touch("b")  # b is live; c went quiet at 0
    clock.now = 60.0
    assert life.due() == ["c"]
    assert life.due(busy=lambda run: True) == ["c"]  # idle that long: released even if it claims work
    assert "a" not in life and len(life) == 2


def test_subject_filters_are_derived_from_the_declared_events() -> None:
    assert inputs_for((RunStarted, RunEnded, QosObserved))[0].family == "run"
    [run, qos] = inputs_for((RunStarted, RunEnded, QosObserved))
    assert run.filters == ("troupe.*.run.started", "troupe.*.run.started.>", "troupe.*.run.ended",
                           "troupe.*.run.ended.>")
    assert qos.family == "qos" and qos.filters == ("troupe.*.qos.observed", "troupe.*.qos.observed.>")
    assert [i.family for i in Director.inputs] == ["danmaku", "run"]


def test_every_registered_actor_declares_what_it_consumes_and_emits() -> None:
    for name, entry in ACTORS.items():
        cls = entry.load()
        assert issubclass(cls, Actor) and cls.name == name
        assert cls.inputs, name
        if name not in ("sink", "recorder", "preview"):  # files, rows, a web page
            assert cls.emits, name


def test_the_harness_serves_a_scheduled_actor_best_priority_first() -> None:
    run = demo_run()
    llm = LLMActor(load_settings(environ={}, llm_max_sentences=1))
    feed = ListFeed(llm, run)
    cues = [
        CueIssued(id=f"c{i}", run=run.run, role=role, correlation=f"c{i}", user="v", text="how are you?",
                  seq=i, danmaku=(f"d{i}",), routed_by="addressed", priority=priority, max_sentences=1)
        for i, (role, priority) in enumerate([(ROLES[0], 1.0), (ROLES[1], 4.0)])
    ]
    chunks = [e for e in feed.feed(*cues) if isinstance(e, UtteranceChunk)]
    assert chunks[0].role == ROLES[1]  # arrived second, more urgent: written first
    assert {c.correlation for c in chunks} == {"c0", "c1"}


def test_the_list_feed_runs_a_clocked_actor_at_its_due_times() -> None:
    run = demo_run()
    feed = ListFeed(Director(load_settings(environ={})), run)
    feed.handle(run)  # the show opens
    topics = ["music", "the weather", "your favourite food", "space travel", "old films", "football"]
    comments = [DanmakuReceived(id=f"d{i}", run=run.run, user=f"u{i}", text=f"what do you think about {t}?")
                for i, t in enumerate(topics)]
    at_once = []
    for d in comments:
        at_once += feed.feed(d, at_ms=1000 + 10 * len(at_once))
    # The floor takes one reply at a time: the rest wait in the waiting room and are answered
    # (or let go) when the clock reaches their time, not when they arrive.
    cued_at_once = [e for e in at_once if isinstance(e, CueIssued)]
    later = feed.advance(30_000)
    cued_later = [e for e in feed.out  # the comments' cues (not the show's own lines)
                  if isinstance(e.event, CueIssued) and e.event.danmaku and e.event not in cued_at_once]
    assert len(cued_at_once) <= 1 and later and cued_later
    assert all(e.at_ms > 1000 for e in cued_later)
    assert len(cued_at_once) + len(cued_later) >= 2


def test_the_metrics_label_vocabularies_are_the_director_s_and_stay_bounded() -> None:
    from actors.director import SKIP_DETAIL
    from infra.metrics import SKIP_REASONS, drop_reason

    assert set(SKIP_REASONS) == set(SKIP_DETAIL)
    assert drop_reason("deadline passed 1234 ms ago while the cue waited") == "deadline"
    assert drop_reason("interrupted by u-7f3a (priority 4 >= 4)") == "interrupted"
    assert drop_reason("role 'zed' is not in the show") == "unknown_role"
    assert drop_reason("the writer ended after sentence 2 without the sentence it announced") == "other"
