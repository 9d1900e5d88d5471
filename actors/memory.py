"""Memory: what the stage knows of a viewer, read for the director, and the facts viewers state.

- ``Reader`` reads a viewer's profile from the read model (``store.viewers``: their earlier shows,
  totals, facts, topics, the roles that answered them) within a time limit, on a thread pool of
  its own.  The director reads with it in ``prepare``, for a remembered viewer's comment, and
  records what it read as ``danmaku.recalled`` (``recalled``) before it decides: the handler does
  no I/O, and re-execution takes the recorded recall instead of reading (the read model may have
  moved on since).  No hop through another actor lies on the cue's way.
- ``MemoryActor`` emits ``danmaku.noted`` for each fact a comment states about its viewer
  (``schedulers.memory``), with the comment as its cause: the projection, which the memory
  process runs (``app.supervisor``), remembers it from there.  Several memory processes share the
  work (a durable consumer, like the llm and tts workers).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from actors.base import Actor, Context
from actors.runtime.core import one_line
from events.base import Event
from events.danmaku import DanmakuReceived
from events.viewer import ViewerNoted, ViewerRecalled, remembered
from infra.settings import Settings
from schedulers.memory import asks_to_forget, bearing, extract_facts, facts_first
from store.viewers import Profile, profile

log = logging.getLogger(__name__)
FACTS_RECALLED = 6
TOPICS_RECALLED = 5
READERS = 4  # reads of the read model at once (a slow store holds a thread each until it answers)


@dataclass(frozen=True, slots=True)
class Looked:
    """What was read of a viewer: their profile (None: not known), or why it could not be."""

    profile: Profile | None
    error: str = ""


class Reader:
    """Reads viewers' profiles from the store within a time limit: a read that takes longer is
    given up on (``Looked`` says why; it finishes on its thread, unused), so that a slow store
    delays a remembered viewer's comment by the limit at most."""

    def __init__(self, engine: Callable[[], Engine]) -> None:
        self._engine = engine  # the store, opened on first use
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None  # made on the first read
        self._stuck: concurrent.futures.Future[Looked] | None = None  # the last read given up on
        self._lock = threading.Lock()

    def look(self, viewer: str, limit_ms: int) -> Looked:
        """The viewer's profile, or why there is none, within ``limit_ms``.  While a read given up
        on has not finished (a store that hangs), none is tried: each would cost the limit."""
        stuck = self._stuck
        if stuck is not None and not stuck.done():
            return Looked(None, "the store has not answered an earlier read yet")
        with self._lock:  # (the director prepares a batch's comments side by side)
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(READERS, thread_name_prefix="recall")
            future = self._pool.submit(self._read, viewer)
        try:
            return future.result(timeout=limit_ms / 1000)
        except concurrent.futures.TimeoutError:
            self._stuck = future
            log.warning("memory: the store did not answer within %d ms for %s", limit_ms, viewer)
            return Looked(None, f"the store did not answer within {limit_ms} ms")

    def _read(self, viewer: str) -> Looked:
        try:
            return Looked(profile(self._engine(), viewer))
        except Exception as exc:  # noqa: BLE001 - the store away: the comment goes on, said so
            log.warning("memory: cannot read what the stage remembers of %s: %s", viewer, one_line(exc))
            return Looked(None, f"the store could not be read: {one_line(exc)}")

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None


def recalled(event: DanmakuReceived, looked: Looked, t_ms: int) -> ViewerRecalled:
    """What the stage remembers of a comment's viewer, as read (``looked``), and the facts the
    comment bears on; ``known`` False for a viewer not known (seen for the first time, or the
    store not read: ``reason`` says so)."""
    known = looked.profile
    facts = known.fact_values() if known is not None else []
    bears = bearing(event.text, facts)
    return ViewerRecalled(
        id=event.derive("recalled"), run=event.run, causation=event.id, correlation=event.id, t_ms=t_ms,
        viewer=event.viewer, danmaku=event.id, known=known is not None,
        shows=len([r for r in known.runs if r != event.run]) if known else 0,
        comments=known.comments if known else 0, gifts=known.gifts if known else 0,
        gift_value=known.gift_value if known else 0.0, last_seen_at_ms=known.last_seen_at_ms if known else 0,
        facts=tuple(f.line for f in facts_first(facts, bears))[:FACTS_RECALLED],
        bears=tuple(f.line for f in bears), topics=tuple(t["topic"] for t in known.topics)[:TOPICS_RECALLED]
        if known else (), roles=tuple(r for r, _ in known.roles)[:3] if known else (), reason=looked.error,
    )


def forgotten(event: DanmakuReceived, t_ms: int) -> ViewerRecalled:
    """A viewer's ``!forget``: nothing recalled, and the projector forgets them."""
    return ViewerRecalled(id=event.derive("recalled"), run=event.run, causation=event.id, correlation=event.id,
                          t_ms=t_ms, viewer=event.viewer, danmaku=event.id, forget=True,
                          reason="the viewer asked to be forgotten (!forget)")


def _notes(event: Event, settings: Settings | None) -> bool:
    return (isinstance(event, DanmakuReceived) and event.kind == "comment" and remembered(event.viewer)
            and (settings is None or settings.memory == "on"))


class MemoryActor(Actor):
    """Danmaku in; the facts viewers state about themselves out."""

    name = "memory"
    consumes = (DanmakuReceived,)
    emits = (ViewerNoted,)
    accepts_unknown_runs = True  # a comment to no run on air is the director's to answer: nothing here

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        if ctx.run is None or ctx.ended or not _notes(event, ctx.settings):
            return ()
        assert isinstance(event, DanmakuReceived)
        if asks_to_forget(event.text):  # nothing noted: the projector forgets them at the recall
            return ()
        common: dict[str, Any] = {"run": event.run, "causation": event.id, "correlation": event.id, "t_ms": ctx.now_ms}
        return [ViewerNoted(
            id=event.derive(f"noted:{fact.key}"), viewer=event.viewer, kind=fact.kind, value=fact.value,
            detail=fact.detail, language=fact.language, said=event.text[:200], **common,
        ) for fact in extract_facts(event.text)]
