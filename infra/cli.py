"""The ``troupe`` command: up, actor, publish."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

from actors.show import ShowError, load_show
from events import codec
from events.base import DecodeError
from events.danmaku import DanmakuReceived
from events.subjects import is_token, subject_for
from infra.bus import BusError, connect
from infra.natsserver import NatsServerError
from infra.settings import Settings, SettingsError, load_settings
from infra.summary import summarise
from infra.supervisor import ACTOR_NAMES, Stage, SupervisorError, run_show
from store.database import StoreError


class UsageError(Exception):
    """A user mistake: printed as one line, exit status 2."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="troupe", description="Multi-role AI live streams on NATS JetStream")
    p.add_argument("--nats", help="NATS URL (default: TROUPE_NATS_URL, else an embedded server)")
    p.add_argument("--store", help="store URL (default: TROUPE_STORE_URL, else SQLite in the state dir)")
    p.add_argument("--state-dir", type=Path, help="state directory (default: TROUPE_STATE_DIR or .troupe)")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run the whole show in this process and write the video")
    up.add_argument("--duration", type=float, default=20.0, help="show length in seconds")
    up.add_argument("--out", type=Path, help="output directory for <run>.mp4 (default: out)")
    up.add_argument("--show", type=Path, help="show file (TOML); default: the built-in demo")
    up.add_argument("--json", action="store_true", help="print the summary as JSON on the last line")
    up.add_argument("--actors", help=f"comma-separated actors to run here (default: all of {','.join(ACTOR_NAMES)})")
    up.add_argument("--resolution", choices=("1080p", "720p", "480p", "360p"))
    up.add_argument("--run", help="run id (default: a new one)")
    up.add_argument("--slow-render-ms", type=float, help="fault injection: each frame costs this many ms more")

    actor = sub.add_parser("actor", help="run one actor until interrupted")
    actor.add_argument("name", choices=ACTOR_NAMES)
    actor.add_argument("--out", type=Path)

    pub = sub.add_parser("publish", help="publish danmaku to a run")
    pub.add_argument("text", nargs="?", help="the comment")
    pub.add_argument("--run", required=True)
    pub.add_argument("--user", default="")
    pub.add_argument("--role", help="address one role")
    pub.add_argument("--file", type=Path, help="JSON lines: {\"user\": ..., \"text\": ..., \"to\": ...}")
    return p


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(
        nats_url=args.nats, store_url=args.store, state_dir=args.state_dir,
        out_dir=getattr(args, "out", None), resolution=getattr(args, "resolution", None),
        slow_render_ms=getattr(args, "slow_render_ms", None),
    )


async def _up(args: argparse.Namespace, settings: Settings) -> int:
    show = load_show(args.show)
    names = ACTOR_NAMES if not args.actors else tuple(a.strip() for a in args.actors.split(",") if a.strip())
    unknown = [n for n in names if n not in ACTOR_NAMES]
    if unknown:
        raise UsageError(f"unknown actor(s): {', '.join(unknown)}")
    if args.duration <= 0:
        raise UsageError("--duration must be positive")
    if args.run is not None and not is_token(args.run):
        raise UsageError("--run must be letters, digits, _ or -")
    async with Stage(settings) as stage:
        print(f"troupe: show {show.title!r}, {len(show.roles)} roles, {args.duration:g} s", file=sys.stderr)
        result = await run_show(stage, show, args.duration, names, run_id=args.run)
    summary = summarise(Stage(settings).engine, result.run, str(result.mp4) if result.mp4 else None)
    lat = summary["latency_ms"]
    print(f"run {result.run}: video {summary['mp4']}")
    print(f"events: {sum(summary['events'].values())} ({', '.join(f'{k} {v}' for k, v in summary['events'].items())})")
    print(
        f"latency danmaku->first audio p50 {lat['danmaku_to_first_audio']['p50']} ms, "
        f"->first viseme frame p50 {lat['danmaku_to_first_viseme_frame']['p50']} ms "
        f"p99 {lat['danmaku_to_first_viseme_frame']['p99']} ms"
    )
    frames = summary["frames"]
    if frames:
        print(
            f"frames: {frames['rendered']} of {frames['expected']} drawn, published "
            f"p50 {frames['publish_lag_ms']['p50']} ms / p99 {frames['publish_lag_ms']['p99']} ms after their show time"
        )
    print(f"rejected {summary['rejected']}, merged {summary['merged']}, dropped {summary['dropped']}")
    if args.json:
        print(orjson.dumps(summary).decode())
    return 0 if result.mp4 else 1


async def _actor(args: argparse.Namespace, settings: Settings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with Stage(settings) as stage:
        await stage.start_actors([args.name])
        print(f"troupe: actor {args.name} running (metrics on port {stage.metrics.port})", file=sys.stderr, flush=True)
        await stop.wait()
    return 0


def _danmaku_lines(args: argparse.Namespace) -> list[DanmakuReceived]:
    now = int(time.time() * 1000)
    if args.file is None:
        if args.text is None:
            raise UsageError("give the comment text or --file")
        return [DanmakuReceived(id=f"cli-{now}-0", run=args.run, user=args.user, text=args.text, to=args.role, at_ms=now)]
    try:
        lines = args.file.read_text("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {args.file}: {exc}") from None
    out = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            doc = orjson.loads(line)
            if not isinstance(doc, dict):
                raise DecodeError("expected a JSON object")
            wrapped = {"type": "danmaku.received", "payload": doc}
            event = codec.decode(orjson.dumps(wrapped), {"id": f"cli-{now}-{no}", "run": args.run, "at_ms": now})
        except (orjson.JSONDecodeError, DecodeError) as exc:
            raise UsageError(f"{args.file}:{no}: {exc}") from None
        out.append(event)  # type: ignore[arg-type]
    return out  # type: ignore[return-value]


async def _publish(args: argparse.Namespace, settings: Settings) -> int:
    if not is_token(args.run):
        raise UsageError("--run must be letters, digits, _ or -")
    batch = _danmaku_lines(args)  # validate everything before sending anything
    if settings.nats_url is None:
        raise UsageError("publish needs a NATS URL: --nats or TROUPE_NATS_URL")
    nc = await connect(settings.nats_url, "troupe-publish")
    try:
        js = nc.jetstream()
        for event in batch:
            await js.publish(subject_for(event), codec.encode(event), headers={"Nats-Msg-Id": event.id})
    finally:
        await nc.close()
    print(f"published {len(batch)} danmaku to run {args.run}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``troupe`` command."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = _settings(args)
        command = {"up": _up, "actor": _actor, "publish": _publish}[args.command]
        return asyncio.run(command(args, settings))
    except (UsageError, SettingsError, ShowError) as exc:
        print(f"troupe: error: {exc}", file=sys.stderr)
        return 2
    except (BusError, NatsServerError, StoreError, SupervisorError) as exc:
        print(f"troupe: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
