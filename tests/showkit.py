"""Test helpers: a demo run to feed actors through the kernel (``actors.kernel.ListFeed``), and
the streams' and store's counts."""

from __future__ import annotations

from nats.js import JetStreamContext
from sqlalchemy import Engine, func, select

from app.shows import load_show
from events.run import RunStarted
from events.subjects import FAMILIES, stream_name
from store.schema import events as events_table


def demo_run(run: str = "r1", seed: int = 7, resolution: str = "360p") -> RunStarted:
    return RunStarted(
        id=f"{run}-start", run=run, show=load_show().to_dict(), seed=seed, resolution=resolution,
        started_at_ms=1_000_000,
    )


async def stream_counts(js: JetStreamContext, run: str) -> dict[str, int]:
    """The run's messages on each family's stream."""
    counts = {}
    for family in FAMILIES:
        info = await js.stream_info(stream_name(family), subjects_filter=f"troupe.{run}.>")
        counts[family] = sum((info.state.subjects or {}).values()) if info.state.subjects else 0
    return counts


def assert_stored_once(engine: Engine, run: str, counts: dict[str, int]) -> None:
    """Every message of the run on the streams is in the store, exactly once."""
    with engine.connect() as conn:
        rows = conn.execute(select(events_table.c.type, func.count()).where(events_table.c.run == run)
                            .group_by(events_table.c.type)).all()
        ids = conn.execute(select(func.count(events_table.c.id.distinct())).where(events_table.c.run == run)).scalar_one()
    by_family: dict[str, int] = {}
    for type_, n in rows:
        by_family[type_.split(".")[0]] = by_family.get(type_.split(".")[0], 0) + n
    assert by_family == {k: v for k, v in counts.items() if v}
    assert ids == sum(by_family.values())
