"""LLM actor: writes each cue's reply in the role's persona, streamed in sentence chunks.

Cues wait in the role-priority scheduler; a batch of one role's cues goes to the reply
writer (``actors.backends``, chosen by ``TROUPE_LLM_BACKEND``) in one call.  A reply's
sentences are released to TTS through the throttle as the writer streams them: the first
at once, each next one while the text released and not yet spoken (placed by lipsync)
stays within the window the QoS actor sets (4-16 tokens, shrinking as the TTS buffer
fills).  A sentence goes out once the writer has yielded the next one (or ended), because its
chunk says whether it is the reply's last.  A reply to a viewer written by a model begins with
the opener the director sent to TTS with the cue (its chunk 0): the writer goes on from it, and
once the opener is out the reply is finished even when the writer is behind (by the scripted
writer, at once).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.backends.emotion import classifier as emotion_classifier
from actors.backends.emotion import take_tag
from actors.backends.protocols import (
    BackendError,
    Persona,
    Prompt,
    ReplyWriter,
    Sentence,
    WriterInterrupted,
)
from actors.backends.registry import BACKENDS, Backends
from actors.backends.text import verbatim_sentences
from actors.base import DROPPED, Cancel, Context, Handled, ScheduledActor, Work
from events.base import Event
from events.cue import CueIssued
from events.danmaku import RolePaceMeasured
from events.qos import ThrottleChanged
from events.role import RoleWeightsChanged
from events.run import RunStarted
from events.show import RoleSpec, Show, blocked, show_from_dict
from events.utterance import UtteranceChunk, UtteranceCompleted, UtteranceDropped
from events.viseme import VisemeTrack
from infra.settings import Settings
from schedulers.batching import tokens_of
from schedulers.throttle import ThrottlePolicy, releasable

_UNREAD = Sentence("")  # the next sentence has not been asked for yet
CONTEXT_LINES = 6  # the last sentences spoken on stage a writer is given
WRITTEN_KEPT = 32  # replies remembered per run, for the follow-ups that answer them
PACE_SAMPLES = 12  # a role's pace is taken over its last replies (and sentences spoken)
PACE_CHANGE = 0.15  # a new pace is told when a number moved this much (and at least PACE_CHANGE_MS)
PACE_CHANGE_MS = 150
SPEAK_MARGIN_MS = 500  # from a first sentence written to its speech on stage (TTS, lip-sync, transport)
# What is said instead of a written sentence that contains a blocked word.
DEFLECTIONS = {"en": "Let's talk about something else!", "zh": "我们聊点别的吧！"}
SLOW = "no first sentence within its budget"  # why a writing attempt is stopped by its timer
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
    stand_in: bool = False  # the scripted line was said in place of the writer's (it wrote nothing sayable)
    begun: bool = False     # the writer has written its first sentence
    slow: bool = False      # it had not by ``llm_first_sentence_ms``: it was stopped
    source: str = ""        # where its words came from: "model", "material", "template", "verbatim"


@dataclass(slots=True)
class _Pace:
    """One role's measured pace in one run: its writer's and its voice's."""

    backend: str = ""
    first: deque[int] = field(default_factory=lambda: deque(maxlen=PACE_SAMPLES))   # ms to the first sentence
    write: deque[int] = field(default_factory=lambda: deque(maxlen=PACE_SAMPLES))   # ms between two more
    speech: deque[int] = field(default_factory=lambda: deque(maxlen=PACE_SAMPLES))  # ms a sentence is spoken
    opener: deque[int] = field(default_factory=lambda: deque(maxlen=PACE_SAMPLES))  # ms an opener is spoken
    replies: int = 0
    told: RolePaceMeasured | None = None
    spoken: dict[tuple[str, int], int] = field(default_factory=dict)  # (utterance, chunk) -> ms placed so far

    def measured(self, run: str, role: str) -> RolePaceMeasured:
        return RolePaceMeasured(
            id="", run=run, role=role, backend=self.backend, first_sentence_ms=_quartile(self.first),
            sentence_write_ms=_median(self.write), speech_ms=_quartile(self.speech),
            opener_ms=_quartile(self.opener), replies=self.replies,
        )

    def moved(self, now: RolePaceMeasured) -> bool:
        """Whether ``now`` differs from what was last told enough to tell again."""
        if self.told is None:
            return True
        for name in ("first_sentence_ms", "sentence_write_ms", "speech_ms", "opener_ms"):
            old, new = getattr(self.told, name), getattr(now, name)
            if abs(new - old) >= PACE_CHANGE_MS and abs(new - old) >= PACE_CHANGE * max(old, 1):
                return True
        return False


@dataclass(slots=True)
class _RunState:
    """What the actor keeps for one run (``open_run``): the kernel holds it and hands it to each
    handler of the run as ``Context.state``."""

    window: int                 # tokens allowed ahead of speech (the QoS actor's throttle window)
    show: Show | None = None    # the run's show, read at its first cue
    factors: dict[str, float] = field(default_factory=dict)  # role -> QoS weight factor
    held: dict[str, _Held] = field(default_factory=dict)     # utterance -> text not yet released
    # utterance -> what this actor wrote for it (a follow-up answers one of them), oldest first
    written: dict[str, str] = field(default_factory=dict)
    # (utterance, role, text) of the last sentences spoken on stage: the writers' context
    spoken: deque[tuple[str, str, str]] = field(default_factory=lambda: deque(maxlen=CONTEXT_LINES))
    pace: dict[str, _Pace] = field(default_factory=dict)     # role -> its measured pace
    # cues that began with an opener (their chunk 0: its speech is an opener's), oldest first;
    # noted as each cue is taken in (``work``), read as its speech is placed (``_spoke``)
    opened: dict[str, None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Cue:
    """A cue that gets a reply: its role, what the writer is asked, and the sentences room."""

    event: CueIssued
    role: RoleSpec
    persona: Persona
    prompt: Prompt
    limit: int
    writer: ReplyWriter
    state: _RunState                # the run's
    settings: Settings              # the run's
    opener: Sentence | None = None  # the cue's chunk 0, sent by the director: the writer goes on from it
    budget_ms: int = 0              # how long a model may take over its first sentence (0: no limit)
    cancel: Cancel = field(default_factory=Cancel)  # the kernel's: an urgent cue it gives way to, a drop


class LLMActor(ScheduledActor):
    """Cue in, utterance chunks out; cues wait in the role-priority scheduler."""

    name = "llm"
    consumes = (CueIssued, RoleWeightsChanged, ThrottleChanged, VisemeTrack, UtteranceDropped)
    emits = (UtteranceChunk, UtteranceCompleted, UtteranceDropped, RolePaceMeasured)

    blocking = True  # the writer runs off the event loop; the actor's state lives on its worker thread

    def __init__(self, settings: Settings, writer: ReplyWriter | None = None, backends: Backends = BACKENDS) -> None:
        self.settings = settings
        self.backends = backends
        self.writer = writer if writer is not None else backends.reply_writer(settings.llm_backend)
        # The emotion classifier (a small embedding model) loads now, with the actor, not with the
        # show's first line: loaded then, on a busy machine it held that line back for seconds.
        emotion_classifier()
        # The writers roles name in the show file (backend, model), built on first use.
        self._writers: dict[tuple[str, str | None], ReplyWriter] = {}
        self.throttle = ThrottlePolicy()

    def open_run(self, run: RunStarted, settings: Settings) -> _RunState:
        return _RunState(window=self.throttle.max_tokens)

    def close_run(self, state: _RunState) -> None:
        state.held.clear()  # a reply still being written for the run stops (see ``_written_out``)

    def _state(self, ctx: Context) -> _RunState:
        """The run's state; a throwaway one where the kernel holds none (a run released while its
        cue waited, a context made by hand)."""
        return ctx.state if isinstance(ctx.state, _RunState) else _RunState(window=self.throttle.max_tokens)

    def _run_settings(self, ctx: Context) -> Settings:
        """The run's settings (the kernel's, in the context)."""
        return ctx.settings_over(self.settings)

    def work(self, event: Event, ctx: Context) -> Work | None:
        if not isinstance(event, CueIssued):
            return None
        state = self._state(ctx)
        factor = state.factors.get(event.role or "", 1.0)
        if event.opener:  # taken in (on the feed's thread), before its opener's speech can be placed
            state.opened[event.id] = None
            while len(state.opened) > WRITTEN_KEPT * 4:
                del state.opened[next(iter(state.opened))]
        # A cue whose opener is out is answered even when its writer is behind (see ``_cue``).
        return Work(event.role or "", tokens=tokens_of(event.text), weight=event.priority * factor,
                    deadline_ms=0 if event.opener else event.deadline_ms)

    def urgent(self, event: Event, ctx: Context) -> bool:
        """A cue at or above the run's ``interrupt_priority`` (a gift, a moderator line)."""
        return isinstance(event, CueIssued) and event.priority >= self._run_settings(ctx).interrupt_priority

    def gives_way(self, working: Event, urgent: Event) -> str | None:
        """A cue gives way to an urgent cue of its run the director issued after it: the director's
        plan cut the reply for it (a cue issued before the urgent one was planned around it)."""
        if isinstance(working, CueIssued) and isinstance(urgent, CueIssued) and working.run == urgent.run \
                and working.seq < urgent.seq:
            return f"the urgent cue {urgent.id} takes the writer"
        return None

    def cancels(self, event: Event) -> str | None:
        """A reply dropped whole (superseded) is not to be written, or written on."""
        return event.utterance if isinstance(event, UtteranceDropped) and event.from_seq == 0 else None

    def expired(self, event: Event, ctx: Context) -> Sequence[Event]:
        assert isinstance(event, CueIssued)
        return [UtteranceDropped(
            id=event.derive("dropped"), run=event.run, role=event.role, causation=event.id,
            correlation=event.correlation, t_ms=ctx.now_ms, utterance=event.id,
            reason=f"deadline passed {ctx.now_ms - event.deadline_ms} ms ago while the cue waited",
        )]

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
                  self._built(role.llm_backend or self.settings.llm_backend, role.llm_model))  # process's own: the worker's backend
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

    @staticmethod
    def _show(ctx: Context, state: _RunState) -> Show:
        assert ctx.run is not None
        if state.show is None:
            state.show = show_from_dict(ctx.run.show)
        return state.show

    def handle(self, event: Event, ctx: Context) -> Handled:
        return self._handle(event, ctx, self._state(ctx))

    def _handle(self, event: Event, ctx: Context, state: _RunState) -> Handled:
        if isinstance(event, RoleWeightsChanged):
            state.factors = dict(event.weights)
            return ()
        if isinstance(event, VisemeTrack | ThrottleChanged | UtteranceDropped):
            return self._progress(event, ctx, state)
        if not isinstance(event, CueIssued):
            return ()
        cue = self._cue(event, ctx, state)
        if not isinstance(cue, _Cue):
            return cue
        return self._write(cue, self._sentences_of(cue), ctx)

    @staticmethod
    def _sentences_of(cue: _Cue) -> Iterable[str]:
        """What the writer writes, or the cue's own text when it is said word for word."""
        return verbatim_sentences(cue.event.text) if cue.event.verbatim else cue.writer.stream(cue.persona, cue.prompt)

    def _or_scripted(self, cue: _Cue, sentences: Iterable[str], held: _Held, ctx: Context) -> Iterator[str]:
        """The writer's sentences; where a model wrote nothing the guards let through (an echo, a
        copy of the stage, another language), it writes once more, sampled anew, while its
        first-sentence budget lasts; where that fails too, or it had written nothing by its
        budget (it is stopped), the scripted writer's line for the same prompt, so that the turn
        is not silent."""
        model = not cue.event.verbatim and not getattr(cue.writer, "instant", False)
        started = ctx.now()
        yield from self._attempt(cue, sentences, held, model, cue.budget_ms if model else 0, cue.prompt.cue_id)
        if not held.begun and model and not held.slow:
            # No budget (0) is no limit; else what is left of it, if anything.
            left_ms = cue.budget_ms - (ctx.now() - started) if cue.budget_ms else 0
            if not cue.budget_ms or left_ms > 0:
                log.info("%s: the %s writer wrote nothing to say: it writes again", cue.event.id, cue.writer.name)
                again = dataclasses.replace(cue.prompt, cue_id=f"{cue.prompt.cue_id}/again")
                yield from self._attempt(cue, cue.writer.stream(cue.persona, again), held, model, left_ms,
                                         again.cue_id)
        if not held.begun and model:
            if held.slow:
                log.info("%s: the %s writer wrote no sentence in %d ms: the scripted line instead", cue.event.id,
                         cue.writer.name, cue.budget_ms)
            else:
                log.info("%s: the %s writer wrote nothing to say: the scripted line instead", cue.event.id,
                         cue.writer.name)
            held.stand_in = True
            for sentence in self._built("scripted", None).stream(cue.persona, cue.prompt):
                held.source = held.source or getattr(sentence, "source", None) or "template"
                yield sentence

    @staticmethod
    def _attempt(cue: _Cue, sentences: Iterable[str], held: _Held, model: bool, budget_ms: int,
                 cue_id: str) -> Iterator[str]:
        """One writing of the reply (its prompt's ``cue_id``): its sentences, its writer stopped at
        its next token when the cue's Cancel is cancelled (an urgent cue takes the writer, the
        reply is dropped whole) or, a model's, when it has no sentence by ``budget_ms`` (0: no
        limit; ``llm_first_sentence_ms``, or until its speech is planned to begin when that is
        later: a model slowed down by a loaded machine does not keep the stage silent)."""
        source = iter(sentences)
        interrupt = None if cue.event.verbatim else getattr(cue.writer, "interrupt", None)
        with cue.cancel.scope() as scope:
            if interrupt is not None:
                scope.on_cancel(functools.partial(interrupt, cue_id))
            in_time = scope.after(budget_ms, SLOW) if model and budget_ms and interrupt is not None else None
            try:
                for sentence in source:
                    if not held.source:
                        held.source = "verbatim" if cue.event.verbatim else "model" if model else (
                            getattr(sentence, "source", None) or "template")
                    held.begun = True
                    if in_time is not None:
                        in_time()  # once this returns, its timer has fired (SLOW) or never will
                        in_time = None
                    yield sentence
            except WriterInterrupted:
                if scope.reason != SLOW:
                    raise  # an urgent cue took the writer, or the reply was dropped whole
                if held.begun:
                    return  # stopped just as its first sentence came: the reply ends with it
            finally:
                held.slow = held.slow or scope.reason == SLOW
                close = getattr(source, "close", None)
                if close is not None:
                    close()

    def handle_batch(self, events: Sequence[Event], ctx: Context) -> list[Handled]:
        """One role's cues: the writer gets their prompts in one call (per persona), and each
        cue's reply streams out as the writer writes it."""
        state = self._state(ctx)
        cues = [self._cue(e, ctx, state) if isinstance(e, CueIssued) else None for e in events]
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
                out.append(self._handle(event, ctx, state))
            elif isinstance(cue, _Cue):
                out.append(self._write(cue, replies[event.id] if event.id in replies else self._sentences_of(cue), ctx))
            else:
                out.append(cue)
        return out

    def _cue(self, event: CueIssued, ctx: Context, state: _RunState) -> _Cue | list[Event]:
        """What to ask the writer for a cue, or the drop that answers it instead."""
        common = _common(event)
        cancel = ctx.cancel_of(event.id)
        if cancel.reason == DROPPED:
            return []  # dropped whole before it was written (superseded): its drop is its answer
        settings = self._run_settings(ctx)
        if cancel.reason is not None:  # an urgent cue issued after it waits: the director's plan cut this one
            return [UtteranceDropped(
                id=event.derive("dropped"), t_ms=ctx.now_ms, utterance=event.id,
                reason=f"gave way before it was written: {cancel.reason}", **common,
            )]
        late = bool(event.deadline_ms) and ctx.now_ms > event.deadline_ms
        if late and not event.opener:
            return [UtteranceDropped(
                id=event.derive("dropped"), t_ms=ctx.now_ms, utterance=event.id,
                reason=f"deadline passed {ctx.now_ms - event.deadline_ms} ms before writing", **common,
            )]
        assert ctx.run is not None
        show = self._show(ctx, state)
        role = show.role(event.role or "")
        if role is None:
            return [UtteranceDropped(
                id=event.derive("dropped"), t_ms=ctx.now_ms, utterance=event.id,
                reason=f"role {event.role!r} is not in the show", **common,
            )]
        persona = Persona(role.id, role.name, role.persona, role.language, role.keywords, role.llm_adapter)
        limit = min(settings.llm_max_sentences, event.max_sentences or settings.llm_max_sentences)
        if event.verbatim:
            limit = 64  # said word for word, whole
        context = tuple(f"{_name(show, who)}: {text}" for _, who, text in state.spoken)
        prompt = Prompt(cue_id=event.id, user=event.user, text=event.text, seed=ctx.run.seed, context=context,
                        max_sentences=limit, cast=tuple(r.name for r in show.roles), gift=event.gift,
                        returning=event.returning, regular=event.regular, facts=event.facts, bears=event.bears,
                        **self._own_line(event, show, state))
        writer = self.writer_for(role)
        scripted = self._built("scripted", None)
        if not event.verbatim and not event.self_driven and scripted.is_injection(event.text):  # type: ignore[attr-defined]
            writer = scripted  # a comment steering the writer is never shown to a model: it is deflected
        opener = Sentence(event.opener, last=False) if event.opener else None
        if opener is not None:
            prompt = dataclasses.replace(prompt, opener=event.opener)
            if late:  # its opener is on stage: the rest comes at once, from the scripted writer
                log.info("%s: the writer is %d ms behind the cue's deadline: the scripted line after its opener",
                         event.id, ctx.now_ms - event.deadline_ms)
                writer = scripted
        budget = settings.llm_first_sentence_ms
        if budget and event.begins_ms:  # on deck: until its speech is planned to begin
            budget = max(budget, event.begins_ms - ctx.now_ms - SPEAK_MARGIN_MS)
        return _Cue(event, role, persona, prompt, limit, writer, state, settings, opener, budget,  # limit: the stage's room
                    cancel)

    @staticmethod
    def _own_line(event: CueIssued, show: Show, state: _RunState) -> dict[str, Any]:
        """What a writer is told of a line of the show's own: its kind, the segment and its
        brief, and the line a follow-up answers (as written here, else as heard on stage)."""
        if not event.self_driven:
            return {}
        follows = ""
        if event.follows:
            follows = state.written.get(event.follows, "")
            follows = follows or " ".join(t for u, _, t in state.spoken if u == event.follows)
        segment = next((g for g in show.rundown if g.title == event.segment), None)
        role = show.role(event.role or "")
        return {"kind": event.reason, "segment": event.segment, "follows": follows, "point": event.point,
                "points": segment.points if segment is not None else (),
                "material": role.material if role is not None else (),
                "brief": segment.brief if segment is not None else event.text,
                "topics": segment.topics if segment is not None else (),
                "addressee": _name(show, event.addressee) if event.addressee else "", "turn": event.turn}

    def _write(self, cue: _Cue, sentences: Iterable[str], ctx: Context) -> Iterator[Event]:
        """Stream a reply: each sentence becomes a chunk, released as the throttle allows."""
        event, state = cue.event, cue.state
        held = _Held()
        state.held[event.id] = held
        texts: list[tuple[str, bool]] = []
        if cue.opener is not None:  # chunk 0, sent with the cue: outside this reply's throttle
            texts.append((str(cue.opener), False))
            held.tokens[0] = 0
            held.spoken_chunks.add(0)
        stream = self._or_scripted(cue, sentences, held, ctx)
        marks = [ctx.now()]  # when writing began, then each sentence (show ms: the writer's pace)
        try:
            yield from self._written_out(cue, held, texts, stream, ctx, marks)
        except WriterInterrupted:  # an urgent cue took the writer mid-sentence: the rest gives way
            if cue.cancel.reason == DROPPED:
                state.held.pop(event.id, None)
                return  # dropped whole while it was written: its drop is already out
            why = cue.cancel.reason or "the urgent cue ? takes the writer"
            yield from self._writer_failed(state, held, event, ctx.now(),
                                           f"interrupted while writing sentence {len(texts)}: {why}")
            return
        except BackendError as exc:  # the model failed (a server down): the cue is answered with the reason
            log.warning("%s: %s", event.id, exc)
            yield from self._writer_failed(state, held, event, ctx.now(), f"writer failed: {exc}")
            return
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # the stage has no room for more: let the writer stop
        if state.held.get(event.id) is not held:
            return
        said = ("" if cue.role.language == "zh" else " ").join(t for t, _ in texts)
        written = state.written
        written[event.id] = said
        while len(written) > WRITTEN_KEPT:  # the oldest go: a follow-up answers a recent line
            del written[next(iter(written))]
        held.completed = UtteranceCompleted(
            id=event.derive("completed"), t_ms=ctx.now_ms, utterance=event.id,
            text=said, chunks=len(texts),
            backend="scripted" if held.stand_in else getattr(cue.writer, "label", cue.writer.name),
            blocked=sum(b for _, b in texts), source=held.source,
            **_common(event),
        )
        if not event.verbatim:
            yield from self._wrote(cue, marks, ctx)
        yield from self._release(state, held, ctx.now_ms)

    def _wrote(self, cue: _Cue, marks: list[int], ctx: Context) -> list[Event]:
        """A reply written: the writer's pace (to its first sentence, between two more)."""
        event = cue.event
        pace = cue.state.pace.setdefault(cue.role.id, _Pace())
        pace.backend = cue.writer.name
        if len(marks) > 1:
            pace.first.append(marks[1] - marks[0])
            pace.write.extend(b - a for a, b in zip(marks[1:], marks[2:], strict=False))
            pace.replies += 1
        return self._tell_pace(event, cue.role.id, ctx, cue.state)

    @staticmethod
    def _tell_pace(cause: Event, role: str, ctx: Context, state: _RunState) -> list[Event]:
        """The role's pace, when it moved enough since it was last told (for the director's floor)."""
        pace = state.pace.get(role)
        if pace is None or not pace.first:
            return []
        now = pace.measured(cause.run, role)
        if not pace.moved(now):
            return []
        told = dataclasses.replace(now, id=cause.derive(f"pace{pace.replies}-{len(pace.speech)}"), t_ms=ctx.now_ms,
                                   causation=cause.id, correlation=cause.correlation)
        pace.told = told
        return [told]

    def _written_out(self, cue: _Cue, held: _Held, texts: list[tuple[str, bool]], stream: Iterator[str],
                     ctx: Context, marks: list[int]) -> Iterator[Event]:
        """The writer's sentences as chunks, each released as the throttle allows (``texts``
        collects each sentence, and whether a blocked word replaced it; ``marks`` when each came)."""
        event, state, cancel = cue.event, cue.state, cue.cancel

        def read() -> str | None:
            text = next(stream, None)
            if text is not None:
                marks.append(ctx.now())
            return text

        limit = cue.limit + len(texts)  # the opener is part of the reply, not of its room
        text = read() if cue.limit > 0 else None
        while text is not None:
            seq = len(texts)
            said = getattr(text, "last", None)  # a Sentence says whether it ends the reply
            text, emotion = self._emotion(text, event.verbatim)
            blocked = not event.verbatim and self._blocked(text, cue)
            if blocked:
                text = DEFLECTIONS.get(cue.role.language, DEFLECTIONS["en"])
            texts.append((text, blocked))
            if seq + 1 >= limit:
                following, last = None, True  # the stage has room for no more
            elif said is None:
                # A plain sentence: the next one (or the end) says whether it is the last; an
                # urgent cue waiting makes it the last (the writer stops, the urgent cue gets it).
                following = None if _gave_way(cancel) is not None else read()
                last = following is None
            else:
                following, last = _UNREAD, said
            if state.held.get(event.id) is not held:
                return  # the reply was cut short (or its run released) while it was written
            held.pieces.append(UtteranceChunk(
                id=event.derive(f"chunk{seq}"), t_ms=ctx.now_ms, utterance=event.id, seq=seq, text=text,
                language=cue.role.language, last=last, priority=event.priority,
                deadline_ms=event.deadline_ms, emotion=emotion, **_common(event),
            ))
            held.tokens[seq] = tokens_of(text)
            if not last:
                # Out now (through the throttle) while the writer writes the next sentence.
                yield from self._release(state, held, ctx.now_ms)
            if following is _UNREAD:
                if cancel.reason == DROPPED:
                    state.held.pop(event.id, None)
                    return  # superseded while it was written: its drop is already out
                urgent = None if last else _gave_way(cancel)
                if urgent is not None:  # the writer stops here: the urgent cue gets it next
                    state.held.pop(event.id, None)
                    yield UtteranceDropped(
                        id=event.derive("preempted"), t_ms=ctx.now(), utterance=event.id,
                        from_seq=held.pieces[0].seq if held.pieces else seq + 1,
                        reason=f"interrupted after sentence {seq}: {urgent}", **_common(event))
                    return
                following = None if last else read()
                if following is None and not last:
                    yield from self._ended_early(held, event, seq, ctx.now())
            text = following

    @staticmethod
    def _emotion(text: str, verbatim: bool) -> tuple[str, str]:
        """A sentence without its emotion tag, and how it is said: the tag's label, else its
        writer's, else the classifier's (neutral where none is installed)."""
        if not verbatim:
            stripped, tagged = take_tag(text)
            if tagged is not None and stripped:
                return Sentence(stripped, last=getattr(text, "last", None)), tagged
        hinted = getattr(text, "emotion", None)
        if hinted is not None:
            return text, hinted
        labeler = emotion_classifier()
        return text, labeler.label(text) if labeler is not None else "neutral"

    @staticmethod
    def _writer_failed(state: _RunState, held: _Held, event: CueIssued, now_ms: int, reason: str) -> list[Event]:
        """The writer failed or was interrupted: what was released stays (it is being spoken), the
        rest is dropped with the reason (stamped ``now_ms``: when it was decided, so that
        re-execution orders it after the speech that came before it)."""
        if state.held.get(event.id) is not held:
            return []
        state.held.pop(event.id, None)
        first = held.pieces[0].seq if held.pieces else len(held.tokens)
        return [UtteranceDropped(
            id=event.derive("failed"), t_ms=now_ms, utterance=event.id, from_seq=first,
            reason=reason, **_common(event),
        )]

    @staticmethod
    def _blocked(text: str, cue: _Cue) -> bool:
        """Whether a written sentence contains a blocked word (the same list as for danmaku)."""
        show = cue.state.show
        return blocked(text, (*cue.settings.blocklist, *(show.blocklist if show is not None else ())))

    @staticmethod
    def _ended_early(held: _Held, event: CueIssued, seq: int, now_ms: int) -> list[Event]:
        """The writer said a sentence was not the last and then ended: the sentence still held
        becomes the last; one already released is followed by the drop of the rest."""
        if held.pieces and held.pieces[-1].seq == seq:
            held.pieces[-1] = dataclasses.replace(held.pieces[-1], last=True)
            return []
        return [UtteranceDropped(
            id=event.derive("ended"), t_ms=now_ms, utterance=event.id, from_seq=seq + 1,
            reason=f"the writer ended after sentence {seq} without the sentence it announced",
            **_common(event),
        )]

    @staticmethod
    def _release(state: _RunState, held: _Held, now_ms: int) -> list[Event]:
        """Release text while what is ahead of speech stays within the throttle window."""
        window = state.window
        out: list[Event] = []
        while held.pieces and releasable(held.released - held.spoken, window, held.tokens[held.pieces[0].seq]):
            piece = held.pieces.popleft()
            held.released += held.tokens[piece.seq]
            out.append(dataclasses.replace(piece, t_ms=now_ms))
        if not held.pieces and held.completed is not None:
            out.append(dataclasses.replace(held.completed, t_ms=now_ms))
            state.held.pop(held.completed.utterance, None)
        return out

    def _progress(self, event: Event, ctx: Context, state: _RunState) -> Sequence[Event]:
        """Speech placed (a sentence's last viseme track), a new window, or a reply cut short."""
        if isinstance(event, ThrottleChanged):
            state.window = event.window_tokens
            return [e for held in list(state.held.values()) for e in self._release(state, held, ctx.now_ms)]
        if isinstance(event, UtteranceDropped):
            state.held.pop(event.utterance, None)
            return ()
        assert isinstance(event, VisemeTrack)
        told = self._spoke(event, ctx, state)
        if event.chunk_done and event.text:  # a sentence spoken on stage: context for the next replies
            spoken = state.spoken
            if not any(u == event.utterance and t == event.text for u, _, t in spoken):
                spoken.append((event.utterance, event.role or "", event.text))
        held = state.held.get(event.utterance)
        if held is None or not event.chunk_done or event.chunk in held.spoken_chunks:
            return tuple(told)
        held.spoken_chunks.add(event.chunk)
        held.spoken += held.tokens.get(event.chunk, 0)
        return told + self._release(state, held, ctx.now_ms)

    def _spoke(self, track: VisemeTrack, ctx: Context, state: _RunState) -> list[Event]:
        """Speech placed on stage: a sentence's length (an opener's apart), for the role's pace."""
        pace = state.pace.get(track.role or "")
        if pace is None:
            return []
        key = (track.utterance, track.chunk)
        pace.spoken[key] = pace.spoken.get(key, 0) + max(0, track.end_ms - track.start_ms)
        if not track.chunk_done:
            return []
        spoken = pace.spoken.pop(key)
        opener = track.chunk == 0 and track.utterance in state.opened
        (pace.opener if opener else pace.speech).append(spoken)
        return self._tell_pace(track, track.role or "", ctx, state)


def _gave_way(cancel: Cancel) -> str | None:
    """Why the reply gives way to an urgent cue (``LLMActor.gives_way``), None when it does not."""
    return cancel.reason if cancel.reason != DROPPED else None


def _quartile(values: Iterable[int]) -> int:
    """The upper quartile (0 of nothing): a pace errs slow, never fast."""
    ordered = sorted(values)
    return ordered[(len(ordered) * 3) // 4] if ordered else 0


def _median(values: Iterable[int]) -> int:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0


def _name(show: Show, role: str) -> str:
    spec = show.role(role)
    return spec.name if spec is not None else role


def _common(event: CueIssued) -> dict[str, Any]:
    """The envelope fields every answer to a cue shares."""
    return {"run": event.run, "role": event.role, "causation": event.id, "correlation": event.correlation}
