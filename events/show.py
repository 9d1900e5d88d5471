"""The show: roles and a danmaku script, read from TOML and carried in ``run.started``."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from events.errors import ConfigError
from events.subjects import is_token

# The stage's resolutions, largest first: (width, height) by name.  The one table: settings,
# the renderer, the sink and the QoS ladder all read it.
RESOLUTIONS: dict[str, tuple[int, int]] = {
    "1080p": (1920, 1080), "720p": (1280, 720), "480p": (854, 480), "360p": (640, 360),
}


def resolution_name(height: int) -> str:
    """The name of a resolution by its height (``480p`` for 480)."""
    return next((name for name, (_, h) in RESOLUTIONS.items() if h == height), f"{height}p")


def blocked(text: str, words: Iterable[str]) -> bool:
    """Whether ``text`` contains one of the blocked ``words`` (ignoring case; empty words never
    match): the one check for danmaku and for what a model writes."""
    folded = text.casefold()
    return any(word and word.casefold() in folded for word in words)


class ShowError(ConfigError):
    """A show file is invalid; the message names the field."""


@dataclass(frozen=True, slots=True)
class RoleSpec:
    """One role as the show declares it."""

    id: str
    name: str
    persona: str
    language: str
    keywords: tuple[str, ...] = ()
    weight: float = 1.0
    voice_variant: str | None = None
    voice_pitch: int = 50
    voice_rate: int = 175
    voice_backend: str | None = None     # the role's own TTS backend; None: the settings'
    color: str = "#888888"
    shape: str = "round"
    llm_backend: str | None = None       # the role's own LLM backend; None: the settings'
    llm_model: str | None = None         # the model (a path) the role's LLM backend loads
    llm_adapter: str | None = None       # a LoRA adapter (a folder) on that model, for backends that take one


@dataclass(frozen=True, slots=True)
class ScriptLine:
    """A scripted danmaku: at ``at_s`` seconds of show time, ``user`` says ``text``."""

    at_s: float
    user: str
    text: str
    to: str | None = None
    kind: str = "comment"


@dataclass(frozen=True, slots=True)
class Show:
    """A show: its title, roles, blocklist and danmaku script."""

    title: str
    roles: tuple[RoleSpec, ...]
    script: tuple[ScriptLine, ...] = ()
    blocklist: tuple[str, ...] = ()

    def role(self, role_id: str) -> RoleSpec | None:
        return next((r for r in self.roles if r.id == role_id), None)

    def to_dict(self) -> dict[str, Any]:
        """The show as plain data (as carried in ``run.started``)."""
        return {
            "title": self.title,
            "blocklist": list(self.blocklist),
            "roles": [
                {
                    "id": r.id, "name": r.name, "persona": r.persona, "language": r.language,
                    "keywords": list(r.keywords), "weight": r.weight,
                    "voice": {"variant": r.voice_variant, "pitch": r.voice_pitch, "rate": r.voice_rate,
                              "backend": r.voice_backend},
                    "look": {"color": r.color, "shape": r.shape},
                    "llm": {"backend": r.llm_backend, "model": r.llm_model, "adapter": r.llm_adapter},
                }
                for r in self.roles
            ],
            "script": [
                {"at": s.at_s, "user": s.user, "text": s.text, "to": s.to, "kind": s.kind}
                for s in self.script
            ],
        }


def _get(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = ...) -> Any:
    if key not in doc:
        if default is ...:
            raise ShowError(f"{where}.{key}: missing")
        return default
    value = doc[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ShowError(f"{where}.{key}: wrong type {type(value).__name__}")
    return value


def _role(doc: Mapping[str, Any], i: int) -> RoleSpec:
    where = f"roles[{i}]"
    role_id = _get(doc, "id", str, where)
    if not is_token(role_id):
        raise ShowError(f"{where}.id: {role_id!r} must be letters, digits, _ or -")
    language = _get(doc, "language", str, where, "en")
    if language not in ("en", "zh"):
        raise ShowError(f"{where}.language: {language!r} is not 'en' or 'zh'")
    voice = _get(doc, "voice", dict, where, {})
    look = _get(doc, "look", dict, where, {})
    shape = _get(look, "shape", str, f"{where}.look", "round")
    if shape not in ("round", "square", "tall"):
        raise ShowError(f"{where}.look.shape: {shape!r} is not round, square or tall")
    pitch = int(_get(voice, "pitch", int, f"{where}.voice", 50))
    if not 0 <= pitch <= 100:
        raise ShowError(f"{where}.voice.pitch: {pitch} is not in 0..100")
    rate = int(_get(voice, "rate", int, f"{where}.voice", 175))
    if not 80 <= rate <= 450:
        raise ShowError(f"{where}.voice.rate: {rate} words a minute is not in 80..450")
    backend = _get(voice, "backend", (str, type(None)), f"{where}.voice", None)
    if backend is not None and not is_token(backend):
        raise ShowError(f"{where}.voice.backend: {backend!r} must be a backend name (letters, digits, _ or -)")
    llm = _get(doc, "llm", dict, where, {})
    llm_backend = _get(llm, "backend", (str, type(None)), f"{where}.llm", None)
    if llm_backend is not None and not is_token(llm_backend):
        raise ShowError(f"{where}.llm.backend: {llm_backend!r} must be a backend name (letters, digits, _ or -)")
    llm_model = _get(llm, "model", (str, type(None)), f"{where}.llm", None)
    llm_adapter = _get(llm, "adapter", (str, type(None)), f"{where}.llm", None)
    weight = float(_get(doc, "weight", (int, float), where, 1.0))
    if not 0 < weight <= 100:
        raise ShowError(f"{where}.weight: {weight:g} is not above 0 (and at most 100)")
    return RoleSpec(
        id=role_id, name=_get(doc, "name", str, where, role_id),
        persona=_get(doc, "persona", str, where, ""), language=language,
        keywords=tuple(str(k) for k in _get(doc, "keywords", list, where, [])),
        weight=weight, voice_variant=_get(voice, "variant", (str, type(None)), f"{where}.voice", None),
        voice_pitch=pitch, voice_rate=rate, voice_backend=backend,
        color=_get(look, "color", str, f"{where}.look", "#888888"), shape=shape,
        llm_backend=llm_backend, llm_model=llm_model, llm_adapter=llm_adapter,
    )


def show_from_dict(doc: Mapping[str, Any]) -> Show:
    """Validate plain data (a parsed TOML file or a ``run.started`` show) into a Show."""
    meta = doc.get("show", doc)
    roles = tuple(_role(r, i) for i, r in enumerate(_get(doc, "roles", list, "show")))
    if not 1 <= len(roles) <= 8:
        raise ShowError("show.roles: a show has 1 to 8 roles")
    if len({r.id for r in roles}) != len(roles):
        raise ShowError("show.roles: role ids must be unique")
    lines = []
    for i, line in enumerate(_get(doc, "danmaku", list, "show", doc.get("script", []))):
        where = f"danmaku[{i}]"
        lines.append(ScriptLine(
            at_s=float(_get(line, "at", (int, float), where)), user=_get(line, "user", str, where, ""),
            text=_get(line, "text", str, where), to=_get(line, "to", (str, type(None)), where, None),
            kind=_get(line, "kind", str, where, "comment"),
        ))
    return Show(
        title=str(meta.get("title", "Troupe show")), roles=roles,
        script=tuple(sorted(lines, key=lambda s: s.at_s)),
        blocklist=tuple(str(w) for w in _get(meta, "blocklist", list, "show", [])),
    )


def show_from_toml(text: str) -> Show:
    """Parse and validate a show file's text."""
    try:
        return show_from_dict(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise ShowError(f"show file is not valid TOML: {exc}") from None
