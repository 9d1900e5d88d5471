"""The multi-role dubbing setup: FIFO against Troupe's role-priority scheduler.

``python -m bench.scheduler [--json] [--requests N] [--repeats R] [--engine vllm [--vllm-model DIR]]``

200 requests over 8 roles of different weights are published at once to a real
nats-server (embedded) as cues; one worker (an ``ActorRuntime`` running a
``ScheduledActor``) serves them with a simulated service time: a batch costs a
fixed part plus a part per token, and a batch holds one role's requests only.
The same runtime, prefetch and batch limits serve both variants; only the order
differs: ``fifo`` takes the oldest request and the requests of its role right
behind it, ``troupe`` the best-scored role (weight, continuity, aging) and up to
8 of its requests.  Latency is from a request's publication to the receipt of its
reply; ``busy`` is the worker's service time over the makespan.  Variants
alternate over the repeats; medians over repeats.

``--engine vllm`` (in the vllm environment that ``scripts/test-vllm.sh`` builds) serves the
batches with a real engine instead of the simulated cost: each batch goes to the vllm reply
writer in one ``write_batch`` (one role's persona, its requests decoded together) and every
reply is read to its end (``--max-tokens``, 32 by default); the model is ``--vllm-model`` or
the tiny random-weight Llama of ``bench.tiny_llm``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from actors.backends.protocols import Persona, Prompt, ReplyWriter
from actors.base import Context, Handled, Input, ScheduledActor, Work
from actors.runtime import ActorRuntime
from app.shows import load_show
from bench.common import machine, median, pct, print_table, write_result
from events import codec
from events.base import Event
from events.cue import CueIssued
from events.run import RunStarted
from events.subjects import subject_for
from events.utterance import UtteranceCompleted
from infra.bus import connect, provision_streams
from infra.metrics import Metrics
from infra.natsserver import EmbeddedNats
from infra.settings import load_settings

WEIGHTS = {"r0": 4.0, "r1": 3.0, "r2": 2.5, "r3": 2.0, "r4": 1.5, "r5": 1.0, "r6": 0.75, "r7": 0.5}
FIXED_MS = 25.0
PER_TOKEN_MS = 0.4


class SimulatedWorker(ScheduledActor):
    """An llm/tts worker whose batches cost FIXED_MS + PER_TOKEN_MS per token."""

    name = "simworker"
    blocking = True
    accepts_unknown_runs = True
    max_batch: ClassVar[int] = 8
    token_budget: ClassVar[int] = 512

    def __init__(self, run: str) -> None:
        self.inputs = (Input("cue", (f"troupe.{run}.cue.issued.>",)),)  # type: ignore[misc]
        self.busy_s = 0.0
        self.batches = 0

    def work(self, event: Event, ctx: Context) -> Work | None:
        assert isinstance(event, CueIssued) and event.role is not None
        return Work(event.role, tokens=len(event.text.split()), weight=WEIGHTS[event.role])

    def handle_batch(self, events: Sequence[Event], ctx: Context) -> list[Handled]:
        tokens = sum(len(e.text.split()) for e in events if isinstance(e, CueIssued))
        cost = (FIXED_MS + PER_TOKEN_MS * tokens) / 1000
        started = time.perf_counter()
        time.sleep(cost)
        self.busy_s += time.perf_counter() - started
        self.batches += 1
        return [[UtteranceCompleted(
            id=e.derive("done"), run=e.run, role=e.role, causation=e.id, correlation=e.id, t_ms=ctx.now_ms,
            utterance=e.id, text="", chunks=0, backend="simulated",
        )] for e in events]


class EngineWorker(SimulatedWorker):
    """The same worker, its batches written by a real reply writer (one role's batch in one call)."""

    def __init__(self, run: str, writer: ReplyWriter) -> None:
        super().__init__(run)
        self.writer = writer

    def handle_batch(self, events: Sequence[Event], ctx: Context) -> list[Handled]:
        cues = [e for e in events if isinstance(e, CueIssued)]
        role = cues[0].role or ""
        persona = Persona(role, role, f"A host with weight {WEIGHTS[role]}.", "en")
        started = time.perf_counter()
        replies = self.writer.write_batch(persona, [Prompt(c.id, c.user, c.text, seed=1) for c in cues])
        texts = [" ".join(reply) for reply in replies]
        self.busy_s += time.perf_counter() - started
        self.batches += 1
        return [[UtteranceCompleted(
            id=e.derive("done"), run=e.run, role=e.role, causation=e.id, correlation=e.id, t_ms=ctx.now_ms,
            utterance=e.id, text=text, chunks=1, backend=self.writer.name,
        )] for e, text in zip(cues, texts, strict=True)]


def requests(run: str, n: int, seed: int) -> list[CueIssued]:
    rng = random.Random(seed)
    roles = [list(WEIGHTS)[i % len(WEIGHTS)] for i in range(n)]
    rng.shuffle(roles)
    return [
        CueIssued(id=f"{run}-q{i}", run=run, role=role, seq=i, user="viewer", routed_by="addressed",
                  text=" ".join(["word"] * rng.randint(16, 64)), danmaku=(), priority=WEIGHTS[role])
        for i, role in enumerate(roles)
    ]


async def one(js: Any, nc: Any, variant: str, run: str, n: int, seed: int, state: Path,
              writer: ReplyWriter | None = None) -> dict[str, Any]:
    settings = load_settings(environ={}, scheduler=variant, metrics_port=-1, state_dir=state,
                             fetch_batch=64, max_inflight=256)
    start = RunStarted(id=f"{run}-start", run=run, show=load_show().to_dict(), seed=1,
                       started_at_ms=int(time.time() * 1000))
    await js.publish(subject_for(start), codec.encode(start), headers={"Nats-Msg-Id": start.id})
    done: dict[str, float] = {}
    finished = asyncio.Event()

    async def on_reply(msg: Any) -> None:
        done[codec.decode(msg.data).causation or ""] = time.perf_counter()
        if len(done) >= n:
            finished.set()

    sub = await nc.subscribe(f"troupe.{run}.utterance.completed.>", cb=on_reply)
    worker = SimulatedWorker(run) if writer is None else EngineWorker(run, writer)
    reqs = requests(run, n, seed)
    async with ActorRuntime(worker, js, settings, Metrics(), durable=f"sim_{run}"):
        t0 = time.perf_counter()
        acks = [await js.publish_async(subject_for(c), codec.encode(c), headers={"Nats-Msg-Id": c.id}) for c in reqs]
        await asyncio.gather(*acks)
        await asyncio.wait_for(finished.wait(), 300)
    await sub.unsubscribe()
    latency = {c.id: (done[c.id] - t0) * 1000 for c in reqs}
    makespan = max(done.values()) - t0
    per_role = {
        role: {"mean_ms": statistics.fmean(v), "p95_ms": pct(v, 95)}
        for role in WEIGHTS
        for v in [[latency[c.id] for c in reqs if c.role == role]]
    }
    values = list(latency.values())
    return {
        "mean_ms": statistics.fmean(values), "p95_ms": pct(values, 95), "per_role": per_role,
        "throughput": n / makespan, "busy": worker.busy_s / makespan, "batches": worker.batches,
        "makespan_s": makespan,
    }


def _median_doc(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "mean_ms": median([d["mean_ms"] for d in docs]), "p95_ms": median([d["p95_ms"] for d in docs]),
        "per_role": {
            role: {k: median([d["per_role"][role][k] for d in docs]) for k in ("mean_ms", "p95_ms")}
            for role in WEIGHTS
        },
        "throughput": median([d["throughput"] for d in docs]), "busy": median([d["busy"] for d in docs]),
        "batches": median([d["batches"] for d in docs]), "repeats": docs,
    }


async def bench(n: int, repeats: int, writer: ReplyWriter | None = None) -> dict[str, Any]:
    out: dict[str, list[dict[str, Any]]] = {"fifo": [], "troupe": []}
    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedNats(Path(tmp) / "nats") as server:
            nc = await connect(server.url, "bench-scheduler")
            js = nc.jetstream()
            await provision_streams(js)
            for r in range(repeats):
                for variant in (("fifo", "troupe") if r % 2 == 0 else ("troupe", "fifo")):
                    run = f"s{variant}{r}"
                    out[variant].append(await one(js, nc, variant, run, n, seed=r, state=Path(tmp), writer=writer))
            await nc.close()
    return {"fifo": _median_doc(out["fifo"]), "troupe": _median_doc(out["troupe"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--engine", choices=("simulated", "vllm"), default="simulated")
    parser.add_argument("--vllm-model", help="the vllm engine's model folder (default: the tiny test Llama)")
    parser.add_argument("--max-tokens", type=int, default=32, help="a reply's budget with a real engine")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        writer = None
        if args.engine == "vllm":
            from actors.backends.llm_vllm import VllmWriter
            from bench.tiny_llm import make_model

            model = args.vllm_model or str(make_model(Path(tmp) / "tiny-llama"))
            writer = VllmWriter(model, max_tokens=args.max_tokens)
            list(writer.stream(Persona("r0", "r0", "", "en"), Prompt("warm", "v", "hello")))  # warm up
        try:
            doc = asyncio.run(bench(args.requests, args.repeats, writer))
        finally:
            if writer is not None:
                writer.close()
    engine = "simulated" if writer is None else f"vllm:{Path(writer.engine.model_config.model).name}"
    fifo, troupe = doc["fifo"], doc["troupe"]
    top = max(WEIGHTS, key=WEIGHTS.__getitem__)
    checks = {
        "top_role_p95_vs_fifo": troupe["per_role"][top]["p95_ms"] / fifo["per_role"][top]["p95_ms"],
        "worst_role_p95_vs_fifo": max(troupe["per_role"][r]["p95_ms"] / fifo["per_role"][r]["p95_ms"] for r in WEIGHTS),
        "throughput_vs_fifo": troupe["throughput"] / fifo["throughput"],
    }
    result = {
        "machine": machine(), "engine": engine, "requests": args.requests, "roles": WEIGHTS, "fixed_ms": FIXED_MS,
        "per_token_ms": PER_TOKEN_MS, "max_batch": SimulatedWorker.max_batch, "repeats": args.repeats,
        **doc, "checks": checks,
    }
    m = result["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['platform']}, Python {m['python']}")
    cost = (f"batch cost {FIXED_MS:g} ms + {PER_TOKEN_MS:g} ms/token" if writer is None else
            f"batches written by {engine} ({args.max_tokens} tokens a reply)")
    print(f"{args.requests} requests over {len(WEIGHTS)} roles at once; {cost}, one role per batch "
          f"(<= {SimulatedWorker.max_batch}); medians of {args.repeats}")
    print_table("overall", ["scheduler", "mean ms", "P95 ms", "req/s", "busy", "batches"], [
        [name, d["mean_ms"], d["p95_ms"], d["throughput"], d["busy"], d["batches"]]
        for name, d in (("fifo", fifo), ("troupe", troupe))
    ])
    print_table("per role (weight): P95 ms", ["role", "weight", "fifo", "troupe", "ratio"], [
        [r, w, fifo["per_role"][r]["p95_ms"], troupe["per_role"][r]["p95_ms"],
         troupe["per_role"][r]["p95_ms"] / fifo["per_role"][r]["p95_ms"]]
        for r, w in WEIGHTS.items()
    ])
    print(f"top role P95 {checks['top_role_p95_vs_fifo']:.2f}x FIFO's (target <= 0.25); worst role "
          f"{checks['worst_role_p95_vs_fifo']:.2f}x (target <= 3); busy {troupe['busy']:.0%} (target >= 90%); "
          f"throughput {checks['throughput_vs_fifo']:.2f}x FIFO (target >= 1)")
    write_result("scheduler" if writer is None else "scheduler_vllm", result)
    if args.json:
        print(json.dumps({
            name: {"mean_ms": round(d["mean_ms"], 1), "p95_ms": round(d["p95_ms"], 1),
                   "per_role": {r: {"p95_ms": round(v["p95_ms"], 1)} for r, v in d["per_role"].items()},
                   "throughput": round(d["throughput"], 2), "busy": round(d["busy"], 3)}
            for name, d in (("fifo", fifo), ("troupe", troupe))
        }))


if __name__ == "__main__":
    main()
