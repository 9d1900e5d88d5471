"""The HTTP endpoint for platform bridges: POST /runs/RUN/danmaku, token-protected, answered per item."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from app.web import WebServer
from infra.bus import connect
from infra.settings import Settings
from tests.integration.test_publish_cli import LiveRun, count, live  # noqa: F401 - the fixture

TOKEN = "s3cret-token"


@pytest.fixture
async def endpoint(live: LiveRun, settings: Settings) -> AsyncIterator[str]:  # noqa: F811
    nc = await connect(live.url, "tests-http")
    server = WebServer(nc, settings.replace(http_port=0, preview_token=TOKEN))
    port = await server.start()
    yield f"http://127.0.0.1:{port}"
    await server.close()
    await nc.close()


async def post(url: str, body: Any, token: str | None = TOKEN, raw: bytes | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as session, session.post(
        url, data=raw if raw is not None else None, json=None if raw is not None else body, headers=headers,
    ) as response:
        return response.status, await response.json()


async def test_one_danmaku_is_answered_with_its_id_and_cue(live: LiveRun, endpoint: str) -> None:  # noqa: F811
    status, doc = await post(f"{endpoint}/runs/{live.run}/danmaku?wait=15",
                             {"user": "alice", "text": "hello @rex", "id": f"{live.run}-a1"})
    assert status == 200, doc
    [result] = doc["results"]
    assert result["id"] == f"{live.run}-a1" and result["outcome"] == "cue" and result["role"] == "rex"


async def test_many_are_answered_each_with_its_outcome_or_reason(live: LiveRun, endpoint: str) -> None:  # noqa: F811
    items = [{"user": "bo", "text": "hi @xiaolu"}, {"user": "cy", "text": "   "},
             {"user": "di", "text": "a badword here"}, {"text": "hello @mika", "kind": "gift"}]
    status, doc = await post(f"{endpoint}/runs/{live.run}/danmaku?wait=15", items)
    assert status == 200, doc
    results = doc["results"]
    assert len(results) == 4 and len({r["id"] for r in results}) == 4
    assert [r["outcome"] for r in results] == ["cue", "rejected", "rejected", "cue"]
    assert [r.get("reason") for r in results[1:3]] == ["empty", "blocked"]


async def test_a_bad_item_sends_nothing_and_names_each_bad_item(live: LiveRun, endpoint: str) -> None:  # noqa: F811
    items = [{"text": "fine"}, {"text": 42}, "not an object", {"text": "ok", "kind": 7}]
    status, doc = await post(f"{endpoint}/runs/{live.run}/danmaku", items)
    assert status == 400
    assert [e["index"] for e in doc["items"]] == [1, 2, 3] and "nothing was sent" in doc["error"]
    assert "text" in doc["items"][0]["error"]
    assert await count(live.stage.js, "danmaku", live.run, "danmaku.received.>") == 0
    status, doc = await post(f"{endpoint}/runs/{live.run}/danmaku", None, raw=b"{not json")
    assert status == 400 and "not JSON" in doc["error"]


async def test_a_wrong_or_missing_token_cannot_send(live: LiveRun, endpoint: str, settings: Settings) -> None:  # noqa: F811
    for token in ("wrong", None, ""):
        status, doc = await post(f"{endpoint}/runs/{live.run}/danmaku", {"text": "hi"}, token=token)
        assert status == 401, doc
    nc = await connect(live.url, "tests-http-off")
    off = WebServer(nc, settings.replace(http_port=0, preview_token=None))  # no token set: nobody may send
    port = await off.start()
    try:
        status, doc = await post(f"http://127.0.0.1:{port}/runs/{live.run}/danmaku", {"text": "hi"})
        assert status == 403 and "TROUPE_PREVIEW_TOKEN" in doc["error"]
    finally:
        await off.close()
        await nc.close()
    assert await count(live.stage.js, "danmaku", live.run, "danmaku.received.>") == 0


async def test_an_unknown_run_is_404_and_nothing_is_sent(endpoint: str) -> None:
    status, doc = await post(f"{endpoint}/runs/nosuchrun/danmaku", {"text": "hi"})
    assert status == 404 and "no run nosuchrun" in doc["error"]
    status, doc = await post(f"{endpoint}/runs/bad%20run/danmaku", {"text": "hi"})
    assert status == 400
