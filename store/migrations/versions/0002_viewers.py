"""The viewers read model (a projection of the store) and the projections' tracking positions;
events get the writing transaction's id on PostgreSQL, so a projection reads past no row that a
transaction still open will commit below it; the redactions that forget a viewer (``store.forget``).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # Each row carries its writer's transaction id: rows of transactions older than every one
        # still open (pg_snapshot_xmin) can be read in (tx, pos) order with none arriving below.
        op.add_column("events", sa.Column("tx", sa.BigInteger, server_default=sa.text("(pg_current_xact_id()::text::bigint)")))
        op.create_index("ix_events_tx_pos", "events", ["tx", "pos"])
    else:
        op.add_column("events", sa.Column("tx", sa.BigInteger))
    op.add_column("events", sa.Column("redaction", sa.String(64)))
    op.create_table(
        "redactions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
        sa.Column("requested_by", sa.String(32), nullable=False),
        sa.Column("events", sa.Integer, nullable=False),
        sa.Column("messages", sa.Integer, nullable=False),
    )
    op.create_table(
        "redaction_chains",
        sa.Column("correlation", sa.String(64), primary_key=True),
        sa.Column("redaction", sa.String(64), nullable=False),
        sa.Column("run", sa.String(64), nullable=False),
    )
    op.create_table(
        "projections",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("tx", sa.BigInteger, nullable=False),
        sa.Column("events", sa.BigInteger, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "viewers",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("platform", sa.String(16), nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("first_seen_at_ms", sa.BigInteger, nullable=False),
        sa.Column("last_seen_at_ms", sa.BigInteger, nullable=False),
        sa.Column("first_run", sa.String(64), nullable=False),
        sa.Column("last_run", sa.String(64), nullable=False),
        sa.Column("shows", sa.Integer, nullable=False),
        sa.Column("comments", sa.Integer, nullable=False),
        sa.Column("gifts", sa.Integer, nullable=False),
        sa.Column("gift_value", sa.Float, nullable=False),
    )
    op.create_index("ix_viewers_last_seen", "viewers", ["last_seen_at_ms"])
    op.create_table(
        "viewer_runs",
        sa.Column("viewer", sa.String(200), primary_key=True),
        sa.Column("run", sa.String(64), primary_key=True),
        sa.Column("first_at_ms", sa.BigInteger, nullable=False),
        sa.Column("comments", sa.Integer, nullable=False),
    )
    op.create_table(
        "viewer_facts",
        sa.Column("viewer", sa.String(200), primary_key=True),
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("detail", sa.String(32), nullable=False),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("language", sa.String(8), nullable=False),
        sa.Column("said", sa.Text, nullable=False),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("danmaku", sa.String(64), nullable=False),
        sa.Column("run", sa.String(64), nullable=False),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "viewer_topics",
        sa.Column("viewer", sa.String(200), primary_key=True),
        sa.Column("danmaku", sa.String(64), primary_key=True),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("run", sa.String(64), nullable=False),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "viewer_roles",
        sa.Column("viewer", sa.String(200), primary_key=True),
        sa.Column("role", sa.String(64), primary_key=True),
        sa.Column("answers", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    for table in ("viewer_roles", "viewer_topics", "viewer_facts", "viewer_runs", "viewers", "projections",
                  "redaction_chains", "redactions"):
        op.drop_table(table)
    op.drop_column("events", "redaction")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_events_tx_pos", "events")
    op.drop_column("events", "tx")
