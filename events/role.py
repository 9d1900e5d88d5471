"""Role family: the digital humans on stage."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from events.base import Event, registry
from events.show import RoleSpec


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
    voice_backend: str | None = None
    color: str = "#888888"
    shape: str = "round"
    avatar: str = ""
    avatar_digest: str = ""
    llm_backend: str | None = None
    llm_model: str | None = None
    llm_adapter: str | None = None
    llm_openers: tuple[str, ...] = ()
    material: tuple[str, ...] = ()
    signoff: tuple[str, ...] = ()

    @classmethod
    def of(cls, run: str, spec: RoleSpec) -> RoleDeclared:
        """The declaration of a show's role (the show's ``RoleSpec`` is the one definition)."""
        fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "id"}
        return cls(id=f"{run}-role-{spec.id}", run=run, role=spec.id, **fields)

    def spec(self) -> RoleSpec:
        """The role as the show declares it."""
        return RoleSpec(id=self.role or "", **{name: getattr(self, name) for name in _ROLE_FIELDS})


@registry.register
@dataclass(frozen=True, slots=True, kw_only=True)
class RoleWeightsChanged(Event):
    """QoS reweighted the roles' priorities."""

    type = "role.weights_changed"
    weights: dict[str, float]
    reason: str


_ROLE_FIELDS = tuple(f.name for f in dataclasses.fields(RoleSpec) if f.name != "id")
# A role field added to the show schema must reach its declaration (and the other way round).
_DECLARED = {f.name for f in dataclasses.fields(RoleDeclared)} - {f.name for f in dataclasses.fields(Event)}
assert set(_ROLE_FIELDS) == _DECLARED, f"RoleSpec and RoleDeclared disagree: {set(_ROLE_FIELDS) ^ _DECLARED}"
