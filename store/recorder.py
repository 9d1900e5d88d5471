"""Writes events into the store in batches, idempotently (the event id is unique)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Engine, insert, select
from sqlalchemy.dialects import postgresql, sqlite

from events import codec
from events.base import Event
from events.run import RunStarted
from store.schema import events, runs


@dataclass(frozen=True, slots=True)
class Recorded:
    """An event as it arrived: the decoded value, its bytes, subject and stream sequence."""

    event: Event
    body: bytes
    subject: str
    stream_seq: int | None = None


class EventWriter:
    """Appends events to the store; a second append of the same id changes nothing."""

    def __init__(self, engine: Engine, frames: str = "full") -> None:
        self.engine = engine
        self.frames = frames
        dialect = engine.dialect.name
        self._insert: Any
        self._insert_run: Any
        if dialect == "sqlite":
            self._insert = sqlite.insert(events).on_conflict_do_nothing(index_elements=["id"])
            self._insert_run = sqlite.insert(runs).on_conflict_do_nothing(index_elements=["id"])
        elif dialect == "postgresql":
            self._insert = postgresql.insert(events).on_conflict_do_nothing(index_elements=["id"])
            self._insert_run = postgresql.insert(runs).on_conflict_do_nothing(index_elements=["id"])
        else:
            self._insert = insert(events)
            self._insert_run = insert(runs)

    def _row(self, item: Recorded) -> dict[str, object]:
        e = item.event
        # Producers may leave envelope fields out (the runtime filled them in from the
        # message): store the complete event.  Media events come from Troupe itself, whole.
        body = item.body if e.blob is not None else codec.encode(e)
        digest, size = None, None
        if self.frames == "digest" and e.blob == "jpeg":
            json_part, blob = codec.split(item.body)
            body = json_part
            digest = hashlib.sha256(blob or b"").hexdigest()
            size = len(blob or b"")
        return {
            "id": e.id, "run": e.run, "type": e.type, "role": e.role, "causation": e.causation,
            "correlation": e.correlation, "t_ms": e.t_ms, "at_ms": e.at_ms, "subject": item.subject,
            "stream_seq": item.stream_seq, "body": body, "blob_digest": digest, "blob_size": size,
        }

    def append(self, items: Sequence[Recorded]) -> None:
        """Write a batch in one transaction (committed when this returns)."""
        if not items:
            return
        rows = [self._row(i) for i in items]
        starts = [
            {"id": i.event.run, "started_at_ms": i.event.started_at_ms,
             "show": orjson.dumps(i.event.show).decode(), "seed": i.event.seed}
            for i in items if isinstance(i.event, RunStarted)
        ]
        with self.engine.begin() as conn:
            conn.execute(self._insert, rows)
            if starts:
                conn.execute(self._insert_run, starts)


def read_events(engine: Engine, run: str, types: Iterable[str] | None = None) -> list[Event]:
    """The run's recorded events in store order, decoded (frames stored by digest get empty bytes)."""
    query = select(events.c.body, events.c.blob_digest).where(events.c.run == run).order_by(events.c.pos)
    if types is not None:
        query = query.where(events.c.type.in_(list(types)))
    with engine.connect() as conn:
        rows = list(conn.execute(query))
    return [codec.decode(codec.frame(body, b"") if digest else body) for body, digest in rows]
