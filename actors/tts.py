"""TTS actor: speaks utterance chunks with the role's voice, in audio chunks of <= 500 ms.

The speaker is the role's own TTS backend when the show names one (``voice.backend``),
else ``TROUPE_TTS_BACKEND``'s; a batch of one role's sentences goes to it in one call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from actors.backends.protocols import Speaker, Speech, Voice
from actors.backends.registry import BACKENDS, Backends, UnknownBackendError
from actors.base import Context, Handled, HandlerError, ScheduledActor, Work
from events.audio import MAX_CHUNK_MS, AudioChunk, PhonemeMark
from events.base import Event
from events.role import RoleWeightsChanged
from events.run import RunStarted
from events.show import Show, show_from_dict
from events.utterance import UtteranceChunk, UtteranceDropped
from infra.settings import Settings
from schedulers.batching import tokens_of

log = logging.getLogger(__name__)


def slice_speech(speech: Speech, max_ms: int = MAX_CHUNK_MS) -> list[tuple[int, bytes, tuple[PhonemeMark, ...]]]:
    """Cut speech into slices of at most ``max_ms``: (offset ms, pcm, phonemes relative to the slice)."""
    bytes_per_ms = speech.sample_rate * 2 / 1000
    total_ms = speech.duration_ms
    slices: list[tuple[int, bytes, tuple[PhonemeMark, ...]]] = []
    offset = 0
    while offset < total_ms or not slices:
        end = min(total_ms, offset + max_ms)
        lo, hi = int(offset * bytes_per_ms) & ~1, int(end * bytes_per_ms) & ~1
        if end >= total_ms:
            hi = len(speech.pcm)
        marks = tuple(
            PhonemeMark(p.ipa, max(p.start_ms, offset) - offset, min(p.end_ms, end) - offset)
            for p in speech.phonemes
            if p.start_ms < end and p.end_ms > offset
        )
        slices.append((offset, speech.pcm[lo:hi], marks))
        if end >= total_ms:
            break
        offset = end
    return slices


@dataclass(slots=True)
class _Voices:
    """What the tts actor keeps for one run (``open_run``)."""

    show: Show
    factors: dict[str, float] = field(default_factory=dict)  # role -> QoS weight factor


class TTSActor(ScheduledActor):
    """Utterance chunks in, audio chunks with phoneme timings out; chunks wait in the
    role-priority scheduler and a batch holds one role's (one voice's) sentences."""

    name = "tts"
    consumes = (UtteranceChunk, RoleWeightsChanged)
    emits = (AudioChunk, UtteranceDropped)
    blocking = True

    def __init__(self, settings: Settings, speaker: Speaker | None = None, backends: Backends = BACKENDS) -> None:
        self.settings = settings
        self.backends = backends
        self.speaker = speaker if speaker is not None else backends.speaker(settings.tts_backend)
        self._speakers: dict[str, Speaker] = {settings.tts_backend: self.speaker}  # by backend name

    def open_run(self, run: RunStarted, settings: Settings) -> _Voices:
        return _Voices(show_from_dict(run.show))

    def work(self, event: Event, ctx: Context) -> Work | None:
        if not isinstance(event, UtteranceChunk):
            return None
        factor = ctx.state.factors.get(event.role or "", 1.0) if ctx.state is not None else 1.0
        # The deadline is for the reply's speech to start: later sentences follow the first.
        return Work(event.role or "", tokens=tokens_of(event.text), weight=event.priority * factor,
                    deadline_ms=event.deadline_ms if event.seq == 0 else 0, batch_key=event.language)

    def expired(self, event: Event, ctx: Context) -> Sequence[Event]:
        assert isinstance(event, UtteranceChunk)
        return [UtteranceDropped(
            id=event.derive("dropped"), run=event.run, role=event.role, causation=event.id,
            correlation=event.correlation, t_ms=ctx.now_ms, utterance=event.utterance, from_seq=event.seq,
            reason=f"deadline passed {ctx.now_ms - event.deadline_ms} ms ago before it was spoken",
        )]

    def _voice(self, ctx: Context, role_id: str | None, language: str) -> tuple[Speaker, Voice]:
        """The speaker and voice of a role (the settings' speaker and a plain voice for a role
        the show does not have)."""
        assert ctx.run is not None
        # The run's show (read again for an input of a run not held: one come after the run's end).
        show = ctx.state.show if ctx.state is not None else show_from_dict(ctx.run.show)
        role = show.role(role_id or "")
        if role is None:
            return self.speaker, Voice(language)
        voice = Voice(language, role.voice_variant, role.voice_pitch, role.voice_rate)
        name = role.voice_backend or self.settings.tts_backend
        speaker = self._speakers.get(name)
        if speaker is None:
            try:
                speaker = self._speakers[name] = self.backends.speaker(name, role.id)
            except UnknownBackendError as exc:
                raise HandlerError(str(exc)) from None
        languages = getattr(speaker, "languages", None)
        if languages is not None and language not in languages and role.voice_backend is None:
            # A voice for the settings' backend does not exist in this language: espeak speaks it.
            if "espeak" not in self._speakers:
                log.warning("the %s speaker has no %r voice: role %s speaks with espeak", name, language, role.id)
                self._speakers["espeak"] = self.backends.speaker("espeak")
            speaker = self._speakers["espeak"]
        return speaker, voice

    def handle(self, event: Event, ctx: Context) -> Handled:
        if isinstance(event, RoleWeightsChanged):
            if ctx.state is not None:
                ctx.state.factors = dict(event.weights)
            return ()
        if not isinstance(event, UtteranceChunk):
            return ()
        speaker, voice = self._voice(ctx, event.role, event.language)
        return self._audio(event, speaker.speak(event.text, voice), ctx)

    def handle_batch(self, events: Sequence[Event], ctx: Context) -> list[Handled]:
        """One role's sentences: each speaker gets its sentences of one voice in one call."""
        groups: dict[tuple[int, Voice], list[UtteranceChunk]] = {}
        speakers: dict[int, Speaker] = {}
        for event in events:
            if isinstance(event, UtteranceChunk):
                speaker, voice = self._voice(ctx, event.role, event.language)
                speakers[id(speaker)] = speaker
                groups.setdefault((id(speaker), voice), []).append(event)
        speech: dict[str, Speech] = {}
        for (key, voice), chunks in groups.items():
            spoken = speakers[key].speak_batch([c.text for c in chunks], voice)
            speech.update(zip((c.id for c in chunks), spoken, strict=True))
        return [self._audio(e, speech[e.id], ctx) if isinstance(e, UtteranceChunk) else self.handle(e, ctx)
                for e in events]

    def _audio(self, event: UtteranceChunk, speech: Speech, ctx: Context) -> list[Event]:
        """A sentence's speech as audio chunks of at most MAX_CHUNK_MS."""
        slices = slice_speech(speech)
        out: list[Event] = []
        for part, (offset, pcm, marks) in enumerate(slices):
            part_last = part == len(slices) - 1
            out.append(AudioChunk(
                id=event.derive(f"audio{part}"), run=event.run, role=event.role,
                causation=event.id, correlation=event.correlation, t_ms=ctx.now_ms,
                utterance=event.utterance, seq=event.seq, part=part, part_last=part_last,
                last=event.last and part_last, priority=event.priority, deadline_ms=event.deadline_ms,
                sample_rate=speech.sample_rate, offset_ms=offset,
                duration_ms=len(pcm) * 1000 // (2 * speech.sample_rate), text=event.text,
                phonemes=marks, emotion=event.emotion, pcm=pcm,
            ))
        return out
