"""What a runtime observes per run (hop latency, handler time, queues) and publishes for QoS."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from events.base import derive_id
from events.qos import QosObserved
from events.run import RunStarted
from events.subjects import is_token
from schedulers.baseline import nearest_rank

OBSERVE_PERIOD_S = 1.0  # how often a runtime publishes its observations (qos.observed)
_INSTANCE = f"{os.getpid()}-{time.time_ns()}"  # tells apart the observations of two processes

Row = tuple[str, str, float, str]  # run, metric, value, source


class Observations:
    """Samples taken between two publications, turned into ``qos.observed`` events per run."""

    def __init__(self, actor: str, durable: str) -> None:
        self.actor = actor
        self.durable = durable
        self._samples: dict[tuple[str, str], list[float]] = {}  # (run, input type | "handler") -> ms
        self._queued_runs: set[str] = set()
        self._count = 0

    def hop(self, run: str, event_type: str, ms: float) -> None:
        self._samples.setdefault((run, event_type), []).append(ms)

    def handler(self, run: str, ms: float) -> None:
        self._samples.setdefault((run, "handler"), []).append(ms)

    def forget(self, run: str) -> None:
        for key in [k for k in self._samples if k[0] == run]:
            del self._samples[key]
        self._queued_runs.discard(run)

    def rows(self) -> list[Row]:
        """The p99 of each run's samples since the last call (and forget them)."""
        samples, self._samples = self._samples, {}
        rows: list[Row] = []
        for (run, what), values in samples.items():
            p99 = nearest_rank(sorted(values), 99)
            if what == "handler":
                rows.append((run, "handler_ms", p99, self.actor))
            else:
                rows.append((run, "hop_latency_ms", p99, f"{what}>{self.actor}"))
        return rows

    def queue_rows(self, now_ms: int, waiting: Iterable[tuple[str, str, int]], capacity: int) -> list[Row]:
        """Queue depth, buffer fill and each role's oldest wait from the (run, role, arrival ms) of
        the inputs waiting; a run whose queue emptied is reported once more, at 0."""
        depth: dict[str, int] = {}
        oldest: dict[tuple[str, str], int] = {}
        for run, role, at in waiting:
            depth[run] = depth.get(run, 0) + 1
            oldest[run, role] = min(oldest.get((run, role), at), at)
        rows: list[Row] = []
        for run in depth.keys() | self._queued_runs:
            n = depth.get(run, 0)
            rows += [(run, "queue_depth", float(n), self.actor), (run, "buffer_fill", n / max(1, capacity), self.actor)]
        rows += [(run, "role_wait_ms", float(now_ms - at), f"{self.actor}:{role}") for (run, role), at in oldest.items()]
        self._queued_runs = set(depth)
        return rows

    def events(self, rows: Iterable[Row], known: dict[str, RunStarted | None], now_ms: int) -> list[QosObserved]:
        """The rows as events, for runs that are known and live (a playback is what was recorded:
        nothing is observed into it)."""
        self._count += 1
        out = []
        for run, metric, value, source in rows:
            started = known.get(run)
            if started is None or not is_token(run) or started.replay_of is not None:
                continue
            out.append(QosObserved(
                id=derive_id(f"{self.durable}:{run}:{_INSTANCE}", f"{metric}:{source}:{self._count}"), run=run,
                t_ms=now_ms - started.started_at_ms, metric=metric, value=round(value, 3), source=source,
            ))
        return out
