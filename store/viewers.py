"""The viewers read model: a projection of the event store.

``Projector.catch_up`` reads the events it has not applied yet, in store order, and applies them
to the ``viewers`` tables (``store.schema``), in one transaction with its tracking position
(``projections``): a restart, or a failure in the middle of a batch, neither skips an event nor
counts one twice (the batch is rolled back whole, position included).

What it reads: the events of live runs (a playback's are left out), of viewers with a stable
identity (``events.viewer.remembered``):

- ``danmaku.received`` (comments and gifts, not moderator lines): the viewer, their name, when
  they were first and last seen, the shows they came to, their comments, gifts and what the gifts
  were worth, and the last few topics (``schedulers.memory.topic_of``);
- ``danmaku.noted``: the facts they stated (one per kind; a newer one replaces an older one);
- ``cue.issued``: the roles that answered them.

**Reading in order.** Rows may commit out of ``pos`` order when several recorders share a
consumer: a PostgreSQL sequence hands ``pos`` out at insert time, and the transaction holding pos
10 may commit after the one holding pos 12.  A projection that read up to 12 and moved on would
skip 10 for good.  So on PostgreSQL each row carries its writer's transaction id (``events.tx``)
and the projector reads only rows of transactions older than every transaction still open
(``pg_snapshot_xmin(pg_current_snapshot())``), in ``(tx, pos)`` order: no row can commit below
that horizon any more.  SQLite has one writer at a time, whose rows are all committed before the
next writer's are numbered: ``pos`` order is commit order there.

**Several projectors.** Projectors of one partitioning (``partitions`` N) each apply the viewers
whose id hashes to their ``partition``, with their own tracking position; two projectors of the
same partition serialise on its tracking row (``FOR UPDATE`` on PostgreSQL, the write lock on
SQLite), so running two is safe and the second takes over when the first stops.

``rebuild`` empties the read model (of the projector's partition) and its position, then catches
up from the first event: the same events give the same rows.  ``retention_days`` expires a viewer
not seen for that long (0: never), at every catch-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    and_,
    bindparam,
    delete,
    func,
    insert,
    select,
    text,
    tuple_,
    update,
)

from events import codec
from events.cue import CueIssued
from events.danmaku import DanmakuReceived
from events.errors import StoreError
from events.viewer import ViewerNoted, ViewerRecalled, remembered
from schedulers.memory import Fact, topic_of
from store.forget import delete_viewers, forget_in, sweep
from store.schema import (
    VIEWER_TABLES,
    events,
    projections,
    redaction_chains,
    runs,
    viewer_facts,
    viewer_roles,
    viewer_runs,
    viewer_topics,
    viewers,
)

log = logging.getLogger(__name__)
NAME = "viewers"
TYPES = (DanmakuReceived.type, ViewerNoted.type, CueIssued.type, ViewerRecalled.type)
TOPICS_KEPT = 5
DAY_MS = 86_400_000


def _hash(viewer: str) -> int:
    return zlib.crc32(viewer.encode())


@dataclass(frozen=True, slots=True)
class Profile:
    """One viewer as the read model knows them (``troupe viewers show``, the recall)."""

    id: str
    platform: str
    name: str
    first_seen_at_ms: int
    last_seen_at_ms: int
    first_run: str
    last_run: str
    shows: int
    comments: int
    gifts: int
    gift_value: float
    runs: tuple[str, ...] = ()
    facts: tuple[dict[str, Any], ...] = ()     # newest first, each with its source
    topics: tuple[dict[str, Any], ...] = ()    # newest first
    roles: tuple[tuple[str, int], ...] = ()    # the roles that answered them, most first

    def fact_values(self) -> list[Fact]:
        return [Fact(f["kind"], f["value"], f["detail"], f["language"]) for f in self.facts]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "platform": self.platform, "name": self.name,
            "first_seen_at_ms": self.first_seen_at_ms, "last_seen_at_ms": self.last_seen_at_ms,
            "first_run": self.first_run, "last_run": self.last_run, "shows": self.shows,
            "comments": self.comments, "gifts": self.gifts, "gift_value": self.gift_value,
            "runs": list(self.runs), "facts": list(self.facts), "topics": list(self.topics),
            "roles": [{"role": r, "answers": n} for r, n in self.roles],
        }


@dataclass(slots=True)
class Progress:
    """What one catch-up did."""

    applied: int = 0       # events read and applied (or passed over: not this partition's)
    position: int = 0
    expired: int = 0
    viewers: set[str] = field(default_factory=set)
    forgotten: int = 0     # viewers forgotten at their own ``!forget``
    more: bool = False     # the batch stopped at a forgetting: more to read
    messages: list[tuple[str, int]] = field(default_factory=list)  # JetStream messages of forgotten chains to delete


class Projector:
    """Builds and follows the viewers read model (see the module's doc)."""

    def __init__(self, engine: Engine, partition: int = 0, partitions: int = 1, retention_days: float = 0.0,
                 batch: int = 1000) -> None:
        if not 0 <= partition < partitions:
            raise ValueError(f"partition {partition} is not one of 0..{partitions - 1}")
        self.engine = engine
        self.partition, self.partitions = partition, partitions
        self.name = NAME if partitions == 1 else f"{NAME}.{partition}of{partitions}"
        self.retention_days = retention_days
        self.batch = batch
        self.pg = engine.dialect.name == "postgresql"

    def mine(self, viewer: str) -> bool:
        return self.partitions == 1 or _hash(viewer) % self.partitions == self.partition

    # -- following the store ----------------------------------------------------

    def catch_up(self, until_idle: bool = True, now_ms: int | None = None) -> Progress:
        """Apply the events not applied yet, a batch a transaction; with ``until_idle`` until none
        are left.  Returns what was done."""
        total = Progress()
        while True:
            step = self.step(now_ms)
            total.applied += step.applied
            total.expired += step.expired
            total.position = step.position
            total.viewers |= step.viewers
            total.forgotten += step.forgotten
            total.messages += step.messages
            if not until_idle or (step.applied < self.batch and not step.more):
                return total

    def step(self, now_ms: int | None = None) -> Progress:
        """One batch: read up to ``batch`` events past the position, apply them, move the position,
        expire what retention says: one transaction."""
        progress = Progress()
        with self.engine.begin() as conn:
            tx, pos, count = self._lock_position(conn)
            horizon = self._horizon(conn)
            if horizon is not None and horizon > (tx, pos):
                rows = self._read(conn, (tx, pos), horizon)
                rows = self._apply_batch(conn, rows, progress)
                progress.applied = len(rows)
                # A short batch read everything up to the horizon: the position moves there (past
                # the frames and audio between, which need not be read again).
                tx, pos = (rows[-1][0], rows[-1][1]) if len(rows) >= self.batch or progress.more else horizon
                count += len(rows)
            progress.messages += sweep(conn, now_ms)  # a forgotten chain's events recorded since
            if self.retention_days > 0:
                progress.expired = self._expire(conn, (now_ms if now_ms is not None else _now_ms())
                                                - int(self.retention_days * DAY_MS))
            conn.execute(update(projections).where(projections.c.name == self.name).values(
                position=pos, tx=tx, events=count, updated_at_ms=_now_ms()))
            progress.position = pos
        return progress

    def position(self) -> tuple[int, int, int]:
        """(tx, pos, events applied) of this projection; (0, 0, 0) before its first catch-up."""
        with self.engine.connect() as conn:
            row = conn.execute(select(projections.c.tx, projections.c.position, projections.c.events)
                               .where(projections.c.name == self.name)).first()
        return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)

    def lag(self) -> int:
        """How many events of the types it reads are in the store past its position."""
        tx, pos, _ = self.position()
        with self.engine.connect() as conn:
            past = tuple_(events.c.tx, events.c.pos) > tuple_(tx, pos) if self.pg else events.c.pos > pos
            return int(conn.execute(select(func.count()).select_from(events)
                                    .where(past, events.c.type.in_(TYPES))).scalar() or 0)

    def rebuild(self, now_ms: int | None = None) -> Progress:
        """Empty this projection (its partition's viewers and its position), then catch up from the
        store's first event."""
        with self.engine.begin() as conn:
            self._lock_position(conn)
            ids = [v for (v,) in conn.execute(select(viewers.c.id)) if self.mine(v)]
            for start in range(0, len(ids), 500):
                delete_viewers(conn, ids[start:start + 500])
            conn.execute(update(projections).where(projections.c.name == self.name).values(
                position=0, tx=0, events=0, updated_at_ms=_now_ms()))
        return self.catch_up(now_ms=now_ms)

    # -- inside a batch's transaction ---------------------------------------------

    def _lock_position(self, conn: Connection) -> tuple[int, int, int]:
        """This projection's position, its row locked for the transaction (created at 0 the first time)."""
        if self.pg:
            conn.execute(text("INSERT INTO projections (name, position, tx, events, updated_at_ms) "
                              "VALUES (:n, 0, 0, 0, :t) ON CONFLICT (name) DO NOTHING"), {"n": self.name, "t": _now_ms()})
            row = conn.execute(select(projections.c.tx, projections.c.position, projections.c.events)
                               .where(projections.c.name == self.name).with_for_update()).one()
        else:
            # The first statement writes: SQLite takes its write lock now, before the position is read.
            conn.execute(text("INSERT INTO projections (name, position, tx, events, updated_at_ms) "
                              "VALUES (:n, 0, 0, 0, :t) ON CONFLICT (name) DO UPDATE SET updated_at_ms = :t"),
                         {"n": self.name, "t": _now_ms()})
            row = conn.execute(select(projections.c.tx, projections.c.position, projections.c.events)
                               .where(projections.c.name == self.name)).one()
        return int(row[0]), int(row[1]), int(row[2])

    def _horizon(self, conn: Connection) -> tuple[int, int] | None:
        """The newest (tx, pos) no row can commit below any more."""
        if self.pg:
            row = conn.execute(text(
                "SELECT tx, pos FROM events WHERE tx < pg_snapshot_xmin(pg_current_snapshot())::text::bigint "
                "ORDER BY tx DESC, pos DESC LIMIT 1")).first()
            return (int(row[0]), int(row[1])) if row else None
        top = conn.execute(select(func.max(events.c.pos))).scalar()
        return (0, int(top)) if top is not None else None

    def _read(self, conn: Connection, after: tuple[int, int], upto: tuple[int, int]) -> list[Any]:
        live = select(runs.c.id).where(runs.c.replay_of.is_(None))
        if self.pg:
            where = and_(tuple_(events.c.tx, events.c.pos) > tuple_(*after),
                         tuple_(events.c.tx, events.c.pos) <= tuple_(*upto))
            order: Sequence[Any] = (events.c.tx, events.c.pos)
        else:
            where = and_(events.c.pos > after[1], events.c.pos <= upto[1])
            order = (events.c.pos,)
        query = (select(events.c.tx, events.c.pos, events.c.run, events.c.at_ms, events.c.body)
                 .where(where, events.c.type.in_(TYPES), events.c.run.in_(live))
                 .order_by(*order).limit(self.batch))
        return [(r[0] or 0, r[1], r[2], r[3], r[4]) for r in conn.execute(query)]

    def _apply_batch(self, conn: Connection, rows: list[Any], progress: Progress) -> list[Any]:
        """Apply a batch's events, in order, as a few statements per table (``_Changes``); a
        ``!forget`` stops the batch there (what is after it was read before their events were
        blanked: the next batch reads it again).  Returns the rows applied."""
        decoded: list[tuple[Any, str, int]] = []
        for n, (_, pos, run, at_ms, body) in enumerate(rows):
            try:
                event = codec.decode(bytes(body))
            except Exception as exc:  # noqa: BLE001 - a row the codec cannot read stops the projection, named
                raise StoreError(f"the viewers projection cannot read the event at pos {pos}: {exc}") from None
            decoded.append((event, run, event.at_ms or at_ms))
            if isinstance(event, ViewerRecalled) and event.forget and remembered(event.viewer) \
                    and self.mine(event.viewer):
                rows, progress.more = rows[:n + 1], True
                break
        ids = {getattr(e, "viewer", "") for e, _, _ in decoded}
        changes = _Changes(conn, sorted(v for v in ids if v and remembered(v) and self.mine(v)))
        # A fact read late (the facts worker's model) from a comment of a viewer forgotten since:
        # not remembered again, even where they came back meanwhile (the sweep blanks its event).
        forgotten = _forgotten_chains(conn, {e.correlation for e, _, _ in decoded
                                             if isinstance(e, ViewerNoted) and e.correlation})
        for event, run, at_ms in decoded:
            if isinstance(event, DanmakuReceived):
                if event.kind != "moderator" and remembered(event.viewer) and self.mine(event.viewer):
                    changes.seen(event, run, at_ms)
                    progress.viewers.add(event.viewer)
            elif isinstance(event, ViewerNoted):
                if remembered(event.viewer) and self.mine(event.viewer) and changes.exists(event.viewer) \
                        and event.correlation not in forgotten:
                    changes.noted(event, run, at_ms)
                    progress.viewers.add(event.viewer)
            elif isinstance(event, ViewerRecalled):
                if event.forget and remembered(event.viewer) and self.mine(event.viewer):
                    changes.write()
                    done = forget_in(conn, event.viewer, "chat", at_ms)
                    progress.messages += done.messages
                    progress.forgotten += 1
                    return rows
            elif (isinstance(event, CueIssued) and event.viewer and remembered(event.viewer)
                  and self.mine(event.viewer) and event.role and not event.self_driven
                  and changes.exists(event.viewer)):
                changes.roles[(event.viewer, event.role)] += 1
        changes.write()
        return rows

    def _expire(self, conn: Connection, before_ms: int) -> int:
        ids = [v for (v,) in conn.execute(select(viewers.c.id).where(viewers.c.last_seen_at_ms < before_ms))
               if self.mine(v)]
        for start in range(0, len(ids), 500):
            delete_viewers(conn, ids[start:start + 500])
        return len(ids)


class _Changes:
    """What a batch of events does to the read model, gathered in order and written at the end
    in a few statements per table: the same rows as applying the events one by one."""

    def __init__(self, conn: Connection, ids: Sequence[str]) -> None:
        self.conn = conn
        self.known: dict[str, dict[str, Any]] = {}   # the viewers' rows as stored, then as changed
        self.new: set[str] = set()                   # viewers first seen in this batch
        self.runs: dict[tuple[str, str], list[int]] = {}  # (viewer, run) -> [first_at, comments, stored]
        self.topics: dict[str, list[dict[str, Any]]] = {}
        self.facts: dict[tuple[str, str], dict[str, Any]] = {}
        self.roles: Counter[tuple[str, str]] = Counter()
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            for row in conn.execute(select(viewers).where(viewers.c.id.in_(part))).mappings():
                self.known[row["id"]] = dict(row)
            for v, r, first, comments in conn.execute(select(
                    viewer_runs.c.viewer, viewer_runs.c.run, viewer_runs.c.first_at_ms, viewer_runs.c.comments)
                    .where(viewer_runs.c.viewer.in_(part))):
                self.runs[(v, r)] = [first, comments, 1]

    def exists(self, viewer: str) -> bool:
        return viewer in self.known

    def seen(self, event: DanmakuReceived, run: str, at_ms: int) -> None:
        viewer, gift = event.viewer, event.kind == "gift"
        pair = self.runs.get((viewer, run))
        first_in_run = pair is None
        if pair is None:
            self.runs[(viewer, run)] = [at_ms, 1, 0]
        else:
            pair[1] += 1
        name = event.user or viewer
        row = self.known.get(viewer)
        if row is None:
            self.new.add(viewer)
            self.known[viewer] = {
                "id": viewer, "platform": event.platform or viewer.partition(":")[0], "name": name,
                "first_seen_at_ms": at_ms, "last_seen_at_ms": at_ms, "first_run": run, "last_run": run, "shows": 1,
                "comments": 0 if gift else 1, "gifts": 1 if gift else 0, "gift_value": event.value if gift else 0.0}
        else:
            row.update(name=name, last_seen_at_ms=max(row["last_seen_at_ms"], at_ms), last_run=run,
                       shows=row["shows"] + (1 if first_in_run else 0), comments=row["comments"] + (0 if gift else 1),
                       gifts=row["gifts"] + (1 if gift else 0),
                       gift_value=row["gift_value"] + (event.value if gift else 0.0))
        topic = topic_of(event.text) if not gift else ""
        if topic:
            mine = self.topics.setdefault(viewer, [])
            mine[:] = [t for t in mine if t["danmaku"] != event.id]
            mine.append({"viewer": viewer, "danmaku": event.id, "topic": topic, "run": run, "at_ms": at_ms})

    def noted(self, event: ViewerNoted, run: str, at_ms: int) -> None:
        fact = Fact(event.kind, event.value, event.detail, event.language)
        self.facts[(event.viewer, fact.key)] = {
            "viewer": event.viewer, "key": fact.key, "kind": fact.kind, "detail": fact.detail, "value": fact.value,
            "language": fact.language, "said": event.said, "source": event.id, "danmaku": event.causation or "",
            "run": run, "at_ms": at_ms}

    def write(self) -> None:
        conn = self.conn
        fresh = [row for v, row in self.known.items() if v in self.new]
        if fresh:
            conn.execute(insert(viewers), fresh)
        changed = [{**row, "v_id": row["id"]} for v, row in self.known.items() if v not in self.new]
        if changed:
            conn.execute(update(viewers).where(viewers.c.id == bindparam("v_id")).values(
                {c: bindparam(c) for c in ("name", "last_seen_at_ms", "last_run", "shows", "comments", "gifts",
                                           "gift_value")}), changed)
        runs_new = [{"viewer": v, "run": r, "first_at_ms": f, "comments": n}
                    for (v, r), (f, n, stored) in self.runs.items() if not stored]
        if runs_new:
            conn.execute(insert(viewer_runs), runs_new)
        runs_old = [{"v": v, "r": r, "n": n} for (v, r), (_, n, stored) in self.runs.items() if stored]
        if runs_old:
            conn.execute(update(viewer_runs).where(viewer_runs.c.viewer == bindparam("v"), viewer_runs.c.run == bindparam("r"))
                         .values(comments=bindparam("n")), runs_old)
        self._topics()
        if self.facts:
            conn.execute(delete(viewer_facts).where(viewer_facts.c.viewer == bindparam("v"),
                                                    viewer_facts.c.key == bindparam("k")),
                         [{"v": v, "k": k} for v, k in self.facts])
            conn.execute(insert(viewer_facts), list(self.facts.values()))
        for (viewer, role), n in self.roles.items():
            _upsert_add(conn, viewer_roles, {"viewer": viewer, "role": role}, "answers", n)

    def _topics(self) -> None:
        if not self.topics:
            return
        conn = self.conn
        added = [t for ts in self.topics.values() for t in ts]
        conn.execute(delete(viewer_topics).where(viewer_topics.c.viewer == bindparam("v"),
                                                 viewer_topics.c.danmaku == bindparam("d")),
                     [{"v": t["viewer"], "d": t["danmaku"]} for t in added])
        conn.execute(insert(viewer_topics), added)
        old = []
        for viewer in self.topics:
            kept = conn.execute(select(viewer_topics.c.danmaku).where(viewer_topics.c.viewer == viewer)
                                .order_by(viewer_topics.c.at_ms.desc(), viewer_topics.c.danmaku.desc())
                                .offset(TOPICS_KEPT)).all()
            old += [{"v": viewer, "d": d} for (d,) in kept]
        if old:
            conn.execute(delete(viewer_topics).where(viewer_topics.c.viewer == bindparam("v"),
                                                     viewer_topics.c.danmaku == bindparam("d")), old)


def _forgotten_chains(conn: Connection, correlations: set[str | None]) -> set[str | None]:
    """Those of these chains a forgetting has redacted."""
    if not correlations:
        return set()
    return {c for (c,) in conn.execute(select(redaction_chains.c.correlation)
                                       .where(redaction_chains.c.correlation.in_(sorted(c for c in correlations if c))))}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _upsert_add(conn: Connection, table: Any, key: dict[str, Any], column: str, n: int) -> None:
    where = [table.c[k] == v for k, v in key.items()]
    done = conn.execute(update(table).where(*where).values({column: table.c[column] + n}))
    if not done.rowcount:
        conn.execute(insert(table).values(**key, **{column: n}))


async def follow(projector: Projector, stop: asyncio.Event | None = None, interval_s: float = 0.5,
                 erase: Callable[[list[tuple[str, int]]], Awaitable[Any]] | None = None) -> None:
    """Keep a projection up with the store until ``stop`` is set (or the task is cancelled): a
    catch-up, then a wait.  A failed catch-up (the store away) is logged and tried again.
    ``erase`` takes the JetStream messages of forgotten viewers' chains (a ``!forget``, or an
    event of a forgotten chain recorded late) and erases them; those it could not are tried again."""
    stop = stop or asyncio.Event()
    pending: list[tuple[str, int]] = []
    while not stop.is_set():
        try:
            done = await asyncio.to_thread(projector.catch_up)
            pending += done.messages
        except Exception as exc:  # noqa: BLE001 - the store away: the next round tries again
            log.warning("viewers: the projection could not catch up: %s", str(exc).splitlines()[0] if str(exc) else exc)
        if pending and erase is not None:
            try:
                await erase(pending)
                pending = []
            except Exception as exc:  # noqa: BLE001 - NATS away: the next round tries again
                log.warning("viewers: %d messages of forgotten viewers not erased yet: %s", len(pending), exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)


# -- reading the read model -----------------------------------------------------


def profile(engine: Engine, viewer: str) -> Profile | None:
    """One viewer's profile with its sources, or None when the read model does not know them."""
    with engine.connect() as conn:
        return _profile(conn, viewer)


def _profile(conn: Connection, viewer: str) -> Profile | None:
    row = conn.execute(select(viewers).where(viewers.c.id == viewer)).mappings().first()
    if row is None:
        return None
    shows = tuple(r for (r,) in conn.execute(select(viewer_runs.c.run).where(viewer_runs.c.viewer == viewer)
                                             .order_by(viewer_runs.c.first_at_ms, viewer_runs.c.run)))
    facts = tuple(dict(r) for r in conn.execute(
        select(viewer_facts.c.kind, viewer_facts.c.detail, viewer_facts.c.value, viewer_facts.c.language,
               viewer_facts.c.said, viewer_facts.c.source, viewer_facts.c.danmaku, viewer_facts.c.run,
               viewer_facts.c.at_ms)
        .where(viewer_facts.c.viewer == viewer).order_by(viewer_facts.c.at_ms.desc(), viewer_facts.c.key)).mappings())
    topics = tuple(dict(r) for r in conn.execute(
        select(viewer_topics.c.topic, viewer_topics.c.danmaku, viewer_topics.c.run, viewer_topics.c.at_ms)
        .where(viewer_topics.c.viewer == viewer)
        .order_by(viewer_topics.c.at_ms.desc(), viewer_topics.c.danmaku.desc())).mappings())
    roles = tuple((r, int(n)) for r, n in conn.execute(
        select(viewer_roles.c.role, viewer_roles.c.answers).where(viewer_roles.c.viewer == viewer)
        .order_by(viewer_roles.c.answers.desc(), viewer_roles.c.role)))
    return Profile(**{k: row[k] for k in ("id", "platform", "name", "first_seen_at_ms", "last_seen_at_ms",
                                          "first_run", "last_run", "shows", "comments", "gifts", "gift_value")},
                   runs=shows, facts=facts, topics=topics, roles=roles)


def listing(engine: Engine, limit: int = 0) -> list[dict[str, Any]]:
    """The read model's viewers, the last seen first: a line each (``troupe viewers``)."""
    with engine.connect() as conn:
        facts = {v: n for v, n in conn.execute(
            select(viewer_facts.c.viewer, func.count()).group_by(viewer_facts.c.viewer))}
        query = select(viewers).order_by(viewers.c.last_seen_at_ms.desc(), viewers.c.id)
        if limit:
            query = query.limit(limit)
        return [dict(r) | {"facts": int(facts.get(r["id"], 0))} for r in conn.execute(query).mappings()]


def snapshot(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the read model, sorted: two projections of the same events compare equal."""
    with engine.connect() as conn:
        return {t.name: sorted(tuple(r) for r in conn.execute(select(t))) for t in VIEWER_TABLES}
