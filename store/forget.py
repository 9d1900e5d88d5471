"""Forgetting a viewer: the read model's rows, and the personal text in the stored events.

**Redaction, not crypto-shredding.**  A forgotten viewer's events are rewritten in place with
their personal fields blanked (``events.viewer.redact``: what they wrote, their name and id, the
facts taken from it, and the text the stage wrote in reply), and each rewritten row names the
redaction that blanked it (``events.redaction``).  Every event stays where it was, with its id,
causation, correlation, times and audio, so the store's structure, ``inspect`` and ``replay``
still work, and ``replay --verify`` knows which inputs it can no longer check (it says so,
rather than calling what follows a divergence).  Crypto-shredding (each viewer's fields encrypted
under a key of their own, the key deleted to forget them) was the alternative: it would leave
the stored bytes untouched, but every reader of a danmaku (the director routes on its text, the
writers quote it) would need the viewer's key, in every process and in re-execution, for as
long as the viewer is remembered, and a forgotten key makes ciphertext that still says how long
each comment was and when it came.  Blanking in place is simpler to trust: the test searches the
tables and streams for the text and finds nothing.

**What is redacted.**  Every event of the chains a viewer started (their ``danmaku.received``
and every event whose correlation is one of them: the recall, the facts noted, the cue, the
reply's text, the waits and skips), in the store, and the same messages in JetStream, deleted by
their stream sequence (``STREAM.MSG.DELETE``, which overwrites the message).  The chains are
kept (``redaction_chains``, by the danmaku's id alone), so that an event of one that is recorded
after the forgetting (a reply still being spoken) is blanked too when the projector reaches it
(``sweep``).  The redaction itself is recorded (``redactions``) without naming the viewer.

Not redacted: the reply's audio and the video drawn from it (the stage's voice, already
broadcast), and what other viewers wrote about them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, or_, select, update

from events import codec
from events.base import Event, registry
from events.danmaku import DanmakuReceived
from events.subjects import family_of, stream_name
from events.viewer import redact
from store.schema import (
    VIEWER_TABLES,
    events,
    projections,
    redaction_chains,
    redactions,
    runs,
    viewers,
)

CHUNK = 500
SWEEP_AFTER_END_MS = 600_000  # a forgotten chain's late events are looked for this long after its run ended


def personal_types() -> tuple[str, ...]:
    """The event types that hold personal fields: the only ones a redaction rewrites."""
    return tuple(t for t in registry.types() if registry.lookup(t).personal)


@dataclass(slots=True)
class Forgotten:
    """What one forgetting did."""

    redaction: str
    known: bool = False                 # the read model had the viewer
    chains: int = 0                     # the comments (and gifts) whose chains were blanked
    events: int = 0                     # events blanked in the store
    messages: list[tuple[str, int]] = field(default_factory=list)  # (stream, seq) to delete from JetStream
    deleted: int = 0                    # of those, deleted (``app.cli.viewers`` does it)

    def to_dict(self) -> dict[str, Any]:
        return {"redaction": self.redaction, "known": self.known, "chains": self.chains, "events": self.events,
                "messages": len(self.messages), "deleted": self.deleted}


def forget(engine: Engine, viewer: str, requested_by: str = "cli", now_ms: int | None = None) -> Forgotten:
    """Forget ``viewer``: their read-model rows go, and every stored event of their chains is
    blanked, in one transaction that no projector batch interleaves with.  Returns what was done,
    with the JetStream messages left to delete (``app.cli.viewers`` deletes them)."""
    if not viewer:
        raise ValueError("which viewer? an id such as twitch:123")
    with engine.begin() as conn:
        return forget_in(conn, viewer, requested_by, now_ms)


def forget_in(conn: Connection, viewer: str, requested_by: str, now_ms: int | None = None) -> Forgotten:
    """``forget`` inside the caller's transaction (the projector's, for a ``!forget``)."""
    done = Forgotten(f"x{uuid.uuid4().hex[:19]}")
    # Written first: on SQLite the write lock is taken now, before anything is read.
    conn.execute(insert(redactions).values(id=done.redaction, at_ms=now_ms if now_ms is not None else _now_ms(),
                                           requested_by=requested_by, events=0, messages=0))
    lock_projections(conn)
    done.known = conn.execute(select(viewers.c.id).where(viewers.c.id == viewer)).first() is not None
    chains = _chains(conn, viewer)
    done.chains = len(chains)
    for start in range(0, len(chains), CHUNK):
        part = chains[start:start + CHUNK]
        fresh = [{"correlation": c, "redaction": done.redaction, "run": run} for c, run in part
                 if not _chain_known(conn, c)]
        if fresh:
            conn.execute(insert(redaction_chains), fresh)
        _blank(conn, [c for c, _ in part], done)
    delete_viewers(conn, [viewer])
    conn.execute(update(redactions).where(redactions.c.id == done.redaction).values(events=done.events))
    return done


def sweep(conn: Connection, now_ms: int | None = None) -> list[tuple[str, int]]:
    """Blank the events of forgotten chains recorded since their forgetting, inside the caller's
    transaction (the projector's, at each batch): the chains of runs on air, or ended less than
    ``SWEEP_AFTER_END_MS`` ago.  Returns the JetStream messages to delete."""
    since = (now_ms if now_ms is not None else _now_ms()) - SWEEP_AFTER_END_MS
    open_runs = select(runs.c.id).where(or_(runs.c.ended_at_ms.is_(None), runs.c.ended_at_ms > since))
    rows = conn.execute(select(events.c.pos, events.c.type, events.c.stream_seq, events.c.body,
                               redaction_chains.c.redaction)
                        .join(redaction_chains, or_(redaction_chains.c.correlation == events.c.correlation,
                                             redaction_chains.c.correlation == events.c.causation))
                        .where(redaction_chains.c.run.in_(open_runs), events.c.redaction.is_(None),
                               events.c.type.in_(personal_types()))).all()
    done = Forgotten("")
    rows = list({r[0]: r for r in reversed(rows)}.values())  # once each, where it is in two chains
    for pos, type_, stream_seq, body, redaction in rows:
        _rewrite(conn, pos, type_, stream_seq, body, redaction, done)
    if rows:
        for redaction in {r[4] for r in rows}:
            conn.execute(update(redactions).where(redactions.c.id == redaction).values(
                events=redactions.c.events + sum(1 for r in rows if r[4] == redaction)))
    return done.messages


def lock_projections(conn: Connection) -> None:
    """Take every projection's tracking row on PostgreSQL, so that a projector's batch runs wholly
    before or wholly after (on SQLite the caller's first write took the one write lock)."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(projections.c.name).with_for_update())


def _chains(conn: Connection, viewer: str) -> list[tuple[str, str]]:
    """(danmaku id, run) of every comment and gift of ``viewer`` still unredacted."""
    where = [events.c.type == DanmakuReceived.type, events.c.redaction.is_(None)]
    out = []
    for _, run, body in conn.execute(select(events.c.pos, events.c.run, events.c.body).where(*where)
                                     .order_by(events.c.pos)):
        event = codec.decode(bytes(body))
        if isinstance(event, DanmakuReceived) and event.viewer == viewer:
            out.append((event.id, run))
    return out


def _chain_known(conn: Connection, correlation: str) -> bool:
    return conn.execute(select(redaction_chains.c.correlation)
                        .where(redaction_chains.c.correlation == correlation)).first() is not None


def _blank(conn: Connection, ids: Sequence[str], done: Forgotten) -> None:
    rows = conn.execute(select(events.c.pos, events.c.type, events.c.stream_seq, events.c.body).where(
        events.c.redaction.is_(None), events.c.type.in_(personal_types()),
        or_(events.c.correlation.in_(ids), events.c.id.in_(ids), events.c.causation.in_(ids)))).all()
    for pos, type_, stream_seq, body in rows:
        _rewrite(conn, pos, type_, stream_seq, body, done.redaction, done)


def _rewrite(conn: Connection, pos: int, type_: str, stream_seq: int | None, body: bytes, redaction: str,
             done: Forgotten) -> None:
    event: Event = codec.decode(bytes(body))
    conn.execute(update(events).where(events.c.pos == pos).values(body=codec.encode(redact(event)),
                                                                    redaction=redaction))
    done.events += 1
    if stream_seq:
        done.messages.append((stream_name(family_of(type_)), int(stream_seq)))


def delete_viewers(conn: Connection, ids: Sequence[str]) -> None:
    """The read model's rows of these viewers, every table."""
    for table in VIEWER_TABLES:
        column = table.c.id if table is viewers else table.c.viewer
        conn.execute(delete(table).where(column.in_(ids)))


def redacted_ids(engine: Engine, run: str) -> set[str]:
    """The ids of a run's blanked events (``replay --verify`` reports what it cannot check)."""
    with engine.connect() as conn:
        return {i for (i,) in conn.execute(select(events.c.id).where(events.c.run == run,
                                                                     events.c.redaction.is_not(None)))}


def _now_ms() -> int:
    return int(time.time() * 1000)
