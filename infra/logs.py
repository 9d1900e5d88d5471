"""Log lines: plain text for a terminal, or one JSON object per line (``TROUPE_LOG_FORMAT=json``)
for a log collector, each with the run, role and correlation id of the event being handled.

The actor runtime sets the event's ids in ``LOG_CONTEXT`` around each handler call (and carries
them into the worker thread of a blocking actor), so any line logged meanwhile, by Troupe or by
a library, says which run, role and danmaku chain it is about.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from events.base import Event

LOG_CONTEXT: ContextVar[dict[str, str] | None] = ContextVar("troupe_log_context", default=None)
FORMATS = ("text", "json")


@contextlib.contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Add these ids (those not None) to every line logged within."""
    token = LOG_CONTEXT.set({**(LOG_CONTEXT.get() or {}), **{k: v for k, v in fields.items() if v}})
    try:
        yield
    finally:
        LOG_CONTEXT.reset(token)


def log_context_of(actor: str, run: str, event: Event | None) -> Token[dict[str, str] | None]:
    """Set the ids of an actor handling an event (the hot path's ``log_context``, without a
    generator); ``LOG_CONTEXT.reset`` the token it returns when the handler is done."""
    ids = {**outer} if (outer := LOG_CONTEXT.get()) else {}
    ids["actor"] = actor
    if run:
        ids["run"] = run
    if event is not None:
        if event.role:
            ids["role"] = event.role
        if event.correlation:
            ids["correlation"] = event.correlation
    return LOG_CONTEXT.set(ids)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the event's ids, an exception."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "logger": record.name, "msg": record.getMessage(),
        }
        doc.update(LOG_CONTEXT.get() or {})
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc).decode()


class _TextFormatter(logging.Formatter):
    """``LEVEL logger: message [run=.. role=.. correlation=..]``."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = LOG_CONTEXT.get()
        return f"{line} [{' '.join(f'{k}={v}' for k, v in ids.items())}]" if ids else line


def configure(level: int, fmt: str = "text") -> None:
    """Log to stderr at ``level`` in ``fmt`` (``text`` or ``json``), unless logging is set up
    already (a test runner, an application embedding Troupe): then it is left as it is."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else _TextFormatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
