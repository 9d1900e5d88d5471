"""Does the show carry itself?  The demo's three roles and three-segment rundown, each case a show
of its own, every actor in one process (as ``troupe up`` runs it).

``python -m bench.show [--json] [--duration 600] [--cases quiet,chat-0.25,chat-1,operator] [--llm transformers]``

Cases: ``quiet`` (no comment at all), ``chat-R`` (bench.chat's generated chat at R danmaku a
second), ``operator`` (controls sent during a quiet show: say, hold, resume, segment next).
Per case, from the event store: the speaking share, the longest silence, seconds per role
against the weights, the show's own lines (repeats, verbatim lines said / asked for, the most
turns between roles without the chat, and where the words of the show's own lines came from: the
show's material, a template, a model), segment start drift, the comment figures of bench.chat,
the wait a comment spent behind the show's own speech, and ``troupe replay --verify``'s
divergences.  ``--llm`` adds a shorter quiet case with that writer (the model's lines).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from app import reexec
from app.airtime import airtime
from app.shows import load_show
from app.supervisor import Stage, run_show
from bench.chat import Line, _fix_all, generate, measure
from bench.common import machine, pct, print_table, write_result
from events.danmaku import OperatorControl
from events.run import RunStarted
from events.show import show_from_dict
from infra.settings import load_settings

Sender = Callable[[Stage, RunStarted], Coroutine[Any, Any, None]]
# When the operator case sends each control (s of show time) and what it asks.
OPERATOR: tuple[tuple[float, str, dict[str, str]], ...] = ((20.0, "say", {"text": "A word from our producer: thanks for watching Troupe tonight!", "target": "rex"}),
            (40.0, "hold", {}), (55.0, "resume", {}), (80.0, "segment", {"target": "next"}))


async def _controls(stage: Stage, started: RunStarted) -> None:
    for i, (at_s, action, fields) in enumerate(OPERATOR):
        delay = started.started_at_ms / 1000 + at_s - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        await stage.publish([OperatorControl(id=f"{started.run}-op{i}", run=started.run, action=action, user="bench",
                                             t_ms=int(at_s * 1000), at_ms=int(time.time() * 1000),
                                             **fields)])  # type: ignore[arg-type]


async def one_case(name: str, duration_s: float, seed: int, llm: str = "scripted", tts: str = "espeak",
                   keep: Path | None = None) -> dict[str, Any]:
    lines: list[Line] = []
    if name.startswith("chat-"):
        lines = generate(float(name.split("-", 1)[1]), duration_s, seed)
    show_doc = load_show().to_dict()
    show_doc["script"] = [{"at": round(x.at_s, 3), "user": x.user, "text": x.text, "kind": x.kind} for x in lines]
    show = show_from_dict(show_doc)
    senders: list[asyncio.Task[None]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = keep / name if keep is not None else Path(tmp)
        settings = load_settings(state_dir=base / "state", out_dir=base / "out", metrics_port=-1,
                                 llm_backend=llm, tts_backend=tts)
        async with Stage(settings) as stage:
            def started(run: RunStarted) -> None:
                if name == "operator":
                    senders.append(asyncio.get_running_loop().create_task(_controls(stage, run)))

            result = await run_show(stage, show, duration_s, drain_timeout_s=180, on_started=started)
            for task in senders:
                await task
        engine = Stage(settings).engine
        doc: dict[str, Any] = {"case": name, "llm": llm, "duration_s": duration_s, "run": result.run,
                               "airtime": airtime(engine, result.run)}
        if lines:
            doc["chat"] = measure(engine, result.run, lines, duration_s)
            _fix_all(doc["chat"])
        if name == "operator":
            doc["operator"] = _operator_figures(engine, result.run)
        verification = reexec.verify(engine, result.run, actors=("director", "lipsync"))
        doc["verify"] = {"divergences": 0 if verification.divergence is None else 1,
                         "checked": verification.checked,
                         "first": None if verification.divergence is None else reexec.format_verification(verification)}
        engine.dispose()
    return doc


def _operator_figures(engine: Any, run: str) -> dict[str, Any]:
    """How soon each control took effect on the show timeline (ms after it was sent)."""
    from sqlalchemy import select

    from events import codec
    from events.cue import CueIssued
    from events.viseme import VisemeTrack
    from store.schema import events

    query = select(events.c.body).where(events.c.run == run, events.c.type.in_(["cue.issued", "viseme.track"]))
    with engine.connect() as conn:
        recorded = [codec.decode(body) for (body,) in conn.execute(query)]
    cues = {e.id: e for e in recorded if isinstance(e, CueIssued)}
    starts: dict[str, int] = {}
    for t in recorded:
        if isinstance(t, VisemeTrack):
            starts[t.utterance] = min(t.start_ms, starts.get(t.utterance, t.start_ms))
    own = sorted((at, cues[u]) for u, at in starts.items() if u in cues and cues[u].self_driven
                 and cues[u].reason != "say")
    at = {action: int(s * 1000) for s, action, _ in OPERATOR}
    say = next((starts[c.id] for c in cues.values() if c.reason == "say" and c.id in starts), None)
    during_hold = [t for t, _ in own if at["hold"] < t < at["resume"]]
    after_resume = next((t for t, _ in own if t >= at["resume"]), None)
    next_segment = next((t for t, c in own if t >= at["segment"] and c.segment != _segment_at(own, at["segment"])), None)
    return {
        "say_ms": None if say is None else say - at["say"],
        "hold_last_own_start_ms": (max(during_hold) - at["hold"]) if during_hold else 0,
        "resume_ms": None if after_resume is None else after_resume - at["resume"],
        "segment_next_ms": None if next_segment is None else next_segment - at["segment"],
    }


def _segment_at(own: list[tuple[int, Any]], t_ms: int) -> str:
    before = [c for at, c in own if at < t_ms]
    return before[-1].segment if before else ""


def _row(doc: dict[str, Any]) -> list[Any]:
    air = doc["airtime"]
    own = air["own_lines"]
    weights = {r.id: r.weight for r in load_show().roles}
    spoken = sum(air["seconds_by_role"].values()) or 1
    shares = " ".join(f"{r} {air['seconds_by_role'].get(r, 0):.0f}s ({air['seconds_by_role'].get(r, 0) / spoken:.0%}"
                      f"/{w / sum(weights.values()):.0%})" for r, w in weights.items())
    drift = max((abs(g["drift_ms"]) for g in air["segments"]), default=0)
    chat = doc.get("chat")
    waits = air["waits_behind_own_ms"]
    return [
        doc["case"] + ("" if doc["llm"] == "scripted" else f" ({doc['llm']})"), f"{doc['duration_s']:.0f}",
        f"{air['speaking_share']:.0%}", f"{air['longest_silence_ms'] / 1000:.1f}", shares,
        f"{len(own['verbatim_said'])}/{own['verbatim_asked']}", own["repeated"],
        " ".join(f"{k} {n}" for k, n in own.get("by_source", {}).items()) or "-", own["most_turns_between_roles"],
        f"{drift / 1000:.1f}",
        "-" if chat is None else f"{chat['answered']}/{chat['valid']}",
        "-" if chat is None else _ms(chat["latency"]["all"]["p99_ms"]),
        "-" if chat is None else _ms(chat["latency"]["gift"]["p99_ms"]),
        "-" if not waits else f"{pct(waits, 50):.0f}/{pct(waits, 99):.0f}",
        "-" if chat is None else f"{chat['outcomes']['none']}/{chat['outcomes']['twice']}",
        doc["verify"]["divergences"],
    ]


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="quiet,chat-0.25,chat-1,operator")
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of show per case")
    parser.add_argument("--operator-duration", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--llm", help="also a quiet case with this LLM backend (e.g. transformers)")
    parser.add_argument("--llm-duration", type=float, default=120.0)
    parser.add_argument("--keep", type=Path, help="keep each case's store and video under this folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    for case in [c for c in args.cases.split(",") if c]:
        length = args.operator_duration if case == "operator" else args.duration
        results.append(asyncio.run(one_case(case, length, args.seed, keep=args.keep)))
    if args.llm:
        results.append(asyncio.run(one_case("quiet", args.llm_duration, args.seed, llm=args.llm, keep=args.keep)))
    m = machine()
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['platform']}, Python {m['python']}")
    print("the demo show (3 roles, weights 2 : 1.5 : 1, rundown of 30 + 45 + 45 s looped), every actor in one process")
    print_table(
        "the show carrying itself, per case",
        ["case", "s", "speaking", "longest silence s", "seconds by role (share/weights)", "verbatim", "repeated",
         "own lines from", "max banter", "seg drift s", "answered", "reply p99 ms", "gift p99 ms", "wait behind own p50/p99 ms",
         "no/2 outcomes", "divergences"],
        [_row(r) for r in results],
    )
    for r in results:
        if "operator" in r:
            print("operator controls (ms after sending, on the show timeline): "
                  + ", ".join(f"{k} {v}" for k, v in r["operator"].items()))
        if r["verify"]["first"]:
            print(r["verify"]["first"])
    name = "show" if args.cases else f"show-{args.llm}"  # a model's case alone: a file of its own
    write_result(name, {"machine": m, "seed": args.seed, "cases": results})
    if args.json:
        print(json.dumps({"cases": results}, ensure_ascii=False))


if __name__ == "__main__":
    main()
