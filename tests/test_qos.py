"""The QoS actor's decisions, handler alone (no NATS)."""

from __future__ import annotations

from actors.kernel import ListFeed
from actors.qos import QosActor
from events.qos import (
    FramesObserved,
    LatencyAnomaly,
    QosObserved,
    ResolutionChanged,
    ThrottleChanged,
)
from events.role import RoleWeightsChanged
from infra.settings import load_settings
from tests.showkit import demo_run

RUN = demo_run("q1", resolution="720p")


def qos_of(**settings: object) -> ListFeed:
    """The QoS actor fed through its kernel, for the run q1 (opened at its first observation)."""
    return ListFeed(QosActor(load_settings(environ={}, **settings)), RUN)


def frames(t_s: int, late: float, loss: float = 0.0) -> FramesObserved:
    return FramesObserved(id=f"fw{t_s}", run="q1", t_ms=t_s * 1000, window_end_ms=t_s * 1000, frames=25,
                          lateness_p99_ms=late, loss=loss, resolution="720p")


def observed(metric: str, value: float, source: str, t_ms: int, n: int) -> QosObserved:
    return QosObserved(id=f"o{n}", run="q1", t_ms=t_ms, metric=metric, value=value, source=source)


def test_three_late_windows_step_the_resolution_down_and_stability_brings_it_back() -> None:
    qos = qos_of()
    decisions = []
    for t in range(1, 40):
        late = 90.0 if 5 <= t < 10 else 8.0
        decisions += [e for e in qos.handle(frames(t, late), at_ms=t * 1000) if isinstance(e, ResolutionChanged)]
    assert [(d.before, d.after, d.t_ms) for d in decisions] == [("720p", "480p", 7000), ("480p", "720p", 25000)]
    assert "3 bad windows in a row: lateness p99 90 ms (budget 40)" in decisions[0].reason
    assert decisions[0].lateness_p99_ms == 90.0 and decisions[0].causation == "fw7"


def test_frame_loss_alone_is_a_bad_window() -> None:
    qos = qos_of()
    out = [e for t in (1, 2, 3) for e in qos.handle(frames(t, 5.0, loss=0.08), at_ms=t * 1000)]
    assert [e.after for e in out if isinstance(e, ResolutionChanged)] == ["480p"]


def test_a_filling_tts_buffer_shrinks_the_throttle_window() -> None:
    qos = qos_of()
    windows = []
    for n, fill in enumerate((0.1, 0.5, 0.8, 0.8, 1.0, 0.2)):
        windows += [e.window_tokens for e in qos.handle(observed("buffer_fill", fill, "tts", n * 500, n))
                    if isinstance(e, ThrottleChanged)]
    assert windows == [12, 4, 16]
    assert qos.handle(observed("buffer_fill", 0.9, "llm", 9000, 99)) == []  # only the tts buffer


def test_a_hop_far_above_its_baseline_is_an_anomaly() -> None:
    qos = qos_of()
    out = []
    for n in range(40):
        out += qos.handle(observed("hop_latency_ms", 20.0 + n % 5, "audio.chunk>lipsync", n * 1000, n))
    assert out == []
    spike = qos.handle(observed("hop_latency_ms", 400.0, "audio.chunk>lipsync", 41000, 41))
    assert len(spike) == 1 and isinstance(spike[0], LatencyAnomaly)
    assert spike[0].hop == "audio.chunk>lipsync" and spike[0].baseline_p99_ms == 24.0


def test_a_role_waiting_over_budget_is_weighted_up_then_back_down() -> None:
    qos = qos_of(role_wait_budget_ms=4000)
    up = qos.handle(observed("role_wait_ms", 5200.0, "tts:rex", 10000, 1))
    assert len(up) == 1 and isinstance(up[0], RoleWeightsChanged) and up[0].weights == {"rex": 1.5}
    assert "rex's oldest work waited 5200 ms in tts (budget 4000 ms)" in up[0].reason
    assert qos.handle(observed("role_wait_ms", 300.0, "tts:host", 10000, 2)) == []
    down = qos.handle(frames(13, 8.0))
    weights = [e for e in down if isinstance(e, RoleWeightsChanged)]
    assert len(weights) == 1 and weights[0].weights == {"rex": 1.0}


def test_no_step_up_into_a_picture_the_renderer_could_not_draw_in_time() -> None:
    qos = qos_of()
    changes = []
    for t in range(1, 60):
        w = frames(t, 90.0 if t < 4 else 8.0)
        w = FramesObserved(**{**{f: getattr(w, f) for f in ("id", "run", "t_ms", "window_end_ms", "frames",
                                                           "lateness_p99_ms", "loss", "resolution")},
                              "cost_p99_ms": 28.0})  # fine at 480p, ~63 ms at 720p
        changes += [e for e in qos.handle(w, at_ms=t * 1000) if isinstance(e, ResolutionChanged)]
    assert [(c.before, c.after) for c in changes] == [("720p", "480p")]


def test_the_wait_budget_is_the_run_s_and_its_state_goes_with_the_run() -> None:
    import dataclasses

    from infra.settings import run_config

    run = dataclasses.replace(RUN, config=run_config(load_settings(environ={}, role_wait_budget_ms=6000)))
    qos = ListFeed(QosActor(load_settings(environ={}, role_wait_budget_ms=4000)), run)
    assert qos.handle(observed("role_wait_ms", 5200.0, "tts:rex", 10000, 1)) == []  # under the run's budget
    assert qos.state().wait_budget_ms == 6000 and qos.kernel.holds("q1")
    qos.release()
    assert not qos.kernel.holds("q1") and qos.state() is None
