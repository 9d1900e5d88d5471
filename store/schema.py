"""The event store's tables (SQLAlchemy Core): every event of every run, one row per run, and
how far the recorder has written each stream.

The schema is owned by the Alembic migrations in ``store/migrations`` (applied when a store is
opened: ``store.database``); this module describes the current revision for the code that reads
and writes it.  The recorder actor is the one writer (``store.recorder.EventWriter``, one
transaction a batch, the batch's messages acked after it commits); ``troupe runs``, ``inspect``,
``replay``, ``export``, re-execution and the end-of-show summary read.

``events``: each event once, whatever was delivered twice.

- ``pos``: the store's own order (auto-incremented): the order a run is read back in.
- ``run``, ``seq``: the run, and the event's number in it (0, 1, ... as the recorder wrote them,
  drawn from ``runs.next_seq``; unique per run).
- ``id``: the envelope's id, unique: a redelivered event, or a duplicate the stream let through,
  is skipped, so writing a batch again changes nothing.
- ``type``, ``role``, ``causation``, ``correlation``, ``t_ms`` (show time), ``at_ms`` (wall-clock
  ms when it was published): the envelope (``events.base``) in columns to query by, indexed by
  (run, type) and by correlation (one danmaku's causal chain: ``inspect --correlation``).
- ``subject``, ``stream_seq``, ``headers``: how it travelled: its NATS subject, its sequence in
  its family's stream, and the message's headers as a JSON object (null when it had none).
- ``body``: the event encoded (``events.codec``), complete: envelope fields a producer left out
  are filled in (as the runtime decoded it); an event with a blob (audio, frames) as it travelled.
- ``blob_digest``, ``blob_size``: with ``TROUPE_STORE_FRAMES=digest`` (the default) a frame's JPEG
  is not kept: ``body`` holds its JSON and these the JPEG's SHA-256 and size; null otherwise.

``runs``: one row a run, following its lifecycle.  Created ``running`` with the run's first
recorded event; ``run.started`` fills in ``started_at_ms``, ``show`` (JSON, as the run carried
it), ``seed`` and ``replay_of`` (the source run of a playback); ``run.ended`` fills in
``ended_at_ms``, ``duration_ms`` (show time), ``end_reason`` and ``status`` (``ended``, or
``failed`` when the reason says so).  ``next_seq`` is the counter ``events.seq`` is drawn from.

``tx``: on PostgreSQL, the id of the transaction that wrote the row (the database fills it in):
rows may commit out of ``pos`` order when several recorders write, so a projection reads rows of
transactions older than every open one, in ``(tx, pos)`` order (``store.viewers``).

``consumers``: per recorder durable consumer, the highest stream sequence it has written
(``last_stream_seq``, in the same transaction as the events, so it never runs ahead of them), its
stream, and when it was last updated.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid); PostgreSQL gets a bigint.
Position = BigInteger().with_variant(Integer(), "sqlite")

events = Table(
    "events", metadata,
    Column("pos", Position, primary_key=True, autoincrement=True),  # global store order
    Column("run", String(64), nullable=False),
    Column("seq", BigInteger, nullable=False),       # order within the run, from 0
    Column("id", String(64), nullable=False, unique=True),
    Column("type", String(64), nullable=False),
    Column("role", String(64)),
    Column("causation", String(64)),
    Column("correlation", String(64)),
    Column("t_ms", BigInteger, nullable=False),      # show time
    Column("at_ms", BigInteger, nullable=False),     # wall clock when emitted
    Column("subject", String(255), nullable=False),
    Column("stream_seq", BigInteger),
    Column("headers", Text),                          # NATS headers as a JSON object
    Column("body", LargeBinary, nullable=False),     # the encoded event as it travelled
    Column("blob_digest", String(64)),               # set when the blob was stored by digest only
    Column("blob_size", Integer),
    # PostgreSQL: the writing transaction's id (filled in by the database), read by projections
    # (``store.viewers``); null on SQLite, whose writers commit in ``pos`` order.
    Column("tx", BigInteger),
    # The redaction that blanked this event's personal fields (``store.forget``); null if none.
    Column("redaction", String(64)),
    UniqueConstraint("run", "seq", name="uq_events_run_seq"),
    Index("ix_events_run_type", "run", "type"),
    Index("ix_events_correlation", "correlation"),
)

runs = Table(
    "runs", metadata,
    Column("id", String(64), primary_key=True),
    Column("started_at_ms", BigInteger),             # null until run.started is recorded
    Column("ended_at_ms", BigInteger),
    Column("duration_ms", BigInteger),
    Column("status", String(16), nullable=False),    # running | ended | failed | ...
    Column("end_reason", Text),
    Column("show", Text),
    Column("seed", BigInteger),
    Column("replay_of", String(64)),                 # a playback's source run
    Column("next_seq", BigInteger, nullable=False),  # the per-run sequence counter
)

# How far each recorder consumer has written its stream (highest stream sequence committed).
consumers = Table(
    "consumers", metadata,
    Column("name", String(128), primary_key=True),
    Column("stream", String(64), nullable=False),
    Column("last_stream_seq", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
)

# Each projection's tracking position (``store.viewers``): the last event it applied, as (tx, pos)
# on PostgreSQL and pos on SQLite (tx 0), committed with the rows it wrote.
projections = Table(
    "projections", metadata,
    Column("name", String(64), primary_key=True),
    Column("position", BigInteger, nullable=False),
    Column("tx", BigInteger, nullable=False),
    Column("events", BigInteger, nullable=False),     # how many events it has applied
    Column("updated_at_ms", BigInteger, nullable=False),
)

# The viewers read model: a projection of live runs' events (``store.viewers``); rebuilt from
# the store at will, and forgotten viewer by viewer.
viewers = Table(
    "viewers", metadata,
    Column("id", String(200), primary_key=True),     # the platform-namespaced id (twitch:<user-id>)
    Column("platform", String(16), nullable=False),
    Column("name", Text, nullable=False),            # the name last shown
    Column("first_seen_at_ms", BigInteger, nullable=False),
    Column("last_seen_at_ms", BigInteger, nullable=False),
    Column("first_run", String(64), nullable=False),
    Column("last_run", String(64), nullable=False),
    Column("shows", Integer, nullable=False),
    Column("comments", Integer, nullable=False),
    Column("gifts", Integer, nullable=False),
    Column("gift_value", Float, nullable=False),
    Index("ix_viewers_last_seen", "last_seen_at_ms"),
)

viewer_runs = Table(
    "viewer_runs", metadata,
    Column("viewer", String(200), primary_key=True),
    Column("run", String(64), primary_key=True),
    Column("first_at_ms", BigInteger, nullable=False),
    Column("comments", Integer, nullable=False),
)

viewer_facts = Table(
    "viewer_facts", metadata,
    Column("viewer", String(200), primary_key=True),
    Column("key", String(64), primary_key=True),     # kind[:detail]: a newer fact replaces an older one
    Column("kind", String(32), nullable=False),
    Column("detail", String(32), nullable=False),
    Column("value", Text, nullable=False),
    Column("language", String(8), nullable=False),
    Column("said", Text, nullable=False),            # the words it was read from
    Column("source", String(64), nullable=False),    # the danmaku.noted event
    Column("danmaku", String(64), nullable=False),   # the comment it was said in
    Column("run", String(64), nullable=False),
    Column("at_ms", BigInteger, nullable=False),
)

viewer_topics = Table(
    "viewer_topics", metadata,
    Column("viewer", String(200), primary_key=True),
    Column("danmaku", String(64), primary_key=True),
    Column("topic", Text, nullable=False),
    Column("run", String(64), nullable=False),
    Column("at_ms", BigInteger, nullable=False),
)

viewer_roles = Table(
    "viewer_roles", metadata,
    Column("viewer", String(200), primary_key=True),
    Column("role", String(64), primary_key=True),
    Column("answers", Integer, nullable=False),
)

# Each forgetting of a viewer (``store.forget``): when, asked by whom, what it blanked.  It names
# no viewer: what it says of them is only that somebody was forgotten.
redactions = Table(
    "redactions", metadata,
    Column("id", String(64), primary_key=True),
    Column("at_ms", BigInteger, nullable=False),
    Column("requested_by", String(32), nullable=False),   # "cli", or "chat" (the viewer's !forget)
    Column("events", Integer, nullable=False),            # events blanked, those redacted later included
    Column("messages", Integer, nullable=False),          # JetStream messages deleted
)

# The chains (a danmaku's correlation) of forgotten viewers: an event of one recorded after the
# forgetting (a reply still on its way) is blanked when the projector comes to it.
redaction_chains = Table(
    "redaction_chains", metadata,
    Column("correlation", String(64), primary_key=True),
    Column("redaction", String(64), nullable=False),
    Column("run", String(64), nullable=False),
)

VIEWER_TABLES = (viewers, viewer_runs, viewer_facts, viewer_topics, viewer_roles)
