"""Test helpers: a demo run and a context, to drive handlers without NATS."""

from __future__ import annotations

from actors.base import Context
from app.shows import load_show
from events.run import RunStarted


def demo_run(run: str = "r1", seed: int = 7, resolution: str = "360p") -> RunStarted:
    return RunStarted(
        id=f"{run}-start", run=run, show=load_show().to_dict(), seed=seed, resolution=resolution,
        started_at_ms=1_000_000,
    )


def ctx(now_ms: int = 0, run: RunStarted | None = None) -> Context:
    return Context(run if run is not None else demo_run(), now_ms)
