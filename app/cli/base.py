"""What every ``troupe`` command shares: the one-line usage error, the global options, the
settings a command's options override (declared per command), and the helpers that find the
show's NATS server and the store, stop on signals and serve the preview page."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import typing
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from actors.runtime import ActorRuntime
from app.publish import RunError
from app.supervisor import Stage
from app.web import WebServer, preview_server
from events.errors import ConfigError, StoreError
from infra.natsserver import announcement_path, running_server
from infra.settings import Settings, load_settings
from store.database import default_url, open_engine

log = logging.getLogger(__name__)


class UsageError(ConfigError):
    """A user mistake: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse with the one-line error of every other user mistake."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"troupe: error: {message}\n")


def global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every command takes, before or after its name.

    On the subcommands they default to SUPPRESS, so the value given anywhere wins.
    """
    unset: object = argparse.SUPPRESS if suppress else None
    parser.add_argument("--nats", default=unset, help="NATS URL, or several comma-separated (default: TROUPE_NATS_URL, else an embedded server)")
    parser.add_argument("--store", default=unset,
                        help="store URL (default: TROUPE_STORE_URL, else SQLite in the state dir)")
    parser.add_argument("--state-dir", type=Path, default=unset,
                        help="state directory (default: TROUPE_STATE_DIR or .troupe)")
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS if suppress else False,
                        help="log what Troupe does (INFO)")


def page_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="the HTTP address to bind (default TROUPE_HTTP_HOST, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="the HTTP port (default TROUPE_HTTP_PORT, 8750; 0: a free one)")


@dataclass(frozen=True, slots=True)
class Command:
    """One ``troupe`` command: its name, its help, the options it declares, what it runs, and
    which settings its options override (option -> Settings field; None leaves the setting be)."""

    name: str
    help: str
    options: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]
    settings: Mapping[str, str] = field(default_factory=dict)
    common: bool = True                               # it takes the global options
    parser: Mapping[str, Any] = field(default_factory=dict)  # more of argparse's add_parser arguments

    def settings_for(self, args: argparse.Namespace) -> Settings:
        """The settings of this run of the command: the environment, the global options and its own."""
        given = vars(args)
        return load_settings(
            nats_url=given.get("nats"), store_url=given.get("store"), state_dir=given.get("state_dir"),
            **{setting: given.get(option) for option, setting in self.settings.items()},
        )


class StopSignal(asyncio.Event):
    """Set by the first SIGTERM or SIGINT (``reason`` names it): the command ends cleanly (a show
    ends its run, closes its video and prints its summary; a worker closes its models and files).
    A second signal cancels the command's task at once (its ``finally`` blocks still run)."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: str | None = None
        self._task = asyncio.current_task()

    def received(self, sig: signal.Signals) -> None:
        if self.is_set():
            if self._task is not None:
                self._task.cancel()
            return
        self.reason = sig.name
        self.set()


def stop_on_signals() -> StopSignal:
    """A ``StopSignal`` that SIGTERM and SIGINT set, for the running task."""
    stop = StopSignal()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.received, sig)
    return stop


def show_nats(settings: Settings) -> str:
    """The NATS server to talk to: the one given, else the embedded one of a running troupe up."""
    url = settings.nats_url or running_server(announcement_path(settings.state_dir))
    if url is None:
        raise RunError(f"no running show found in {settings.state_dir} "
                       "(start one with troupe up, or give --nats URL)")
    return url


def require_preview() -> None:
    """The preview extra missing: one line, before anything starts."""
    try:
        import aiortc  # noqa: F401
    except ImportError:
        raise UsageError("the preview page needs aiortc: pip install 'troupe[preview]'") from None


async def serve_preview(stage: Stage, runtime: ActorRuntime | None = None) -> WebServer:
    """Start the preview actor (unless given) and serve its page; print where."""
    settings = stage.settings
    try:
        server = await preview_server(stage, runtime)
    except OSError as exc:
        raise UsageError(f"cannot serve the preview on {settings.http_host}:{settings.http_port}: {exc.strerror}") from None
    who = "a token sends danmaku" if settings.preview_token else "read-only: no TROUPE_PREVIEW_TOKEN"
    print(f"troupe: preview http://{settings.http_host}:{server.port}/ ({who})", file=sys.stderr, flush=True)
    return server


def store_engine(settings: Settings) -> Engine:
    """The store the read commands use; it must exist already."""
    if settings.store_url is None:
        path = settings.state_dir / "troupe.db"
        if not path.exists():
            raise StoreError(f"no store at {path}: run `troupe up` first, or set TROUPE_STORE_URL / --store")
    return open_engine(settings.store_url or default_url(settings.state_dir))

