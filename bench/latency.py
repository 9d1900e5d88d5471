"""Interaction latency: danmaku publish -> first frame showing the reply's first non-silent viseme.

``python -m bench.latency [--json] [--count N] [--interval S] [--resolution R] [--split ACTORS]``

The show runs as it is deployed: by default the media sink and the recorder in
processes of their own (``troupe actor sink``, ``troupe actor recorder``) and every
other actor in this one, with an embedded nats-server, the SQLite store, the
scripted LLM and espeak; ``--split ""`` runs every actor in this one process, as
``troupe up`` does.  Danmaku are
published at a steady rate, spread over the roles, each one after the previous
reply has finished (replies are one sentence), so the stage is idle when it
arrives (the show's own speech is off: ``TROUPE_SELF_DRIVEN=off``).  Latencies come from the event store: the wall-clock emission time
(``at_ms``) of each event along the danmaku's correlation chain.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import select

from app.shows import load_show
from app.summary import first_speaking_frames, frame_lags
from app.supervisor import ACTOR_NAMES, Stage, run_show
from bench.common import machine, median, pct, print_table, write_result
from events.show import show_from_dict
from infra.settings import load_settings
from store.schema import events

HOPS = ("cue.issued", "utterance.chunk", "audio.chunk", "viseme.track")
QUESTIONS = (
    "@host what game is next", "@rex how fast is your gpu", "@xiaolu 今天吃什么",
    "@host play a song", "@rex explain neural networks", "@xiaolu 推荐旅行的地方",
)


def chains(engine: Any, run: str) -> list[dict[str, float]]:
    """Per danmaku: ms from its publish to the first event of each hop and to the first viseme frame."""
    first: dict[str, dict[str, int]] = {}
    received: dict[str, int] = {}
    idle: dict[str, bool] = {}
    query = select(events.c.type, events.c.id, events.c.correlation, events.c.at_ms, events.c.body).where(
        events.c.run == run, events.c.type.in_(["danmaku.received", *HOPS])
    )
    with engine.connect() as conn:
        for type_, id_, corr, at_ms, body in conn.execute(query):
            if type_ == "danmaku.received":
                received[id_] = at_ms
            elif corr:
                hops = first.setdefault(corr, {})
                hops[type_] = min(at_ms, hops.get(type_, at_ms))
                if type_ == "viseme.track":
                    doc = orjson.loads(body)
                    if doc["payload"]["seq"] == 0:
                        idle[corr] = doc["payload"]["start_ms"] - doc["t_ms"] <= 1
    for corr, at_ms in first_speaking_frames(engine, run).items():
        first.setdefault(corr, {})["frame"] = at_ms
    out = []
    for corr, t0 in received.items():
        hops = first.get(corr, {})
        if "frame" in hops:
            row = {k: float(v - t0) for k, v in hops.items()}
            row["idle"] = float(idle.get(corr, False))
            out.append(row)
    return out


async def spawn_actor(name: str, stage: Stage, settings: Any) -> asyncio.subprocess.Process:
    """Run one actor kind in its own process (``troupe actor NAME``) against this stage's NATS."""
    assert stage.embedded is not None
    env = {
        **os.environ, "TROUPE_NATS_URL": stage.embedded.url, "TROUPE_STATE_DIR": str(settings.state_dir),
        "TROUPE_OUT_DIR": str(settings.out_dir), "TROUPE_METRICS_PORT": "-1",
        "TROUPE_RESOLUTION": settings.resolution,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "actor", name, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    line = await asyncio.wait_for(proc.stderr.readline(), 60)
    if b"running" not in line:
        raise RuntimeError(f"actor {name} did not start: {line!r}")
    return proc


async def bench(
    count: int, interval_s: float, resolution: str, split: tuple[str, ...] = (), llm: str = "scripted",
    tts: str = "espeak",
) -> dict[str, Any]:
    doc = load_show().to_dict()
    rng = random.Random(42)  # comments do not arrive in step with the frame clock: jitter them
    doc["script"] = [
        {
            "at": round(1.0 + i * interval_s + rng.uniform(0, 0.2), 3), "user": f"viewer{i}",
            "text": f"{QUESTIONS[i % len(QUESTIONS)]} #{i}",
        }
        for i in range(count)
    ]
    show = show_from_dict(doc)
    duration = 1.0 + count * interval_s + 2.0
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            state_dir=Path(tmp) / "state", out_dir=Path(tmp) / "out", metrics_port=-1,
            resolution=resolution, llm_max_sentences=1, merge_window_ms=0, llm_backend=llm, tts_backend=tts,
            self_driven="off",  # an idle stage: the show does not speak by itself between the danmaku
        )
        async with Stage(settings) as stage:
            workers = [await spawn_actor(name, stage, settings) for name in split]
            try:
                local = [n for n in ACTOR_NAMES if n not in split]
                result = await run_show(stage, show, duration, local)
            finally:
                for worker in workers:
                    worker.terminate()
                    await worker.wait()
        engine = Stage(settings).engine
        rows = chains(engine, result.run)
        lateness = frame_lags(engine, result.run, result.started_at_ms)
    frame = [r["frame"] for r in rows]
    idle_rows = [r for r in rows if r["idle"]]
    hops = {h: median([r[h] for r in rows if h in r]) for h in HOPS}
    return {
        "machine": machine(), "count": count, "interval_s": interval_s, "resolution": resolution,
        "processes": ["+".join(n for n in ACTOR_NAMES if n not in split), *split],
        "answered": len(rows), "idle": len(idle_rows), "llm": llm, "tts": tts,
        # The target is over replies that found the stage idle; the rest waited for the floor.
        "p50_ms": pct([r["frame"] for r in idle_rows], 50),
        "p99_ms": pct([r["frame"] for r in idle_rows], 99),
        "all_p50_ms": pct(frame, 50), "all_p99_ms": pct(frame, 99), "max_ms": max(frame) if frame else None,
        "first_audio_p50_ms": pct([r["audio.chunk"] for r in rows], 50),
        "first_audio_p99_ms": pct([r["audio.chunk"] for r in rows], 99),
        "hop_median_ms": hops,
        "frame_publish_lateness_ms": {"p50": pct(lateness, 50), "p99": pct(lateness, 99)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--interval", type=float, default=4.0)
    parser.add_argument("--resolution", default="720p")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--llm", default="scripted", help="LLM backend (TROUPE_LLM_BACKEND)")
    parser.add_argument("--tts", default="espeak", help="TTS backend (TROUPE_TTS_BACKEND)")
    parser.add_argument("--result", help="the name of the results file (default: from the options)")
    parser.add_argument(
        "--split", default="sink,recorder",
        help="comma-separated actors to run in processes of their own (default sink,recorder; '' for none)",
    )
    args = parser.parse_args()
    split = tuple(n for n in args.split.split(",") if n)
    doc = asyncio.run(bench(args.count, args.interval, args.resolution, split, args.llm, args.tts))
    m = doc["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['platform']}, Python {m['python']}")
    print(f"{doc['answered']}/{args.count} danmaku answered on stage, {doc['idle']} found the stage idle; {args.resolution}; processes: {', '.join(doc['processes'])}; llm {args.llm}, tts {args.tts}")
    print_table(
        "median ms from danmaku publish to the first event of each hop",
        ["cue", "utterance", "audio", "visemes", "frame p50 (idle)", "frame p99 (idle)"],
        [[*(doc["hop_median_ms"][h] for h in HOPS), doc["p50_ms"], doc["p99_ms"]]],
    )
    print(
        f"danmaku -> first viseme frame, stage idle ({doc['idle']}): p50 {doc['p50_ms']:.0f} ms, "
        f"p99 {doc['p99_ms']:.0f} ms (target p99 <= 87 ms); all {doc['answered']} (some waited for "
        f"the floor): p50 {doc['all_p50_ms']:.0f} ms, p99 {doc['all_p99_ms']:.0f} ms"
    )
    models = "" if (args.llm, args.tts) == ("scripted", "espeak") else f"-{args.llm}-{args.tts}"
    write_result(args.result or ("latency" if split else "latency-one-process") + models, doc)
    if args.json:
        print(json.dumps({k: doc[k] for k in (
            "p50_ms", "p99_ms", "all_p50_ms", "all_p99_ms", "count", "answered", "idle",
            "first_audio_p50_ms", "first_audio_p99_ms", "processes", "llm", "tts",
        )}))


if __name__ == "__main__":
    main()
