"""Memory: what the stage knows of a viewer reaches the director as an event.

For each comment or gift of a viewer with a stable identity (``events.viewer.remembered``) it
emits, in the danmaku stream:

- ``danmaku.recalled``: the viewer's profile as the read model holds it (``store.viewers``: their
  earlier shows, totals, facts, topics, the roles that answered them) and the facts this comment
  bears on; ``known`` False for a viewer seen for the first time.  The director takes the comment
  in when it comes (``TROUPE_RECALL_WAIT_MS`` at most) and the cue carries it to the writer.
- ``danmaku.noted``: each fact the comment states about its viewer (``schedulers.memory``), with
  the comment as its cause: the projection remembers it from there.

The read model is read in ``prepare`` (on a thread beside the handler, the store's I/O); the
handler only decides, from the comment and what was read.  Several memory processes share the
work (a durable consumer, like the llm and tts workers).  Re-execution needs none of this: the
director reads the recall from the store like any other input.
"""

from __future__ import annotations

import logging
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


@dataclass(frozen=True, slots=True)
class Looked:
    """What ``prepare`` read of a viewer: their profile (None: not known), or why it could not."""

    profile: Profile | None
    error: str = ""


def _asks(event: Event, settings: Settings | None) -> bool:
    return (isinstance(event, DanmakuReceived) and event.kind != "moderator" and remembered(event.viewer)
            and (settings is None or settings.memory == "on"))


class MemoryActor(Actor):
    """Danmaku in; what the stage remembers of the viewer, and the facts they state, out."""

    name = "memory"
    consumes = (DanmakuReceived,)
    emits = (ViewerRecalled, ViewerNoted)
    accepts_unknown_runs = True  # a comment to no run on air is the director's to answer: nothing here

    def __init__(self, engine: Callable[[], Engine]) -> None:
        self._engine = engine  # the store, opened on first use

    def prepare(self, event: Event, ctx: Context) -> Any:
        # (ctx.run is not known here before the run's first input is taken: handle turns away the
        # comments of runs not on air)
        if not _asks(event, ctx.settings):
            return None
        assert isinstance(event, DanmakuReceived)
        if asks_to_forget(event.text):  # nothing is recalled for a !forget: no read
            return None
        try:
            return Looked(profile(self._engine(), event.viewer))
        except Exception as exc:  # noqa: BLE001 - the store away: the comment goes on, said so
            log.warning("memory: cannot read what the stage remembers of %s: %s", event.viewer, one_line(exc))
            return Looked(None, f"the store could not be read: {one_line(exc)}")

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        if ctx.run is None or ctx.ended or not _asks(event, ctx.settings):
            return ()
        assert isinstance(event, DanmakuReceived)
        common: dict[str, Any] = {"run": event.run, "causation": event.id, "correlation": event.id, "t_ms": ctx.now_ms}
        if asks_to_forget(event.text):  # nothing recalled, nothing noted: the projector forgets them
            return [ViewerRecalled(id=event.derive("recalled"), viewer=event.viewer, danmaku=event.id, forget=True,
                                   reason="the viewer asked to be forgotten (!forget)", **common)]
        looked: Looked = ctx.prepared if isinstance(ctx.prepared, Looked) else Looked(None, "not read")
        known = looked.profile
        facts = known.fact_values() if known is not None else []
        bears = bearing(event.text, facts)
        out: list[Event] = [ViewerRecalled(
            id=event.derive("recalled"), viewer=event.viewer, danmaku=event.id, known=known is not None,
            shows=len([r for r in known.runs if r != event.run]) if known else 0,
            comments=known.comments if known else 0, gifts=known.gifts if known else 0,
            gift_value=known.gift_value if known else 0.0, last_seen_at_ms=known.last_seen_at_ms if known else 0,
            facts=tuple(f.line for f in facts_first(facts, bears))[:FACTS_RECALLED],
            bears=tuple(f.line for f in bears), topics=tuple(t["topic"] for t in known.topics)[:TOPICS_RECALLED]
            if known else (), roles=tuple(r for r, _ in known.roles)[:3] if known else (), reason=looked.error,
            **common,
        )]
        if event.kind == "comment":
            out += [ViewerNoted(
                id=event.derive(f"noted:{fact.key}"), viewer=event.viewer, kind=fact.kind, value=fact.value,
                detail=fact.detail, language=fact.language, said=event.text[:200], **common,
            ) for fact in extract_facts(event.text)]
        return out
