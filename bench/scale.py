"""Many shows at once: how many concurrent shows one machine holds in real time.

``python -m bench.scale [--resolutions 720p,480p,360p] [--modes one,split] [--shows 1,2,3,4,6,8]
[--seconds 30] [--rate 0.5] [--json]``

For each resolution and way of running the actors, shows are started together on one
embedded nats-server and one SQLite store, ``k`` at a time for each ``k`` of ``--shows``
(stopping at the first ``k`` that does not hold).  The workers are shared: one runtime (or
process) per actor kind serves every show, as ``troupe up`` and compose run them.  Modes:

- ``one``: every actor in this process (``troupe up``);
- ``split``: every actor kind in a process of its own (``troupe actor NAME``, as compose
  deploys them), this process only publishing the shows' chats.

Each show gets the demo's roles and a generated live-room chat (``bench.chat``) at ``--rate``
comments a second, the self-driven stage on.  A ``k`` holds when, for every show, the frames
were drawn in real time (every frame of the show's length drawn, lateness p99 within the frame
budget, 40 ms at 25 fps) and every cue was answered: its reply completed, or dropped by the
stage's own decision (superseded, giving way to a gift), never for a deadline missed.
Measured per ``k``: the worst show's lateness p99, frames drawn / expected, cues answered,
CPU seconds per show-second (every process of the stage: this one, the workers, nats-server)
and resident memory per show (all those processes together, divided by ``k``).
Results go to bench/results/scale.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import psutil
from sqlalchemy import select

from app.shows import load_show
from app.summary import frame_lates
from app.supervisor import ACTOR_NAMES, Stage, run_show
from bench.chat import generate
from bench.common import machine, pct, print_table, write_result
from bench.latency import spawn_actor
from events.show import show_from_dict
from infra.settings import load_settings
from store.schema import events

FPS = 25


def frame_path(resolution: str, frames: int = 100) -> dict[str, float]:
    """Milliseconds per frame of each step a frame takes today (median of 3): drawn and
    JPEG-encoded by the render actor; JPEG-decoded (FFmpeg's mjpeg, to limited-range yuv420p)
    and H.264-encoded by the sink, as its MP4 writer does them."""
    from actors.backends.mp4 import Mp4Writer
    from actors.backends.render_torch import StageRenderer, encode_jpeg
    from bench.render import LOOKS, QUALITY, show_states, timed

    renderer = StageRenderer(LOOKS, resolution, seed=1)
    settings = load_settings()
    width, height = renderer.size
    script = [show_states(i) for i in range(frames)]
    for i, (states, line) in enumerate(script[:FPS]):
        renderer.draw(i * 40, states, line)

    def ms(fn: Any) -> float:
        return round(timed(fn, 3) * 1000 / frames, 2)

    images = [renderer.draw(i * 40, st, line) for i, (st, line) in enumerate(script)]
    jpegs = [encode_jpeg(im, QUALITY) for im in images]
    with tempfile.TemporaryDirectory() as tmp:

        def sink(decode_only: bool) -> None:
            with Mp4Writer(Path(tmp) / "f.mp4", width, height, FPS, 22050, preset=settings.video_preset,
                           threads=settings.video_threads) as writer:  # as the sink's
                for jpeg in jpegs:
                    if decode_only:
                        writer.to_frame(jpeg)  # the writer's own decode, alone
                    else:
                        writer.write_frame(jpeg)

        decode = ms(lambda: sink(True))
        return {
            "draw": ms(lambda: [renderer.draw(i * 40, st, line) for i, (st, line) in enumerate(script)]),
            "jpeg_encode": ms(lambda: [encode_jpeg(im, QUALITY) for im in images]),
            "jpeg_decode": decode,
            "h264_encode": round(ms(lambda: sink(False)) - decode, 2),
        }


def chat_show(seconds: float, rate: float, seed: int) -> Any:
    """The demo's roles with a generated live-room chat as the show's script."""
    doc = load_show().to_dict()
    doc["script"] = [
        {"at": round(x.at_s, 3), "user": x.user, "text": x.text, "kind": x.kind}
        for x in sorted(generate(rate, seconds, seed), key=lambda x: x.at_s) if x.at_s < seconds - 2
    ]
    return show_from_dict(doc)


class Tree:
    """CPU time and resident memory of this process and every process below it (workers,
    nats-server), sampled while the shows run."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.cpu: dict[int, float] = {}
        self.rss_peak = 0

    def _procs(self) -> list[psutil.Process]:
        return [self.me, *self.me.children(recursive=True)]

    def sample(self) -> None:
        rss = 0
        for p in self._procs():
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                self.cpu[p.pid] = t.user + t.system
                rss += p.memory_info().rss
        self.rss_peak = max(self.rss_peak, rss)

    def cpu_s(self) -> float:
        return sum(self.cpu.values())

    def by_process(self, since: dict[int, float], names: dict[int, str]) -> dict[str, float]:
        """CPU seconds since ``since`` (an earlier ``cpu``) per process, named by ``names``
        (the workers' actor kinds), else "stage" (this process) or the program's name."""
        out: dict[str, float] = {}
        for pid, cpu in self.cpu.items():
            name = names.get(pid) or ("stage" if pid == self.me.pid else _program(pid))
            out[name] = out.get(name, 0.0) + cpu - since.get(pid, 0.0)
        return out


def _program(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "gone"


def show_figures(engine: Any, run: str, seconds: float) -> dict[str, Any]:
    """One show from the store: its frames' lateness, frames drawn, cues and their ends."""
    drawn = frame_lates(engine, run)
    lateness = [late for _, late in drawn]
    expected = -(-int(seconds * 1000) * FPS // 1000)
    at = {t for t, _ in drawn}
    # When the frames nobody drew were due (show second -> how many): a start, or a stall.
    missing: dict[int, int] = {}
    for n in range(expected):
        if n * 1000 // FPS not in at:
            missing[n // FPS] = missing.get(n // FPS, 0) + 1
    with engine.connect() as conn:
        cues = {r.id for r in conn.execute(select(events.c.id).where(events.c.run == run, events.c.type == "cue.issued"))}
        done: set[str] = set()
        dropped: set[str] = set()
        late: set[str] = set()  # dropped because the machine was too slow (a deadline passed)
        for type_, body in conn.execute(select(events.c.type, events.c.body).where(
                events.c.run == run, events.c.type.in_(["utterance.completed", "utterance.dropped"]))):
            payload = orjson.loads(body)["payload"]
            (done if type_ == "utterance.completed" else dropped).add(payload["utterance"])
            if type_ == "utterance.dropped" and str(payload.get("reason", "")).startswith("deadline passed"):
                late.add(payload["utterance"])
    return {
        "frames": len(lateness), "expected": expected, "missing_by_second": missing,
        "late_p99_ms": round(pct(lateness, 99), 1) if lateness else None,
        # A reply written in full may still be dropped later (lipsync's deadline): dropped, not
        # answered.  Drops the stage decides (superseded, giving way to a gift) are not load.
        "cues": len(cues), "answered": len((cues & done) - dropped), "dropped": len(cues & dropped),
        "dropped_late": len(cues & late), "unended": len(cues - done - dropped),
    }


async def trial(resolution: str, mode: str, k: int, seconds: float, rate: float) -> dict[str, Any]:
    """``k`` shows at once; what held."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(state_dir=Path(tmp) / "state", out_dir=Path(tmp) / "out", metrics_port=-1,
                                 resolution=resolution, fps=FPS)
        tree = Tree()
        async with Stage(settings) as stage:
            workers = []
            try:
                if mode == "split":
                    workers = [await spawn_actor(name, stage, settings) for name in ACTOR_NAMES]
                else:
                    await stage.start_actors(ACTOR_NAMES)
                tree.sample()
                cpu0, t0, since = tree.cpu_s(), time.monotonic(), dict(tree.cpu)

                async def sampler() -> None:
                    while True:
                        await asyncio.sleep(2.0)
                        tree.sample()

                sampling = asyncio.create_task(sampler())
                try:
                    results = await asyncio.gather(*(
                        run_show(stage, chat_show(seconds, rate, seed=100 + i), seconds, names=(), drain_timeout_s=120)
                        for i in range(k)
                    ))
                finally:
                    sampling.cancel()
                tree.sample()
                cpu_s, wall_s = tree.cpu_s() - cpu0, time.monotonic() - t0
                by_process = tree.by_process(since, {w.pid: name for w, name in zip(workers, ACTOR_NAMES, strict=False)})
            finally:
                for w in workers:
                    w.terminate()
                    await w.wait()
        engine = Stage(settings).engine
        shows = [show_figures(engine, r.run, seconds) for r in results]
        engine.dispose()
    budget = 1000 / FPS
    held = all(
        s["frames"] == s["expected"] and s["late_p99_ms"] is not None and s["late_p99_ms"] <= budget
        and s["unended"] == 0 and s["dropped_late"] == 0
        for s in shows
    )
    worst = max((s["late_p99_ms"] or 0.0) for s in shows)
    return {
        "resolution": resolution, "mode": mode, "shows": k, "held": held, "seconds": seconds,
        "worst_late_p99_ms": worst, "budget_ms": budget,
        "frames": [f"{s['frames']}/{s['expected']}" for s in shows],
        "cues": sum(s["cues"] for s in shows), "answered": sum(s["answered"] for s in shows),
        "dropped": sum(s["dropped"] for s in shows), "dropped_late": sum(s["dropped_late"] for s in shows),
        "unended": sum(s["unended"] for s in shows),
        "cpu_s_per_show_s": round(cpu_s / (k * seconds), 3), "cpu_busy": round(cpu_s / wall_s / psutil.cpu_count(), 2),
        "cpu_s_per_show_s_by_process": {n: round(c / (k * seconds), 3) for n, c in sorted(by_process.items(), key=lambda x: -x[1])},
        "rss_mb_per_show": round(tree.rss_peak / 2**20 / k, 1), "rss_mb": round(tree.rss_peak / 2**20, 1),
        "per_show": shows,
    }


async def bench(resolutions: list[str], modes: list[str], ladder: list[int], seconds: float, rate: float) -> dict[str, Any]:
    trials = []
    held: dict[str, dict[str, int]] = {}
    for resolution in resolutions:
        for mode in modes:
            best = 0
            for k in ladder:
                t = await trial(resolution, mode, k, seconds, rate)
                trials.append(t)
                print(f"{resolution} {mode} {k} shows: {'held' if t['held'] else 'did not hold'} "
                      f"(worst lateness p99 {t['worst_late_p99_ms']} ms, frames {t['frames']}, "
                      f"cues {t['answered']}/{t['cues']} answered, {t['dropped']} dropped ({t['dropped_late']} late), "
                      f"CPU {t['cpu_s_per_show_s']} s per show-second {t['cpu_s_per_show_s_by_process']}; "
                      f"frames missing by show second "
                      f"{[s['missing_by_second'] for s in t['per_show']]})", file=sys.stderr, flush=True)
                if not t["held"]:
                    break
                best = k
            held.setdefault(resolution, {})[mode] = best
    costs = {resolution: frame_path(resolution) for resolution in resolutions}
    return {"machine": machine(), "seconds": seconds, "rate": rate, "fps": FPS, "ladder": ladder,
            "video_preset": load_settings().video_preset, "video_threads": load_settings().video_threads,
            "held": held, "frame_path_ms": costs, "trials": trials}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolutions", default="720p,480p,360p")
    parser.add_argument("--modes", default="one,split")
    parser.add_argument("--shows", default="1,2,3,4,6,8", help="the numbers of concurrent shows tried, in order")
    parser.add_argument("--seconds", type=float, default=30.0, help="each show's length")
    parser.add_argument("--rate", type=float, default=0.5, help="comments a second in each show")
    parser.add_argument("--preset", default=None, help="the sinks' x264 preset (TROUPE_VIDEO_PRESET; default: the setting's)")
    parser.add_argument("--result", default="scale")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.preset:  # the stage's settings and the split workers' environment both read it
        os.environ["TROUPE_VIDEO_PRESET"] = args.preset
    doc = asyncio.run(bench(args.resolutions.split(","), args.modes.split(","),
                            [int(k) for k in args.shows.split(",")], args.seconds, args.rate))
    rows = [[t["resolution"], t["mode"], t["shows"], "yes" if t["held"] else "no", t["worst_late_p99_ms"],
             " ".join(t["frames"]), f"{t['answered']}/{t['cues']} ({t['dropped_late']} late)", t["cpu_s_per_show_s"], t["rss_mb_per_show"]]
            for t in doc["trials"]]
    print_table(f"concurrent shows, {args.seconds:g} s each, {args.rate:g} comments/s each ({doc['machine']['cpu']})",
                ["resolution", "mode", "shows", "held", "worst late p99 ms", "frames", "cues answered",
                 "CPU s / show-s", "RSS MB / show"], rows)
    print_table("milliseconds per frame, each step of a frame's path (median of 3)",
                ["resolution", "draw", "JPEG encode", "JPEG decode", "H.264 encode", "JPEG share"],
                [[r, c["draw"], c["jpeg_encode"], c["jpeg_decode"], c["h264_encode"],
                  f"{(c['jpeg_encode'] + c['jpeg_decode']) / sum(c.values()):.0%}"]
                 for r, c in doc["frame_path_ms"].items()])
    print("most shows held: " + "; ".join(f"{r} " + ", ".join(f"{m} {n}" for m, n in v.items())
                                          for r, v in doc["held"].items()))
    write_result(args.result, doc)
    if args.json:
        print(json.dumps({k: v for k, v in doc.items() if k != "trials"} | {
            "trials": [{k: v for k, v in t.items() if k != "per_show"} for t in doc["trials"]]}))


if __name__ == "__main__":
    main()
