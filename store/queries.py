"""Reading the store: runs, and a run's events with where they sit in the store.

Every reader goes through here, so a missing run, a corrupt row or an event type
this version does not know is one clear ``StoreError`` wherever it is met.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Engine, case, func, or_, select

from events import codec
from events.base import Event
from events.errors import StoreError
from events.run import RunStarted
from store.schema import events, runs


@dataclass(frozen=True, slots=True)
class Row:
    """A recorded event with its place in the store."""

    pos: int
    seq: int
    stream_seq: int | None
    subject: str
    blob_digest: str | None
    event: Event


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One line of ``troupe runs``."""

    id: str
    started_at_ms: int | None
    duration_ms: int | None
    status: str
    roles: tuple[str, ...]
    events: int
    errors: int
    replay_of: str | None
    seed: int | None
    show: dict[str, Any] | None


def _roles(show: dict[str, Any] | None) -> tuple[str, ...]:
    return tuple(r.get("id", "?") for r in (show or {}).get("roles", []) if isinstance(r, dict))


def _info(row: Any, n_events: int, n_errors: int) -> RunInfo:
    try:
        show = orjson.loads(row.show) if row.show else None
    except orjson.JSONDecodeError:
        raise StoreError(f"run {row.id}: its recorded show is not valid JSON") from None
    return RunInfo(
        row.id, row.started_at_ms, row.duration_ms, row.status, _roles(show), n_events, n_errors,
        row.replay_of, row.seed, show,
    )


_ERRORS = func.sum(case((events.c.type.like("error.%"), 1), else_=0))


def list_runs(engine: Engine, limit: int | None = None) -> list[RunInfo]:
    """Runs, newest first, with their event and error counts."""
    counts = (
        select(events.c.run, func.count().label("n"), _ERRORS.label("errors"))
        .group_by(events.c.run).subquery()
    )
    query = (
        select(runs, counts.c.n, counts.c.errors)
        .join(counts, counts.c.run == runs.c.id, isouter=True)
        .order_by(runs.c.started_at_ms.desc().nulls_last(), runs.c.id)
    )
    if limit is not None:
        query = query.limit(limit)
    with engine.connect() as conn:
        return [_info(r, int(r.n or 0), int(r.errors or 0)) for r in conn.execute(query)]


def run_info(engine: Engine, run: str) -> RunInfo:
    """One run; a StoreError naming it when the store has no such run."""
    info = find_run(engine, run)
    if info is None:
        raise StoreError(f"no run {run!r} in the store (see `troupe runs`)")
    return info


def find_run(engine: Engine, run: str) -> RunInfo | None:
    """One run, or None when the store has no such run."""
    with engine.connect() as conn:
        row = conn.execute(select(runs).where(runs.c.id == run)).one_or_none()
        if row is None:
            return None
        n, errors = conn.execute(
            select(func.count(), _ERRORS).select_from(events).where(events.c.run == run)
        ).one()
    return _info(row, int(n or 0), int(errors or 0))


def decode_row(pos: int, body: bytes, digest: str | None) -> Event:
    """The event stored at ``pos``; a frame stored by digest gets empty image bytes."""
    try:
        return codec.decode(codec.frame(body, b"") if digest else body)
    except codec.DecodeError as exc:
        raise StoreError(f"the event at store position {pos} cannot be read: {exc}") from None


def iter_rows(
    engine: Engine, run: str, types: Iterable[str] | None = None,
    from_ms: int | None = None, to_ms: int | None = None,
) -> Iterator[Row]:
    """A run's events in run order; ``types`` are exact types or whole families (``audio``)."""
    query = select(
        events.c.pos, events.c.seq, events.c.stream_seq, events.c.subject, events.c.blob_digest, events.c.body,
    ).where(events.c.run == run).order_by(events.c.seq)
    if types:
        wanted = list(types)
        query = query.where(or_(
            events.c.type.in_([t for t in wanted if "." in t]),
            *(events.c.type.like(f"{family}.%") for family in wanted if "." not in family),
        ))
    if from_ms is not None:
        query = query.where(events.c.t_ms >= from_ms)
    if to_ms is not None:
        query = query.where(events.c.t_ms < to_ms)
    with engine.connect() as conn:
        for pos, seq, stream_seq, subject, digest, body in conn.execute(query):
            yield Row(pos, seq, stream_seq, subject, digest, decode_row(pos, body, digest))


def in_stream_order(rows: Iterable[Row], kind: type[Event] | tuple[type[Event], ...]) -> list[Row]:
    """The rows of some event types in the order their stream holds them (the order a consumer
    was given them, and the order their producer emitted them)."""
    return sorted((r for r in rows if isinstance(r.event, kind)), key=lambda r: (r.stream_seq or 0, r.seq))


def run_started(rows: Iterable[Row]) -> RunStarted:
    for row in rows:
        if isinstance(row.event, RunStarted):
            return row.event
    raise StoreError("the run has no run.started event in the store: it cannot be replayed")
