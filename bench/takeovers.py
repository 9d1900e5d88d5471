"""Twenty takeovers in one show, then ``troupe replay --verify``: the director, lipsync, render
and the sink each run in a process of their own with a standby waiting; one after another, the
process running a kind gets ``kill -9``, its standby takes the show over, and a fresh standby
starts for it.  When the show is over, the run is re-executed and compared with what was
recorded, event by event and frame by frame.

``python -m bench.takeovers [--takeovers 20] [--seconds 150] [--rate 1] [--json]``

Run it with the cores kept busy (``../shared/tools/busy SECONDS 2 -- python -m bench.takeovers``):
a takeover under load is where the handling times of a rebuilt actor and the live one could
part.  Measured: the takeovers done (each kind's count), seconds from each kill to its standby
running (median, max), the frames missing, each event stored once, one outcome per danmaku,
and the divergences of the re-execution (the target is 0).  Results go to
bench/results/takeovers.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from app.reexec import format_verification, verify
from app.summary import danmaku_outcomes
from app.supervisor import ACTOR_NAMES, Stage, run_show
from bench.common import machine, print_table, write_result
from bench.scale import chat_show
from bench.standby import Worker
from events.frame import FrameRendered
from infra.natsserver import EmbeddedNats
from infra.settings import Settings, load_settings
from store.recorder import read_events

KINDS = ("director", "lipsync", "render", "sink")
FIRST_KILL_S = 8.0   # the show under way, every kind's state worth rebuilding
LAST_KILL_S = 15.0   # before the end: the last standby has time to take the show over


class Kind:
    """One kind's processes: the one running it and the one standing by."""

    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name, self.env = name, env
        self.running: Worker | None = None
        self.standby: Worker | None = None
        self.took_s: list[float] = []
        self.spare: asyncio.Task[Worker] | None = None

    async def start(self) -> None:
        self.running = await Worker.start(self.name, self.env, "running")
        self.standby = await Worker.start(self.name, self.env, "standing by")

    def ready(self) -> bool:
        """A standby waits (a fresh one has said so) and the one running has not been killed."""
        if self.spare is not None and self.spare.done():
            self.standby, self.spare = self.spare.result(), None
        return self.standby is not None and self.spare is None and self.running is not None

    async def kill(self) -> None:
        """``kill -9`` of the process running the kind; its standby takes over (timed), and a
        fresh standby starts beside it."""
        assert self.running is not None and self.standby is not None
        killed = time.time()
        self.running.proc.send_signal(signal.SIGKILL)
        await self.running.proc.wait()
        dead, self.running, self.standby = self.running, self.standby, None
        await dead.stop()
        seen = len([1 for _, line in self.running.lines if "running" in line])
        took = await _said_again(self.running, "running", seen, 90.0)
        self.took_s.append(round(took - killed, 2))
        self.spare = asyncio.create_task(Worker.start(self.name, self.env, "standing by", timeout_s=120.0))

    async def stop(self) -> None:
        if self.spare is not None:
            with_spare = await asyncio.gather(self.spare, return_exceptions=True)
            if isinstance(with_spare[0], Worker):
                await with_spare[0].stop()
        for worker in (self.running, self.standby):
            if worker is not None:
                await worker.stop()


async def _said_again(worker: Worker, text: str, seen: int, timeout_s: float) -> float:
    """When ``worker`` printed its ``seen + 1``-th line with ``text``."""
    deadline = time.monotonic() + timeout_s
    while True:
        said = [t for t, line in worker.lines if text in line]
        if len(said) > seen:
            return said[seen]
        if worker.proc.returncode is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the standby {text!r} did not come:\n{worker.log()}")
        await asyncio.sleep(0.05)


async def takeovers(nats_url: str, settings: Settings, tmp: Path, run: str, count: int, seconds: float,
                    rate: float) -> dict[str, Any]:
    env = {
        **os.environ, "TROUPE_NATS_URL": nats_url, "TROUPE_STATE_DIR": str(tmp / "workers"),
        "TROUPE_OUT_DIR": str(settings.out_dir), "TROUPE_METRICS_PORT": "-1",
        "TROUPE_LEASE_TTL_S": str(settings.lease_ttl_s), "TROUPE_RESOLUTION": settings.resolution,
    }
    kinds = {name: Kind(name, env) for name in KINDS}
    done: list[tuple[float, str]] = []
    try:
        await asyncio.gather(*(k.start() for k in kinds.values()))
        async with Stage(settings) as stage:
            show = asyncio.create_task(run_show(stage, chat_show(seconds, rate, seed=11), seconds,
                                                [n for n in ACTOR_NAMES if n not in KINDS], run_id=run))
            began = time.monotonic()
            # Kill after kill, the kinds in turn (one whose fresh standby is not up yet lets the
            # next go first), a kill every ``gap`` seconds from FIRST_KILL_S to LAST_KILL_S before the end.
            gap = max(1.0, (seconds - FIRST_KILL_S - LAST_KILL_S) / max(1, count))
            slot, turn = FIRST_KILL_S, 0
            while len(done) < count and not show.done():
                at = time.monotonic() - began
                if at > seconds - LAST_KILL_S:
                    break
                ready = [kinds[KINDS[(turn + i) % len(KINDS)]] for i in range(len(KINDS))]
                ready = [k for k in ready if k.ready()]
                if at < slot or not ready:
                    await asyncio.sleep(0.1)
                    continue
                kind = ready[0]
                await kind.kill()
                done.append((round(at, 1), kind.name))
                print(f"takeover {len(done)}: {kind.name} at {at:.1f} s, its standby running after "
                      f"{kind.took_s[-1]} s", file=sys.stderr, flush=True)
                turn, slot = KINDS.index(kind.name) + 1, at + gap
            result = await show
            load = os.getloadavg()[0]  # the machine's load as the show ended (busy: above 2 on 2 cores)
    finally:
        await asyncio.gather(*(k.stop() for k in kinds.values()))
    engine = Stage(settings).engine
    events = list(read_events(engine, run))
    ids = Counter(e.id for e in events)
    frames = {e.n for e in events if isinstance(e, FrameRendered)}
    outcomes = danmaku_outcomes(engine, run)
    t0 = time.perf_counter()
    checked = verify(engine, run)
    verify_s = time.perf_counter() - t0
    print(format_verification(checked), file=sys.stderr)
    engine.dispose()
    took = [t for k in kinds.values() for t in k.took_s]
    expected = int(seconds * settings.fps)
    return {
        "takeovers": len(done), "kills": done, "per_kind": {k.name: len(k.took_s) for k in kinds.values()},
        "took_s_median": statistics.median(took) if took else None, "took_s_max": max(took, default=None),
        "frames": len(frames), "expected_frames": expected, "stored_twice": sum(1 for n in ids.values() if n > 1),
        "danmaku": outcomes["received"], "no_outcome": outcomes["none"], "two_outcomes": outcomes["twice"],
        "divergence": checked.to_dict()["first_divergence"],
        "checked": dict(checked.checked), "verify_s": round(verify_s, 1),
        "mp4": str(result.mp4) if result.mp4 is not None else None, "load": round(load, 1),
    }


async def bench(count: int, seconds: float, rate: float, keep: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() if keep is None else contextlib.nullcontext(str(keep)) as tmp:
        server = EmbeddedNats(Path(tmp) / "nats")
        await server.start()
        try:
            settings = load_settings(nats_url=server.url, state_dir=Path(tmp) / "state", out_dir=Path(tmp) / "out",
                                     metrics_port=-1, lease_ttl_s=1.5, resolution="360p")
            r = await takeovers(server.url, settings, Path(tmp), "takeovers", count, seconds, rate)
        finally:
            await server.stop()
    return {"machine": machine(), "seconds": seconds, "rate": rate, **r}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--takeovers", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--rate", type=float, default=1.0, help="comments a second")
    parser.add_argument("--keep", type=Path, help="a folder to keep the store, the videos and the workers' state in")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    doc = asyncio.run(bench(args.takeovers, args.seconds, args.rate, args.keep))
    print_table(f"{doc['takeovers']} takeovers in one {args.seconds:.0f} s show, then --verify ({doc['machine']['cpu']})",
                ["takeovers (director/lipsync/render/sink)", "standby running after s (median, max)", "frames",
                 "stored twice", "danmaku without / with two outcomes", "re-executed (checked)", "divergences"],
                [[f"{doc['takeovers']} ({'/'.join(str(doc['per_kind'][k]) for k in KINDS)})",
                  f"{doc['took_s_median']}, {doc['took_s_max']}", f"{doc['frames']}/{doc['expected_frames']}",
                  doc["stored_twice"], f"{doc['no_outcome']} / {doc['two_outcomes']}",
                  ", ".join(f"{k} {v}" for k, v in doc["checked"].items()),
                  0 if doc["divergence"] is None else f"1: {doc['divergence']['actor']} {doc['divergence']['type']}"]])
    write_result("takeovers", doc)
    if args.json:
        print(json.dumps(doc))


if __name__ == "__main__":
    main()
