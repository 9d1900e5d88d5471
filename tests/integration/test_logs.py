"""Log lines carry the run, role and correlation id of the event being handled, as JSON lines
(``TROUPE_LOG_FORMAT=json``), from a handler on the event loop and from a blocking one's thread."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence

import orjson
import pytest
from nats.js import JetStreamContext

from actors.base import Actor, Context, Input
from actors.runtime import ActorRuntime
from events import codec
from events.base import Event
from events.danmaku import DanmakuReceived
from infra.logs import JsonFormatter
from infra.metrics import Metrics
from infra.settings import Settings
from tests.conftest import wait_for

_ids = itertools.count()
log = logging.getLogger("tests.logs")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(orjson.loads(self.format(record)))


@pytest.mark.parametrize("blocking", [False, True], ids=["event-loop", "worker-thread"])
async def test_a_handler_s_log_lines_say_which_run_role_and_chain(js: JetStreamContext, settings: Settings,
                                                                  blocking: bool) -> None:
    run = f"logs{next(_ids)}"

    class Talker(Actor):
        name = f"talker{next(_ids)}"
        inputs = (Input("danmaku", (f"troupe.{run}.danmaku.received.>",)),)
        accepts_unknown_runs = True

        def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
            log.warning("handling %s", event.id)
            return ()

    Talker.blocking = blocking
    lines = _Lines()
    log.addHandler(lines)
    try:
        async with ActorRuntime(Talker(), js, settings, Metrics()):
            event = DanmakuReceived(id=f"{run}-d1", run=run, role="rex", correlation=f"{run}-d1", text="hi")
            await js.publish(f"troupe.{run}.danmaku.received.rex", codec.encode(event))
            await wait_for(lambda: bool(lines.lines), 10, "the handler's log line")
    finally:
        log.removeHandler(lines)
    [line] = lines.lines
    assert line["msg"] == f"handling {run}-d1" and line["level"] == "WARNING" and line["logger"] == "tests.logs"
    assert (line["run"], line["role"], line["correlation"]) == (run, "rex", f"{run}-d1")
    assert str(line["actor"]).startswith("talker") and str(line["ts"]).endswith("Z")
