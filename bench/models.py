"""Model backends side by side: time to the first sentence / first audio and throughput, with
1, 4 and 8 roles asking at once.

``python -m bench.models [--json] [--repeats N] [--llm a,b] [--tts a,b] [--vllm-model DIR]``

LLM backends (scripted, transformers/SmolLM2, llama_cpp/Qwen2.5-Coder-0.5B, openai against
``python -m llama_cpp.server`` on the same GGUF, started here unless TROUPE_OPENAI_BASE_URL
names a server, vllm) get N prompts from N roles, each role's
through ``write_batch`` (as the llm actor hands a batch to its writer), all asked before the
first reply is read; each reply is then read to its end in turn (a served model decodes them
together meanwhile, a local one writes each as it is read).  ``vllm`` runs in the vllm
environment (``scripts/test-vllm.sh`` builds it) on ``--vllm-model``, by default the tiny
random-weight Llama of ``bench.tiny_llm`` (serving speed only: its text is noise).  Measured: the time from the batch's start to each reply's first sentence (p50 over
replies, and the first reply's), and tokens per second over the batch (tokens counted with
SmolLM2's tokenizer for every backend, so the numbers compare).  TTS backends (espeak, onnx
joe voice) speak N sentences: time to the first audio and the real-time factor (synthesis
time over audio time).  Medians over the repeats; the first call of each backend (loading)
is not counted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from actors.backends.protocols import Persona, Prompt, Voice
from actors.backends.registry import BACKENDS
from bench.common import machine, median, pct, print_table, write_result

ROLES = [
    Persona(f"r{i}", name, persona, "en", ())
    for i, (name, persona) in enumerate([
        ("Mika", "An upbeat host who loves games and music."),
        ("Rex", "A dry-humoured retro gamer."),
        ("Ada", "A curious science fan."),
        ("Leo", "A calm chef who talks about food."),
        ("Ivy", "A cheerful traveller."),
        ("Max", "A football commentator."),
        ("Zoe", "A film buff."),
        ("Sam", "A gardener who loves plants."),
    ])
]
QUESTIONS = [
    "what game are we playing tonight?", "do you like jazz?", "what should I cook for dinner?",
    "where should I travel this summer?", "who will win the match?", "recommend me a film!",
    "how do I keep my plants alive?", "what is your favourite song?",
]
SENTENCES = [
    "Welcome back to the stream, everyone!", "That was a close one, but we made it.",
    "Tonight we are trying something completely new.", "Thanks for the gift, it means a lot.",
    "I think the answer is hidden in the second level.", "Let's take a quick break and chat.",
    "The weather outside is lovely today.", "Don't forget to say hello in the chat!",
]
COUNTS = (1, 4, 8)


def _tokens() -> Any:
    from transformers import AutoTokenizer

    from actors.backends.llm_transformers import default_model

    path = default_model().rsplit("/", 1)
    return AutoTokenizer.from_pretrained(path[0], gguf_file=path[1])


def bench_llm(name: str, repeats: int, tokenizer: Any, model: str | None = None) -> list[dict[str, Any]]:
    writer = BACKENDS.reply_writer(name, model=model)
    list(writer.stream(ROLES[0], Prompt("warm", "v", "hello!")))  # the first call loads what it needs
    rows = []
    for n in COUNTS:
        firsts: list[float] = []
        first_reply: list[float] = []
        rates: list[float] = []
        ttft = _engine_ttft()
        for rep in range(repeats):
            prompts = [Prompt(f"c{rep}-{i}", f"viewer{i}", QUESTIONS[i], seed=rep, max_sentences=2) for i in range(n)]
            start = time.perf_counter()
            tokens = 0
            replies = [writer.write_batch(role, [prompt])[0] for role, prompt in zip(ROLES, prompts, strict=False)]
            for i, (reply, prompt) in enumerate(zip(replies, prompts, strict=True)):
                seen_first = False
                for k, sentence in enumerate(reply):
                    if not seen_first:
                        firsts.append((time.perf_counter() - start) * 1000)
                        if i == 0:
                            first_reply.append(firsts[-1])
                        seen_first = True
                    tokens += len(tokenizer(sentence)["input_ids"])
                    if k + 1 >= prompt.max_sentences:
                        break
                close = getattr(reply, "close", None)
                if close is not None:
                    close()  # as the actor does: the rest is not needed
            rates.append(tokens / (time.perf_counter() - start))
        ttft_ms = None
        if ttft is not None:  # the engine's own time to first token, mean over this row's requests
            (sum0, count0), (sum1, count1) = ttft, _engine_ttft() or ttft
            ttft_ms = (sum1 - sum0) / (count1 - count0) * 1000 if count1 > count0 else None
        rows.append({"backend": name if model is None else f"{name}:{Path(model).name}", "roles": n,
                     "first_token_ms": ttft_ms, "first_sentence_ms": median(first_reply),
                     "first_sentence_p50_all_ms": pct(firsts, 50), "tokens_per_s": median(rates)})
    close = getattr(writer, "close", None)
    if close is not None:
        close()
    return rows


@contextlib.contextmanager
def _llama_server() -> Iterator[None]:
    """``python -m llama_cpp.server`` on the shipped GGUF, on a free loopback port, for the openai
    backend (TROUPE_OPENAI_BASE_URL / TROUPE_OPENAI_MODEL point at it while it runs)."""
    from actors.backends.shipped import QWEN_CODER_05B
    from infra.natsserver import free_port

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(QWEN_CODER_05B.path()), "--model_alias", "qwen",
         "--host", "127.0.0.1", "--port", str(port), "--n_threads", "2", "--n_ctx", "2048"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise SystemExit("the llama.cpp server did not start") from None
                time.sleep(0.2)
        os.environ.update(TROUPE_OPENAI_BASE_URL=url, TROUPE_OPENAI_MODEL="qwen")
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)


def _engine_ttft() -> tuple[float, float] | None:
    """vLLM's time-to-first-token histogram so far (sum, count); None without vLLM."""
    from prometheus_client import REGISTRY

    total = count = None
    for family in REGISTRY.collect():
        if family.name == "vllm:time_to_first_token_seconds":
            total = sum(s.value for s in family.samples if s.name.endswith("_sum"))
            count = sum(s.value for s in family.samples if s.name.endswith("_count"))
    return None if total is None or count is None else (total, count)


def bench_tts(name: str, repeats: int) -> list[dict[str, Any]]:
    speaker = BACKENDS.speaker(name)
    voice = Voice("en")
    speaker.speak("Hello there.", voice)  # loads the voice
    rows = []
    for n in COUNTS:
        firsts: list[float] = []
        rtfs: list[float] = []
        for _ in range(repeats):
            start = time.perf_counter()
            speeches = speaker.speak_batch(SENTENCES[:n], voice)
            took = time.perf_counter() - start
            # A batch's audio exists when the call returns; one sentence alone: that sentence's time.
            single = time.perf_counter()
            speaker.speak(SENTENCES[0], voice)
            firsts.append((time.perf_counter() - single) * 1000 if n == 1 else took * 1000)
            audio_s = sum(s.duration_ms for s in speeches) / 1000
            rtfs.append(took / audio_s)
        rows.append({"backend": name, "roles": n, "first_audio_ms": median(firsts), "rtf": median(rtfs)})
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--llm", default="scripted,transformers")
    parser.add_argument("--tts", default="espeak,onnx")
    parser.add_argument("--vllm-model", help="the vllm backend's model folder (default: the tiny test Llama)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    tokenizer = _tokens()
    llms = [name for name in args.llm.split(",") if name]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        if "openai" in llms and not os.environ.get("TROUPE_OPENAI_BASE_URL"):
            stack.enter_context(_llama_server())  # the openai backend against llama.cpp's own server
        model = args.vllm_model
        if "vllm" in llms and model is None:
            from bench.tiny_llm import make_model

            model = str(make_model(Path(tmp) / "tiny-llama"))
        llm = [row for name in llms
               for row in bench_llm(name, args.repeats, tokenizer, model if name == "vllm" else None)]
    tts = [row for name in args.tts.split(",") if name for row in bench_tts(name, args.repeats)]
    doc = {"machine": machine(), "repeats": args.repeats, "llm": llm, "tts": tts}
    m = doc["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['platform']}, Python {m['python']}")
    print_table("LLM: N roles asking at once, medians", ["backend", "roles", "first token ms (engine)",
                "first reply's 1st sentence ms", "p50 1st sentence ms", "tokens/s"],
                [[r["backend"], r["roles"], "-" if r["first_token_ms"] is None else r["first_token_ms"],
                  r["first_sentence_ms"], r["first_sentence_p50_all_ms"], r["tokens_per_s"]] for r in llm])
    print_table("TTS: N sentences at once, medians", ["backend", "roles", "first audio ms", "real-time factor"],
                [[r["backend"], r["roles"], r["first_audio_ms"], r["rtf"]] for r in tts])
    write_result("models_vllm" if "vllm" in llms else "models", doc)  # vllm runs in its own environment
    if args.json:
        print(json.dumps({"llm": llm, "tts": tts}))


if __name__ == "__main__":
    main()
