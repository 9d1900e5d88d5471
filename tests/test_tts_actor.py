"""The tts actor: its speaker is a backend (the settings', or a role's own), batches reach it whole."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from actors.backends.protocols import Phoneme, Speaker, Speech, Voice
from actors.backends.registry import BACKENDS
from actors.base import HandlerError
from actors.kernel import ListFeed
from actors.tts import TTSActor
from app.shows import load_show
from events.audio import AudioChunk
from events.role import RoleDeclared, RoleWeightsChanged
from events.run import RunStarted
from events.show import ShowError, show_from_dict, show_from_toml
from events.utterance import UtteranceChunk
from infra.settings import load_settings
from tests.showkit import demo_run


class Tones(Speaker):
    """10 ms of silence a character, one phoneme a character; remembers what it was asked."""

    def __init__(self, name: str = "tones") -> None:
        self.name = name
        self.calls: list[tuple[int, Voice]] = []

    def speak(self, text: str, voice: Voice) -> Speech:
        return self.speak_batch([text], voice)[0]

    def speak_batch(self, texts: Sequence[str], voice: Voice) -> list[Speech]:
        self.calls.append((len(texts), voice))
        return [Speech(b"\0\0" * 160 * len(t), 16000, tuple(Phoneme("a", 10 * i, 10 * i + 10) for i in range(len(t))))
                for t in texts]


def chunk(seq: int, text: str = "hello", role: str = "host") -> UtteranceChunk:
    return UtteranceChunk(id=f"c{seq}", run="r1", role=role, utterance="u", seq=seq, text=text, language="en",
                          last=seq == 2)


def run_with_voice_backend(backend: str | None) -> RunStarted:
    show = load_show()
    roles = tuple(dataclasses.replace(r, voice_backend=backend) if r.id == "host" else r for r in show.roles)
    return dataclasses.replace(demo_run("r1"), show=dataclasses.replace(show, roles=roles).to_dict())


def test_a_batch_of_one_voice_is_spoken_in_one_call() -> None:
    speaker = Tones()
    feed = ListFeed(TTSActor(load_settings(environ={}), speaker=speaker), demo_run("r1"))
    chunks = [chunk(0, "hi"), chunk(1, "there"), chunk(2, "you")]
    out = feed.handle(*chunks, at_ms=0)  # they wait in the scheduler together and leave in one batch
    assert [n for n, _ in speaker.calls] == [3]
    audio = [[a for a in out if isinstance(a, AudioChunk) and a.causation == c.id] for c in chunks]
    assert [[a.duration_ms for a in o] for o in audio] == [[20], [50], [30]]
    assert out == [a for o in audio for a in o] and audio[2][-1].last  # audio alone, in the inputs' order
    assert speaker.calls[0][1].pitch == load_show().role("host").voice_pitch  # type: ignore[union-attr]


def test_a_role_speaks_with_its_own_backend() -> None:
    own = Tones("own")
    backends = BACKENDS.with_tts("own", lambda: own)
    default = Tones()
    feed = ListFeed(TTSActor(load_settings(environ={}), speaker=default, backends=backends),
                    run_with_voice_backend("own"))
    feed.handle(chunk(0), at_ms=0)
    feed.handle(chunk(1, role="guest"), at_ms=0)
    assert len(own.calls) == 1 and len(default.calls) == 1


def test_an_unknown_voice_backend_fails_the_input_for_good() -> None:
    feed = ListFeed(TTSActor(load_settings(environ={}), speaker=Tones()), run_with_voice_backend("nope"))
    with pytest.raises(HandlerError, match="voice.backend of role 'host': 'nope' \\(available: espeak, onnx\\)"):
        feed.handle(chunk(0), at_ms=0)


def test_release_forgets_everything_of_a_run() -> None:
    feed = ListFeed(TTSActor(load_settings(environ={}), speaker=Tones()), demo_run("r1"))
    feed.handle(RoleWeightsChanged(id="w", run="r1", weights={"host": 1.5}, reason="test"), at_ms=0)
    feed.handle(chunk(0), at_ms=0)
    assert feed.kernel.holds("r1") and feed.state().factors == {"host": 1.5}
    feed.release()
    assert not feed.kernel.holds("r1") and feed.state() is None


def test_the_run_s_role_weights_order_the_queue() -> None:
    host, guest = chunk(0, role="host"), dataclasses.replace(chunk(0, role="guest"), id="g0", utterance="g")
    plain = ListFeed(TTSActor(load_settings(environ={}), speaker=Tones()), demo_run("r1"))
    assert [a.causation for a in plain.handle(host, guest, at_ms=0)] == ["c0", "g0"]  # the same weight: in turn
    weighted = ListFeed(TTSActor(load_settings(environ={}), speaker=Tones()), demo_run("r1"))
    weighted.handle(RoleWeightsChanged(id="w", run="r1", weights={"guest": 3.0}, reason="test"), at_ms=0)
    assert [a.causation for a in weighted.handle(host, guest, at_ms=0)] == ["g0", "c0"]  # the guest weighted up


def test_a_show_file_names_a_roles_voice_backend() -> None:
    text = '[[roles]]\nid = "a"\n[roles.voice]\nbackend = "espeak"\n[[roles]]\nid = "b"\n'
    show = show_from_toml(text)
    assert [r.voice_backend for r in show.roles] == ["espeak", None]
    assert show_from_dict(show.to_dict()) == show
    assert RoleDeclared.of("r1", show.roles[0]).spec() == show.roles[0]
    with pytest.raises(ShowError, match=r"roles\[0\].voice.backend"):
        show_from_toml(text.replace('"espeak"', '"no such"'))
