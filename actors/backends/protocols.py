"""The backend seam: what the llm, tts and render actors need from a model, as protocols and
neutral value types.

A backend module imports this module (and its own libraries), never an actor, so that a
new backend is one module and one line in ``actors.backends.registry``.  A backend may
subclass its protocol to inherit the default batch method, and raises a ``BackendError``
(or a subclass) for what it cannot do.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from events.errors import BackendError
from events.show import RESOLUTIONS

__all__ = [
    "RESOLUTIONS", "BackendError", "Persona", "env_setting", "reply_tokens", "Phoneme", "Prompt", "ReplyWriter", "RoleLook", "RoleState", "Sentence",
    "Speaker", "Speech",
    "StageDrawer", "Voice",
]

def env_setting(variable: str) -> str:
    """A backend's own ``TROUPE_*`` variable: its value, else the contents of the file that
    ``<variable>_FILE`` names (a container secret), without the trailing newline; else ""."""
    raw = os.environ.get(variable, "")
    path = os.environ.get(f"{variable}_FILE", "")
    if raw == "" and path:
        try:
            raw = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise BackendError(f"{variable}_FILE: cannot read {path}: {exc.strerror}") from None
    return raw


def reply_tokens(default: int) -> int:
    """A model reply's budget of new tokens: ``TROUPE_LLM_MAX_TOKENS`` where set (above 0),
    else the backend's own ``default``."""
    raw = env_setting("TROUPE_LLM_MAX_TOKENS").strip()
    if raw in ("", "0"):
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= 4096:
        raise BackendError(f"TROUPE_LLM_MAX_TOKENS={raw!r} is not a number of tokens from 1 to 4096 (0: the backend's own)")
    return int(raw)


# -- replies (llm) -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Persona:
    """Who is speaking: role id, display name, persona text, language and topic keywords, and
    the role's own LoRA adapter (a folder) for a backend that serves adapters."""

    role: str
    name: str
    persona: str
    language: str
    keywords: tuple[str, ...] = ()
    adapter: str | None = None


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request: cue id, viewer name, viewer comment and how many viewers said it.

    ``seed`` is the run's seed (the actor always sets it): the same seed, persona and prompt
    give the same reply where the backend can promise it; None leaves it to the backend.
    """

    cue_id: str
    user: str
    text: str
    merged: int = 1
    seed: int | None = None
    # What a model needs besides the comment: the last lines spoken on stage, oldest first, as
    # "Name: text" (so roles can answer each other), and how many sentences the stage has room for.
    context: tuple[str, ...] = ()
    max_sentences: int = 3
    # A line of the show's own (no viewer asked): ``kind`` says which ("brief": a point on the
    # segment's brief, "follow_up": answering ``follows``, the line ``addressee`` just said,
    # "invitation": inviting the chat); "" for a reply to a viewer.  ``turn`` counts the role's
    # own lines before this one, so a writer can vary them.
    kind: str = ""
    segment: str = ""
    brief: str = ""
    topics: tuple[str, ...] = ()
    follows: str = ""
    addressee: str = ""
    turn: int = 0
    # The names of the roles on stage: a writer stops a reply that begins a transcript with one.
    cast: tuple[str, ...] = ()
    # What the role has already said of this reply (an opener, spoken while the model writes).
    opener: str = ""
    # What the show gives the role to say of its own, as written (a line of the show's own; a model
    # is told of it): the segment's points, the role's material, and which of the segment's points
    # in the role's language this point on the brief is (-1: none, or not a point on the brief).
    points: tuple[str, ...] = ()
    material: tuple[str, ...] = ()
    point: int = -1
    # The viewer sent a gift, and ``text`` is the message that came with it: the reply thanks them.
    gift: bool = False
    # What the stage remembers of the viewer (``danmaku.recalled``): their first comment in this
    # show after earlier ones (``returning``: greet them back), a regular's (``regular``), and what
    # they said of themselves before, each "kind|detail|value" (``home||Berlin``,
    # ``pet|cat|Miso``), the first ``bears`` of them what this comment bears on.
    returning: bool = False
    regular: bool = False
    facts: tuple[str, ...] = ()
    bears: int = 0


def fact_parts(line: str) -> tuple[str, str, str]:
    """A remembered fact as ``Prompt.facts`` (and a recall, and a cue) carry it, ``kind|detail|value``
    (``home||Berlin``, ``pet|cat|Miso``; a value may hold ``|``), as (kind, detail, value).
    (``schedulers.memory.Fact`` reads the same line: schedulers import nothing of the project.)"""
    kind, _, rest = line.partition("|")
    detail, _, value = rest.partition("|")
    return kind, detail, value


class Sentence(str):
    """A sentence of a reply that also says whether the reply ends with it.

    A writer that knows (the scripted replies; a model that has just produced the token
    after a sentence's end, or its end of text) yields ``Sentence(text, last=...)``: the
    sentence goes to TTS at once.  A plain ``str`` leaves it open, and the actor reads the
    next sentence (or the end) before it can say, so the first sentence waits for the second.
    A writer that said ``last=False`` should yield another sentence; one that then ends (a guard
    cut a model's loop) leaves the actor to close the reply (``utterance.dropped`` of the rest).
    """

    last: bool | None
    emotion: str | None  # how it is said, where the writer knows (one of actors.backends.emotion.LABELS)
    source: str | None   # where its words come from, where the writer knows: "material" (the show's), "template"

    def __new__(cls, text: str, last: bool | None = None, emotion: str | None = None,
                source: str | None = None) -> Sentence:
        sentence = super().__new__(cls, text)
        sentence.last = last
        sentence.emotion = emotion
        sentence.source = source
        return sentence


class ReplyWriter(Protocol):
    """Writes a role's reply to a comment, or a line of the show's own (``Prompt.kind``),
    streamed one sentence at a time.

    Built once per process with no arguments (``Class()``).  ``name`` is recorded in
    ``utterance.completed``.  Each sentence is one chunk of text for TTS; the actor cuts the
    stream at the stage's room for the reply (``TROUPE_LLM_MAX_SENTENCES``) and closes it.
    """

    name: str  # the backend's name, e.g. "scripted"

    def stream(self, persona: Persona, prompt: Prompt) -> Iterator[str]:
        """The reply's sentences, each yielded as soon as it is written (a ``Sentence`` when
        the writer knows whether it is the last)."""
        ...

    def write_batch(self, persona: Persona, prompts: Sequence[Prompt]) -> list[Iterator[str]]:
        """The replies of one role to a batch of prompts, in order, in one call (a batching
        model decodes them together); by default each on its own."""
        return [self.stream(persona, prompt) for prompt in prompts]

    def interrupt(self, cue_id: str) -> None:
        """Stop writing ``cue_id``'s reply at once, mid-sentence (an urgent cue takes the writer):
        its stream raises ``WriterInterrupted`` at the next token.  Called from another thread.
        By default nothing happens: the reply is stopped after its sentence."""
        return None


class WriterInterrupted(BackendError):
    """A reply stopped mid-sentence because an urgent cue took the writer."""


# -- speech (tts) --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Voice:
    """How to speak: language ("en" or "zh"), a backend's variant name, pitch (0..100, 50 is
    the voice's own) and rate (words a minute).  Each backend checks what it can speak."""

    language: str
    variant: str | None = None
    pitch: int = 50
    rate: int = 175


@dataclass(frozen=True, slots=True)
class Phoneme:
    """One IPA phoneme label and where it sits in the returned audio."""

    ipa: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class Speech:
    """Synthesised audio (s16le mono) with its phoneme timeline."""

    pcm: bytes
    sample_rate: int
    phonemes: tuple[Phoneme, ...]

    @property
    def duration_ms(self) -> int:
        """Audio length in whole milliseconds (floored)."""
        return len(self.pcm) // 2 * 1000 // self.sample_rate


class Speaker(Protocol):
    """Speaks text in a voice: PCM plus the timing of every phoneme (lip-sync is placed from
    those timings, so they are part of the contract: in order, within the audio, covering
    pauses with ``"_"``).  Built once per process with no arguments (``Class()``)."""

    name: str  # the backend's name, e.g. "espeak"

    def speak(self, text: str, voice: Voice) -> Speech:
        """The speech of one text; empty text gives empty speech."""
        ...

    def speak_batch(self, texts: Sequence[str], voice: Voice) -> list[Speech]:
        """The speech of a batch of texts in one voice, in order, in one call; by default
        each on its own."""
        return [self.speak(text, voice) for text in texts]


# -- the stage (render) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RoleLook:
    """How one role looks on stage."""

    role: str
    name: str
    color: str
    shape: str = "round"
    avatar: str = ""  # a folder of layered art (actors.backends.avatar); "": the procedural figure


# A face is drawn in steps (equal steps draw equal pictures): an eased change in sixteenths, the
# eyes' turn in four steps each way, a nod in eighths.
BLEND_STEPS, GAZE_STEPS, NOD_STEPS = 16, 4, 8


@dataclass(frozen=True, slots=True)
class RoleState:
    """What one role does in one frame: its mouth, and its face (``actors.faces``): the expression
    it shows, eased from ``previous`` (``blend`` of the way, 1: all of it), where it looks
    (``gaze``: -1 far left, 0 the audience, 1 far right) and how far a nod has its head down."""

    role: str
    viseme: str
    speaking: bool
    expression: str = "neutral"
    previous: str = "neutral"
    blend: float = 1.0
    gaze: float = 0.0
    nod: float = 0.0


class StageDrawer(Protocol):
    """Draws one run's stage: built per run as ``Class(looks, resolution, device=..., seed=...)``.

    ``draw`` must be a pure function of its arguments and the constructor's (re-execution and
    export draw recorded runs again); ``scene_key`` names what a picture shows, so that an
    unchanged stage is encoded once.  ``draw_batch`` and ``encode_batch`` give what ``draw``
    and ``encode`` give, frame by frame.
    """

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the current resolution."""
        ...

    def set_resolution(self, resolution: str) -> None:
        """Draw the next frames at another of ``RESOLUTIONS``."""
        ...

    def scene_key(self, t_ms: int, states: Sequence[RoleState], subtitle: str | None) -> tuple[Hashable, ...]:
        """Equal for two frames whose pictures are equal."""
        ...

    def set_background(self, background: str) -> None:
        """Draw the next frames with another back wall ("", "#rrggbb" or an image file); a
        drawer that has only one ignores it."""

    def draw(self, t_ms: int, states: Sequence[RoleState], subtitle: str | None) -> Any:
        """The picture of the stage at ``t_ms`` (whatever ``encode`` takes)."""
        ...

    def encode(self, picture: Any, quality: int) -> bytes:
        """A drawn picture as JPEG."""
        ...

    @property
    def frame_batch(self) -> int:
        """How many frames ``draw_batch`` and ``encode_batch`` are best given at once (callers
        cut longer runs of frames to it); by default 1, frame by frame."""
        return 1

    def draw_batch(
        self, frames: Sequence[tuple[int, Sequence[RoleState], str | None]],
    ) -> list[Any]:
        """The pictures of several frames, each ``(t_ms, states, subtitle)``, in order, in one
        call (a GPU drawer stacks them); by default each on its own."""
        return [self.draw(t_ms, states, subtitle) for t_ms, states, subtitle in frames]

    def encode_batch(self, pictures: Sequence[Any], quality: int) -> list[bytes]:
        """Drawn pictures as JPEGs, in order, in one call (a GPU drawer encodes them together);
        by default each on its own."""
        return [self.encode(picture, quality) for picture in pictures]

    def memory_fraction(self) -> float | None:
        """The share of its device's memory the drawer holds; None when not on a GPU."""
        ...
