"""The preview page: the show watched and steered in a browser.

Served by ``troupe up --preview`` and ``troupe actor preview`` beside the danmaku endpoint
(``app.web``), from the preview actor's boards, read where its kernel holds them
(``actors.preview.Boards``), and what its listeners are told:

- ``GET /``: the page (its script, style and CJK font are served from here too: no CDN);
- ``GET /api/runs``: the runs on the boards, and the runs recorded in the store;
- ``GET /api/runs/RUN/feed``: server-sent events: the run's state, then each change (danmaku
  and their outcomes and replies, the floor, role weights, resolution, answers' latencies,
  live outputs);
- ``POST /api/runs/RUN/webrtc``: the page's WebRTC offer, answered with the stage's video and
  audio (``app.webrtc``);
- ``POST /api/runs/RUN/play``: play a recorded run from the store into a new run (token);
- the page's input box posts to ``POST /runs/RUN/danmaku`` (token), like any bridge;
- its operator buttons (hold, resume, next segment, say) post to ``POST /api/runs/RUN/control``
  (token): a ``danmaku.control``, answered with what the director did.

Reading is open (the server binds to 127.0.0.1 unless told otherwise); sending and playing
need ``TROUPE_PREVIEW_TOKEN``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web
from sqlalchemy.exc import SQLAlchemyError

from actors.backends.stage_art import packaged_cjk_font
from actors.preview import Boards, Message, PreviewActor
from app.publish import RunError, send
from app.web import WebServer
from app.web import json_response as _json
from events.danmaku import CONTROLS, OperatorControl
from events.errors import TroupeError
from events.subjects import is_token

if TYPE_CHECKING:
    from sqlalchemy import Engine

log = logging.getLogger(__name__)
FEED_QUEUE = 2048     # messages a slow page may fall behind before its feed is restarted
HEARTBEAT_S = 15.0
STATIC = {"preview.js": "text/javascript", "preview.css": "text/css"}


def _page_file(name: str) -> bytes:
    return resources.files("app").joinpath("static", name).read_bytes()


class PreviewPage:
    """The page's routes on a ``WebServer``."""

    def __init__(self, server: WebServer, preview: PreviewActor, boards: Boards,
                 engine: Callable[[], Engine] | None) -> None:
        from app.webrtc import Peers  # aiortc: imported only where a page is served

        self.server = server
        self.preview = preview
        self.boards = boards
        self.engine = engine
        self.peers = Peers(preview, boards)
        self._feeds: set[asyncio.Queue[Message | None]] = set()
        self._plays: set[asyncio.Task[float]] = set()
        preview.listeners.append(self._broadcast)
        router = server.app.router
        router.add_get("/", self.index)
        router.add_get("/static/{name}", self.static)
        router.add_get("/api/runs", self.runs)
        router.add_get("/api/runs/{run}/feed", self.feed)
        router.add_post("/api/runs/{run}/webrtc", self.webrtc)
        router.add_post("/api/runs/{run}/play", self.play)
        router.add_post("/api/runs/{run}/control", self.control)

    async def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.preview.listeners.remove(self._broadcast)
        for queue in list(self._feeds):
            queue.put_nowait(None)
        for task in list(self._plays):
            task.cancel()
        await self.peers.close()

    async def index(self, request: web.Request) -> web.Response:
        return web.Response(body=_page_file("preview.html"), content_type="text/html", charset="utf-8")

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name == "cjk.otf":  # the font the stage uses: Chinese in the feed on any machine
            font = packaged_cjk_font()
            if font is None:
                raise web.HTTPNotFound()
            return web.FileResponse(font, headers={"Cache-Control": "max-age=86400"})
        if name not in STATIC:
            raise web.HTTPNotFound()
        return web.Response(body=_page_file(name), content_type=STATIC[name], charset="utf-8")

    async def runs(self, request: web.Request) -> web.Response:
        recorded: list[dict[str, Any]] = []
        if self.engine is not None:
            from store.queries import list_runs

            try:
                infos = await asyncio.to_thread(list_runs, self.engine(), 20)
            except (TroupeError, SQLAlchemyError) as exc:  # watching needs no store: say why it is missing
                log.warning("the preview cannot list recorded runs: %s", exc)
            else:
                recorded = [{"run": i.id, "started_at_ms": i.started_at_ms, "duration_ms": i.duration_ms,
                             "status": i.status, "roles": list(i.roles), "replay_of": i.replay_of}
                            for i in infos]
        return _json({"live": self.boards.runs(), "recorded": recorded, "token": bool(self.server.settings.preview_token)})

    def _broadcast(self, run: str, message: Message) -> None:
        for queue in list(self._feeds):
            if getattr(queue, "run", None) not in (run, "*"):
                continue
            try:
                queue.put_nowait(message)
            except asyncio.QueueFull:  # a page that cannot keep up: its feed restarts with the state
                self._feeds.discard(queue)
                with contextlib.suppress(asyncio.QueueFull):
                    queue.get_nowait()
                    queue.put_nowait(None)

    async def feed(self, request: web.Request) -> web.StreamResponse:
        run = _run(request)
        queue: asyncio.Queue[Message | None] = asyncio.Queue(FEED_QUEUE)
        queue.run = run  # type: ignore[attr-defined]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        board = self.boards.get(run)
        first = board.state() if board is not None else {"type": "waiting", "run": run}
        self._feeds.add(queue)
        try:
            await response.write(_sse(first))
            while True:
                try:
                    message = await asyncio.wait_for(queue.get(), HEARTBEAT_S)
                except TimeoutError:
                    await response.write(b": heartbeat\n\n")
                    continue
                if message is None:
                    break
                await response.write(_sse(message))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._feeds.discard(queue)
        return response

    async def webrtc(self, request: web.Request) -> web.Response:
        run = _run(request)
        try:
            offer = orjson.loads(await request.read())
            if not isinstance(offer, dict) or offer.get("type") != "offer" or not isinstance(offer.get("sdp"), str):
                raise ValueError("expected {\"type\": \"offer\", \"sdp\": ...}")
            answer = await self.peers.answer(run, offer)
        except (ValueError, orjson.JSONDecodeError) as exc:
            return _json({"error": f"bad offer: {exc}"}, 400)
        return _json(answer)

    async def play(self, request: web.Request) -> web.Response:
        refused = self.server.refused(request)
        if refused is not None:
            return refused
        run = _run(request)
        if self.engine is None:
            return _json({"error": "no store to play from"}, 404)
        from app import playback

        into = f"{run}-replay-{secrets.token_hex(2)}"
        try:
            messages = await asyncio.to_thread(playback.prepare, self.engine(), run, into, None, None, None)
        except TroupeError as exc:
            return _json({"error": str(exc)}, 404)
        js = self.server.nc.jetstream(timeout=10.0)
        task = asyncio.create_task(playback.publish(js, messages, 1.0, None))
        self._plays.add(task)
        task.add_done_callback(self._played)
        return _json({"run": run, "into": into, "events": len(messages)})

    async def control(self, request: web.Request) -> web.Response:
        """An operator's control from the page's buttons (the token holder only): published as
        ``danmaku.control`` and answered with what the director did."""
        refused = self.server.refused(request)
        if refused is not None:
            return refused
        run = _run(request)
        try:
            doc = orjson.loads(await request.read())
            if not isinstance(doc, dict) or doc.get("action") not in CONTROLS:
                raise ValueError(f"expected {{\"action\": one of {', '.join(CONTROLS)}}}")
            control = OperatorControl(
                id=f"page-{secrets.token_hex(6)}", run=run, action=str(doc["action"]), text=str(doc.get("text", "")),
                target=str(doc.get("target", "")), all=bool(doc.get("all", False)), user="preview",
                at_ms=int(time.time() * 1000))
        except (ValueError, orjson.JSONDecodeError) as exc:
            return _json({"error": f"bad control: {exc}"}, 400)
        try:
            [sent] = await send(self.server.nc, run, [control], 5.0)
        except RunError as exc:
            return _json({"error": str(exc)}, 404)
        answer = sent.to_dict()
        return _json(answer, 422 if answer["outcome"] == "rejected" else 200)

    def _played(self, task: asyncio.Task[float]) -> None:
        self._plays.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("playing a recorded run failed: %s", task.exception())


def _run(request: web.Request) -> str:
    run = request.match_info["run"]
    if not is_token(run):
        raise web.HTTPBadRequest(body=orjson.dumps({"error": "the run id must be letters, digits, _ or -"}),
                                 content_type="application/json")
    return run


def _sse(message: Message) -> bytes:
    return b"data: " + orjson.dumps(message, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n\n"


