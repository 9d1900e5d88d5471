"""Shows spread over machines: several processes of each stateful kind share the runs on air.

``python -m bench.spread [--shows 6] [--seconds 40] [--resolution 360p] [--json]``

An embedded nats-server; with ``TROUPE_SPREAD=on``, two processes each of the director,
lipsync, render and sink (``troupe actor KIND``), one each of llm, tts, qos and the recorder;
``--shows`` shows started together in this process (the demo's roles, a generated chat), each
its own run on air.  Measured:

- placed: how many runs each process holds once every show is on air (the target: 2 to 4 of 6);
- killed: one render process gets SIGKILL a third into the shows: for each of its runs, the
  seconds from the kill to the run's next stored frame and the frames missing from the run; for
  the other runs, the frames missing;
- joined: a third render process starts, then one more show: which process holds it.

Results go to bench/results/spread.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from actors.runtime.owners import OWN, key_value, own_key
from app.supervisor import Stage, run_show
from bench.common import machine, print_table, write_result
from bench.scale import chat_show
from bench.standby import Worker
from events import codec
from events.frame import FrameRendered
from events.subjects import PREFIX, stream_name
from infra.bus import read_stream
from infra.lease import holder_of, keys_under, lease_bucket
from infra.natsserver import EmbeddedNats
from infra.settings import Settings, load_settings

SPREAD = ("director", "lipsync", "render", "sink")
SHARED = ("llm", "tts", "qos", "recorder")
TTL_S = 0.6  # the run keys' lease time: a dead holder's runs are free this long after its last renewal


async def holders(stage: Stage, kind: str) -> dict[str, str]:
    """Run -> the process holding it for a kind, from the lease bucket."""
    kv = await lease_bucket(stage.js, TTL_S)
    out = {}
    for run in await keys_under(stage.js, f"{OWN}.{kind}"):
        value = await key_value(kv, own_key(kind, run))
        if value:  # None: deleted or expired, held by nobody now
            out[run] = holder_of(value)
    return out


async def frames(stage: Stage, run: str) -> list[tuple[float, int]]:
    """(stored at, n) of each of the run's stored frames, in stream order."""
    msgs = await read_stream(stage.js, stream_name("frame"), [f"{PREFIX}.{run}.frame.>"])
    out = []
    for m in msgs:
        e = codec.decode(m.data)
        if isinstance(e, FrameRendered):
            out.append((m.time_us / 1e6, e.n))
    return out


def ranges(numbers: list[int]) -> list[str]:
    """Frame numbers as runs: ``[3, 4, 5, 9]`` is ``["3-5", "9"]``."""
    out: list[str] = []
    for n in numbers:
        if out and int(out[-1].split("-")[-1]) == n - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return out


def worker_of(name: str, workers: dict[str, Worker]) -> str:
    """The bench's label of a member (its name holds its process id: ``actors.runtime.owners``)."""
    return next((w for w, worker in workers.items() if f"-{worker.proc.pid}-" in name), name)


async def spread(settings: Settings, tmp: Path, shows: int, seconds: float) -> dict[str, Any]:
    assert settings.nats_url is not None
    env = {**os.environ, "TROUPE_NATS_URL": settings.nats_url, "TROUPE_STATE_DIR": str(tmp / "state"),
           "TROUPE_OUT_DIR": str(settings.out_dir), "TROUPE_METRICS_PORT": "-1", "TROUPE_SPREAD": "on",
           "TROUPE_LEASE_TTL_S": str(TTL_S), "TROUPE_RESOLUTION": settings.resolution}
    workers: dict[str, Worker] = {}
    try:
        for kind in SPREAD:
            for i in (1, 2):
                workers[f"{kind}-{i}"] = await Worker.start(kind, env, "running")
        for kind in SHARED:
            workers[kind] = await Worker.start(kind, env, "running")
        async with Stage(settings) as stage:
            runs = [f"spread{i}" for i in range(shows)]
            tasks = [asyncio.create_task(run_show(stage, chat_show(seconds, 0.5, seed=i), seconds, [], run_id=run))
                     for i, run in enumerate(runs)]
            began = time.monotonic()
            placed: dict[str, dict[str, str]] = {}
            while time.monotonic() - began < 30:
                placed = {kind: await holders(stage, kind) for kind in SPREAD}
                if all(len(placed[kind]) == shows for kind in SPREAD):
                    break
                await asyncio.sleep(0.1)
            placed_s = round(time.monotonic() - began, 2)
            counts = {kind: {worker_of(h, workers): sum(1 for x in placed[kind].values() if x == h)
                             for h in set(placed[kind].values())} for kind in SPREAD}
            # Killed: one render process, a third into the shows.
            await asyncio.sleep(max(0.0, seconds / 3 - (time.monotonic() - began)))
            victim_name = max(counts["render"], key=lambda w: counts["render"][w])
            victim = workers[victim_name]
            lost = sorted(run for run, h in (await holders(stage, "render")).items() if worker_of(h, workers) == victim_name)
            victim.proc.send_signal(signal.SIGKILL)
            killed = time.time()
            killed_show_s = killed - time.time() + (time.monotonic() - began)
            await victim.proc.wait()
            # Joined: a third render process, then one more show.
            workers["render-3"] = await Worker.start("render", env, "running")
            late_run = "spread-late"
            late_seconds = max(6.0, seconds - (time.monotonic() - began) - 2)
            tasks.append(asyncio.create_task(run_show(stage, chat_show(late_seconds, 0.5, seed=99), late_seconds, [],
                                                      run_id=late_run)))
            joined_holder = ""
            while time.monotonic() - began < seconds + 30 and not joined_holder:
                joined_holder = (await holders(stage, "render")).get(late_run, "")
                await asyncio.sleep(0.1)
            await asyncio.gather(*tasks)
            per_run = {}
            for run in [*runs, late_run]:
                got = await frames(stage, run)
                expected = int((late_seconds if run == late_run else seconds) * settings.fps)
                after = [t for t, _ in got if t > killed]
                drawn = {n for _, n in got if n < expected}
                per_run[run] = {
                    "held_by_killed": run in lost, "frames": len(drawn), "expected": expected,
                    "missing": expected - len(drawn), "missing_ranges": ranges(sorted(set(range(expected)) - drawn)),
                    "resumed_after_s": round(after[0] - killed, 2) if after and run in lost else None,
                }
    finally:
        for worker in workers.values():
            await worker.stop()
    return {
        "shows": shows, "seconds": seconds, "resolution": settings.resolution, "lease_ttl_s": TTL_S,
        "placed_s": placed_s, "runs_held": counts, "killed": victim_name, "killed_runs": lost,
        "killed_at_s": round(killed_show_s, 1),
        "joined": worker_of(joined_holder, workers) if joined_holder else None, "per_run": per_run,
    }


async def bench(shows: int, seconds: float, resolution: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedNats(Path(tmp) / "nats")
        await server.start()
        try:
            settings = load_settings(nats_url=server.url, state_dir=Path(tmp) / "state", out_dir=Path(tmp) / "out",
                                     metrics_port=-1, resolution=resolution, lease_ttl_s=TTL_S)
            doc = await spread(settings, Path(tmp), shows, seconds)
        finally:
            await server.stop()
    return {"machine": machine(), **doc}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shows", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--resolution", default="360p")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    doc = asyncio.run(bench(args.shows, args.seconds, args.resolution))
    print_table(f"runs held per process once {doc['shows']} shows are on air (placed in {doc['placed_s']} s)",
                ["kind", "processes: runs held"],
                [[kind, ", ".join(f"{w} {n}" for w, n in sorted(held.items()))]
                 for kind, held in doc["runs_held"].items()])
    print_table(f"kill -9 of {doc['killed']} ({len(doc['killed_runs'])} runs); then render-3 joined and one more show "
                f"started: held by {doc['joined']} ({doc['machine']['cpu']})",
                ["run", "held by the killed process", "frames resumed after s", "frames missing"],
                [[run, r["held_by_killed"], r["resumed_after_s"], f"{r['missing']}/{r['expected']}"]
                 for run, r in doc["per_run"].items()])
    write_result("spread", doc)
    if args.json:
        print(json.dumps(doc))


if __name__ == "__main__":
    main()
