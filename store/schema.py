"""The event store's tables (SQLAlchemy Core).

The schema is owned by the Alembic migrations in ``store/migrations``; this module
describes the current revision for the code that reads and writes it.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
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
