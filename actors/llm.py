"""LLM actor: writes each cue's reply in the role's persona, streamed in sentence chunks.

Cues wait in the role-priority scheduler; a batch of one role's cues goes to the reply
writer (``actors.backends``, chosen by ``TROUPE_LLM_BACKEND``) in one call.  A reply's
sentences are released to TTS through the throttle as the writer streams them: the first
at once, each next one while the text released and not yet spoken (placed by lipsync)
stays within the window the QoS actor sets (4-16 tokens, shrinking as the TTS buffer
fills).  A sentence goes out once the writer has yielded the next one (or ended), because its
chunk says whether it is the reply's last.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.backends.protocols import Persona, Prompt, ReplyWriter, Sentence
from actors.backends.registry import BACKENDS, Backends
from actors.backends.text import verbatim_sentences
from actors.base import Context, Handled, ScheduledActor, Work
from events.base import Event
from events.cue import CueIssued
from events.qos import ThrottleChanged
from events.role import RoleWeightsChanged
from events.show import RoleSpec, Show, blocked, show_from_dict
from events.utterance import UtteranceChunk, UtteranceCompleted, UtteranceDropped
from events.viseme import VisemeTrack
from infra.settings import Settings
from schedulers.batching import tokens_of
from schedulers.throttle import ThrottlePolicy, releasable

_UNREAD = Sentence("")  # the next sentence has not been asked for yet
CONTEXT_LINES = 6  # the last sentences spoken on stage a writer is given
WRITTEN_KEPT = 32  # replies remembered per run, for the follow-ups that answer them
# What is said instead of a written sentence that contains a blocked word.
DEFLECTIONS = {"en": "Let's talk about something else!", "zh": "我们聊点别的吧！"}
log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Held:
    """A reply being written or not all released: the LLM->TTS throttle holds the rest."""

    pieces: deque[UtteranceChunk] = field(default_factory=deque)
    completed: UtteranceCompleted | None = None  # set once the writer has ended
    tokens: dict[int, int] = field(default_factory=dict)
    released: int = 0
    spoken: int = 0
    spoken_chunks: set[int] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class _Cue:
    """A cue that gets a reply: its role, what the writer is asked, and the sentences room."""

    event: CueIssued
    role: RoleSpec
    persona: Persona
    prompt: Prompt
    limit: int
    writer: ReplyWriter


class LLMActor(ScheduledActor):
    """Cue in, utterance chunks out; cues wait in the role-priority scheduler."""

    name = "llm"
    consumes = (CueIssued, RoleWeightsChanged, ThrottleChanged, VisemeTrack, UtteranceDropped)
    emits = (UtteranceChunk, UtteranceCompleted, UtteranceDropped)

    blocking = True  # the writer runs off the event loop; the actor's state lives on its worker thread

    def __init__(self, settings: Settings, writer: ReplyWriter | None = None, backends: Backends = BACKENDS) -> None:
        self.settings = settings
        self.backends = backends
        self.writer = writer if writer is not None else backends.reply_writer(settings.llm_backend)
        # The writers roles name in the show file (backend, model), built on first use.
        self._writers: dict[tuple[str, str | None], ReplyWriter] = {}
        self._spoken: dict[str, deque[tuple[str, str, str]]] = {}  # run -> (utterance, role, text) on stage
        self._shows: dict[str, Show] = {}
        self.factors: dict[str, dict[str, float]] = {}  # run -> role -> QoS weight factor
        self.throttle = ThrottlePolicy()
        self.windows: dict[str, int] = {}  # run -> tokens allowed ahead of speech (QoS)
        self._held: dict[str, dict[str, _Held]] = {}  # run -> utterance -> text not yet released
        # run -> utterance -> what this actor wrote for it (a follow-up answers one of them)
        self._written: dict[str, dict[str, str]] = {}

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

    def holds(self, run: str) -> bool:
        return any(run in per_run for per_run in (self._shows, self.factors, self.windows, self._held, self._spoken,
                                                     self._written))

    def release(self, run: str) -> None:
        for per_run in (self._shows, self.factors, self.windows, self._held, self._spoken, self._written):
            per_run.pop(run, None)

    def close(self) -> None:
        """Stop the writers that hold something outside this process (a served model's engine)."""
        for writer in {id(w): w for w in (self.writer, *self._writers.values())}.values():
            close = getattr(writer, "close", None)
            if close is not None:
                close()

    def writer_for(self, role: RoleSpec) -> ReplyWriter:
        """The role's writer: the backend (and model) its show entry names, else the settings';
        a writer that cannot write the role's language falls back to the scripted replies."""
        writer = (self.writer if role.llm_backend is None and role.llm_model is None else
                  self._built(role.llm_backend or self.settings.llm_backend, role.llm_model))
        languages = getattr(writer, "languages", None)
        if languages is not None and role.language not in languages:
            if ("scripted", None) not in self._writers:  # said once, when the fallback is first built
                log.warning("the %s writer cannot write %r: role %s gets scripted replies",
                            writer.name, role.language, role.id)
            writer = self._built("scripted", None)
        return writer

    def _built(self, backend: str, model: str | None) -> ReplyWriter:
        """The writer of a backend and model, built on first use."""
        key = (backend, model)
        if key not in self._writers:
            self._writers[key] = self.backends.reply_writer(backend, model=model)
        return self._writers[key]

    def _show(self, ctx: Context) -> Show:
        assert ctx.run is not None
        show = self._shows.get(ctx.run.run)
        if show is None:
            show = self._shows[ctx.run.run] = show_from_dict(ctx.run.show)
        return show

    def handle(self, event: Event, ctx: Context) -> Handled:
        if isinstance(event, RoleWeightsChanged):
            self.factors[event.run] = dict(event.weights)
            return ()
        if isinstance(event, VisemeTrack | ThrottleChanged | UtteranceDropped):
            return self._progress(event, ctx)
        if not isinstance(event, CueIssued):
            return ()
        cue = self._cue(event, ctx)
        if not isinstance(cue, _Cue):
            return cue
        return self._write(cue, self._sentences_of(cue), ctx)

    @staticmethod
    def _sentences_of(cue: _Cue) -> Iterable[str]:
        """What the writer writes, or the cue's own text when it is said word for word."""
        return verbatim_sentences(cue.event.text) if cue.event.verbatim else cue.writer.stream(cue.persona, cue.prompt)

    def handle_batch(self, events: Sequence[Event], ctx: Context) -> list[Handled]:
        """One role's cues: the writer gets their prompts in one call (per persona), and each
        cue's reply streams out as the writer writes it."""
        cues = [self._cue(e, ctx) if isinstance(e, CueIssued) else None for e in events]
        by_persona: dict[tuple[Persona, int], list[_Cue]] = {}
        for cue in cues:
            if isinstance(cue, _Cue) and not cue.event.verbatim:
                by_persona.setdefault((cue.persona, id(cue.writer)), []).append(cue)
        replies: dict[str, Iterator[str]] = {}
        for (persona, _), group in by_persona.items():
            streams = group[0].writer.write_batch(persona, [c.prompt for c in group])
            replies.update(zip((c.event.id for c in group), streams, strict=True))
        out: list[Handled] = []
        for event, cue in zip(events, cues, strict=True):
            if cue is None:
                out.append(self.handle(event, ctx))
            elif isinstance(cue, _Cue):
                out.append(self._write(cue, replies[event.id] if event.id in replies else self._sentences_of(cue), ctx))
            else:
                out.append(cue)
        return out

    def _cue(self, event: CueIssued, ctx: Context) -> _Cue | list[Event]:
        """What to ask the writer for a cue, or the drop that answers it instead."""
        common = _common(event)
        if event.deadline_ms and ctx.now_ms > event.deadline_ms:
            return [UtteranceDropped(
                id=event.derive("dropped"), t_ms=ctx.now_ms, utterance=event.id,
                reason=f"deadline passed {ctx.now_ms - event.deadline_ms} ms before writing", **common,
            )]
        assert ctx.run is not None
        show = self._show(ctx)
        role = show.role(event.role or "")
        if role is None:
            return [UtteranceDropped(
                id=event.derive("dropped"), t_ms=ctx.now_ms, utterance=event.id,
                reason=f"role {event.role!r} is not in the show", **common,
            )]
        persona = Persona(role.id, role.name, role.persona, role.language, role.keywords, role.llm_adapter)
        limit = min(self.settings.llm_max_sentences, event.max_sentences or self.settings.llm_max_sentences)
        if event.verbatim:
            limit = 64  # said word for word, whole
        context = tuple(f"{_name(show, who)}: {text}" for _, who, text in self._spoken.get(event.run, ()))
        prompt = Prompt(cue_id=event.id, user=event.user, text=event.text, seed=ctx.run.seed, context=context,
                        max_sentences=limit, **self._own_line(event, show))
        return _Cue(event, role, persona, prompt, limit, self.writer_for(role))  # limit: the stage's room

    def _own_line(self, event: CueIssued, show: Show) -> dict[str, Any]:
        """What a writer is told of a line of the show's own: its kind, the segment and its
        brief, and the line a follow-up answers (as written here, else as heard on stage)."""
        if not event.self_driven:
            return {}
        follows = ""
        if event.follows:
            follows = self._written.get(event.run, {}).get(event.follows, "")
            follows = follows or " ".join(t for u, _, t in self._spoken.get(event.run, ()) if u == event.follows)
        segment = next((g for g in show.rundown if g.title == event.segment), None)
        return {"kind": event.reason, "segment": event.segment, "follows": follows,
                "brief": segment.brief if segment is not None else event.text,
                "topics": segment.topics if segment is not None else (),
                "addressee": _name(show, event.addressee) if event.addressee else "", "turn": event.turn}

    def _write(self, cue: _Cue, sentences: Iterable[str], ctx: Context) -> Iterator[Event]:
        """Stream a reply: each sentence becomes a chunk, released as the throttle allows."""
        event, run = cue.event, cue.event.run
        held = _Held()
        self._held.setdefault(run, {})[event.id] = held
        texts: list[str] = []
        blocked = 0
        stream = iter(sentences)
        try:
            text = next(stream, None) if cue.limit > 0 else None
            while text is not None:
                seq = len(texts)
                said = getattr(text, "last", None)  # a Sentence says whether it ends the reply
                if not event.verbatim and self._blocked(text, cue):
                    text, blocked = DEFLECTIONS.get(cue.role.language, DEFLECTIONS["en"]), blocked + 1
                texts.append(text)
                if seq + 1 >= cue.limit:
                    following, last = None, True  # the stage has room for no more
                elif said is None:
                    # A plain sentence: the next one (or the end) says whether it is the last.
                    following = next(stream, None)
                    last = following is None
                else:
                    following, last = _UNREAD, said
                if self._held.get(run, {}).get(event.id) is not held:
                    return  # the reply was cut short (or its run released) while it was written
                held.pieces.append(UtteranceChunk(
                    id=event.derive(f"chunk{seq}"), t_ms=ctx.now_ms, utterance=event.id, seq=seq, text=text,
                    language=cue.role.language, last=last, priority=event.priority,
                    deadline_ms=event.deadline_ms, **_common(event),
                ))
                held.tokens[seq] = tokens_of(text)
                if not last:
                    # Out now (through the throttle) while the writer writes the next sentence.
                    yield from self._release(run, held, ctx.now_ms)
                if following is _UNREAD:
                    following = None if last else next(stream, None)
                    if following is None and not last:
                        yield from self._ended_early(run, held, event, seq, ctx)
                text = following
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # the stage has no room for more: let the writer stop
        if self._held.get(run, {}).get(event.id) is not held:
            return
        said = ("" if cue.role.language == "zh" else " ").join(texts)
        written = self._written.setdefault(run, {})
        written[event.id] = said
        while len(written) > WRITTEN_KEPT:  # the oldest go: a follow-up answers a recent line
            del written[next(iter(written))]
        held.completed = UtteranceCompleted(
            id=event.derive("completed"), t_ms=ctx.now_ms, utterance=event.id,
            text=said, chunks=len(texts),
            backend=getattr(cue.writer, "label", cue.writer.name), blocked=blocked, **_common(event),
        )
        yield from self._release(run, held, ctx.now_ms)

    def _blocked(self, text: str, cue: _Cue) -> bool:
        """Whether a written sentence contains a blocked word (the same list as for danmaku)."""
        show = self._shows.get(cue.event.run)
        return blocked(text, (*self.settings.blocklist, *(show.blocklist if show is not None else ())))

    def _ended_early(self, run: str, held: _Held, event: CueIssued, seq: int, ctx: Context) -> list[Event]:
        """The writer said a sentence was not the last and then ended: the sentence still held
        becomes the last; one already released is followed by the drop of the rest."""
        if held.pieces and held.pieces[-1].seq == seq:
            held.pieces[-1] = dataclasses.replace(held.pieces[-1], last=True)
            return []
        return [UtteranceDropped(
            id=event.derive("ended"), t_ms=ctx.now_ms, utterance=event.id, from_seq=seq + 1,
            reason=f"the writer ended after sentence {seq} without the sentence it announced",
            **_common(event),
        )]

    def _release(self, run: str, held: _Held, now_ms: int) -> list[Event]:
        """Release text while what is ahead of speech stays within the throttle window."""
        window = self.windows.get(run, self.throttle.max_tokens)
        out: list[Event] = []
        while held.pieces and releasable(held.released - held.spoken, window, held.tokens[held.pieces[0].seq]):
            piece = held.pieces.popleft()
            held.released += held.tokens[piece.seq]
            out.append(dataclasses.replace(piece, t_ms=now_ms))
        if not held.pieces and held.completed is not None:
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
        if event.chunk_done and event.text:  # a sentence spoken on stage: context for the next replies
            spoken = self._spoken.setdefault(event.run, deque(maxlen=CONTEXT_LINES))
            if not any(u == event.utterance and t == event.text for u, _, t in spoken):
                spoken.append((event.utterance, event.role or "", event.text))
        held = held_runs.get(event.utterance)
        if held is None or not event.chunk_done or event.chunk in held.spoken_chunks:
            return ()
        held.spoken_chunks.add(event.chunk)
        held.spoken += held.tokens.get(event.chunk, 0)
        return self._release(event.run, held, ctx.now_ms)


def _name(show: Show, role: str) -> str:
    spec = show.role(role)
    return spec.name if spec is not None else role


def _common(event: CueIssued) -> dict[str, Any]:
    """The envelope fields every answer to a cue shares."""
    return {"run": event.run, "role": event.role, "causation": event.id, "correlation": event.correlation}
