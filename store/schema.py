"""The event store's tables (SQLAlchemy Core)."""

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
)

metadata = MetaData()

events = Table(
    "events", metadata,
    Column("pos", Integer, primary_key=True, autoincrement=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("run", String(64), nullable=False),
    Column("type", String(64), nullable=False),
    Column("role", String(64)),
    Column("causation", String(64)),
    Column("correlation", String(64)),
    Column("t_ms", BigInteger, nullable=False),
    Column("at_ms", BigInteger, nullable=False),
    Column("subject", String(255), nullable=False),
    Column("stream_seq", BigInteger),
    Column("body", LargeBinary, nullable=False),   # the encoded event as it travelled
    Column("blob_digest", String(64)),             # set when the blob was stored by digest only
    Column("blob_size", Integer),
    Index("ix_events_run_type", "run", "type"),
    Index("ix_events_correlation", "correlation"),
)

runs = Table(
    "runs", metadata,
    Column("id", String(64), primary_key=True),
    Column("started_at_ms", BigInteger, nullable=False),
    Column("show", Text, nullable=False),
    Column("seed", BigInteger, nullable=False),
)
