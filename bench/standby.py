"""A standby taking over: how long a show goes without its director, lip-sync or renderer
when the process running one is killed (``kill -9``) and another stands by.

``python -m bench.standby [--kinds director,lipsync,render] [--seconds 20] [--rate 2] [--json]``

For each kind: an embedded nats-server; ``troupe actor KIND`` in a process of its own and a
second one standing by; the rest of the show in this process (every other actor, the store),
a generated live-room chat at ``--rate`` comments a second and the self-driven stage.  Once
the show is half over and the killed kind has published enough (a few cues, tracks, or three
seconds of frames), its process gets SIGKILL.  Measured: seconds from the kill to the standby running the kind (the
lease lapsing, then the state rebuilt), to the kind's next stored output, the frames missing
and the latest frame, and the show's checks (one outcome per danmaku, each event stored
once).  Results go to bench/results/standby.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import av

from app.summary import danmaku_outcomes, frame_lates
from app.supervisor import ACTOR_NAMES, Stage, run_show
from bench.common import machine, print_table, write_result
from bench.scale import chat_show
from events.base import Event
from events.frame import FrameRendered
from events.run import RunStarted
from events.subjects import PREFIX, stream_name
from infra.bus import read_stream
from infra.natsserver import EmbeddedNats
from infra.settings import Settings, load_settings
from store.recorder import read_events

# How much of a family is stored before the process running a kind is killed, and the family
# its next output is looked for in (the sink's: its live output connecting again).
KILL_AFTER = {"director": ("cue", 6), "lipsync": ("viseme", 6), "render": ("frame", 75), "sink": ("frame", 75)}
NEXT_OUTPUT = {"director": "cue", "lipsync": "viseme", "render": "frame", "sink": "output"}


class Worker:
    """``troupe actor NAME`` in its own process; its stderr lines kept with the time each came."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[tuple[float, str]] = []
        self._reading = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, name: str, env: dict[str, str], expect: str, timeout_s: float = 60.0) -> Worker:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app.cli", "actor", name, env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        worker = cls(proc)
        await worker.wait_said(expect, timeout_s)
        return worker

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.lines.append((time.time(), line.decode(errors="replace").rstrip()))

    def said(self, text: str) -> float | None:
        """When the process first printed a line with ``text`` (None: not yet)."""
        return next((t for t, line in self.lines if text in line), None)

    async def wait_said(self, text: str, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while (at := self.said(text)) is None:
            if self.proc.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not say {text!r}:\n{self.log()}")
            await asyncio.sleep(0.05)
        return at

    def log(self) -> str:
        return "\n".join(line for _, line in self.lines[-40:])

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.terminate()
            await self.proc.wait()
        await self._reading


async def _count(stage: Stage, family: str, run: str) -> int:
    info = await stage.js.stream_info(stream_name(family), subjects_filter=f"{PREFIX}.{run}.>")
    return sum((info.state.subjects or {}).values()) if info.state is not None else 0


async def _first_after(stage: Stage, family: str, run: str, after_s: float) -> float | None:
    """When the first message of the run's family was stored after ``after_s`` (wall clock)."""
    msgs = await read_stream(stage.js, stream_name(family), [f"{PREFIX}.{run}.>"])
    return next((m.time_us / 1e6 for m in msgs if m.time_us / 1e6 > after_s), None)


async def takeover(kind: str, nats_url: str, settings: Settings, tmp: Path, run: str, seconds: float = 20.0,
                   rate: float = 2.0) -> dict[str, Any]:
    """One show whose ``kind`` is killed mid-show with a standby waiting; its figures (``events``:
    everything the store holds of the run)."""
    env = {
        **os.environ, "TROUPE_NATS_URL": nats_url, "TROUPE_STATE_DIR": str(tmp / kind),
        "TROUPE_OUT_DIR": str(settings.out_dir), "TROUPE_METRICS_PORT": "-1",
        "TROUPE_ACK_WAIT_S": str(settings.ack_wait_s), "TROUPE_LEASE_TTL_S": str(settings.lease_ttl_s),
        "TROUPE_RESOLUTION": settings.resolution,
    }
    if kind == "sink":  # a live output, to see it carried on
        env["TROUPE_HLS_DIR"] = str(tmp / "hls")
    family, enough = KILL_AFTER[kind]
    first = await Worker.start(kind, env, "running")
    standby = await Worker.start(kind, env, "standing by")
    try:
        async with Stage(settings) as stage:
            show = asyncio.create_task(run_show(stage, chat_show(seconds, rate, seed=7), seconds,
                                                [n for n in ACTOR_NAMES if n != kind], run_id=run))
            began = time.monotonic()
            while await _count(stage, family, run) < enough or time.monotonic() - began < seconds / 2:
                if show.done():
                    raise RuntimeError(f"the show ended before {enough} {family} events")
                await asyncio.sleep(0.05)
            first.proc.send_signal(signal.SIGKILL)
            killed = time.time()
            await first.proc.wait()
            running = await standby.wait_said("running", 60.0)
            result = await show
            next_output = await _first_after(stage, NEXT_OUTPUT[kind], run, killed)
    finally:
        await first.stop()
        await standby.stop()
    engine = Stage(settings).engine
    events: list[Event] = list(read_events(engine, run))
    started = next(e for e in events if isinstance(e, RunStarted))
    killed_frame = int((killed * 1000 - started.started_at_ms) * settings.fps / 1000)
    ids = Counter(e.id for e in events)
    numbers = sorted(e.n for e in events if isinstance(e, FrameRendered))
    expected = int(seconds * settings.fps)
    lates = [late for _, late in frame_lates(engine, run)]
    outcomes = danmaku_outcomes(engine, run)
    engine.dispose()
    return {
        "kind": kind, "took_s": round(running - killed, 2),
        "next_output_s": None if next_output is None else round(next_output - killed, 2),
        "rebuilt": next((line for _, line in standby.lines if "took over" in line), ""),
        "frames": len(numbers), "expected_frames": expected, "missing_frames": expected - len(set(numbers)),
        "missing": sorted(set(range(expected)) - set(numbers))[:20],
        # frames nobody drew from a second before the kill on (the takeover's; not a skip at the start)
        "missing_at_kill": len(set(range(max(0, killed_frame - settings.fps), expected)) - set(numbers)),
        "latest_frame_ms": round(max(lates), 1) if lates else None,
        "stored_twice": sum(1 for n in ids.values() if n > 1),
        "danmaku": outcomes["received"], "no_outcome": outcomes["none"], "two_outcomes": outcomes["twice"],
        "mp4": str(result.mp4) if result.mp4 is not None else None, "events": events,
        **_videos(Path(settings.out_dir), tmp / "hls" / run / "index.m3u8", run),
    }


def _videos(out: Path, playlist: Path, run: str) -> dict[str, Any]:
    """The video a sink that took over wrote (its frames), and the live playlist's discontinuities."""
    resumed = sorted(out.glob(f"{run}.from-*.mp4"))
    frames = None
    if resumed:
        with av.open(str(resumed[0])) as video:
            frames = sum(1 for _ in video.decode(video=0))
    return {
        "resumed_mp4": str(resumed[0]) if resumed else None, "resumed_frames": frames,
        "hls_discontinuities": playlist.read_text().count("#EXT-X-DISCONTINUITY") if playlist.exists() else None,
    }


async def bench(kinds: list[str], seconds: float, rate: float) -> dict[str, Any]:
    results = []
    for kind in kinds:
        with tempfile.TemporaryDirectory() as tmp:
            server = EmbeddedNats(Path(tmp) / "nats")
            await server.start()
            try:
                settings = load_settings(nats_url=server.url, state_dir=Path(tmp) / "state", out_dir=Path(tmp) / "out",
                                         metrics_port=-1)
                r = await takeover(kind, server.url, settings, Path(tmp), f"standby-{kind}", seconds, rate)
            finally:
                await server.stop()
        r.pop("events")
        print(f"{kind}: taken over {r['took_s']} s after kill -9, next output after {r['next_output_s']} s",
              file=sys.stderr, flush=True)
        results.append(r)
    return {"machine": machine(), "seconds": seconds, "rate": rate, "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="director,lipsync,render,sink")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=2.0, help="comments a second")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    doc = asyncio.run(bench(args.kinds.split(","), args.seconds, args.rate))
    print_table(f"kill -9 of the process running each, a standby waiting ({doc['machine']['cpu']})",
                ["kind", "standby running after s", "next output after s", "frames", "latest frame ms",
                 "stored twice", "danmaku without / with two outcomes", "video after the takeover"],
                [[r["kind"], r["took_s"], r["next_output_s"], f"{r['frames']}/{r['expected_frames']}",
                  r["latest_frame_ms"], r["stored_twice"], f"{r['no_outcome']} / {r['two_outcomes']}",
                  f"{Path(r['resumed_mp4']).name}: {r['resumed_frames']} frames" if r["resumed_mp4"] else ""]
                 for r in doc["results"]])
    write_result("standby", doc)
    if args.json:
        print(json.dumps(doc))


if __name__ == "__main__":
    main()
