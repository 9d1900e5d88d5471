"""The event store's contract, run against SQLite and PostgreSQL alike."""

from __future__ import annotations

import threading

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import func, select

from events import codec
from events.audio import AudioChunk, PhonemeMark
from events.danmaku import DanmakuReceived
from events.errors import StoreError
from events.frame import FrameRendered
from events.run import RunEnded
from store.database import HEAD, MIGRATIONS, open_engine, schema_revision
from store.recorder import EventWriter, Recorded, read_events
from store.schema import consumers, events, runs
from tests.showkit import demo_run


def danmaku(run: str, i: int) -> DanmakuReceived:
    return DanmakuReceived(id=f"{run}-d{i}", run=run, t_ms=i * 10, at_ms=1000 + i, text=f"hello {i}", user="u")


def recorded(event, stream_seq: int | None = None, consumer: str | None = None) -> Recorded:  # type: ignore[no-untyped-def]
    return Recorded(event, codec.encode(event), f"troupe.{event.run}.{event.type}", stream_seq,
                    {"Nats-Msg-Id": event.id}, "TROUPE_X" if consumer else None, consumer)


def frame(run: str, n: int) -> FrameRendered:
    return FrameRendered(id=f"{run}-f{n}", run=run, t_ms=n * 40, n=n, width=64, height=36,
                         resolution="360p", jpeg=b"\xff\xd8jpeg" * 10)


def audio(run: str) -> AudioChunk:
    return AudioChunk(id=f"{run}-a0", run=run, role="host", utterance="u1", seq=0, sample_rate=22050,
                      offset_ms=0, duration_ms=100, text="hi", phonemes=(PhonemeMark("h", 0, 50),),
                      pcm=bytes(range(256)) * 17)


def count(engine, run: str) -> int:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(events).where(events.c.run == run)).scalar_one()


def test_migrations_reach_head_and_opening_twice_changes_nothing(store_url: str) -> None:
    assert ScriptDirectory.from_config(_alembic_config()).get_current_head() == HEAD
    engine = open_engine(store_url)
    assert schema_revision(engine) == HEAD
    engine.dispose()
    engine = open_engine(store_url)
    assert schema_revision(engine) == HEAD
    engine.dispose()


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def test_appending_twice_stores_each_event_once_with_a_gapless_run_sequence(store_url: str) -> None:
    engine = open_engine(store_url)
    writer = EventWriter(engine)
    batch = [recorded(danmaku("r1", i), i + 1) for i in range(20)]
    assert writer.append(batch[:12]) == 12
    assert writer.append(batch) == 8            # a redelivered batch: only the new ones
    assert writer.append(batch[5:] + batch[:3]) == 0
    assert writer.append([batch[0], batch[0]]) == 0
    with engine.connect() as conn:
        rows = conn.execute(select(events.c.id, events.c.seq, events.c.headers).where(events.c.run == "r1")
                            .order_by(events.c.pos)).all()
    assert [r.id for r in rows] == [f"r1-d{i}" for i in range(20)]
    assert [r.seq for r in rows] == list(range(20))
    assert '"Nats-Msg-Id"' in rows[0].headers
    assert [e.id for e in read_events(engine, "r1")] == [f"r1-d{i}" for i in range(20)]
    engine.dispose()


def test_runs_follow_their_lifecycle_and_have_their_own_sequences(store_url: str) -> None:
    engine = open_engine(store_url)
    writer = EventWriter(engine)
    start = demo_run("r2", seed=99)
    writer.append([recorded(danmaku("r2", 0)), recorded(start), recorded(danmaku("r3", 0))])
    writer.append([recorded(RunEnded(id="r2-end", run="r2", t_ms=5000, at_ms=9, reason="duration", duration_ms=5000))])
    with engine.connect() as conn:
        r2 = conn.execute(select(runs).where(runs.c.id == "r2")).one()
        r3 = conn.execute(select(runs).where(runs.c.id == "r3")).one()
        seqs = dict(conn.execute(select(events.c.id, events.c.seq)).all())
    assert (r2.status, r2.seed, r2.duration_ms, r2.end_reason) == ("ended", 99, 5000, "duration")
    assert r2.started_at_ms == start.started_at_ms and '"roles"' in r2.show
    assert (r3.status, r3.started_at_ms) == ("running", None)
    assert seqs == {"r2-d0": 0, "r2-start": 1, "r3-d0": 0, "r2-end": 2}
    engine.dispose()


def test_frames_by_digest_and_audio_whole(store_url: str) -> None:
    engine = open_engine(store_url)
    EventWriter(engine, frames="digest").append([recorded(frame("r4", 0)), recorded(audio("r4"))])
    EventWriter(engine, frames="full").append([recorded(frame("r5", 0))])
    got = {e.id: e for e in read_events(engine, "r4") + read_events(engine, "r5")}
    assert got["r4-f0"].jpeg == b"" and got["r5-f0"].jpeg == frame("r5", 0).jpeg  # type: ignore[attr-defined]
    assert got["r4-a0"] == audio("r4")
    with engine.connect() as conn:
        digest, size = conn.execute(select(events.c.blob_digest, events.c.blob_size)
                                    .where(events.c.id == "r4-f0")).one()
    assert len(digest) == 64 and size == len(frame("r4", 0).jpeg)
    engine.dispose()


def test_consumer_positions_only_move_forward(store_url: str) -> None:
    engine = open_engine(store_url)
    writer = EventWriter(engine)
    writer.append([recorded(danmaku("r6", i), 10 + i, "recorder_danmaku") for i in range(3)])
    writer.append([recorded(danmaku("r6", 0), 10, "recorder_danmaku")])  # an old redelivery
    with engine.connect() as conn:
        assert conn.execute(select(consumers.c.last_stream_seq)).scalar_one() == 12
    engine.dispose()


def test_a_failing_batch_writes_nothing(store_url: str) -> None:
    engine = open_engine(store_url)
    writer = EventWriter(engine)
    good = [recorded(danmaku("r7", i)) for i in range(3)]
    bad = Recorded(danmaku("r7", 9), b"", None, None)  # type: ignore[arg-type]  # subject is required
    with pytest.raises(Exception):  # noqa: B017 - whichever integrity error the driver raises
        writer.append([*good, bad])
    assert count(engine, "r7") == 0
    assert writer.append(good) == 3
    with engine.connect() as conn:
        assert conn.execute(select(events.c.seq).where(events.c.run == "r7")).scalars().all() == [0, 1, 2]
    engine.dispose()


def test_concurrent_writers_store_each_event_once(store_url: str) -> None:
    engine = open_engine(store_url)
    items = [recorded(danmaku("r8", i)) for i in range(300)]
    errors: list[BaseException] = []

    def write(offset: int) -> None:
        writer = EventWriter(engine)
        try:
            for k in range(0, 300, 25):
                writer.append(items[(k + offset) % 300:(k + offset) % 300 + 25])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(o,)) for o in (0, 100, 200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with engine.connect() as conn:
        ids = conn.execute(select(events.c.id).where(events.c.run == "r8")).scalars().all()
        seqs = conn.execute(select(events.c.seq).where(events.c.run == "r8")).scalars().all()
    assert sorted(ids) == sorted(i.event.id for i in items)
    assert len(set(seqs)) == 300
    engine.dispose()


def test_an_unreachable_or_foreign_store_is_one_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(StoreError, match="cannot open the store at postgresql"):
        open_engine("postgresql://postgres@127.0.0.1:1/nothing")
    with pytest.raises(StoreError, match="unsupported store"):
        open_engine("mysql://x@y/z")
    with pytest.raises(StoreError, match="not a database URL"):
        open_engine("::::")
    (tmp_path / "old.db").write_bytes(b"")
    import sqlite3
    with sqlite3.connect(tmp_path / "old.db") as legacy:
        legacy.execute("CREATE TABLE events (pos INTEGER PRIMARY KEY)")
    with pytest.raises(StoreError, match="without a schema version"):
        open_engine(f"sqlite:///{tmp_path / 'old.db'}")
