"""Audio family: speech PCM in chunks of at most 500 ms, with phoneme timings.

``offset_ms`` is the chunk's position inside its utterance; the utterance's place
on the show timeline is decided by lipsync (``viseme.track.start_ms``).
"""

from __future__ import annotations

from dataclasses import dataclass

from events.base import Event, registry

MAX_CHUNK_MS = 500


@dataclass(frozen=True, slots=True)
class PhonemeMark:
    """An IPA phoneme with its start and end in ms relative to the chunk start."""

    ipa: str
    start_ms: int
    end_ms: int


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class AudioChunk(Event):
    """Signed 16-bit mono PCM; the bytes travel raw after the JSON header.

    ``seq`` is the utterance chunk (sentence) it speaks, ``part`` its slice of at
    most 500 ms; ``part_last`` closes the sentence and ``last`` the utterance.
    """

    type = "audio.chunk"
    personal = ("text",)
    blob = "pcm"
    utterance: str
    seq: int
    sample_rate: int
    offset_ms: int
    duration_ms: int
    text: str
    phonemes: tuple[PhonemeMark, ...]
    part: int = 0
    part_last: bool = True
    last: bool = False
    priority: float = 1.0   # the cue's (a cue at TROUPE_INTERRUPT_PRIORITY takes the floor)
    deadline_ms: int = 0    # the cue's: show time by which the reply must start to be spoken; 0: none
    emotion: str = "neutral"  # how the sentence is said (its utterance.chunk's): the face acts it out
    pcm: bytes = b""
