"""The tts actor: its speaker is a backend (the settings', or a role's own), batches reach it whole."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from actors.backends.protocols import Phoneme, Speaker, Speech, Voice
from actors.backends.registry import BACKENDS
from actors.base import HandlerError
from actors.tts import TTSActor
from app.shows import load_show
from events.audio import AudioChunk
from events.role import RoleDeclared, RoleWeightsChanged
from events.run import RunStarted
from events.show import ShowError, show_from_dict, show_from_toml
from events.utterance import UtteranceChunk
from infra.settings import load_settings
from tests.showkit import ctx, demo_run


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
    tts = TTSActor(load_settings(environ={}), speaker=speaker)
    outs = tts.handle_batch([chunk(0, "hi"), chunk(1, "there"), chunk(2, "you")], ctx(0, demo_run("r1")))
    assert [n for n, _ in speaker.calls] == [3]
    audio = [[a for a in o if isinstance(a, AudioChunk)] for o in outs]
    assert [[a.duration_ms for a in o] for o in audio] == [[20], [50], [30]]
    assert [len(o) for o in audio] == [len(list(o)) for o in outs] and audio[2][-1].last
    assert speaker.calls[0][1].pitch == load_show().role("host").voice_pitch  # type: ignore[union-attr]


def test_a_role_speaks_with_its_own_backend() -> None:
    own = Tones("own")
    backends = BACKENDS.with_tts("own", lambda: own)
    default = Tones()
    tts = TTSActor(load_settings(environ={}), speaker=default, backends=backends)
    run = run_with_voice_backend("own")
    list(tts.handle(chunk(0), ctx(0, run)))
    list(tts.handle(chunk(1, role="guest"), ctx(0, run)))
    assert len(own.calls) == 1 and len(default.calls) == 1


def test_an_unknown_voice_backend_fails_the_input_for_good() -> None:
    tts = TTSActor(load_settings(environ={}), speaker=Tones())
    with pytest.raises(HandlerError, match="voice.backend of role 'host': 'nope' \\(available: espeak, onnx\\)"):
        tts.handle(chunk(0), ctx(0, run_with_voice_backend("nope")))


def test_release_forgets_everything_of_a_run() -> None:
    tts = TTSActor(load_settings(environ={}), speaker=Tones())
    tts.handle(RoleWeightsChanged(id="w", run="r1", weights={"host": 1.5}, reason="test"), ctx(0, demo_run("r1")))
    tts.handle(chunk(0), ctx(0, demo_run("r1")))
    assert tts.holds("r1") and tts.factors
    tts.release("r1")
    assert not tts.holds("r1") and not tts.factors


def test_a_show_file_names_a_roles_voice_backend() -> None:
    text = '[[roles]]\nid = "a"\n[roles.voice]\nbackend = "espeak"\n[[roles]]\nid = "b"\n'
    show = show_from_toml(text)
    assert [r.voice_backend for r in show.roles] == ["espeak", None]
    assert show_from_dict(show.to_dict()) == show
    assert RoleDeclared.of("r1", show.roles[0]).spec() == show.roles[0]
    with pytest.raises(ShowError, match=r"roles\[0\].voice.backend"):
        show_from_toml(text.replace('"espeak"', '"no such"'))
