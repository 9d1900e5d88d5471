"""The ``troupe`` command: up, actor, publish, and the store's runs, inspect, replay, export."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import shlex
import shutil
import signal
import sys
import time
import typing
from collections.abc import Sequence
from pathlib import Path

import nats.errors
import orjson
from sqlalchemy import Engine

from actors.backends.registry import BACKENDS
from actors.runtime import ActorRuntime
from app import export, inspect, operator, playback, reexec
from app.bilibili import read_bilibili_xml
from app.publish import DanmakuFileError, RunError, Sent, read_danmaku_file, send, tally
from app.registry import ACTORS
from app.shows import load_show
from app.summary import summarise
from app.supervisor import ACTOR_NAMES, Stage, run_show
from app.web import WebServer, preview_server
from events.base import registry
from events.danmaku import DanmakuReceived
from events.errors import BusError, ConfigError, StoreError, TroupeError
from events.run import RunStarted
from events.show import RESOLUTIONS, Show
from events.subjects import FAMILIES, is_token
from infra.bus import connect, masked_url, provision_streams
from infra.logs import FORMATS as LOG_FORMATS
from infra.logs import configure as configure_logs
from infra.natsserver import announcement_path, running_server
from infra.settings import Settings, load_settings
from store.database import default_url, open_engine
from store.queries import list_runs

log = logging.getLogger(__name__)
DANMAKU_KINDS = ("comment", "gift", "moderator")


class UsageError(ConfigError):
    """A user mistake: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with the one-line error of every other user mistake."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"troupe: error: {message}\n")


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every command takes, before or after its name.

    On the subcommands they default to SUPPRESS, so the value given anywhere wins.
    """
    unset: object = argparse.SUPPRESS if suppress else None
    parser.add_argument("--nats", default=unset, help="NATS URL (default: TROUPE_NATS_URL, else an embedded server)")
    parser.add_argument("--store", default=unset,
                        help="store URL (default: TROUPE_STORE_URL, else SQLite in the state dir)")
    parser.add_argument("--state-dir", type=Path, default=unset,
                        help="state directory (default: TROUPE_STATE_DIR or .troupe)")
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS if suppress else False,
                        help="log what Troupe does (INFO)")


def _page_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="the HTTP address to bind (default TROUPE_HTTP_HOST, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="the HTTP port (default TROUPE_HTTP_PORT, 8750; 0: a free one)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="troupe", description="Multi-role AI live streams on NATS JetStream")
    _global_options(p, suppress=False)
    common = _Parser(add_help=False)
    _global_options(common, suppress=True)
    sub = p.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", parents=[common], help="run the whole show in this process and write the video")
    up.add_argument("--duration", type=float, default=20.0, help="show length in seconds")
    up.add_argument("--out", type=Path, help="output directory for <run>.mp4 (default: out)")
    up.add_argument("--show", type=Path, help="show file (TOML); default: the built-in demo")
    up.add_argument("--json", action="store_true", help="print the summary as JSON on the last line")
    up.add_argument("--rtmp", metavar="URL", help="also push the show live to this RTMP ingest (TROUPE_RTMP_URL)")
    up.add_argument("--hls", type=Path, metavar="DIR", help="also write a live HLS playlist under DIR/<run>/ (TROUPE_HLS_DIR)")
    up.add_argument("--preview", action="store_true",
                    help="serve the preview page (video, audio, feed, input box) on http://HOST:PORT/ while the show runs")
    _page_options(up)
    up.add_argument("--actors", help=f"comma-separated actors to run here (default: all of {','.join(ACTOR_NAMES)}; "
                         "none: only start, script and end the run, for workers elsewhere)")
    up.add_argument("--resolution", choices=tuple(RESOLUTIONS))
    up.add_argument("--run", help="run id (default: a new one)")
    up.add_argument("--slow-render-ms", type=float, help="fault injection: each frame costs this many ms more")
    up.add_argument("--llm", metavar="NAME", help="LLM backend (default: TROUPE_LLM_BACKEND, else scripted)")
    up.add_argument("--tts", metavar="NAME", help="TTS backend (default: TROUPE_TTS_BACKEND, else espeak)")

    actor = sub.add_parser(
        "actor", parents=[common], help="run one actor until interrupted (exits 1 if its loop dies)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="actors:\n" + "\n".join(f"  {e.name:<9} {e.summary}" for e in ACTORS.values()),
    )
    actor.add_argument("name", help="an actor, or several separated by commas (one worker process for them all)")
    actor.add_argument("--out", type=Path)
    _page_options(actor)

    pub = sub.add_parser("publish", parents=[common], help="publish danmaku to a run and show what became of them")
    pub.add_argument("text", nargs="?", help="the comment")
    pub.add_argument("--run", required=True, help="the run id (printed by troupe up)")
    pub.add_argument("--user", help="viewer name")
    pub.add_argument("--role", help="address one role")
    pub.add_argument("--kind", choices=DANMAKU_KINDS, help="comment (default), gift or moderator")
    pub.add_argument("--id", dest="danmaku_id", metavar="ID", help="the danmaku's id (default: a new one); resending it is a no-op")
    pub.add_argument("--file", type=Path,
                     help='JSON lines: {"user": ..., "text": ..., "to": ..., "kind": ..., "id": ...}')
    pub.add_argument("--bilibili", type=Path, metavar="FILE",
                     help='a Bilibili danmaku XML file (<d p="time,mode,...">text</d>), played at its pace')
    pub.add_argument("--speed", type=float, default=1.0,
                     help="with --bilibili: how many times faster than recorded (default 1)")
    pub.add_argument("--wait", type=float, default=10.0,
                     help="seconds to wait for the director's answers, all together (0: do not wait; default "
                          "10: a comment may wait for the floor up to 6 s after the line being spoken)")
    pub.add_argument("--json", action="store_true", help="one JSON object per danmaku")

    operator.add_parsers(sub, common)

    serve = sub.add_parser("serve", parents=[common],
                           help="the HTTP endpoint for platform bridges: POST /runs/RUN/danmaku")
    _page_options(serve)

    runs = sub.add_parser("runs", parents=[common], help="list the recorded runs")
    runs.add_argument("--json", action="store_true")
    runs.add_argument("--limit", type=int, default=50)

    ins = sub.add_parser("inspect", parents=[common], help="what happened in a run: cues, replies, latencies, QoS, rejections, errors")
    ins.add_argument("run")
    ins.add_argument("--correlation", help="one danmaku's causal chain (its id) with the time at each hop")
    ins.add_argument("--json", action="store_true")

    rep = sub.add_parser("replay", parents=[common], help="re-publish a recorded run on NATS, or --verify it by re-execution")
    rep.add_argument("run")
    rep.add_argument("--into", help="run id of the playback (default: RUN-replay-XXXX)")
    pace = rep.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, default=1.0, help="pace as a multiple of the original (default 1)")
    pace.add_argument("--max", action="store_true", help="as fast as JetStream takes the events")
    rep.add_argument("--from", dest="from_s", type=float, help="start at this show time (s)")
    rep.add_argument("--to", dest="to_s", type=float, help="stop before this show time (s)")
    rep.add_argument("--types", nargs="+", help="event types or families to replay (run.started always is)")
    rep.add_argument("--no-record", action="store_true", help="do not record the playback in the store")
    rep.add_argument("--verify", action="store_true",
                     help="re-execute the deterministic actors from the store and report the first divergence")
    rep.add_argument("--json", action="store_true")

    sub.add_parser("provision", parents=[common],
                   help="create or update the JetStream streams on TROUPE_NATS_URL, then exit")

    conf = sub.add_parser("nats-config", help="print the nats-server config with a user per service and its permissions")
    conf.add_argument("--port", dest="nats_port", type=int, default=4222)
    conf.add_argument("--monitor-port", type=int, default=8222)
    conf.add_argument("--store-dir", default="/data", help="JetStream's store directory on the server")

    exp = sub.add_parser("export", parents=[common], help="re-render a recorded run to a video file (no LLM, no TTS)")
    exp.add_argument("run")
    exp.add_argument("output", type=Path)
    return p


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(
        nats_url=args.nats, store_url=args.store, state_dir=args.state_dir,
        out_dir=getattr(args, "out", None), resolution=getattr(args, "resolution", None),
        slow_render_ms=getattr(args, "slow_render_ms", None),
        rtmp_url=getattr(args, "rtmp", None), hls_dir=getattr(args, "hls", None),
        llm_backend=getattr(args, "llm", None), tts_backend=getattr(args, "tts", None),
        http_host=getattr(args, "host", None), http_port=getattr(args, "port", None),
    )


async def _up(args: argparse.Namespace, settings: Settings) -> int:
    show = load_show(args.show)
    BACKENDS.check(settings, show)  # an unknown backend name: one line, before anything starts
    if args.actors == "none":  # the actors run elsewhere (workers): start, script and end the run only
        names: tuple[str, ...] = ()
    else:
        names = ACTOR_NAMES if not args.actors else tuple(a.strip() for a in args.actors.split(",") if a.strip())
    unknown = [n for n in names if n not in ACTORS]
    if unknown:
        raise UsageError(f"unknown actor(s): {', '.join(unknown)}")
    if args.duration <= 0:
        raise UsageError("--duration must be positive")
    if args.run is not None and not is_token(args.run):
        raise UsageError("--run must be letters, digits, _ or -")
    if "render" in names:
        BACKENDS.require_render()  # the render extra missing: one line, before anything starts
    preview = args.preview or "preview" in names
    if preview:
        _require_preview()
    async with Stage(settings) as stage:
        page = await _serve_preview(stage) if preview else None
        roles = f"{len(show.roles)} role{'' if len(show.roles) == 1 else 's'}"
        print(f"troupe: show {show.title!r}, {roles}, {args.duration:g} s", file=sys.stderr, flush=True)
        try:
            result = await run_show(stage, show, args.duration, [n for n in names if n != "preview"],
                                    run_id=args.run, on_started=lambda started: _announce(stage, show, started))
        finally:
            if page is not None:
                await page.close()
    log.info("run %s ended after %g s, %s", result.run, args.duration,
             f"drained: video {result.mp4}" if result.mp4 else "not drained (no video)")
    summary = summarise(Stage(settings).engine, result.run, str(result.mp4) if result.mp4 else None, settings.fps)
    lat = summary["latency_ms"]
    print(f"run {result.run}: video {summary['mp4']}")
    print(f"events: {sum(summary['events'].values())} ({', '.join(f'{k} {v}' for k, v in summary['events'].items())})")
    print(
        f"latency danmaku->first audio p50 {_ms(lat['danmaku_to_first_audio']['p50'])}, "
        f"->first viseme frame p50 {_ms(lat['danmaku_to_first_viseme_frame']['p50'])} "
        f"p99 {_ms(lat['danmaku_to_first_viseme_frame']['p99'])}"
    )
    frames = summary["frames"]
    if frames:
        print(
            f"frames: {frames['rendered']} of {frames['expected']} drawn, published "
            f"p50 {_ms(frames['publish_lag_ms']['p50'])} / p99 {_ms(frames['publish_lag_ms']['p99'])} "
            "after their show time"
        )
    late = summary["frame_lateness_ms"]
    for change in summary["resolution_changes"]:
        print(f"resolution {change['from']} -> {change['to']} at {change['t_ms'] / 1000:.1f} s: {change['reason']}")
    if "p99_after" in late:
        print(f"frame lateness p99 {late['p99_before']} ms before the first downgrade, {late['p99_after']} ms after "
              f"(budget {late['budget']:.0f} ms)")
    d = summary["danmaku"]
    reasons = ", ".join(f"{k} {v}" for k, v in d["skipped_by_reason"].items())
    print(f"danmaku: {d['received']} received, {d['answered']} answered, {d['merged']} merged, "
          f"{d['skipped']} skipped{f' ({reasons})' if reasons else ''}, {d['rejected']} rejected"
          + (f"; {d['none']} without an outcome, {d['twice']} with two" if d["none"] or d["twice"] else ""))
    print(f"replies dropped: {summary['dropped']} (deadline, interruption or the show's end)")
    for line in inspect.format_airtime(summary.get("airtime") or {}):
        if line:
            print(line)
    if args.json:
        print(orjson.dumps(summary).decode())
    return 0 if result.mp4 else 1


def _ms(value: float | None) -> str:
    """A latency for a summary line; n/a when there were no samples."""
    return "n/a" if value is None else f"{value:g} ms"


def _announce(stage: Stage, show: Show, started: RunStarted) -> None:
    """Tell the user, as the run starts, where it runs and how to talk to it from another terminal."""
    settings = stage.settings
    url = stage.embedded.url if stage.embedded is not None else settings.nats_url
    where = "embedded" if stage.embedded is not None else "given"
    metrics = "off" if stage.metrics.port is None else f"http://127.0.0.1:{stage.metrics.port}/metrics"
    mention = f" @{show.roles[0].id}" if show.roles else ""
    # The command as it runs from any folder of a new terminal: this troupe's own path (a venv's
    # is on no PATH until activated), and the state dir where publish finds the embedded server.
    program = shutil.which("troupe") or str(Path(sys.argv[0]).resolve())
    command = [program, "publish", "--run", started.run, f"hello{mention}"]
    controls = [program, "say", "--run", started.run, "--role", show.roles[0].id, "We'll be right back!"]
    if stage.embedded is None:
        extra = ["--nats", masked_url(str(url))]  # never a password in a log
    else:
        extra = ["--state-dir", str(Path(settings.state_dir).resolve())]
    print(f"troupe: run {started.run}\n"
          f"troupe: NATS {masked_url(str(url))} ({where})\n"
          f"troupe: metrics {metrics}\n"
          f"troupe: talk to it from another terminal: {shlex.join(command + extra)}\n"
          f"troupe: steer it (say, segment next, hold, resume): {shlex.join(controls + extra)}",
          file=sys.stderr, flush=True)


def _stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT: a worker stops cleanly (its models and files closed)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _show_nats(settings: Settings) -> str:
    """The NATS server to talk to: the one given, else the embedded one of a running troupe up."""
    url = settings.nats_url or running_server(announcement_path(settings.state_dir))
    if url is None:
        raise RunError(f"no running show found in {settings.state_dir} "
                       "(start one with troupe up, or give --nats URL)")
    return url


def _require_preview() -> None:
    """The preview extra missing: one line, before anything starts."""
    try:
        import aiortc  # noqa: F401
    except ImportError:
        raise UsageError("the preview page needs aiortc: pip install 'troupe[preview]'") from None


async def _serve_preview(stage: Stage, runtime: ActorRuntime | None = None) -> WebServer:
    """Start the preview actor (unless given) and serve its page; print where."""
    settings = stage.settings
    try:
        server = await preview_server(stage, runtime)
    except OSError as exc:
        raise UsageError(f"cannot serve the preview on {settings.http_host}:{settings.http_port}: {exc.strerror}") from None
    who = "a token sends danmaku" if settings.preview_token else "read-only: no TROUPE_PREVIEW_TOKEN"
    print(f"troupe: preview http://{settings.http_host}:{server.port}/ ({who})", file=sys.stderr, flush=True)
    return server


async def _actor(args: argparse.Namespace, settings: Settings) -> int:
    BACKENDS.check(settings)  # an unknown backend name: one line, before connecting
    stop = _stop_on_signals()
    names = [n.strip() for n in args.name.split(",") if n.strip()]
    unknown = [n for n in names if n not in ACTORS]
    if not names or unknown:
        raise UsageError(f"unknown actor(s): {', '.join(unknown) or '(none given)'} (known: {', '.join(ACTORS)})")
    if "render" in names:
        BACKENDS.require_render()  # the render extra missing: one line, before connecting
    if "preview" in names:
        _require_preview()
    async with Stage(settings) as stage:
        runtimes = await stage.start_actors(names)
        page = None
        if "preview" in names:
            page = await _serve_preview(stage, runtimes[names.index("preview")])
        print(f"troupe: actor {','.join(names)} running (metrics on port {stage.metrics.port})",
              file=sys.stderr, flush=True)
        stopped = asyncio.create_task(stop.wait())
        failures = [asyncio.create_task(rt.failed()) for rt in runtimes]
        done, _ = await asyncio.wait([stopped, *failures], return_when=asyncio.FIRST_COMPLETED)
        for task in [stopped, *failures]:
            task.cancel()
        failed = [t.result() for t in failures if t in done]
        if page is not None:
            await page.close()
    if failed:
        # An orchestrator restarts a process that exits; a process with a dead loop it cannot see.
        print(f"troupe: actor {','.join(names)} stopped: {failed[0]}", file=sys.stderr, flush=True)
        return 1
    return 0


def _danmaku_batch(args: argparse.Namespace) -> tuple[list[DanmakuReceived], list[float] | None]:
    """The danmaku to send, all validated before anything is sent, and when to send each
    (seconds after the first; None: at once)."""
    now = int(time.time() * 1000)
    if args.bilibili is not None:
        if args.file is not None or args.text is not None:
            raise UsageError("give the comment text, --file or --bilibili, one of them")
        if any(v is not None for v in (args.user, args.role, args.kind, args.danmaku_id)):
            raise UsageError("--user, --role, --kind and --id are for one comment, not --bilibili")
        if not 0 < args.speed <= 10_000:  # also refuses nan
            raise UsageError("--speed must be above 0 (1: as recorded, 20: twenty times faster)")
        try:
            timed = read_bilibili_xml(args.bilibili, args.run, now)
        except DanmakuFileError as exc:
            raise UsageError(str(exc)) from None
        return [t.event for t in timed], [t.at_s / args.speed for t in timed]
    if args.speed != 1.0:
        raise UsageError("--speed is for --bilibili")
    return _one_or_file(args, now), None


def _one_or_file(args: argparse.Namespace, now: int) -> list[DanmakuReceived]:
    if args.file is None:
        if args.text is None:
            raise UsageError("give the comment text or --file")
        ident = args.danmaku_id or f"cli-{now}-{secrets.token_hex(3)}"
        return [DanmakuReceived(id=ident, run=args.run, user=args.user or "", text=args.text, to=args.role,
                                kind=args.kind or "comment", at_ms=now)]
    if args.text is not None:
        raise UsageError("give the comment text or --file, not both")
    if any(v is not None for v in (args.user, args.role, args.kind, args.danmaku_id)):
        raise UsageError("--user, --role, --kind and --id are for one comment; in a --file each line has its own")
    try:
        return read_danmaku_file(args.file, args.run, now)
    except DanmakuFileError as exc:
        raise UsageError(str(exc)) from None


async def _publish(args: argparse.Namespace, settings: Settings) -> int:
    if not is_token(args.run):
        raise UsageError("--run must be letters, digits, _ or -")
    if not 0 <= args.wait < 3600:  # also refuses nan
        raise UsageError("--wait must be 0 or more seconds (under an hour)")
    batch, offsets = _danmaku_batch(args)  # validate everything before sending anything
    url = _show_nats(settings)
    log.info("publishing %d danmaku to run %s on %s", len(batch), args.run, url)

    def sent_line(s: Sent) -> None:
        if not args.json:
            print(f"sent {s.id}" + (" (a duplicate)" if s.duplicate else ""), flush=True)

    nc = await connect(url, "troupe-publish")
    try:
        sent = await send(nc, args.run, batch, args.wait, sent_line, offsets)
    except (nats.errors.Error, TimeoutError) as exc:
        raise BusError(f"NATS at {masked_url(url)} failed: {exc or type(exc).__name__}") from None
    finally:
        await nc.close()
    for s in sent:
        if args.json:
            print(orjson.dumps({**s.to_dict(), "run": args.run}).decode())
        elif args.wait > 0 or s.duplicate:
            print(s.describe(args.wait))
    if not args.json and len(sent) > 1 and args.wait > 0:
        print(tally(sent, args.wait))
    return 0


async def _control(args: argparse.Namespace, settings: Settings) -> int:
    return await operator.run_control(args, _show_nats(settings))


def _store(settings: Settings) -> Engine:
    """The store the read commands use; it must exist already."""
    if settings.store_url is None:
        path = settings.state_dir / "troupe.db"
        if not path.exists():
            raise StoreError(f"no store at {path}: run `troupe up` first, or set TROUPE_STORE_URL / --store")
    return open_engine(settings.store_url or default_url(settings.state_dir))


def _when(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


async def _runs(args: argparse.Namespace, settings: Settings) -> int:
    runs = list_runs(_store(settings), args.limit)
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


async def _inspect(args: argparse.Namespace, settings: Settings) -> int:
    engine = _store(settings)
    if args.correlation:
        doc = inspect.chain(engine, args.run, args.correlation)
        print(orjson.dumps(doc).decode() if args.json else inspect.format_chain(doc))
    else:
        doc = inspect.report(engine, args.run)
        print(orjson.dumps(doc).decode() if args.json else inspect.format_report(doc))
    return 0


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
    engine = _store(settings)
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


async def _serve(args: argparse.Namespace, settings: Settings) -> int:
    url = _show_nats(settings)
    nc = await connect(url, "troupe-serve")
    server = WebServer(nc, settings)
    try:
        try:
            port = await server.start()
        except OSError as exc:
            raise UsageError(f"cannot listen on {settings.http_host}:{settings.http_port}: {exc.strerror}") from None
        who = "token required" if settings.preview_token else "sending off: no TROUPE_PREVIEW_TOKEN"
        print(f"troupe: serving POST http://{settings.http_host}:{port}/runs/RUN/danmaku ({who}), NATS {masked_url(url)}",
              file=sys.stderr, flush=True)
        await _stop_on_signals().wait()
    finally:
        await server.close()
        await nc.close()
    return 0


async def _provision(args: argparse.Namespace, settings: Settings) -> int:
    if settings.nats_url is None:
        raise UsageError("troupe provision needs a NATS server: --nats URL or TROUPE_NATS_URL")
    nc = await connect(settings.nats_url, "troupe-provision")
    try:
        changed = await provision_streams(nc.jetstream(timeout=10.0), settings.frame_max_age_s)
    except nats.errors.Error as exc:
        raise BusError(f"NATS at {masked_url(settings.nats_url)} refused to create the streams: {exc}") from None
    finally:
        await nc.close()
    what = f"created or updated: {', '.join(changed)}" if changed else "unchanged"
    print(f"troupe: streams ready on {masked_url(settings.nats_url)} ({what})")
    return 0


async def _nats_config(args: argparse.Namespace, settings: Settings) -> int:
    from app.natsauth import server_config

    sys.stdout.write(server_config(args.nats_port, args.monitor_port, args.store_dir))
    return 0


async def _export(args: argparse.Namespace, settings: Settings) -> int:
    result = export.export(_store(settings), args.run, args.output, settings)
    print(f"exported run {args.run} to {result.path}: {result.frames} frames, {result.duration_ms / 1000:.1f} s "
          f"of video and audio, in {result.seconds:.1f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``troupe`` command."""
    args = _parser().parse_args(argv)
    log_format = os.environ.get("TROUPE_LOG_FORMAT") or "text"
    if log_format not in LOG_FORMATS:
        print(f"troupe: error: TROUPE_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}", file=sys.stderr)
        return 2
    configure_logs(logging.INFO if args.verbose else logging.WARNING, log_format)
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)  # a line per plug-in: noise
    try:
        settings = _settings(args)
        command = {
            "up": _up, "actor": _actor, "publish": _publish, "runs": _runs, "inspect": _inspect,
            "replay": _replay, "export": _export, "serve": _serve, "nats-config": _nats_config,
            "provision": _provision, **dict.fromkeys(operator.COMMANDS, _control),
        }[args.command]
        return asyncio.run(command(args, settings))
    except TroupeError as exc:
        # What the user asked for is wrong (2), or something it needs failed (1).
        print(f"troupe: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) and not isinstance(exc, RunError) else 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
