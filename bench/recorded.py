"""A recorded chat played into a running show from a plain NATS client: does speech start in time?

``python -m bench.recorded FILE.xml [--start S] [--seconds 120] [--tail 30] [--address 0.05] [--llm NAME] [--tts NAME] [--json]``

``troupe up`` runs in a process of its own (embedded NATS, a SQLite store in a temporary folder),
as a user starts it.  Once it has announced its run and NATS address, this process plays the
file's danmaku from ``--start`` to ``--start + --seconds`` (seconds into the recording) at their
recorded pace with nats-py alone: the bare JSON of "Publishing danmaku from any NATS client" on
``troupe.<run>.danmaku.received``, with a ``Nats-Msg-Id`` (a Super Chat, gift or membership of a
live room's recording is a ``gift``).  The show lasts ``--seconds + --tail``, so that what was
sent last can still be answered.

Latency is measured from the sender's clock: from each danmaku's publication here to the first
frame that shows its reply's speech (the frame's publication, read from the run's store after
the show); a danmaku merged into another's reply counts from its own publication to that
reply's first frame.  Reported: how many were sent, rejected, skipped, answered; p50/p99 of
speech start over the answered; the share of those within 8 s; the show's speaking share and
its floor gaps (from the run's summary).  A recording of someone else's room names none of our
roles, so ``--address`` puts ``@Name`` before a share of its comments (chosen by id, the same
every time), as viewers address a room's hosts; reported: how many of those were spoken.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nats
import orjson

from app.bilibili import Timed, read_bilibili_xml
from app.shows import load_show
from app.summary import first_speaking_frames
from bench.common import machine, pct, print_table, write_result
from store.database import open_engine
from store.schema import events

TARGET_MS = 8000


def window(timed: Sequence[Timed], start_s: float, seconds: float) -> list[Timed]:
    """The danmaku between ``start_s`` and ``start_s + seconds``, their offsets from ``start_s``."""
    return [Timed(t.at_s - start_s, t.event) for t in timed if start_s <= t.at_s < start_s + seconds]


def addressed(chat: Sequence[Timed], share: float, names: Sequence[str]) -> list[Timed]:
    """The chat with ``share`` of its comments addressed to a role (``@Name `` before the text), as
    viewers of a live room address its hosts: chosen by the danmaku id's digest, so the same file
    is addressed the same way every time (a recording of someone else's room names none of our roles)."""
    import dataclasses
    import hashlib

    out = []
    for item in chat:
        digest = int.from_bytes(hashlib.sha256(item.event.id.encode()).digest()[:8], "big")
        if names and item.event.kind == "comment" and digest % 10_000 < share * 10_000:
            name = names[digest // 10_000 % len(names)]
            item = Timed(item.at_s, dataclasses.replace(item.event, text=f"@{name} {item.event.text}"))
        out.append(item)
    return out


def foreign_json(item: Timed) -> bytes:
    """What any NATS client publishes for a danmaku: the documented bare JSON, no Troupe code."""
    e = item.event
    return orjson.dumps({"type": "danmaku.received", "id": e.id,
                         "payload": {"text": e.text, "user": e.user, "kind": e.kind}})


async def play(url: str, run: str, chat: Sequence[Timed]) -> dict[str, int]:
    """Publish each danmaku at its time with plain nats-py; the wall ms each was published."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    sent: dict[str, int] = {}
    began = time.monotonic()
    try:
        for item in chat:
            delay = item.at_s - (time.monotonic() - began)
            if delay > 0:
                await asyncio.sleep(delay)
            sent[item.event.id] = int(time.time() * 1000)
            await js.publish(f"troupe.{run}.danmaku.received", foreign_json(item),
                             headers={"Nats-Msg-Id": item.event.id})
    finally:
        await nc.close()
    return sent


async def announced(process: asyncio.subprocess.Process, lines: list[str]) -> tuple[str, str]:
    """The run id and NATS URL ``troupe up`` prints on its standard error as the run starts."""
    run = url = None
    assert process.stderr is not None
    while run is None or url is None:
        raw = await asyncio.wait_for(process.stderr.readline(), 180)
        if not raw:
            raise SystemExit("troupe up ended before it announced its run:\n" + "".join(lines[-20:]))
        line = raw.decode(errors="replace")
        lines.append(line)
        if m := re.match(r"troupe: run (\S+)", line):
            run = m.group(1)
        elif m := re.match(r"troupe: NATS (nats://\S+)", line):
            url = m.group(1)
    return run, url


def outcomes(engine: Any, run: str, sent: dict[str, int]) -> dict[str, Any]:
    """What became of each danmaku sent, and when its reply's speech was first on screen."""
    from sqlalchemy import select

    kinds: dict[str, str] = {}
    cue_of: dict[str, str] = {}  # danmaku -> the correlation its reply is spoken under
    root: dict[str, str] = {}  # cue id -> its correlation
    merged: dict[str, str] = {}  # danmaku -> the cue that answers it too
    query = select(events.c.type, events.c.id, events.c.correlation, events.c.body).where(
        events.c.run == run, events.c.type.in_(["cue.issued", "cue.merged", "danmaku.skipped", "danmaku.rejected"]))
    speaking: list[tuple[int, int]] = []
    with engine.connect() as conn:
        for type_, id_, correlation, body in conn.execute(query):
            payload = orjson.loads(body)["payload"]
            if type_ == "cue.issued":
                root[id_] = correlation
                for d in payload.get("danmaku") or (correlation,):
                    kinds[d], cue_of[d] = "answered", correlation
            elif type_ == "cue.merged":
                kinds[correlation], merged[correlation] = "merged", payload["cue"]
            elif type_ in ("danmaku.skipped", "danmaku.rejected"):
                kinds.setdefault(correlation, f"{type_.split('.')[1]}:{payload.get('reason')}")
        spans = select(events.c.body).where(events.c.run == run, events.c.type == "viseme.track")
        for (body,) in conn.execute(spans):
            p = orjson.loads(body)["payload"]
            speaking.append((int(p.get("start_ms", 0)), int(p.get("end_ms", 0))))
    for d, cue in merged.items():
        if cue in root:
            cue_of[d] = root[cue]
    first = first_speaking_frames(engine, run)
    latencies = [float(first[cue_of[d]] - t) for d, t in sent.items()
                 if kinds.get(d) in ("answered", "merged") and cue_of.get(d) in first]
    spoken = {d for d, t in sent.items() if kinds.get(d) in ("answered", "merged") and cue_of.get(d) in first}
    return {"outcomes": Counter(kinds.get(d, "none") for d in sent), "latencies": latencies,
            "speech_ms": _covered(speaking), "spoken": spoken}


def _covered(spans: list[tuple[int, int]]) -> int:
    """ms of show time covered by at least one span."""
    total, end = 0, -1
    for start, stop in sorted(spans):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    chat = window(read_bilibili_xml(Path(args.file), "bench", 0), args.start, args.seconds)
    if not chat:
        raise SystemExit(f"no danmaku between {args.start} s and {args.start + args.seconds} s of {args.file}")
    chat = addressed(chat, args.address, [r.name for r in load_show().roles])
    to_role = {t.event.id for t in chat if t.event.text.startswith("@")}
    state = Path(tempfile.mkdtemp(prefix="troupe-recorded-"))
    duration = args.seconds + args.tail
    env = {**os.environ, "TROUPE_STATE_DIR": str(state), "TROUPE_METRICS_PORT": "0"}
    troupe = shutil.which("troupe") or str(Path(sys.executable).with_name("troupe"))
    command = [troupe, "up", "--duration", f"{duration:g}", "--out", str(state / "out"), "--json",
               "--llm", args.llm, "--tts", args.tts]
    process = await asyncio.create_subprocess_exec(*command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: list[str] = []
    assert process.stdout is not None
    summary_out = asyncio.create_task(process.stdout.read())  # the summary: read as it comes
    try:
        run, url = await announced(process, lines)
        drain = asyncio.create_task(_drain(process, lines))
        sent = await play(url, run, chat)
        await asyncio.wait_for(process.wait(), duration + 300)
        out = await summary_out
        await drain
    finally:
        if process.returncode is None:
            process.kill()
            summary_out.cancel()
    if process.returncode != 0:
        raise SystemExit(f"troupe up failed ({process.returncode}):\n" + "".join(lines[-20:]))
    summary = orjson.loads(out.decode().strip().splitlines()[-1])
    engine = open_engine(f"sqlite:///{state / 'troupe.db'}", migrate=False)
    found = outcomes(engine, run, sent)
    engine.dispose()
    if args.keep is not None:  # the store and the video, to look into
        shutil.copytree(state, args.keep, dirs_exist_ok=True)
    shutil.rmtree(state, ignore_errors=True)
    lat = found["latencies"]
    spoken = found["spoken"]
    floor = summary.get("airtime", {}).get("floor", {})
    return {
        "file": Path(args.file).name, "start_s": args.start, "seconds": args.seconds, "show_s": duration,
        "llm": args.llm, "tts": args.tts, "sent": len(sent), "outcomes": dict(found["outcomes"].most_common()),
        "answered": len(lat), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "max_ms": max(lat, default=None),
        "within_8s": round(sum(1 for v in lat if v <= TARGET_MS) / len(lat), 3) if lat else None,
        "speaking_share": round(found["speech_ms"] / (duration * 1000), 3),
        "addressed": len(to_role), "addressed_spoken": len(to_role & spoken),
        "addressed_spoken_share": round(len(to_role & spoken) / len(to_role), 3) if to_role else None,
        "floor_gap_ms": floor.get("gaps_ms"), "speaking_share_waiting": floor.get("speaking_share_waiting"),
        "longest_silence_ms": summary.get("airtime", {}).get("longest_silence_ms"),
        "run_summary_answered": summary.get("danmaku", {}).get("answered"),
    }


async def _drain(process: asyncio.subprocess.Process, lines: list[str]) -> None:
    """Keep reading the show's log so that it never blocks on a full pipe."""
    assert process.stderr is not None
    while raw := await process.stderr.readline():
        lines.append(raw.decode(errors="replace"))
        del lines[:-200]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recorded")
    parser.add_argument("file", help="a Bilibili danmaku XML file (a video's, or a live room's recording)")
    parser.add_argument("--start", type=float, default=0.0, help="seconds into the recording to start from")
    parser.add_argument("--seconds", type=float, default=120.0, help="seconds of the recording to play")
    parser.add_argument("--tail", type=float, default=30.0, help="seconds the show goes on after the last")
    parser.add_argument("--address", type=float, default=0.05,
                        help="share of comments addressed to a role (@Name), as a live room's viewers do")
    parser.add_argument("--llm", default="scripted")
    parser.add_argument("--tts", default="espeak")
    parser.add_argument("--result", help="results file name (default: recorded-<llm>-<tts>)")
    parser.add_argument("--keep", type=Path, help="keep the show's store and video in this folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = {"machine": machine(), **asyncio.run(measure(args))}
    print_table(f"recorded chat {result['file']} [{args.start:g} s, +{args.seconds:g} s] into a "
                f"{result['show_s']:g} s show ({args.llm} + {args.tts})",
                ["sent", "answered", "p50", "p99", "within 8 s", "addressed spoken", "speaking", "gap p50/p95/max",
                 "outcomes"],
                [[result["sent"], result["answered"], result["p50_ms"], result["p99_ms"], result["within_8s"],
                  f"{result['addressed_spoken']}/{result['addressed']}", result["speaking_share"],
                  "/".join(str(g.get(k)) for k in ("p50", "p95", "max")) if (g := result["floor_gap_ms"]) else "-",
                  ", ".join(f"{k} {v}" for k, v in result["outcomes"].items())]])
    write_result(args.result or f"recorded-{args.llm}-{args.tts}", result)
    if args.json:
        print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
