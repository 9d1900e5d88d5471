"""The GPU check: every GPU path against its CPU path on one machine, in one script, as a table.

``python -m bench.gpu_check [--json] [--frames N]``  (needs the ``render`` and ``models`` extras;
on a GPU machine onnxruntime-gpu in place of onnxruntime, and a CUDA build of torch)

- render: frames per second drawn and JPEG-encoded per resolution, CPU vs CUDA, in batches of
  8 frames (``draw_batch`` + ``encode_batch``), with the JPEG encoder each device used;
- TTS: the onnx voice's real-time factor, CPU execution provider vs CUDA;
- LLM: the transformers writer's time to first sentence and tokens/s, CPU vs CUDA;
- torch's peak CUDA memory;
- vLLM: not measured (no vLLM backend yet), said so in the table.

A path that cannot run here (no GPU, no CUDA build, no CUDA execution provider) is listed
as skipped with the reason, so the script runs on any machine.  It stays well under eight
minutes on one GPU.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, cast

import torch

from actors.backends.protocols import Persona, Prompt, Voice
from actors.backends.render_torch import StageRenderer
from bench.common import machine, median, print_table, write_result
from bench.render import LOOKS, show_states
from events.show import RESOLUTIONS

SENTENCES = ("Welcome back to the stream, everyone!", "Tonight we are trying something completely new.",
             "Thanks for the gift, it means a lot.", "Don't forget to say hello in the chat!")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100)
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

    memory = torch.cuda.max_memory_allocated() / 2**20 if reason is None else None
    rows.append(["torch peak CUDA memory MiB", "-", _or(memory, reason, 0)])
    rows.append(["vLLM first token / tokens/s, 1/4/8 roles", "-", "skipped: no vLLM backend yet"])
    doc["skipped"]["vllm"] = "no vLLM backend yet"
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
