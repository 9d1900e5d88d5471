"""Error family: inputs that could not be handled, dead-lettered with their bytes."""

from __future__ import annotations

from dataclasses import dataclass

from events.base import Event, registry


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLettered(Event):
    """An input was terminated; ``raw`` carries the original message bytes."""

    type = "error.dead_lettered"
    blob = "raw"
    personal = ("raw",)  # the original message: a forgotten viewer's comment, where it was one
    actor: str
    subject: str
    reason: str
    deliveries: int
    stream_seq: int
    raw: bytes = b""
