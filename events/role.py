"""Role family: the digital humans on stage."""

from __future__ import annotations

from dataclasses import dataclass

from events.base import Event, registry


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class RoleDeclared(Event):
    """A role joins the stage with its persona, voice and look."""

    type = "role.declared"
    name: str
    persona: str
    language: str
    keywords: tuple[str, ...] = ()
    weight: float = 1.0
    voice_variant: str | None = None
    voice_pitch: int = 50
    voice_rate: int = 175
    color: str = "#888888"
    shape: str = "round"


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class RoleWeightsChanged(Event):
    """QoS reweighted the roles' priorities."""

    type = "role.weights_changed"
    weights: dict[str, float]
    reason: str
