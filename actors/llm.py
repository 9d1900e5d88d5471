"""LLM actor: writes each cue's reply in the role's persona, streamed in sentence chunks.

Cues wait in the role-priority scheduler.  The reply's sentences are released to
TTS through the throttle: the first at once, each next one while the text
released and not yet spoken (placed by lipsync) stays within the window the QoS
actor sets (4-16 tokens, shrinking as the TTS buffer fills).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.backends.llm_scripted import Persona, Prompt, ScriptedLLM
from actors.base import Context, Input, ScheduledActor, Work
from events.base import Event
from events.cue import CueIssued
from events.qos import ThrottleChanged
from events.role import RoleWeightsChanged
from events.show import Show, show_from_dict
from events.utterance import UtteranceChunk, UtteranceCompleted, UtteranceDropped
from events.viseme import VisemeTrack
from infra.settings import Settings
from schedulers.batching import tokens_of
from schedulers.throttle import ThrottlePolicy, releasable


@dataclass(slots=True)
class _Held:
    """A reply written and not all released: the LLM->TTS throttle holds the rest."""

    pieces: deque[UtteranceChunk]
    completed: UtteranceCompleted
    tokens: dict[int, int]
    released: int = 0
    spoken: int = 0
    spoken_chunks: set[int] = field(default_factory=set)


class LLMActor(ScheduledActor):
    """Cue in, utterance chunks out; cues wait in the role-priority scheduler."""

    name = "llm"
    inputs = (
        Input("cue", ("troupe.*.cue.issued.>",)), Input("role", ("troupe.*.role.weights_changed",)),
        Input("qos", ("troupe.*.qos.throttle_changed",)), Input("viseme", ("troupe.*.viseme.track.>",)),
        Input("utterance", ("troupe.*.utterance.dropped.>",)),
    )

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._backends: dict[str, ScriptedLLM] = {}
        self._shows: dict[str, Show] = {}
        self.factors: dict[str, dict[str, float]] = {}  # run -> role -> QoS weight factor
        self.throttle = ThrottlePolicy()
        self.windows: dict[str, int] = {}  # run -> tokens allowed ahead of speech (QoS)
        self._held: dict[str, dict[str, _Held]] = {}  # run -> utterance -> text not yet released

    def work(self, event: Event, ctx: Context) -> Work | None:
        if not isinstance(event, CueIssued):
            return None
        factor = self.factors.get(event.run, {}).get(event.role or "", 1.0)
        return Work(event.role or "", tokens=tokens_of(event.text), weight=event.priority * factor,
                    deadline_ms=event.deadline_ms)

    def expired(self, event: Event, ctx: Context) -> Sequence[Event]:
        assert isinstance(event, CueIssued)
        return [UtteranceDropped(
            id=event.derive("dropped"), run=event.run, role=event.role, causation=event.id,
            correlation=event.correlation, t_ms=ctx.now_ms, utterance=event.id,
            reason=f"deadline passed {ctx.now_ms - event.deadline_ms} ms ago while the cue waited",
        )]

    def _for_run(self, ctx: Context) -> tuple[ScriptedLLM, Show]:
        assert ctx.run is not None
        run = ctx.run.run
        if run not in self._backends:
            self._backends[run] = ScriptedLLM(seed=ctx.run.seed)
            self._shows[run] = show_from_dict(ctx.run.show)
        return self._backends[run], self._shows[run]

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        if isinstance(event, RoleWeightsChanged):
            self.factors[event.run] = dict(event.weights)
            return ()
        if isinstance(event, VisemeTrack | ThrottleChanged | UtteranceDropped):
            return self._progress(event, ctx)
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
        limit = min(self.settings.llm_max_sentences, event.max_sentences or self.settings.llm_max_sentences)
        chunks = list(backend.stream(persona, prompt))[:limit]  # the stage's room for this reply
        pieces = [
            UtteranceChunk(
                id=event.derive(f"chunk{i}"), t_ms=ctx.now_ms, utterance=event.id, seq=i,
                text=text, language=role.language, last=i == len(chunks) - 1, priority=event.priority,
                deadline_ms=event.deadline_ms, **common,
            )
            for i, text in enumerate(chunks)
        ]
        completed = UtteranceCompleted(
            id=event.derive("completed"), t_ms=ctx.now_ms, utterance=event.id,
            text=("" if role.language == "zh" else " ").join(chunks), chunks=len(chunks),
            backend=backend.name, **common,
        )
        held = _Held(deque(pieces), completed, {p.seq: tokens_of(p.text) for p in pieces})
        self._held.setdefault(event.run, {})[event.id] = held
        return self._release(event.run, held, ctx.now_ms)

    def _release(self, run: str, held: _Held, now_ms: int) -> list[Event]:
        """Release text while what is ahead of speech stays within the throttle window."""
        window = self.windows.get(run, self.throttle.max_tokens)
        out: list[Event] = []
        while held.pieces and releasable(held.released - held.spoken, window, held.tokens[held.pieces[0].seq]):
            piece = held.pieces.popleft()
            held.released += held.tokens[piece.seq]
            out.append(dataclasses.replace(piece, t_ms=now_ms))
        if not held.pieces:
            out.append(dataclasses.replace(held.completed, t_ms=now_ms))
            self._held.get(run, {}).pop(held.completed.utterance, None)
        return out

    def _progress(self, event: Event, ctx: Context) -> Sequence[Event]:
        """Speech placed (a sentence's last viseme track), a new window, or a reply cut short."""
        if isinstance(event, ThrottleChanged):
            self.windows[event.run] = event.window_tokens
            return [e for held in list(self._held.get(event.run, {}).values())
                    for e in self._release(event.run, held, ctx.now_ms)]
        held_runs = self._held.get(event.run, {})
        if isinstance(event, UtteranceDropped):
            held_runs.pop(event.utterance, None)
            return ()
        assert isinstance(event, VisemeTrack)
        held = held_runs.get(event.utterance)
        if held is None or not event.chunk_done or event.chunk in held.spoken_chunks:
            return ()
        held.spoken_chunks.add(event.chunk)
        held.spoken += held.tokens.get(event.chunk, 0)
        return self._release(event.run, held, ctx.now_ms)
