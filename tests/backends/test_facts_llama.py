"""The facts worker's reader with the real Qwen2.5-Coder-0.5B-Instruct the llama extra ships:
it finds what the rules miss, in English and Chinese, and what it says is kept only where the
comment bears it out."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp", reason="the llama extra is not installed (scripts/test.sh installs it)")

from actors.backends.facts_llama import LlamaFactReader  # noqa: E402
from actors.backends.llm_llama import LlamaError  # noqa: E402
from schedulers.memory import extract_facts  # noqa: E402


@pytest.fixture(scope="module")
def reader() -> LlamaFactReader:
    return LlamaFactReader()


@pytest.mark.parametrize(("text", "fact"), [
    ("grew up in Glasgow, still there", ("home", "Glasgow")),
    ("@host Lisbon has been home for ten years now", ("home", "Lisbon")),  # the mention is not read
    ("our hamster Mochi is asleep on my keyboard", ("pet", "Mochi")),
    ("I spend my days as a firefighter", ("job", "firefighter")),
    ("我老家在成都，好想回去", ("home", "成都")),
])
def test_the_model_reads_a_fact_the_rules_miss(reader: LlamaFactReader, text: str, fact: tuple[str, str]) -> None:
    assert fact not in [(f.kind, f.value) for f in extract_facts(text)]
    assert fact in [(f.kind, f.value) for f in reader.read(text)]


@pytest.mark.parametrize("text", ["my sister lives in Paris, what do you think of it?", "this song is a banger",
                                  "我朋友在学法语", "what do you think about cats?"])
def test_nothing_is_read_where_the_writer_states_nothing_of_their_own(reader: LlamaFactReader, text: str) -> None:
    assert reader.read(text) == []


def test_the_same_comment_is_read_the_same_each_time(reader: LlamaFactReader) -> None:
    text = "born and raised in Lisbon, I'm a nurse"
    first = reader.read(text)
    assert reader.read(text) == first  # greedy: the same answer for the same comment
    assert reader.label.startswith("llama_cpp:")


def test_a_missing_model_file_is_one_clear_error() -> None:
    with pytest.raises(LlamaError, match="model not found: /nonexistent.gguf"):
        LlamaFactReader("/nonexistent.gguf")
