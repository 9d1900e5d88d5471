"""Facts: a model reads what a viewer's comment says about them that the rules miss.

The memory worker notes the facts its rules find (``schedulers.memory.extract_facts``), in a
millisecond.  This worker (run by ``troupe up`` where ``TROUPE_FACTS=llama_cpp``) reads the same comments
with the llama.cpp model, off that way: a comment of a viewer with a stable identity, in the first
person ("Berlin is where I grew up", "我老家在成都"), is read in ``prepare`` (on a thread, one at a
time, ``TROUPE_FACTS_THREADS`` cores), and each fact the model finds that holds up against the
comment (``schedulers.memory.facts_from_model``) and that the rules did not find in it is emitted
as ``danmaku.noted`` (``extractor`` the model's name), caused by the comment: the projection
remembers it from there, and a forgetting blanks it with the rest of the comment's chain.

A model that cannot be loaded or fails on a comment leaves that comment to the rules (said in the
log, and counted); the show goes on.  Several facts processes share the work (a durable
consumer), fetching 4 comments at a time, so that a batch is read well within the ack wait; a
chat faster than the model builds a backlog in the stream, read in order, never dropped.
Re-execution reads the facts from the store: nothing here is re-executed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from actors.backends.protocols import BackendError
from actors.base import Actor, Context
from actors.runtime.core import one_line
from events.base import Event
from events.danmaku import DanmakuReceived
from events.viewer import ViewerNoted, remembered
from infra.settings import Settings
from schedulers.memory import Fact, asks_to_forget, extract_facts, may_state_facts

log = logging.getLogger(__name__)


class FactReader(Protocol):
    """What reads a comment's facts (``actors.backends.facts_llama.LlamaFactReader``)."""

    label: str

    def read(self, text: str) -> list[Fact]: ...


@dataclass(frozen=True, slots=True)
class Read:
    """What ``prepare`` read of a comment: the facts the rules missed, or why nothing was read."""

    facts: tuple[Fact, ...] = ()
    error: str = ""


def _reads(event: Event, settings: Settings) -> bool:
    return (isinstance(event, DanmakuReceived) and event.kind == "comment" and remembered(event.viewer)
            and settings.memory == "on"
            and not asks_to_forget(event.text) and may_state_facts(event.text))


class FactsActor(Actor):
    """Danmaku in; the facts a model reads in them, that the rules missed, out."""

    name = "facts"
    consumes = (DanmakuReceived,)
    emits = (ViewerNoted,)
    accepts_unknown_runs = True  # a comment to no run on air: nothing here (the director answers it)
    fetch_most = 4  # a comment read takes 1-2 s (more on a busy machine): a batch stays well within the ack wait

    def __init__(self, settings: Settings, reader: FactReader | None = None) -> None:
        self.settings = settings
        self._reader = reader
        self._load = threading.Lock()
        self.failed = 0  # comments left to the rules: the model failed on them

    @property
    def loaded(self) -> bool:
        """Whether the model is loaded (on the first comment it reads)."""
        return self._reader is not None

    def reader(self) -> FactReader:
        """The model, loaded on the first comment it reads (a show that never needs it loads nothing)."""
        with self._load:
            if self._reader is None:
                from actors.backends.facts_llama import LlamaFactReader
                self._reader = LlamaFactReader(self.settings.llama_model, self.settings.facts_threads)
            return self._reader

    def prepares(self, event: Event) -> bool:
        return isinstance(event, DanmakuReceived)  # (the run's settings say which: ``prepare``)

    def prepare(self, event: Event, ctx: Context) -> Any:
        if not _reads(event, ctx.settings_over(self.settings)):
            return None
        assert isinstance(event, DanmakuReceived)
        found = {f.key for f in extract_facts(event.text)}
        try:
            facts = self.reader().read(event.text)
        except BackendError as exc:
            self.failed += 1
            log.warning("facts: %s; comment %s left to the rules", one_line(exc), event.id)
            return Read(error=one_line(exc))
        return Read(tuple(f for f in facts if f.key not in found))

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        if ctx.run is None or ctx.ended or not isinstance(ctx.prepared, Read):
            return ()
        assert isinstance(event, DanmakuReceived)
        label = self._reader.label if self._reader is not None else "model"
        return [ViewerNoted(
            id=event.derive(f"read:{fact.key}"), run=event.run, causation=event.id, correlation=event.id,
            t_ms=ctx.now_ms, viewer=event.viewer, kind=fact.kind, value=fact.value, detail=fact.detail,
            language=fact.language, said=event.text[:200], extractor=label,
        ) for fact in ctx.prepared.facts]
