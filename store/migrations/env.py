"""Alembic environment: migrates the connection Troupe hands over, or the configured URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from store.schema import metadata

config = context.config


def run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as conn:
        run(conn)
    engine.dispose()
