"""Writes events into the store in batches, idempotently (the event id is unique).

A batch is one transaction: events already in the store are skipped, the rest get
the next numbers of their run's sequence, the run's row follows its lifecycle
(run.started, run.ended), and the consumer's position is recorded.  The caller
acks the batch's messages only after ``append`` returns.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Engine, bindparam, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import (
    DBAPIError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
)

from events import codec
from events.base import Event
from events.run import RunEnded, RunStarted
from store.queries import decode_row
from store.schema import consumers, events, runs


def store_away(exc: BaseException) -> bool:
    """Whether a failed write failed because the store is away (down, unreachable, restarting,
    locked by another process), not because of what was written: worth trying again later."""
    if isinstance(exc, OperationalError | InterfaceError | DisconnectionError):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


@dataclass(frozen=True, slots=True)
class Recorded:
    """An event as it arrived: the decoded value, its bytes, subject and stream position."""

    event: Event
    body: bytes
    subject: str
    stream_seq: int | None = None
    headers: dict[str, str] | None = None
    stream: str | None = None
    consumer: str | None = None


class EventWriter:
    """Appends events to the store; a second append of the same id changes nothing."""

    def __init__(self, engine: Engine, frames: str = "full") -> None:
        self.engine = engine
        self.frames = frames
        self.dialect = engine.dialect.name
        if self.dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported store dialect {self.dialect!r}")
        self._ins: Any = sqlite.insert if self.dialect == "sqlite" else postgresql.insert
        self._greatest: Any = func.max if self.dialect == "sqlite" else func.greatest
        self._insert_events = insert(events)
        # Built once: the per-batch statements only take parameters.
        self._known = select(events.c.id).where(events.c.id.in_(bindparam("ids", expanding=True)))
        counter = self._ins(runs).values(id=bindparam("run"), status="running", next_seq=bindparam("n"))
        self._count = counter.on_conflict_do_update(
            index_elements=["id"], set_={"next_seq": runs.c.next_seq + counter.excluded.next_seq},
        ).returning(runs.c.next_seq)
        position = self._ins(consumers)
        self._position = position.on_conflict_do_update(index_elements=["name"], set_={
            "last_stream_seq": self._greatest(consumers.c.last_stream_seq, position.excluded.last_stream_seq),
            "updated_at_ms": position.excluded.updated_at_ms, "stream": position.excluded.stream,
        })

    def row(self, item: Recorded) -> dict[str, Any]:
        """The events row for one recorded event (without its per-run ``seq``)."""
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
            "headers": orjson.dumps(item.headers).decode() if item.headers else None,
        }

    def append(self, items: Sequence[Recorded], attempts: int = 3, passed: Sequence[Recorded] = ()) -> int:
        """Write a batch in one transaction; returns how many events were new.

        ``passed``: messages of the batch deliberately not stored (the recorder turned them away);
        only the consumers' positions follow them.
        """
        if not items:
            if passed:
                with self.engine.begin() as conn:
                    self._track(conn, passed)
            return 0
        # Most batches are new events: insert them straight away and let the unique index
        # catch a batch that holds some already stored (a redelivery); the transaction is
        # rolled back, and the batch written again without the ones the store has.
        for attempt in range(attempts + 1):
            try:
                return self._append(items, dedupe=attempt > 0, passed=passed)
            except IntegrityError:
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    def _append(self, items: Sequence[Recorded], dedupe: bool, passed: Sequence[Recorded] = ()) -> int:
        unique: dict[str, Recorded] = {}
        for item in items:
            unique.setdefault(item.event.id, item)
        with self.engine.begin() as conn:
            known = set(conn.execute(self._known, {"ids": list(unique)}).scalars()) if dedupe else set()
            fresh = [i for i in unique.values() if i.event.id not in known]
            rows = [self.row(i) for i in fresh]
            per_run: dict[str, list[dict[str, Any]]] = {}
            for r in rows:
                per_run.setdefault(r["run"], []).append(r)
            for run, run_rows in per_run.items():
                end = conn.execute(self._count, {"run": run, "n": len(run_rows)}).scalar_one()
                for n, r in enumerate(run_rows, start=end - len(run_rows)):
                    r["seq"] = n
            if rows:
                conn.execute(self._insert_events, rows)
            for item in fresh:
                e = item.event
                if isinstance(e, RunStarted):
                    conn.execute(update(runs).where(runs.c.id == e.run).values(
                        started_at_ms=e.started_at_ms, show=orjson.dumps(e.show).decode(), seed=e.seed,
                        replay_of=e.replay_of,
                    ))
                elif isinstance(e, RunEnded):
                    conn.execute(update(runs).where(runs.c.id == e.run).values(
                        ended_at_ms=e.at_ms, duration_ms=e.duration_ms, end_reason=e.reason,
                        status="failed" if e.reason.startswith("failed") else "ended",
                    ))
            self._track(conn, [*items, *passed])
        return len(rows)

    def _track(self, conn: Any, items: Sequence[Recorded]) -> None:
        """Record the highest stream sequence each consumer has committed."""
        last: dict[tuple[str, str], int] = {}
        for i in items:
            if i.consumer and i.stream and i.stream_seq is not None:
                key = (i.consumer, i.stream)
                last[key] = max(last.get(key, 0), i.stream_seq)
        if last:
            now = int(time.time() * 1000)
            conn.execute(self._position, [
                {"name": name, "stream": stream, "last_stream_seq": seq, "updated_at_ms": now}
                for (name, stream), seq in last.items()
            ])


def plain_insert(engine: Engine, rows: Sequence[dict[str, Any]]) -> None:
    """A plain SQLAlchemy bulk insert of prepared rows (the store benchmark's baseline)."""
    with engine.begin() as conn:
        conn.execute(insert(events), list(rows))


def read_events(engine: Engine, run: str, types: Iterable[str] | None = None) -> list[Event]:
    """The run's recorded events in store order, decoded (frames stored by digest get empty bytes)."""
    query = select(events.c.pos, events.c.body, events.c.blob_digest).where(events.c.run == run).order_by(events.c.pos)
    if types is not None:
        query = query.where(events.c.type.in_(list(types)))
    with engine.connect() as conn:
        rows = list(conn.execute(query))
    return [decode_row(pos, body, digest) for pos, body, digest in rows]
