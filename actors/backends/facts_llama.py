"""Facts a viewer states about themselves, read by a GGUF model on llama.cpp: what the rules
(``schedulers.memory.extract_facts``) do not catch ("Berlin is where I grew up", "我老家在成都").

The model is asked for JSON only (a grammar from the answer's schema holds it to that), greedily,
with a few worked examples; ``schedulers.memory.facts_from_model`` then keeps only what holds up
against the comment (a value said in it word for word).  The default model is the writer's
(``TROUPE_LLAMA_MODEL``, else the shipped Qwen2.5-Coder-0.5B); ``TROUPE_FACTS_THREADS`` (default
1) keeps the reading to one core, beside a show's replies.  Nothing is downloaded.
"""

from __future__ import annotations

import threading
from typing import Any

import orjson

from actors.backends.llm_llama import LlamaError, llama_and_model
from schedulers.choice import MENTION
from schedulers.memory import KINDS, Fact, facts_from_model

N_CTX = 1024
MAX_TOKENS = 96      # a few facts' JSON
MAX_COMMENT_CHARS = 200
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"facts": {"type": "array", "items": {
        "type": "object",
        "properties": {"kind": {"type": "string", "enum": list(KINDS)}, "value": {"type": "string"},
                       "detail": {"type": "string"}},
        "required": ["kind", "value", "detail"]}}},
    "required": ["facts"],
}
SYSTEM = (
    "You read one comment from a live stream's chat and list the facts its writer states about "
    "themselves. Kinds: home (the place they live in or come from), learning (what they are "
    "learning), pet (their pet's name; detail: the animal), job (their work), favourite (their "
    "favourite thing; detail: what kind of thing), name (what to call them). Copy each value word "
    "for word from the comment. Facts about other people are not the writer's. Answer with JSON only."
)
# Worked examples: (comment, answer).  None of them is, or is shaped like, one of the labelled
# comments ``bench.memory --facts`` scores (``bench.stated``).
EXAMPLES: tuple[tuple[str, list[dict[str, str]]], ...] = (
    ("Munich is home for me, born there", [{"kind": "home", "value": "Munich", "detail": ""}]),
    ("good evening! my parrot Kiwi says hi too", [{"kind": "pet", "value": "Kiwi", "detail": "parrot"}]),
    ("我家乡在西安，最近迷上了滑板", [{"kind": "home", "value": "西安", "detail": ""}]),
    ("my brother moved to Rome, is it nice there?", []),
    ("night shifts at the bakery again, I'm a baker", [{"kind": "job", "value": "baker", "detail": ""}]),
    ("practising the drums every night", [{"kind": "learning", "value": "drums", "detail": ""}]),
    ("fav movie of all time: Alien", [{"kind": "favourite", "value": "Alien", "detail": "movie"}]),
    ("the name's Jojo by the way", [{"kind": "name", "value": "Jojo", "detail": ""}]),
    ("下班了，做厨师真累，周末去上西班牙语课", [{"kind": "job", "value": "厨师", "detail": ""},
                                              {"kind": "learning", "value": "西班牙语", "detail": ""}]),
)


def _answer(facts: list[dict[str, str]]) -> str:
    return orjson.dumps({"facts": facts}).decode()


class LlamaFactReader:
    """Reads a comment's facts with a GGUF model on llama.cpp, one comment at a time."""

    name = "llama_cpp"

    def __init__(self, model: str | None = None, n_threads: int = 1) -> None:
        Llama, path = llama_and_model(model, "reading facts with llama_cpp")
        from llama_cpp.llama_grammar import LlamaGrammar
        try:
            self.model: Any = Llama(str(path), n_ctx=N_CTX, n_threads=n_threads, n_threads_batch=n_threads,
                                    verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise LlamaError(f"cannot load the model {path}: {exc}") from None
        self.grammar = LlamaGrammar.from_json_schema(orjson.dumps(SCHEMA).decode(), verbose=False)
        self.label = f"llama_cpp:{path.stem}"
        self._lock = threading.Lock()  # one reading at a time: one context
        self.examples: list[dict[str, str]] = []
        for comment, facts in EXAMPLES:
            self.examples += [{"role": "user", "content": comment}, {"role": "assistant", "content": _answer(facts)}]

    def read(self, text: str) -> list[Fact]:
        """The facts the model finds in a comment that hold up against it (``facts_from_model``)."""
        said = " ".join(MENTION.sub(" ", text).split())[:MAX_COMMENT_CHARS]  # "@host ..." misled the model
        messages = [{"role": "system", "content": SYSTEM}, *self.examples, {"role": "user", "content": said}]
        with self._lock:
            try:
                out = self.model.create_chat_completion(messages, max_tokens=MAX_TOKENS, temperature=0.0, seed=0,
                                                        grammar=self.grammar)
            except (ValueError, RuntimeError) as exc:
                raise LlamaError(f"reading facts failed: {exc}") from None
        raw = out["choices"][0]["message"].get("content") or ""
        try:
            found = orjson.loads(raw).get("facts")
        except (orjson.JSONDecodeError, AttributeError):
            found = None  # cut short at MAX_TOKENS: nothing kept of it
        return facts_from_model(found, text)

