"""The event store: runs, events, consumer tracking.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("started_at_ms", sa.BigInteger),
        sa.Column("ended_at_ms", sa.BigInteger),
        sa.Column("duration_ms", sa.BigInteger),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("end_reason", sa.Text),
        sa.Column("show", sa.Text),
        sa.Column("seed", sa.BigInteger),
        sa.Column("replay_of", sa.String(64)),
        sa.Column("next_seq", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "events",
        sa.Column("pos", Position, primary_key=True, autoincrement=True),
        sa.Column("run", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("id", sa.String(64), nullable=False, unique=True),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("role", sa.String(64)),
        sa.Column("causation", sa.String(64)),
        sa.Column("correlation", sa.String(64)),
        sa.Column("t_ms", sa.BigInteger, nullable=False),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("stream_seq", sa.BigInteger),
        sa.Column("headers", sa.Text),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("blob_digest", sa.String(64)),
        sa.Column("blob_size", sa.Integer),
        sa.UniqueConstraint("run", "seq", name="uq_events_run_seq"),
    )
    op.create_index("ix_events_run_type", "events", ["run", "type"])
    op.create_index("ix_events_correlation", "events", ["correlation"])
    op.create_table(
        "consumers",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("stream", sa.String(64), nullable=False),
        sa.Column("last_stream_seq", sa.BigInteger, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("consumers")
    op.drop_index("ix_events_correlation", "events")
    op.drop_index("ix_events_run_type", "events")
    op.drop_table("events")
    op.drop_table("runs")
