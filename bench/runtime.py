"""Runtime overhead: a chain of pass-through hops on ActorRuntime vs the same chain on raw nats-py.

``python -m bench.runtime [--json] [--messages N] [--hops K] [--repeats R]``

Both chains use durable pull consumers on the same stream, ``fetch`` sized by
free capacity, ``publish_async`` to the next hop and an ack after the publish is
confirmed.  Throughput: N messages published at once, time until the last one
leaves the last hop.  Latency: one message every 5 ms, publish → out of the last
hop.  The two variants alternate in one process, and the medians are compared.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from nats.errors import TimeoutError as NatsTimeoutError

from actors.base import Actor, Context, Input
from actors.runtime import ActorRuntime
from bench.common import machine, median, pct, print_table, write_result
from events import codec
from events.base import Event
from events.qos import QosObserved
from infra.bus import ConsumerSpec, connect, provision_consumers, provision_streams
from infra.metrics import Metrics
from infra.natsserver import EmbeddedNats
from infra.settings import load_settings

_seq = itertools.count()


def hop_subject(run: str, i: int) -> str:
    return f"troupe.{run}.qos.observed.h{i}"


def make_hop(run: str, i: int) -> Actor:
    class Hop(Actor):
        name = f"hop{i}_{run}"
        inputs = (Input("qos", (hop_subject(run, i),)),)
        accepts_unknown_runs = True

        def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
            return [replace(event, id=event.derive(i), role=f"h{i + 1}", causation=event.id, at_ms=0)]

    return Hop()


async def raw_hop(js: Any, run: str, i: int, stop: asyncio.Event, batch: int) -> None:
    spec = ConsumerSpec(f"rawhop{i}_{run}", "qos", (hop_subject(run, i),), ack_wait_s=30)
    await provision_consumers(js, [spec])
    sub = await js.pull_subscribe_bind(spec.durable, spec.stream)
    target = hop_subject(run, i + 1)
    while not stop.is_set():
        try:
            msgs = await sub.fetch(batch=batch, timeout=0.5)
        except (NatsTimeoutError, TimeoutError):
            continue
        futures = [
            await js.publish_async(target, m.data, headers={"Nats-Msg-Id": f"{m.headers['Nats-Msg-Id']}.{i}"})
            for m in msgs
        ]
        await asyncio.gather(*futures)
        for m in msgs:
            await m.ack()
    await sub.unsubscribe()


async def run_chain(nc: Any, variant: str, hops: int, n: int, interval_s: float, batch: int) -> dict[str, Any]:
    """One pass: n messages through the chain; throughput and per-message latency."""
    js = nc.jetstream()
    run = f"b{variant[0]}{next(_seq)}{int(time.time()) % 100000}"
    settings = load_settings(environ={}, fetch_batch=batch, metrics_port=-1)
    sent: dict[str, float] = {}
    latencies: list[float] = []
    done = asyncio.Event()
    key = "correlation" if variant == "troupe" else "id"

    async def on_out(msg: Any) -> None:
        origin = orjson.loads(codec.split(msg.data)[0])[key]
        latencies.append(time.perf_counter() - sent[origin])
        if len(latencies) == n:
            done.set()

    sub = await nc.subscribe(hop_subject(run, hops), cb=on_out)
    stop = asyncio.Event()
    runtimes: list[ActorRuntime] = []
    tasks: list[asyncio.Task[None]] = []
    if variant == "troupe":
        for i in range(hops):
            runtimes.append(await ActorRuntime(make_hop(run, i), js, settings, Metrics()).start())
    else:
        tasks = [asyncio.create_task(raw_hop(js, run, i, stop, batch)) for i in range(hops)]
        await asyncio.sleep(0.2)  # let the raw consumers bind before the clock starts
    started, cpu_started = time.perf_counter(), time.process_time()
    pending = []
    for k in range(n):
        event = QosObserved(id=f"{run}m{k}", run=run, role="h0", correlation=f"{run}m{k}", metric="bench", value=float(k), source="bench")
        sent[event.id] = time.perf_counter()
        pending.append(await js.publish_async(hop_subject(run, 0), codec.encode(event), headers={"Nats-Msg-Id": event.id}))
        if interval_s:
            await asyncio.sleep(interval_s)
    await asyncio.gather(*pending)
    await asyncio.wait_for(done.wait(), 120)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    stop.set()
    for rt in runtimes:
        await rt.stop()
    await asyncio.gather(*tasks)
    await sub.unsubscribe()
    return {"msgs_per_s": n / elapsed, "cpu_us_per_msg": cpu / n * 1e6, "p50_ms": pct(latencies, 50) * 1000, "p99_ms": pct(latencies, 99) * 1000}


async def bench(messages: int, hops: int, repeats: int, latency_messages: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedNats(Path(tmp)) as server:
            nc = await connect(server.url, "bench")
            await provision_streams(nc.jetstream())
            results: dict[str, dict[str, list[float]]] = {
                v: {"tput": [], "cpu_us": [], "p50": [], "p99": []} for v in ("raw", "troupe")}
            for _ in range(repeats):
                for variant in ("raw", "troupe"):
                    t = await run_chain(nc, variant, hops, messages, 0.0, 64)
                    lat = await run_chain(nc, variant, hops, latency_messages, 0.005, 64)
                    results[variant]["tput"].append(t["msgs_per_s"])
                    results[variant]["cpu_us"].append(t["cpu_us_per_msg"])
                    results[variant]["p50"].append(lat["p50_ms"])
                    results[variant]["p99"].append(lat["p99_ms"])
            await nc.close()
    med = {v: {k: median(vals) for k, vals in r.items()} for v, r in results.items()}
    return {
        "machine": machine(), "hops": hops, "messages": messages, "latency_messages": latency_messages,
        "repeats": repeats, "raw": med["raw"], "troupe": med["troupe"], "samples": results,
        "ratio": med["troupe"]["tput"] / med["raw"]["tput"],
        # Each repeat runs the two side by side: the median of those pairs' ratios is less moved by
        # a noisy neighbour than the ratio of the medians.
        "pair_ratio": median([t / r for r, t in zip(results["raw"]["tput"], results["troupe"]["tput"], strict=True)]),
        # The client process's CPU per message through the chain (nats-server's not counted): what
        # the runtime adds, less moved by others' load than wall-clock throughput.
        "cpu_ratio": med["raw"]["cpu_us"] / med["troupe"]["cpu_us"],
        "added_p50_ms": (med["troupe"]["p50"] - med["raw"]["p50"]) / hops,
        "added_p99_ms": (med["troupe"]["p99"] - med["raw"]["p99"]) / hops,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--latency-messages", type=int, default=400)
    parser.add_argument("--hops", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    doc = asyncio.run(bench(args.messages, args.hops, args.repeats, args.latency_messages))
    m = doc["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['platform']}, Python {m['python']}")
    print_table(
        f"runtime overhead: {args.hops}-hop pass-through chain, medians of {args.repeats}",
        ["variant", "msgs/s", "client CPU us/msg", "e2e p50 ms", "e2e p99 ms"],
        [[v, doc[v]["tput"], doc[v]["cpu_us"], doc[v]["p50"], doc[v]["p99"]] for v in ("raw", "troupe")],
    )
    print(f"ratio troupe/raw msgs/s: {doc['ratio']:.2f} of the medians, {doc['pair_ratio']:.2f} the median of the "
          f"side-by-side pairs (target >= 0.85); client CPU per message raw/troupe: {doc['cpu_ratio']:.2f}")
    print(f"added latency per hop: p50 {doc['added_p50_ms']:.3f} ms, p99 {doc['added_p99_ms']:.3f} ms (target p99 <= 1 ms)")
    write_result("runtime", doc)
    if args.json:
        print(json.dumps({k: doc[k] for k in ("ratio", "pair_ratio", "cpu_ratio", "added_p50_ms", "added_p99_ms", "raw", "troupe", "hops")}))


if __name__ == "__main__":
    main()
