"""Utterance family: the LLM's reply text, streamed in sentence chunks."""

from __future__ import annotations

from dataclasses import dataclass

from events.base import Event, registry


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class UtteranceChunk(Event):
    """One sentence-sized piece of a role's reply; ``last`` closes the utterance."""

    type = "utterance.chunk"
    personal = ("text",)
    utterance: str
    seq: int
    text: str
    language: str
    last: bool = False
    priority: float = 1.0   # the cue's
    deadline_ms: int = 0    # the cue's: show time after which the chunk is not spoken; 0: none
    # How the sentence is said: neutral, happy, sad, angry, surprised or thinking (the writer's
    # tag or label, else the nearest over sentence embeddings; neutral without a classifier).
    emotion: str = "neutral"


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class UtteranceCompleted(Event):
    """The whole reply text of a cue, once every chunk is out."""

    type = "utterance.completed"
    personal = ("text",)
    utterance: str
    text: str
    chunks: int
    backend: str            # the writer, with its model and sampling where it has them
    blocked: int = 0        # sentences the blocklist replaced with a deflection
    source: str = ""        # where its words came from: "model", "material" (the show's), "template", "verbatim"


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class UtteranceDropped(Event):
    """A reply (or its rest) was dropped on purpose, with the reason."""

    type = "utterance.dropped"
    personal = ("reason",)  # may name the viewer whose comment dropped it ("superseded: alice wrote again")
    # Not an outcome of its cause: a comment that superseded a reply, or made room before one,
    # has its own answer still to come (a takeover publishes it where the last holder died first).
    answers = False
    utterance: str
    reason: str
    from_seq: int = 0       # the chunks from this one on are dropped (0: the whole reply)
