"""The HTTP endpoint for platform bridges: ``POST /runs/RUN/danmaku`` with one danmaku or many.

A bridge (a platform's webhook, a chat relay) that does not speak NATS posts JSON: one object
or a list of them, each as on NATS (``text``, and optionally ``user``, ``to``, ``kind``,
``id``).  The request carries ``Authorization: Bearer <TROUPE_PREVIEW_TOKEN>``; without a
configured token nobody may send.  Every item is checked first, by the codec the director
decodes with: one bad item answers 400 with each bad item's index and reason, and nothing is
sent.  Then the items go to the run like any producer's, and the answer lists, per item, its
id and the director's outcome (cue, merged, skipped or rejected with its reason), waiting up
to ``?wait=S`` seconds (default 5) for them.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import nats.errors
import orjson
from aiohttp import web
from nats.aio.client import Client

from actors.preview import Boards, PreviewActor
from app.publish import RunEndedError, UnknownRunError, danmaku_from, send
from events.errors import DecodeError
from events.subjects import is_token
from infra.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from actors.runtime import ActorRuntime
    from app.preview import PreviewPage
    from app.supervisor import Stage

MAX_ITEMS = 1000  # a request's most danmaku
MAX_BODY = 2 << 20
log = logging.getLogger(__name__)


def json_response(doc: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response(doc, status=status, dumps=lambda d: orjson.dumps(d).decode())


def _error(status: int, message: str, **more: Any) -> web.Response:
    return json_response({"error": message, **more}, status)


class WebServer:
    """``troupe serve``: the HTTP endpoint on ``http_host:http_port``, talking to NATS through ``nc``;
    with the preview actor's runtime, the preview page as well (``app.preview``): its listeners
    tell the page what changes, and its kernel holds the runs' boards."""

    def __init__(self, nc: Client, settings: Settings, preview: ActorRuntime | None = None,
                 engine: Callable[[], Engine] | None = None) -> None:
        self.nc = nc
        self.settings = settings
        self.app = web.Application(client_max_size=MAX_BODY)
        self.app.router.add_post("/runs/{run}/danmaku", self.post_danmaku)
        self.app.router.add_get("/healthz", self.healthz)
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.page: PreviewPage | None = None
        if preview is not None:
            from app.preview import (
                PreviewPage,  # aiortc, the page's files: only where a page is served
            )

            assert isinstance(preview.actor, PreviewActor)
            self.page = PreviewPage(self, preview.actor, Boards(preview.kernel.states), engine)

    async def start(self) -> int:
        """Serve; returns the port (``http_port`` 0: a free one)."""
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.settings.http_host, self.settings.http_port).start()
        self.port = int(self._runner.addresses[0][1])
        return self.port

    async def close(self) -> None:
        if self.page is not None:
            await self.page.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def healthz(self, request: web.Request) -> web.Response:
        return json_response({"nats": self.nc.is_connected})

    def refused(self, request: web.Request) -> web.Response | None:
        """None when the request may send; else the answer that refuses it."""
        token = self.settings.preview_token
        if not token:
            return _error(403, "sending danmaku (or playing runs) over HTTP is off: set TROUPE_PREVIEW_TOKEN")
        given = request.headers.get("Authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
            return _error(401, "a wrong or missing token (Authorization: Bearer <token>)")
        return None

    async def post_danmaku(self, request: web.Request) -> web.Response:
        refused = self.refused(request)
        if refused is not None:
            return refused
        run = request.match_info["run"]
        if not is_token(run):
            return _error(400, "the run id must be letters, digits, _ or -")
        try:
            wait_s = float(request.query.get("wait", "5"))
        except ValueError:
            wait_s = -1.0
        if not 0 <= wait_s <= 60:  # also refuses nan
            return _error(400, "wait must be 0 to 60 seconds")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            return _error(400, f"the body is not JSON: {exc}")
        items = body if isinstance(body, list) else [body]
        if not 1 <= len(items) <= MAX_ITEMS:
            return _error(400, f"send 1 to {MAX_ITEMS} danmaku at a time, got {len(items)}")
        now = int(time.time() * 1000)
        batch, errors = [], []
        stamp = f"http-{now}-{secrets.token_hex(4)}"
        for i, item in enumerate(items):
            try:
                batch.append(danmaku_from(item, f"{stamp}-{i}", run, now))
            except DecodeError as exc:
                errors.append({"index": i, "error": str(exc)})
        if errors:
            return _error(400, "bad danmaku: nothing was sent", items=errors)
        try:
            sent = await send(self.nc, run, batch, wait_s)
        except UnknownRunError as exc:
            return _error(404, str(exc))
        except RunEndedError as exc:
            return _error(409, str(exc))
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("NATS failed while sending danmaku: %s", exc)
            return _error(503, f"NATS failed: {exc or type(exc).__name__}")
        return json_response({"run": run, "results": [s.to_dict() for s in sent]})


async def preview_server(stage: Stage, runtime: ActorRuntime | None = None) -> WebServer:
    """Start the stage's preview actor (unless its runtime is given) and serve its page; the
    server is started (``port`` set) or an ``OSError`` says why it cannot listen."""
    if runtime is None:
        [runtime] = await stage.start_actors(["preview"])
    assert isinstance(runtime.actor, PreviewActor) and stage.nc is not None
    server = WebServer(stage.nc, stage.settings, preview=runtime, engine=lambda: stage.engine)
    try:
        await server.start()
    except OSError:
        await server.close()
        raise
    return server
