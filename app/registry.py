"""The one registry of actors: what ``troupe up`` and ``troupe actor`` run, what re-execution
replays, what the CLI's help lists.  Classes are imported when first needed (a tts process
needs no torch); each declares what it consumes and emits (``actors.base``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from actors.base import Actor
from events.errors import ConfigError
from infra.metrics import Metrics
from infra.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine


@dataclass(frozen=True, slots=True)
class Wiring:
    """What an actor may be built with besides its settings."""

    settings: Settings
    metrics: Metrics
    engine: Callable[[], Engine]  # the store, opened on first use


def _with_settings(cls: type[Actor], w: Wiring) -> Actor:
    return cls(w.settings)  # type: ignore[call-arg]


def _director(cls: type[Actor], w: Wiring) -> Actor:
    from actors.memory import Reader  # it reads what the stage remembers of a viewer from the store
    return cls(w.settings, Reader(w.engine))  # type: ignore[call-arg]


def _recorder(cls: type[Actor], w: Wiring) -> Actor:
    from store.recorder import EventWriter
    return cls(EventWriter(w.engine(), w.settings.store_frames), w.metrics)  # type: ignore[call-arg]


@dataclass(frozen=True, slots=True)
class ActorEntry:
    name: str
    target: str                  # "module:Class"
    summary: str
    build_with: Callable[[type[Actor], Wiring], Actor] = _with_settings
    # Re-executed from a recorded run (``troupe replay --verify``): it is deterministic.
    reexecuted: bool = False
    # Part of the show: run by ``troupe up`` unless told otherwise, and waited for at its end.
    # A watcher (the preview) is not: it runs when asked and the show never waits for it.
    show: bool = True
    # Run by troupe up only where the settings ask for it (None: always, being part of the show).
    wanted: Callable[[Settings], bool] | None = None

    def load(self) -> type[Actor]:
        module, _, attr = self.target.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        assert issubclass(cls, Actor) and cls.name == self.name, self.target
        return cls

    def build(self, wiring: Wiring) -> Actor:
        return self.build_with(self.load(), wiring)


ACTORS: dict[str, ActorEntry] = {e.name: e for e in (
    ActorEntry("director", "actors.director:Director", "danmaku in, cues out: which role answers what, and when",
               build_with=_director, reexecuted=True),
    ActorEntry("llm", "actors.llm:LLMActor", "cues in, the reply's sentences out, in the role's persona"),
    ActorEntry("tts", "actors.tts:TTSActor", "sentences in, audio with phoneme timings out"),
    ActorEntry("lipsync", "actors.lipsync:LipsyncActor", "audio in, viseme tracks on the show timeline out",
               build_with=lambda cls, w: cls(), reexecuted=True),
    ActorEntry("render", "actors.render:RenderActor", "viseme tracks in, stage frames out", reexecuted=True),
    ActorEntry("sink", "actors.sink:SinkActor", "frames and audio in, the MP4 out"),
    ActorEntry("qos", "actors.qos:QosActor", "observations in, resolution, throttle and role weights out",
               reexecuted=True),
    ActorEntry("memory", "actors.memory:MemoryActor",
               "danmaku in, the facts viewers state out; keeps the viewers read model up with the store",
               build_with=lambda cls, w: cls()),
    ActorEntry("facts", "actors.facts:FactsActor",
               "danmaku in, the facts a model reads in them that the rules missed out (TROUPE_FACTS=llama_cpp)",
               wanted=lambda s: s.facts == "llama_cpp"),
    ActorEntry("recorder", "actors.recorder:RecorderActor", "every event into the store", build_with=_recorder),
    ActorEntry("preview", "actors.preview:PreviewActor",
               "the show watched and steered in a browser: video and audio over WebRTC, the feed, the input box",
               build_with=lambda cls, w: cls(), show=False),
)}
NAMES = tuple(ACTORS)
SHOW = tuple(name for name, e in ACTORS.items() if e.show and e.wanted is None)  # what every show runs


def show_actors(settings: Settings) -> tuple[str, ...]:
    """What troupe up runs by default with these settings: the show's actors, and those the
    settings ask for (the facts worker where a model reads facts)."""
    return tuple(name for name, e in ACTORS.items() if e.show and (e.wanted is None or e.wanted(settings)))


REEXECUTED = tuple(name for name, e in ACTORS.items() if e.reexecuted)


def entry(name: str) -> ActorEntry:
    try:
        return ACTORS[name]
    except KeyError:
        raise ConfigError(f"unknown actor {name!r} (known: {', '.join(NAMES)})") from None


def actor_class(name: str) -> type[Actor]:
    return entry(name).load()
