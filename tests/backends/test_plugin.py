"""A new backend plugs in by name: one class and one line in the backend tables, no actor touched."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.backends.protocols import Persona, Phoneme, Prompt, ReplyWriter, Speaker, Speech, Voice
from actors.backends.registry import BACKENDS, UnknownBackendError
from actors.kernel import ListFeed
from actors.llm import LLMActor
from actors.tts import TTSActor
from events.audio import AudioChunk
from events.cue import CueIssued
from events.utterance import UtteranceChunk, UtteranceCompleted
from infra.settings import load_settings
from tests.showkit import demo_run


class EchoWriter(ReplyWriter):
    """Answers every comment by repeating it."""

    name = "echo"
    instant = True  # the whole reply at once: no opener is said before it

    def stream(self, persona: Persona, prompt: Prompt) -> Iterator[str]:
        yield f"{prompt.user} said:"
        yield f"{prompt.text}!"


class BeepSpeaker(Speaker):
    """Speaks every text as 10 ms of silence a character, one phoneme a character."""

    name = "beep"

    def speak(self, text: str, voice: Voice) -> Speech:
        phonemes = tuple(Phoneme("a", 10 * i, 10 * i + 10) for i in range(len(text)))
        return Speech(b"\0\0" * 160 * len(text), 16000, phonemes)


RUN = demo_run("r1")
PROJECT = {"app", "actors", "store", "infra", "events", "schedulers"}
BACKENDS_WITH_ECHO = BACKENDS.with_llm("echo", "tests.backends.test_plugin:EchoWriter").with_tts("beep", BeepSpeaker)


def cue(i: int = 0, text: str = "hello stage") -> CueIssued:
    return CueIssued(id=f"cue{i}", run="r1", role="host", correlation=f"d{i}", seq=i, user="ann", text=text,
                     danmaku=(f"d{i}",), routed_by="mention", priority=2.0)


def test_an_echo_writer_chosen_by_name_answers_a_cue() -> None:
    settings = load_settings(environ={"TROUPE_LLM_BACKEND": "echo"})
    llm = ListFeed(LLMActor(settings, backends=BACKENDS_WITH_ECHO), RUN)
    out = llm.handle(cue(1), at_ms=100)  # both sentences fit in the throttle's window
    chunks = [e for e in out if isinstance(e, UtteranceChunk)]
    assert [c.text for c in chunks] == ["ann said:", "hello stage!"] and [c.last for c in chunks] == [False, True]
    completed = [e for e in out if isinstance(e, UtteranceCompleted)]
    assert completed[0].backend == "echo" and completed[0].text == "ann said: hello stage!"


def test_a_speaker_chosen_by_name_speaks_chunks() -> None:
    tts = TTSActor(load_settings(environ={"TROUPE_TTS_BACKEND": "beep"}), backends=BACKENDS_WITH_ECHO)
    chunk = UtteranceChunk(id="c0", run="r1", role="host", utterance="u", seq=0, text="hi", language="en", last=True)
    (audio,) = ListFeed(tts, RUN).handle(chunk, at_ms=0)
    assert isinstance(audio, AudioChunk) and audio.duration_ms == 20 and [p.ipa for p in audio.phonemes] == ["a", "a"]


def test_an_unknown_backend_is_one_line_naming_the_available_ones() -> None:
    with pytest.raises(UnknownBackendError, match=r"TROUPE_LLM_BACKEND 'nope' \(available: scripted, transformers, vllm, llama_cpp, openai\)$"):
        LLMActor(load_settings(environ={"TROUPE_LLM_BACKEND": "nope"}))
    with pytest.raises(UnknownBackendError, match="available: espeak, onnx, beep"):
        BACKENDS_WITH_ECHO.check(load_settings(environ={"TROUPE_TTS_BACKEND": "nope"}))


@pytest.mark.parametrize("module", ["llm_scripted", "tts_espeak", "render_torch", "replies", "own_lines", "stage_art",
                                    "avatar", "avatar_stage"])
def test_a_backend_imports_no_actor(module: str) -> None:
    """Backends see the protocols (and their own helpers), never an actor or the layers above."""
    path = Path(__file__).resolve().parents[2] / "actors" / "backends" / f"{module}.py"
    imported: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    ours = {name for name in imported if name and name.split(".")[0] in PROJECT}
    assert ours <= {"actors.backends.protocols", "actors.backends.replies", "actors.backends.own_lines",
                    "actors.backends.stage_art", "actors.backends.avatar", "actors.backends.avatar_stage"}, ours
