"""The store's commands: ``troupe runs``, ``inspect``, ``replay`` (playback, ``--verify``), ``export``."""

from __future__ import annotations

import argparse
import logging
import secrets
import sys
import time
from pathlib import Path

import orjson

from app import export, inspect, playback, reexec
from app.cli.base import (
    Command,
    UsageError,
    store_engine,
)
from app.supervisor import Stage
from events.base import registry
from events.errors import StoreError
from events.subjects import FAMILIES
from infra.settings import Settings
from store.queries import list_runs

log = logging.getLogger(__name__)


def _runs_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="the runs as one JSON list")
    parser.add_argument("--limit", type=int, default=50, help="list at most this many runs, the newest first")


def _when(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


async def _runs(args: argparse.Namespace, settings: Settings) -> int:
    runs = list_runs(store_engine(settings), args.limit)
    if args.json:
        print(orjson.dumps([{
            "id": r.id, "started_at_ms": r.started_at_ms, "duration_ms": r.duration_ms, "roles": list(r.roles),
            "events": r.events, "errors": r.errors, "status": r.status, "replay_of": r.replay_of,
        } for r in runs]).decode())
        return 0
    width = max([20, *(len(r.id) for r in runs)])  # a playback's id is longer: the columns follow it
    print(f"{'run':<{width}} {'started':<19} {'duration':>8}  {'roles':<22} {'events':>7} {'errors':>6}  status")
    for r in runs:
        duration = "-" if r.duration_ms is None else f"{r.duration_ms / 1000:.1f}s"
        status = r.status + (f" (playback of {r.replay_of})" if r.replay_of else "")
        print(f"{r.id:<{width}} {_when(r.started_at_ms):<19} {duration:>8}  {','.join(r.roles):<22} "
              f"{r.events:>7} {r.errors:>6}  {status}")
    if not runs:
        print("(no runs recorded yet)")
    return 0


def _inspect_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id (troupe runs lists them)")
    parser.add_argument("--correlation", help="one danmaku's causal chain (its id) with the time at each hop")
    parser.add_argument("--json", action="store_true", help="the report as one JSON object")


async def _inspect(args: argparse.Namespace, settings: Settings) -> int:
    engine = store_engine(settings)
    if args.correlation:
        doc = inspect.chain(engine, args.run, args.correlation)
        print(orjson.dumps(doc).decode() if args.json else inspect.format_chain(doc))
    else:
        doc = inspect.report(engine, args.run)
        print(orjson.dumps(doc).decode() if args.json else inspect.format_report(doc))
    return 0


def _replay_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the recorded run to replay or verify (troupe runs lists them)")
    parser.add_argument("--into", help="run id of the playback (default: RUN-replay-XXXX)")
    pace = parser.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, default=1.0, help="pace as a multiple of the original (default 1)")
    pace.add_argument("--max", action="store_true", help="as fast as JetStream takes the events")
    parser.add_argument("--from", dest="from_s", type=float, help="start at this show time (s)")
    parser.add_argument("--to", dest="to_s", type=float, help="stop before this show time (s)")
    parser.add_argument("--types", nargs="+", help="event types or families to replay (run.started always is)")
    parser.add_argument("--no-record", action="store_true", help="do not record the playback in the store")
    parser.add_argument("--verify", action="store_true",
                        help="re-execute the deterministic actors from the store and report the first divergence")
    parser.add_argument("--json", action="store_true", help="the outcome as one JSON object")


class _ProgressBar:
    def __init__(self, label: str) -> None:
        self.label = label
        self.shown = 0.0
        self.live = sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.live or (done < total and now - self.shown < 0.1):
            return
        self.shown = now
        width = 30
        filled = width * done // max(total, 1)
        print(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end="", file=sys.stderr)
        if done == total:
            print(file=sys.stderr)


def _check_replay_args(args: argparse.Namespace) -> None:
    """Usage errors of a playback, found before the store is opened."""
    if args.speed <= 0:
        raise UsageError("--speed must be positive")
    for name, value in (("--from", args.from_s), ("--to", args.to_s)):
        if value is not None and value < 0:
            raise UsageError(f"{name} must be 0 or more seconds")
    if args.from_s is not None and args.to_s is not None and args.to_s <= args.from_s:
        raise UsageError(f"--to ({args.to_s:g} s) must be after --from ({args.from_s:g} s)")
    known = set(registry.types()) | set(FAMILIES)
    unknown = [t for t in args.types or () if t not in known]
    if unknown:
        raise UsageError(f"unknown event type or family: {', '.join(unknown)} (families: {', '.join(FAMILIES)})")


async def _replay(args: argparse.Namespace, settings: Settings) -> int:
    if not args.verify:
        _check_replay_args(args)
    engine = store_engine(settings)
    if args.verify:
        result = reexec.verify(engine, args.run, settings=settings)
        print(orjson.dumps(result.to_dict()).decode() if args.json else reexec.format_verification(result))
        return 0 if result.divergence is None else 1
    into = args.into or f"{args.run}-replay-{secrets.token_hex(2)}"
    messages = playback.prepare(
        engine, args.run, into, args.types,
        None if args.from_s is None else int(args.from_s * 1000),
        None if args.to_s is None else int(args.to_s * 1000),
    )
    async with Stage(settings) as stage:
        if not args.no_record:
            await stage.start_actors(["recorder"])
        seconds = await playback.publish(stage.js, messages, None if args.max else args.speed,
                                         _ProgressBar(f"replay {args.run} -> {into}"))
        if not args.no_record and not await stage.drain(["recorder"], timeout_s=120):
            raise StoreError(f"the recorder did not catch up with the playback of {into} within 120 s")
    rate = len(messages) / seconds if seconds > 0 else float("inf")
    doc = {"run": args.run, "into": into, "published": len(messages), "seconds": round(seconds, 3),
           "events_per_s": round(rate), "recorded": not args.no_record}
    print(orjson.dumps(doc).decode() if args.json else
          f"replayed {len(messages)} events of {args.run} into run {into} in {seconds:.2f} s ({rate:.0f} events/s)")
    return 0


def _export_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the recorded run to re-render (troupe runs lists them)")
    parser.add_argument("output", type=Path, help="the video file to write (MP4: H.264 and AAC)")


async def _export(args: argparse.Namespace, settings: Settings) -> int:
    result = export.export(store_engine(settings), args.run, args.output, settings)
    print(f"exported run {args.run} to {result.path}: {result.frames} frames, {result.duration_ms / 1000:.1f} s "
          f"of video and audio, in {result.seconds:.1f} s")
    return 0


COMMANDS = (
    Command("runs", "list the recorded runs", _runs_options, _runs),
    Command("inspect", "what happened in a run: cues, replies, latencies, QoS, rejections, errors, air time",
            _inspect_options, _inspect),
    Command("replay", "re-publish a recorded run on NATS, or --verify it by re-execution", _replay_options, _replay),
    Command("export", "re-render a recorded run to a video file (no LLM, no TTS)", _export_options, _export),
)
