"""Opening the event store: SQLite (WAL) by default, any SQLAlchemy URL otherwise."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, create_engine, event

from store.schema import metadata


class StoreError(RuntimeError):
    """The store cannot be opened or written."""


def default_url(state_dir: Path) -> str:
    """The SQLite file Troupe uses when no store URL is configured."""
    state_dir.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(state_dir / 'troupe.db').resolve()}"


def open_engine(url: str) -> Engine:
    """An engine with the schema created; SQLite gets WAL and a busy timeout."""
    try:
        if url.startswith("sqlite"):
            engine = create_engine(url, connect_args={"timeout": 30})

            @event.listens_for(engine, "connect")
            def _pragmas(conn, _record):  # type: ignore[no-untyped-def]
                cur = conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.close()
        else:
            engine = create_engine(url, pool_pre_ping=True)
        metadata.create_all(engine)
    except Exception as exc:  # noqa: BLE001 - one clear message for any driver failure
        raise StoreError(f"cannot open the store at {url}: {exc.__class__.__name__}: {exc}") from None
    return engine
