"""LLM actor: writes each cue's reply in the role's persona, streamed in sentence chunks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actors.backends.llm_scripted import Persona, Prompt, ScriptedLLM
from actors.base import Actor, Context, Input
from actors.show import Show, show_from_dict
from events.base import Event
from events.cue import CueIssued
from events.utterance import UtteranceChunk, UtteranceCompleted, UtteranceDropped
from infra.settings import Settings


class LLMActor(Actor):
    """Cue in, utterance chunks out."""

    name = "llm"
    inputs = (Input("cue", ("troupe.*.cue.issued.>",)),)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._backends: dict[str, ScriptedLLM] = {}
        self._shows: dict[str, Show] = {}

    def _for_run(self, ctx: Context) -> tuple[ScriptedLLM, Show]:
        assert ctx.run is not None
        run = ctx.run.run
        if run not in self._backends:
            self._backends[run] = ScriptedLLM(seed=ctx.run.seed)
            self._shows[run] = show_from_dict(ctx.run.show)
        return self._backends[run], self._shows[run]

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        if not isinstance(event, CueIssued):
            return ()
        common: dict[str, Any] = {
            "run": event.run, "role": event.role, "causation": event.id, "correlation": event.correlation,
        }
        if event.deadline_ms and ctx.now_ms > event.deadline_ms:
            return [UtteranceDropped(
                id=event.derive("dropped"), t_ms=ctx.now_ms, utterance=event.id,
                reason=f"deadline passed {ctx.now_ms - event.deadline_ms} ms before writing", **common,
            )]
        backend, show = self._for_run(ctx)
        role = show.role(event.role or "")
        if role is None:
            return [UtteranceDropped(
                id=event.derive("dropped"), t_ms=ctx.now_ms, utterance=event.id,
                reason=f"role {event.role!r} is not in the show", **common,
            )]
        persona = Persona(role.id, role.name, role.persona, role.language, role.keywords)
        prompt = Prompt(cue_id=event.id, user=event.user, text=event.text)
        chunks = list(backend.stream(persona, prompt))[: self.settings.llm_max_sentences]
        out: list[Event] = [
            UtteranceChunk(
                id=event.derive(f"chunk{i}"), t_ms=ctx.now_ms, utterance=event.id, seq=i,
                text=text, language=role.language, last=i == len(chunks) - 1, **common,
            )
            for i, text in enumerate(chunks)
        ]
        out.append(UtteranceCompleted(
            id=event.derive("completed"), t_ms=ctx.now_ms, utterance=event.id,
            text=("" if role.language == "zh" else " ").join(chunks), chunks=len(chunks),
            backend=backend.name, **common,
        ))
        return out
