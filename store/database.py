"""Opening the event store: SQLite (WAL) by default, PostgreSQL when the URL says so.

Opening a store migrates it to the current schema with Alembic (under a lock, so
that several processes may open one store at once).  PostgreSQL goes through
psycopg 3; ``postgresql://`` URLs are given that driver.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, inspect, make_url, text
from sqlalchemy.engine import URL

from events.errors import StoreError

HEAD = "0002"  # the newest migration in store/migrations/versions
MIGRATIONS = Path(__file__).parent / "migrations"
_PG_LOCK = 0x7472_6F75_7065  # pg_advisory_lock key for migrations ("troupe")


def default_url(state_dir: Path) -> str:
    """The SQLite file Troupe uses when no store URL is configured."""
    state_dir.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(state_dir / 'troupe.db').resolve()}"


def normalise_url(url: str) -> URL:
    """The URL with Troupe's driver for its database (psycopg 3 for PostgreSQL)."""
    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - SQLAlchemy's ArgumentError and friends
        raise StoreError(f"not a database URL: {url!r}") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise StoreError(f"unsupported store {parsed.drivername!r}: use sqlite:/// or postgresql://")
    return parsed


def _describe(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def open_engine(url: str, migrate: bool = True) -> Engine:
    """An engine on a store at the current schema; fails with one clear StoreError."""
    parsed = normalise_url(url)
    try:
        if parsed.get_backend_name() == "sqlite":
            engine = create_engine(parsed, connect_args={"timeout": 10})

            @event.listens_for(engine, "connect")
            def _pragmas(conn, _record):  # type: ignore[no-untyped-def]
                cur = conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.close()
        else:
            engine = create_engine(
                parsed, pool_pre_ping=True, connect_args={"connect_timeout": 5, "options": "-c plan_cache_mode=force_custom_plan"},
            )
        if migrate:
            upgrade(engine)
        else:
            with engine.connect():
                pass
    except StoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - one clear message for any driver failure
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise StoreError(f"cannot open the store at {_describe(parsed)}: {reason}") from None
    return engine


def schema_revision(engine: Engine) -> str | None:
    """The store's Alembic revision, or None for an empty database."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            if inspect(conn).has_table("events"):
                raise StoreError(
                    "the store holds tables without a schema version (made by an older Troupe): "
                    "move it aside or point TROUPE_STORE_URL elsewhere"
                )
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(engine: Engine) -> None:
    """Migrate the store to HEAD with Alembic; a store at HEAD is left untouched."""
    if schema_revision(engine) == HEAD:
        return
    from alembic import command
    from alembic.config import Config

    with _migration_lock(engine), engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK})
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = conn
        command.upgrade(config, "head")


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    """Serialise migrations of one SQLite file across processes (PostgreSQL locks in SQL)."""
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
