"""``troupe actor NAME[,NAME...]``: a worker process running actors until it is stopped."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from actors.backends.registry import BACKENDS
from app.cli.base import (
    Command,
    UsageError,
    page_options,
    require_preview,
    serve_preview,
    stop_on_signals,
)
from app.registry import ACTORS
from app.supervisor import Stage
from infra.settings import Settings

log = logging.getLogger(__name__)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="an actor, or several separated by commas (one worker process for them all)")
    parser.add_argument("--out", type=Path, help="output directory of the sink's <run>.mp4 (default: TROUPE_OUT_DIR, else out)")
    page_options(parser)


async def _actor(args: argparse.Namespace, settings: Settings) -> int:
    BACKENDS.check(settings)  # an unknown backend name: one line, before connecting
    stop = stop_on_signals()
    names = [n.strip() for n in args.name.split(",") if n.strip()]
    unknown = [n for n in names if n not in ACTORS]
    if not names or unknown:
        raise UsageError(f"unknown actor(s): {', '.join(unknown) or '(none given)'} (known: {', '.join(ACTORS)})")
    if "render" in names:
        BACKENDS.require_render()  # the render extra missing: one line, before connecting
    if "preview" in names:
        require_preview()
    async with Stage(settings) as stage:
        def standing_by(name: str, holder: str) -> None:
            print(f"troupe: actor {name} standing by: {holder} runs it; taking over when it stops",
                  file=sys.stderr, flush=True)

        runtimes = await stage.start_actors(names, standing_by, stop, wait=True)
        if stop.is_set():  # stopped while standing by
            return 0
        page = None
        if "preview" in names:
            page = await serve_preview(stage, runtimes[names.index("preview")])
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


COMMANDS = (Command(
    "actor", "run one actor until interrupted (exits 1 if its loop dies)", _options, _actor,
    settings={"out": "out_dir", "host": "http_host", "port": "http_port"},
    parser={"formatter_class": argparse.RawDescriptionHelpFormatter,
            "epilog": "actors:\n" + "\n".join(f"  {e.name:<9} {e.summary}" for e in ACTORS.values())},
),)
