"""QoS actor: watches the show's observations and decides, with reasons and numbers.

Inputs are the ``qos`` family alone (one stream, so the order it handles them in
is the stream's order, and re-execution decides exactly as the live run did):

- ``qos.frames_observed`` (render, one per second of frames) -> the resolution
  ladder (``schedulers.ladder``) -> ``qos.resolution_changed``;
- ``qos.observed`` ``buffer_fill`` of the tts worker -> the LLM->TTS throttle
  window (``schedulers.throttle``) -> ``qos.throttle_changed``;
- ``qos.observed`` ``hop_latency_ms`` (every actor's runtime, per input type) ->
  sliding p99 baselines (``schedulers.baseline``) -> ``qos.anomaly``;
- ``qos.observed`` ``role_wait_ms`` (the llm and tts schedulers, per role) -> role
  weight factors, raised while a role's oldest work waits over budget and brought
  back down once it no longer does -> ``role.weights_changed``.

Every decision's show time is its observation's, never the clock at handling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from actors.base import Actor, Context
from events.base import Event
from events.qos import (
    FramesObserved,
    LatencyAnomaly,
    QosObserved,
    ResolutionChanged,
    ThrottleChanged,
)
from events.role import RoleWeightsChanged
from events.run import RunStarted
from events.show import RESOLUTIONS
from infra.settings import Settings
from schedulers.baseline import LatencyBaselines
from schedulers.ladder import LadderPolicy, ResolutionLadder, Window
from schedulers.throttle import ThrottlePolicy

FACTOR_STEP = 1.5
MAX_FACTOR = 3.0
QUIET_MS = 2000  # a raised role whose waits stopped being reported this long ago comes back down


@dataclass(slots=True)
class _RunQos:
    """What the QoS actor keeps for one run (``open_run``)."""

    ladder: ResolutionLadder
    baselines: LatencyBaselines
    window_tokens: int
    factors: dict[str, float] = field(default_factory=dict)
    last_wait: dict[str, tuple[int, float]] = field(default_factory=dict)  # role -> (t_ms, worst wait)
    wait_budget_ms: int = 0       # the run's role_wait_budget_ms


class QosActor(Actor):
    """Observations in, decisions (resolution, throttle, role weights, anomalies) out."""

    name = "qos"
    consumes = (FramesObserved, QosObserved)
    emits = (ResolutionChanged, ThrottleChanged, RoleWeightsChanged, LatencyAnomaly)
    observed = False

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.throttle = ThrottlePolicy()

    def open_run(self, run: RunStarted, settings: Settings) -> _RunQos:
        return _RunQos(
            ResolutionLadder(RESOLUTIONS, run.resolution, LadderPolicy(budget_ms=1000 / run.fps)),
            LatencyBaselines(), self.throttle.max_tokens, wait_budget_ms=settings.role_wait_budget_ms,
        )

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        state: _RunQos | None = ctx.state
        if state is None:  # a run this process does not hold (an observation after its end)
            return []
        if isinstance(event, FramesObserved):
            return [*self._ladder(state, event), *self._relax(state, event)]
        if not isinstance(event, QosObserved):
            return []
        if event.metric == "buffer_fill" and event.source == "tts":
            return self._throttle(state, event)
        if event.metric == "hop_latency_ms":
            anomaly = state.baselines.observe(event.source, event.value)
            if anomaly is None:
                return []
            return [LatencyAnomaly(
                id=event.derive("anomaly"), run=event.run, causation=event.id, t_ms=event.t_ms,
                hop=anomaly.hop, sample_ms=anomaly.sample_ms, baseline_p99_ms=anomaly.baseline_p99_ms,
                factor=anomaly.factor,
            )]
        if event.metric == "role_wait_ms":
            return self._role_wait(state, event)
        return []

    def _ladder(self, state: _RunQos, e: FramesObserved) -> list[Event]:
        change = state.ladder.observe(Window(e.window_end_ms, e.lateness_p99_ms, e.loss, e.frames, e.cost_p99_ms))
        if change is None:
            return []
        return [ResolutionChanged(
            id=e.derive("resolution"), run=e.run, causation=e.id, t_ms=e.window_end_ms,
            before=change.before, after=change.after, reason=change.reason,
            lateness_p99_ms=change.lateness_p99_ms, loss=change.loss,
        )]

    def _throttle(self, state: _RunQos, e: QosObserved) -> list[Event]:
        window = self.throttle.window(e.value)
        if window == state.window_tokens:
            return []
        before, state.window_tokens = state.window_tokens, window
        return [ThrottleChanged(
            id=e.derive("throttle"), run=e.run, causation=e.id, t_ms=e.t_ms, window_tokens=window,
            buffer_fill=e.value, reason=(
                f"tts buffer {e.value:.0%} full (shrinks above {self.throttle.shrink_above:.0%}): "
                f"{before} -> {window} tokens ahead of speech"
            ),
        )]

    def _role_wait(self, state: _RunQos, e: QosObserved) -> list[Event]:
        role = e.source.split(":", 1)[-1]
        t, worst = state.last_wait.get(role, (e.t_ms, 0.0))
        state.last_wait[role] = (e.t_ms, max(worst, e.value) if t == e.t_ms else e.value)
        budget = state.wait_budget_ms
        factor = state.factors.get(role, 1.0)
        if e.value <= budget or factor >= MAX_FACTOR:
            return []
        state.factors[role] = min(MAX_FACTOR, factor * FACTOR_STEP)
        return [self._weights(state, e, (
            f"{role}'s oldest work waited {e.value:.0f} ms in {e.source.split(':', 1)[0]} "
            f"(budget {budget} ms): weight x{state.factors[role]:.2f}"
        ))]

    def _relax(self, state: _RunQos, e: FramesObserved) -> list[Event]:
        """Once a second: bring raised roles back down when their waits are back under budget."""
        calm = [
            role for role, factor in state.factors.items() if factor > 1.0 and (
                e.window_end_ms - state.last_wait.get(role, (0, 0.0))[0] > QUIET_MS
                or state.last_wait[role][1] <= state.wait_budget_ms / 2
            )
        ]
        if not calm:
            return []
        for role in calm:
            state.factors[role] = max(1.0, state.factors[role] / FACTOR_STEP)
        return [self._weights(state, e, f"waits back under budget: {', '.join(sorted(calm))} lowered")]

    @staticmethod
    def _weights(state: _RunQos, cause: Event, reason: str) -> RoleWeightsChanged:
        return RoleWeightsChanged(
            id=cause.derive("weights"), run=cause.run, causation=cause.id, t_ms=cause.t_ms,
            weights=dict(sorted(state.factors.items())), reason=reason,
        )
