"""Hours on air: one long show, comments from several producers, the self-driven stage on.

``python -m bench.soak --minutes 30 [--rate 5] [--producers 4] [--resolution 720p] [--json]``

Every actor runs in this process, as ``troupe up`` runs them, on an embedded nats-server of the
benchmark's own.  ``--producers`` plain nats-py connections publish the generated chat of
``bench.chat`` (bursts, gifts, addressed comments, repeats) at ``--rate`` comments a second
between them.  Sampled every 5 s: this process's resident memory, the JetStream folder and the
store file.  From the store afterwards: frame lateness p99 per minute, every comment's one
outcome, every cue's reply spoken or dropped with its reason.

Reported: memory after warm-up (the first fifth of the show, at least 30 s) against its end and
its peak, lateness p99 per minute against the frame budget, the store's and JetStream's growth
per hour of show, and the streams' limits that bound JetStream's disk.  Results go to
bench/results/soak-<minutes>m.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import select

from app.shows import load_show
from app.summary import danmaku_outcomes, frame_lates
from app.supervisor import Stage, run_show
from bench.chat import generate
from bench.common import machine, pct, print_table, write_result
from events.danmaku import DanmakuReceived
from events.run import RunStarted
from events.show import show_from_dict
from events.subjects import stream_specs
from infra.bus import connect, publish_events
from infra.settings import load_settings
from store.schema import events

SAMPLE_S = 5.0


def rss_bytes() -> int:
    """This process's resident memory."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def folder_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a file removed as it was listed
                total += (Path(root) / name).stat().st_size
    return total


async def produce(url: str, run: RunStarted, lines: list[Any], who: int) -> int:
    """One producer: its share of the chat, each comment at its show time."""
    nc = await connect(url, f"soak-producer-{who}")
    js = nc.jetstream()
    sent = 0
    try:
        for i, line in lines:
            delay = run.started_at_ms / 1000 + line.at_s - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await publish_events(js, [DanmakuReceived(
                id=f"{run.run}-p{who}-{i}", run=run.run, user=line.user, text=line.text, kind=line.kind,
                t_ms=int(line.at_s * 1000), at_ms=int(time.time() * 1000),
            )])
            sent += 1
    finally:
        await nc.close()
    return sent


async def soak(minutes: float, rate: float, producers: int, resolution: str, seed: int = 11,
               root: Path | None = None) -> dict[str, Any]:
    duration_s = minutes * 60
    lines = [x for x in generate(rate, duration_s, seed) if x.at_s < duration_s - 2]
    shares = [[(i, x) for i, x in enumerate(lines) if i % producers == p] for p in range(producers)]
    show_doc = load_show().to_dict()
    show_doc["script"] = []
    show = show_from_dict(show_doc)
    with tempfile.TemporaryDirectory() as tmp:
        base = root or Path(tmp)
        settings = load_settings(state_dir=base / "state", out_dir=base / "out", metrics_port=-1,
                                 resolution=resolution)
        samples: list[dict[str, float]] = []
        tasks: list[asyncio.Task[int]] = []
        async with Stage(settings) as stage:
            assert stage.embedded is not None
            url = stage.embedded.url
            db = Path(settings.state_dir) / "troupe.db"
            nats_dir = Path(settings.state_dir) / "nats"
            t0 = time.monotonic()

            def measure_now() -> dict[str, float]:
                store = sum(p.stat().st_size for p in db.parent.glob("troupe.db*") if p.is_file())
                return {"t_s": round(time.monotonic() - t0, 1), "rss": rss_bytes(),
                        "jetstream": folder_bytes(nats_dir), "store": store}

            async def sample() -> None:
                while True:
                    samples.append(measure_now())
                    await asyncio.sleep(SAMPLE_S)

            def started(run: RunStarted) -> None:
                loop = asyncio.get_running_loop()
                tasks.extend(loop.create_task(produce(url, run, share, p)) for p, share in enumerate(shares))

            sampler = asyncio.create_task(sample())
            try:
                result = await run_show(stage, show, duration_s, drain_timeout_s=300, on_started=started)
                sent = sum(await asyncio.gather(*tasks))
            finally:
                sampler.cancel()
            samples.append(measure_now())
        engine = Stage(settings).engine
        doc = figures(engine, result.run, samples, duration_s, settings.fps)
        doc.update({"minutes": minutes, "rate": rate, "producers": producers, "resolution": resolution,
                    "sent": sent, "run": result.run, "machine": machine()})
        engine.dispose()
    return doc


def figures(engine: Any, run: str, samples: list[dict[str, float]], duration_s: float, fps: int) -> dict[str, Any]:
    """What held over the show: memory, lateness per minute, outcomes, growth."""
    lates = frame_lates(engine, run)
    frames = len(lates)
    late_by_minute: dict[int, list[float]] = {}
    for t_ms, late in lates:
        late_by_minute.setdefault(int(t_ms // 60000), []).append(late)
    with engine.connect() as conn:
        cues = {r.id for r in conn.execute(select(events.c.id).where(events.c.run == run,
                                                                        events.c.type == "cue.issued"))}
        ends = {orjson.loads(body)["payload"]["utterance"]
                for (body,) in conn.execute(select(events.c.body).where(
                    events.c.run == run, events.c.type.in_(["utterance.completed", "utterance.dropped"])))}
    warm_s = max(30.0, duration_s / 5)
    after = [s for s in samples if s["t_s"] >= warm_s] or samples
    warm = after[0]
    end = samples[-1]
    hours = max(1e-9, (end["t_s"] - warm["t_s"]) / 3600)
    outcomes = danmaku_outcomes(engine, run)
    return {
        "frames": {"expected": -(-int(duration_s * 1000) * fps // 1000), "drawn": frames},
        "lateness_p99_ms_by_minute": {m: round(pct(v, 99), 1) for m, v in sorted(late_by_minute.items())},
        "lateness_budget_ms": 1000 / fps,
        "memory": {"warm_mb": round(warm["rss"] / 2**20, 1), "end_mb": round(end["rss"] / 2**20, 1),
                   "peak_after_warm_mb": round(max(s["rss"] for s in after) / 2**20, 1),
                   "growth": round(end["rss"] / warm["rss"] - 1, 3) if warm["rss"] else None},
        "store_mb_per_hour": round((end["store"] - warm["store"]) / 2**20 / hours, 1),
        "jetstream_mb_per_hour": round((end["jetstream"] - warm["jetstream"]) / 2**20 / hours, 1),
        "jetstream_end_mb": round(end["jetstream"] / 2**20, 1),
        "stream_limits": {s.name: {"max_age_h": round(s.max_age_s / 3600, 2), "max_gib": round(s.max_bytes / 2**30, 1)}
                          for s in stream_specs()},
        "cues": len(cues), "cues_without_an_end": len(cues - ends),
        "danmaku": {k: outcomes[k] for k in ("received", "answered", "merged", "skipped", "rejected", "none", "twice")},
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=5.0, help="comments a second, all producers together")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--resolution", default="720p")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    doc = asyncio.run(soak(args.minutes, args.rate, args.producers, args.resolution))
    path = write_result(f"soak-{args.minutes:g}m", doc)
    mem = doc["memory"]
    late = doc["lateness_p99_ms_by_minute"]
    print(f"machine: {doc['machine']['cpu']}, {doc['machine']['cores']} cores")
    print_table(
        f"bench.soak: {args.minutes:g} min at {args.rate:g} comments/s from {args.producers} producers, {args.resolution}",
        ["what", "value"],
        [["memory after warm-up / end / peak (MB)", f"{mem['warm_mb']} / {mem['end_mb']} / {mem['peak_after_warm_mb']}"],
         ["memory growth after warm-up", f"{mem['growth']:.1%}"],
         ["frame lateness p99, worst minute (ms)", f"{max(late.values()):.1f} (budget {doc['lateness_budget_ms']:.0f})"],
         ["frames drawn / due", f"{doc['frames']['drawn']} / {doc['frames']['expected']}"],
         ["comments sent / received / answered", f"{doc['sent']} / {doc['danmaku']['received']} / {doc['danmaku']['answered']}"],
         ["comments without an outcome / with two", f"{doc['danmaku']['none']} / {doc['danmaku']['twice']}"],
         ["cues / without a reply's end", f"{doc['cues']} / {doc['cues_without_an_end']}"],
         ["store growth (MB per hour of show)", doc["store_mb_per_hour"]],
         ["JetStream growth (MB per hour) / at the end (MB)", f"{doc['jetstream_mb_per_hour']} / {doc['jetstream_end_mb']}"]])
    print(f"results: {path}")
    if args.json:
        print(json.dumps({k: v for k, v in doc.items() if k != "samples"}))


if __name__ == "__main__":
    main()
