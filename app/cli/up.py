"""``troupe up``: the whole show in this process, its video and its summary."""

from __future__ import annotations

import argparse
import logging
import shlex
import shutil
import sys
import time
from pathlib import Path

import orjson

from actors.backends.registry import BACKENDS
from actors.floor import sparse
from app import inspect
from app.cli.base import (
    Command,
    UsageError,
    page_options,
    require_preview,
    serve_preview,
    stop_on_signals,
)
from app.registry import ACTORS, show_actors
from app.shows import load_show
from app.summary import summarise
from app.supervisor import ACTOR_NAMES, Stage, run_show
from events.run import RunStarted
from events.show import RESOLUTIONS, Show
from events.subjects import is_token
from infra.bus import masked_url
from infra.settings import Settings
from store.queries import find_run

log = logging.getLogger(__name__)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=20.0, help="show length in seconds")
    parser.add_argument("--out", type=Path, help="output directory for <run>.mp4 (default: out)")
    parser.add_argument("--show", type=Path, help="show file (TOML); default: the built-in demo")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on the last line")
    parser.add_argument("--rtmp", metavar="URL", help="also push the show live to this RTMP ingest (TROUPE_RTMP_URL)")
    parser.add_argument("--hls", type=Path, metavar="DIR", help="also write a live HLS playlist under DIR/<run>/ (TROUPE_HLS_DIR)")
    parser.add_argument("--preview", action="store_true",
                        help="serve the preview page (video, audio, feed, input box) on http://HOST:PORT/ while the show runs")
    page_options(parser)
    parser.add_argument("--actors", help=f"comma-separated actors to run here (default: all of {','.join(ACTOR_NAMES)}, and facts where TROUPE_FACTS=llama_cpp; "
                         "none: only start, script and end the run, for workers elsewhere)")
    parser.add_argument("--resolution", choices=tuple(RESOLUTIONS),
                        help="the stage's size (default: TROUPE_RESOLUTION, else 720p)")
    parser.add_argument("--run", help="run id, one the store does not hold yet (default: a new one)")
    parser.add_argument("--slow-render-ms", type=float, help="fault injection: each frame costs this many ms more")
    parser.add_argument("--llm", metavar="NAME", help="LLM backend (default: TROUPE_LLM_BACKEND, else scripted)")
    parser.add_argument("--tts", metavar="NAME", help="TTS backend (default: TROUPE_TTS_BACKEND, else espeak)")


async def _up(args: argparse.Namespace, settings: Settings) -> int:
    show = load_show(args.show)
    BACKENDS.check(settings, show)  # an unknown backend name: one line, before anything starts
    if settings.self_driven == "on" and sparse(show, settings):
        print("troupe: warning: the show gives its roles nothing to say of their own (no roles' material, no "
              "segments' points) and no model writes for them: its own lines will be few (its verbatim lines "
              "and questions to the chat)", file=sys.stderr, flush=True)
    if args.actors == "none":  # the actors run elsewhere (workers): start, script and end the run only
        names: tuple[str, ...] = ()
    else:
        names = show_actors(settings) if not args.actors else tuple(a.strip() for a in args.actors.split(",") if a.strip())
    unknown = [n for n in names if n not in ACTORS]
    if unknown:
        raise UsageError(f"unknown actor(s): {', '.join(unknown)}")
    if args.duration <= 0:
        raise UsageError("--duration must be positive")
    if args.run is not None and not is_token(args.run):
        raise UsageError("--run must be letters, digits, _ or -")
    if args.run is not None:
        _refuse_a_recorded_run(settings, args.run)
    if "render" in names:
        BACKENDS.require_render()  # the render extra missing: one line, before anything starts
    preview = args.preview or "preview" in names
    if preview:
        require_preview()
    stop = stop_on_signals()  # SIGTERM or SIGINT: the run ends where it is, the video and summary still come
    async with Stage(settings) as stage:
        page = await serve_preview(stage) if preview else None
        roles = f"{len(show.roles)} role{'' if len(show.roles) == 1 else 's'}"
        print(f"troupe: show {show.title!r}, {roles}, {args.duration:g} s", file=sys.stderr, flush=True)
        try:
            result = await run_show(stage, show, args.duration, [n for n in names if n != "preview"],
                                    run_id=args.run, on_started=lambda started: _announce(stage, show, started),
                                    stop=stop)
        finally:
            if page is not None:
                await page.close()
    if stop.is_set():
        print(f"troupe: {stop.reason}: the run ended at {result.duration_ms / 1000:g} s of {args.duration:g}",
              file=sys.stderr, flush=True)
    log.info("run %s ended after %g s, %s", result.run, result.duration_ms / 1000,
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


def _refuse_a_recorded_run(settings: Settings, run: str) -> None:
    """A --run the store holds already is refused: the store would keep that run's events and drop these."""
    engine = Stage(settings).engine
    try:
        found = find_run(engine, run)
    finally:
        engine.dispose()
    if found is not None:
        when = ("its run.started not recorded" if found.started_at_ms is None else
                time.strftime("started %Y-%m-%d %H:%M:%S", time.localtime(found.started_at_ms / 1000)))
        raise UsageError(f"run {run} exists in the store ({when}): choose another --run")


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


COMMANDS = (Command("up", "run the whole show in this process and write the video", _options, _up,
                    settings={"out": "out_dir", "resolution": "resolution", "slow_render_ms": "slow_render_ms",
                              "rtmp": "rtmp_url", "hls": "hls_dir", "llm": "llm_backend", "tts": "tts_backend",
                              "host": "http_host", "port": "http_port"}),)
