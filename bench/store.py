"""The event store: recorder ingest, recorder lag, playback and re-execution speed.

``python -m bench.store [--json] [--events N] [--show-s S] [--repeats R] [--no-postgres]``

1. Recorder ingest into SQLite and PostgreSQL: the recorder's write path
   (``EventWriter.append``: rows from the events, dedupe, per-run sequence, run
   lifecycle, consumer position, one transaction per fetched batch of 64) against
   a plain SQLAlchemy bulk insert of the same rows (made from the same events by
   the same function, numbered, one ``insert(events)`` per batch of 64),
   alternating, on fresh databases; ratio of the medians.
2. A 720p show of ``S`` seconds with every actor in this process: the recorder's
   lag (age of the newest event at commit, sampled every 100 ms).
3. Playback of that run at ``--max`` (``app.playback.publish``) against raw
   nats-py ``publish_async`` of the same messages, each repeat into a fresh run id.
4. Re-execution (``troupe replay --verify``) of that run: show seconds per wall second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import machine, median, pct, print_table, write_result
from events import codec
from events.audio import AudioChunk, PhonemeMark
from events.base import Event
from events.danmaku import DanmakuReceived
from events.frame import FrameRendered, SpeakingMark
from events.viseme import VisemeMark, VisemeTrack
from store.database import open_engine
from store.recorder import EventWriter, Recorded, plain_insert

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
BATCH = 64


def show_like_events(run: str, n: int, seed: int = 1) -> list[Recorded]:
    """A recorded show's mix: per second 25 frames (digest-only), 4 audio chunks of 250 ms,
    4 viseme tracks, 1 danmaku."""
    rng = random.Random(seed)
    out: list[Recorded] = []
    i = 0
    while len(out) < n:
        t = i * 40
        e: Event
        if i % 30 == 7:
            e = DanmakuReceived(id=f"{run}-d{i}", run=run, t_ms=t, at_ms=t, text=f"hello number {i}", user="viewer")
        elif i % 7 == 3:
            pcm = rng.randbytes(11025)
            e = AudioChunk(id=f"{run}-a{i}", run=run, role="host", t_ms=t, at_ms=t, utterance=f"u{i // 50}",
                           seq=i % 50, sample_rate=22050, offset_ms=0, duration_ms=250, text="a sentence of speech",
                           phonemes=tuple(PhonemeMark("a", k * 50, k * 50 + 50) for k in range(5)), pcm=pcm)
        elif i % 7 == 5:
            e = VisemeTrack(id=f"{run}-v{i}", run=run, role="host", t_ms=t, at_ms=t, utterance=f"u{i // 50}",
                            audio=f"{run}-a{i - 2}", seq=i % 50, start_ms=t, end_ms=t + 250, text="a sentence",
                            visemes=tuple(VisemeMark("aa", t + k * 50, t + k * 50 + 50) for k in range(5)))
        else:
            e = FrameRendered(id=f"{run}-f{i}", run=run, t_ms=t, at_ms=t, n=i, width=1280, height=720,
                              resolution="720p", speaking=(SpeakingMark("host", "c1", "aa"),), jpeg=rng.randbytes(2048))
        out.append(Recorded(e, codec.encode(e), f"troupe.{run}.{e.type}", len(out) + 1,
                            {"Nats-Msg-Id": e.id}, "TROUPE_X", "recorder_x"))
        i += 1
    return out


def _pg_database() -> tuple[str, Callable[[], None]] | None:
    try:
        import psycopg

        name = f"troupe_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:  # noqa: BLE001 - no PostgreSQL here: the SQLite half still runs
        print(f"PostgreSQL not available ({str(exc).splitlines()[0]}): skipping it")
        return None

    def drop() -> None:
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return PG_ADMIN.rsplit("/", 1)[0] + f"/{name}", drop


def ingest(url: str, items: list[Recorded], repeats: int) -> dict[str, Any]:
    engine = open_engine(url)
    writer = EventWriter(engine, frames="digest")
    troupe, plain = [], []
    for r in range(repeats):
        for variant in (("troupe", "plain") if r % 2 == 0 else ("plain", "troupe")):
            run = f"b{r}{variant}"
            batch_items = [Recorded(_rerun(i.event, run), i.body, i.subject, i.stream_seq, i.headers, i.stream,
                                    i.consumer) for i in items]
            if variant == "troupe":
                t0 = time.perf_counter()
                for k in range(0, len(batch_items), BATCH):
                    writer.append(batch_items[k:k + BATCH])
                troupe.append(len(items) / (time.perf_counter() - t0))
            else:
                t0 = time.perf_counter()
                for k in range(0, len(batch_items), BATCH):
                    rows = [writer.row(item) for item in batch_items[k:k + BATCH]]
                    for n, row in enumerate(rows, start=k):
                        row["seq"] = n
                    plain_insert(engine, rows)
                plain.append(len(items) / (time.perf_counter() - t0))
    engine.dispose()
    return {"troupe_eps": median(troupe), "plain_eps": median(plain), "ratio": median(troupe) / median(plain),
            "troupe_runs": troupe, "plain_runs": plain}


def _rerun(e: Event, run: str) -> Event:
    import dataclasses

    return dataclasses.replace(e, id=f"{run}-{e.id}", run=run)


async def show_and_replay(show_s: float, repeats: int) -> dict[str, Any]:
    from app import playback, reexec
    from app.shows import load_show
    from app.supervisor import Stage, run_show
    from events.show import show_from_dict
    from infra.settings import load_settings

    doc = load_show().to_dict()
    questions = ("@host what game is next", "@rex how fast is your gpu", "@xiaolu 今天吃什么", "@host play a song")
    doc["script"] = [{"at": 1.0 + 3.0 * i, "user": f"v{i}", "text": f"{questions[i % 4]} #{i}"}
                     for i in range(int((show_s - 2) / 3))]
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(environ={}, state_dir=Path(tmp) / "state", out_dir=Path(tmp) / "out",
                                 metrics_port=-1, resolution="720p")
        lags: list[float] = []
        async with Stage(settings) as stage:
            stop = threading.Event()

            def sample() -> None:
                gauge = stage.metrics.recorder_lag
                while not stop.wait(0.1):
                    lags.append(gauge._value.get() * 1000)  # noqa: SLF001 - reading our own gauge

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            result = await run_show(stage, show_from_dict(doc), show_s)
            stop.set()
            sampler.join()
        engine = Stage(settings).engine
        verification = reexec.verify(engine, result.run, settings=settings)
        async with Stage(settings) as stage:  # NATS alone: nothing else competes with the publishing
            troupe_rates, raw_rates = [], []
            n_messages = 0
            for r in range(repeats):
                for variant in (("troupe", "raw") if r % 2 == 0 else ("raw", "troupe")):
                    messages = playback.prepare(engine, result.run, f"{result.run}-{variant}{r}")
                    n_messages = len(messages)
                    if variant == "troupe":
                        seconds = await playback.publish(stage.js, messages, None)
                        troupe_rates.append(len(messages) / seconds)
                    else:
                        t0 = time.perf_counter()
                        acks = [await stage.js.publish_async(m.subject, m.data, headers={"Nats-Msg-Id": m.msg_id})
                                for m in messages]
                        await asyncio.gather(*acks)
                        raw_rates.append(len(messages) / (time.perf_counter() - t0))
    v = verification.to_dict()
    return {
        "show_s": show_s, "run": result.run,
        "recorder_lag_ms": {"p50": pct(lags, 50), "p99": pct(lags, 99), "max": max(lags) if lags else None,
                            "samples": len(lags)},
        "playback": {"messages": n_messages, "troupe_eps": median(troupe_rates), "raw_eps": median(raw_rates),
                     "ratio": median(troupe_rates) / median(raw_rates), "troupe_runs": troupe_rates,
                     "raw_runs": raw_rates},
        "reexec": {"seconds": v["seconds"], "x_realtime": v["x_realtime"], "checked": v["checked"],
                   "divergences": v["divergences"]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--show-s", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    items = show_like_events("bench", args.events)
    size = sum(len(i.body) for i in items) / len(items)
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = ingest(f"sqlite:///{tmp}/bench.db", items, args.repeats)
    postgres = None
    pg = None if args.no_postgres else _pg_database()
    if pg is not None:
        url, drop = pg
        try:
            postgres = ingest(url, items, args.repeats)
        finally:
            drop()
    live = asyncio.run(show_and_replay(args.show_s, args.repeats))
    doc = {
        "machine": machine(), "events": args.events, "mean_event_bytes": round(size), "batch": BATCH,
        "repeats": args.repeats, "sqlite": sqlite, "postgres": postgres, **live,
    }
    m = doc["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['platform']}, Python {m['python']}")
    rows = [["SQLite", sqlite["troupe_eps"], sqlite["plain_eps"], sqlite["ratio"]]]
    if postgres:
        rows.append(["PostgreSQL", postgres["troupe_eps"], postgres["plain_eps"], postgres["ratio"]])
    print_table(f"recorder ingest, {args.events} show-like events (mean {size:.0f} B), batches of {BATCH}, "
                f"median of {args.repeats}", ["store", "recorder ev/s", "plain insert ev/s", "ratio (>= 0.8)"], rows)
    lag = live["recorder_lag_ms"]
    print(f"recorder lag during a {args.show_s:g} s 720p show: p50 {lag['p50']:.0f} ms, p99 {lag['p99']:.0f} ms, "
          f"max {lag['max']:.0f} ms")
    pb = live["playback"]
    print_table(f"playback of that run at --max ({pb['messages']} messages), median of {args.repeats}",
                ["variant", "events/s"], [["troupe replay", pb["troupe_eps"]], ["raw publish_async", pb["raw_eps"]]])
    rx = live["reexec"]
    print(f"playback ratio {pb['ratio']:.2f} (target >= 0.8); re-execution {rx['seconds']:.2f} s for "
          f"{args.show_s:g} s of show: {rx['x_realtime']}x real time (target >= 20x), {rx['divergences']} divergences")
    write_result("store", doc)
    if args.json:
        print(json.dumps({
            "sqlite_ratio": round(sqlite["ratio"], 3),
            "postgres_ratio": round(postgres["ratio"], 3) if postgres else None,
            "replay_ratio": round(pb["ratio"], 3), "reexec_x_realtime": rx["x_realtime"],
            "recorder_lag_p99_ms": lag["p99"],
        }))


if __name__ == "__main__":
    main()
