"""Render/JPEG/MP4 throughput per resolution: ``python -m bench.render [--json] [--seconds N]``."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actors.backends.mp4 import Mp4Writer
from actors.backends.protocols import RoleLook, RoleState
from actors.backends.render_torch import RESOLUTIONS, StageRenderer, encode_jpeg
from bench.common import machine as common_machine

FPS = 25
RATE = 22050
QUALITY = 80
RESULTS = Path(__file__).parent / "results" / "render.json"
SAMPLE_ART = Path(__file__).resolve().parent.parent / "app" / "shows" / "avatars" / "pip"
LOOKS = (
    RoleLook("host", "主持人 Mia", "#e0603a", "round"),
    RoleLook("guest", "Dr. Bolt", "#3a8ee0", "square"),
    RoleLook("critic", "Willow", "#52b060", "tall"),
)
# Visemes in a speech-like order; one changes every two frames (80 ms), like real lip-sync.
SPEECH = ("sil", "kk", "aa", "nn", "E", "DD", "oh", "PP", "ih", "SS", "ou", "RR", "aa", "TH", "FF", "CH")
LINES = (
    "Welcome back to the show, everyone!",
    "今天我们来聊一聊人工智能和直播的未来。",
    "I think the robots are doing a fine job of hosting, honestly.",
    "Let's take a question from the audience before the break.",
)


@dataclass(frozen=True, slots=True)
class Row:
    """Medians for one resolution."""

    resolution: str
    draw_fps: float
    jpeg_fps: float
    jpeg_kb: float
    mp4_fps: float
    mp4_kbps: float
    rtf: float  # wall seconds per second of video, draw+JPEG+mux on one thread
    rtf_threaded: float  # same, with the MP4 writer on its own thread


def machine() -> dict[str, object]:
    """What the numbers were measured on, with torch's version and threads."""
    return {**common_machine(), "torch": torch.__version__, "torch_threads": torch.get_num_threads()}


def show_states(i: int) -> tuple[list[RoleState], str]:
    """Frame i of a scripted show: the speaker rotates every 3 s, the subtitle every 2 s."""
    speaker = LOOKS[(i // (3 * FPS)) % len(LOOKS)].role
    viseme = SPEECH[(i // 2) % len(SPEECH)]
    states = [RoleState(look.role, viseme if look.role == speaker else "sil", look.role == speaker)
              for look in LOOKS]
    return states, LINES[(i // (2 * FPS)) % len(LINES)]


def frame_pcm(i: int) -> bytes:
    """One video frame's worth of a quiet sine, as the sink would write speech or silence."""
    n = RATE // FPS
    t = (np.arange(n) + i * n) / RATE
    return (np.sin(2 * np.pi * 220 * t) * 3000).astype("<i2").tobytes()


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Median wall seconds of fn over repeats runs."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(resolution: str, frames: int, repeats: int, tmp: Path) -> Row:
    """Runs every stage for one resolution and returns the medians."""
    renderer = StageRenderer(LOOKS, resolution, seed=1)
    width, height = renderer.size
    script = [show_states(i) for i in range(frames)]
    for i, (states, line) in enumerate(script[:FPS]):  # warm the subtitle cache like a running show
        renderer.draw(i * 40, states, line)

    def draw_all() -> None:
        # Frames are dropped as they go, as in a show; keeping them all would time page faults.
        for i, (states, line) in enumerate(script):
            renderer.draw(i * 40, states, line)

    draw_s = timed(draw_all, repeats)
    images = [renderer.draw(i * 40, s, line) for i, (s, line) in enumerate(script)]
    jpeg_s = timed(lambda: [encode_jpeg(im, QUALITY) for im in images], repeats)
    jpegs = [encode_jpeg(im, QUALITY) for im in images]
    out = tmp / f"{resolution}.mp4"

    def mux() -> None:
        with Mp4Writer(out, width, height, FPS, RATE) as writer:
            for i, jpeg in enumerate(jpegs):
                writer.write_frame(jpeg)
                writer.write_audio(frame_pcm(i))

    def pipeline() -> None:
        with Mp4Writer(out, width, height, FPS, RATE) as writer:
            for i, (states, line) in enumerate(script):
                writer.write_frame(encode_jpeg(renderer.draw(i * 40, states, line), QUALITY))
                writer.write_audio(frame_pcm(i))

    def threaded() -> None:
        jobs: queue.Queue[bytes | None] = queue.Queue(maxsize=FPS)
        with Mp4Writer(out, width, height, FPS, RATE) as writer:

            def consume() -> None:
                k = 0
                while (jpeg := jobs.get()) is not None:
                    writer.write_frame(jpeg)
                    writer.write_audio(frame_pcm(k))
                    k += 1

            worker = threading.Thread(target=consume)
            worker.start()
            for i, (states, line) in enumerate(script):
                jobs.put(encode_jpeg(renderer.draw(i * 40, states, line), QUALITY))
            jobs.put(None)
            worker.join()

    mp4_s = timed(mux, repeats)
    kbps = out.stat().st_size * 8 / 1000 / (frames / FPS)
    video_s = frames / FPS
    return Row(resolution, frames / draw_s, frames / jpeg_s, sum(map(len, jpegs)) / len(jpegs) / 1000,
               frames / mp4_s, kbps, timed(pipeline, repeats) / video_s, timed(threaded, repeats) / video_s)


def acting_states(i: int) -> tuple[list[RoleState], str]:
    """Frame i of the scripted show with faces that act, as ``actors.faces`` gives them: the
    speaker's expression changes with each sentence (2 s) and eases in over 250 ms, listeners look
    at the speaker (eased, with an idle drift), and the next speaker nods as the turn comes."""
    states, line = show_states(i)
    t = i * 1000 // FPS
    speaker = next(k for k, s in enumerate(states) if s.speaking)
    expressions = ("happy", "thinking", "surprised", "sad", "neutral", "angry")
    sentence = t // 2000
    blend = min(1.0, (t % 2000) / 250)
    eased = 1 - (1 - blend) ** 5
    out = []
    for k, s in enumerate(states):
        if s.speaking:
            face = dict(expression=expressions[sentence % 6], previous=expressions[(sentence - 1) % 6], blend=eased)
        else:
            turn = min(1.0, (t % 3000) / 250)
            face = dict(gaze=max(-1.0, min(1.0, (speaker - k) / 2)) * (1 - (1 - turn) ** 5)
                        + 0.12 * np.sin(t / 830 + k))
        nod = np.sin(np.pi * ((t % 3000) - 2400) / 600) if (t % 3000) >= 2400 and k == (speaker + 1) % 3 else 0.0
        out.append(dataclasses.replace(s, **face, nod=float(nod)))  # type: ignore[arg-type]
    return out, line


def _baseline_drawer(rev: str, tmp: Path) -> type:
    """The stage drawer of an earlier revision (its render_torch and stage_art, from git), to
    time today's stage against it in the same run."""
    package = tmp / "stage_before"
    package.mkdir()
    (package / "__init__.py").write_text("")
    root = Path(__file__).resolve().parent.parent
    for name in ("render_torch", "stage_art"):
        text = subprocess.run(["git", "show", f"{rev}:actors/backends/{name}.py"], cwd=root, check=True,
                              capture_output=True, text=True).stdout
        (package / f"{name}.py").write_text(text.replace("actors.backends.stage_art", "stage_before.stage_art"))
    sys.path.insert(0, str(tmp))
    module = importlib.import_module("stage_before.render_torch")
    return module.StageRenderer  # type: ignore[no-any-return]


def faces_cost(frames: int, repeats: int, baseline: str | None, tmp: Path) -> dict[str, float]:
    """ms per 720p frame (draw and JPEG) of the stage with still faces, with faces that act, with
    three image-art roles acting, and (``baseline``) of an earlier revision's stage, measured in
    turns in one run; medians."""
    script = [show_states(i) for i in range(frames)]
    acting = [acting_states(i) for i in range(frames)]
    art = [dataclasses.replace(look, avatar=str(SAMPLE_ART)) for look in LOOKS]  # three image-art roles
    stages: dict[str, tuple[Any, list[tuple[list[RoleState], str]]]] = {
        "still": (StageRenderer(LOOKS, "720p", seed=1), script),
        "acting": (StageRenderer(LOOKS, "720p", seed=1), acting),
        "art": (StageRenderer(art, "720p", seed=1), acting),
    }
    if baseline:
        old = _baseline_drawer(baseline, tmp)(LOOKS, "720p", seed=1)
        plain = [([RoleState(s.role, s.viseme, s.speaking) for s in states], line) for states, line in script]
        stages["baseline"] = (old, plain)
    for renderer, frames_of in stages.values():  # warm the caches (subtitles, face sprites)
        for i, (states, line) in enumerate(frames_of):
            renderer.draw(i * 40, states, line)
    times: dict[str, list[float]] = {name: [] for name in stages}
    for _ in range(repeats):
        for name, (renderer, frames_of) in stages.items():
            began = time.perf_counter()
            for i, (states, line) in enumerate(frames_of):
                encode_jpeg(renderer.draw(i * 40, states, line), QUALITY)
            times[name].append((time.perf_counter() - began) * 1000 / len(frames_of))
    return {name: round(statistics.median(ms), 3) for name, ms in times.items()}


def encode_all(images: list[torch.Tensor], quality: int) -> None:
    """JPEG-encodes every image."""
    for image in images:
        encode_jpeg(image, quality)


def jpeg_sweep(frames: int, repeats: int) -> dict[str, dict[str, float]]:
    """encode_jpeg speed and size at 720p for qualities 75..85."""
    renderer = StageRenderer(LOOKS, "720p", seed=1)
    images = [renderer.draw(i * 40, *show_states(i)) for i in range(min(frames, 2 * FPS))]
    sweep = {}
    for quality in (75, 80, 85):
        secs = timed(partial(encode_all, images, quality), repeats)
        kb = sum(len(encode_jpeg(im, quality)) for im in images) / len(images) / 1000
        sweep[str(quality)] = {"ms": secs / len(images) * 1000, "kb": kb}
    return sweep


def table(info: dict[str, object], rows: list[Row]) -> str:
    """Human-readable report."""
    head = (f"# {info['platform']} | {info['cpu']} | {info['cores']} cores | torch {info['torch']} "
            f"({info['torch_threads']} threads)")
    cols = ("res", "draw fps", "jpeg fps", "jpeg kB", "mp4 fps", "mp4 kbit/s", "RTF", "RTF 2 threads")
    lines = [head, " ".join(f"{c:>13}" for c in cols)]
    for r in rows:
        vals = (r.resolution, f"{r.draw_fps:.0f}", f"{r.jpeg_fps:.0f}", f"{r.jpeg_kb:.1f}", f"{r.mp4_fps:.0f}",
                f"{r.mp4_kbps:.0f}", f"{r.rtf:.3f}", f"{r.rtf_threaded:.3f}")
        lines.append(" ".join(f"{v:>13}" for v in vals))
    lines.append("RTF = wall seconds per second of 25 fps video for draw+JPEG+MP4 (<1 is faster than real time)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds of video per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions; medians are reported")
    parser.add_argument("--baseline", metavar="REV",
                        help="also time the stage drawer of this git revision (faces: today's against it)")
    args = parser.parse_args(argv)
    frames = max(FPS, round(args.seconds * FPS))
    info = machine()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(res, frames, args.repeats, Path(tmp)) for res in RESOLUTIONS]
        faces = faces_cost(frames, max(args.repeats, 5), args.baseline, Path(tmp))
    sweep = jpeg_sweep(frames, args.repeats)
    report = {"machine": info, "seconds": frames / FPS, "repeats": args.repeats, "fps": FPS,
              "jpeg_quality": QUALITY, "results": {r.resolution: asdict(r) for r in rows},
              "jpeg_720p_by_quality": sweep, "faces_720p_ms": faces, "baseline": args.baseline}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(table(info, rows))
    print("encode_jpeg 720p: " + ", ".join(f"q{q} {v['ms']:.2f} ms {v['kb']:.1f} kB" for q, v in sweep.items()))
    base = faces.get("baseline")
    print("720p frame (draw + JPEG), ms: " + ", ".join(f"{k} {v:.2f}" for k, v in faces.items())
          + (f"; acting / {args.baseline}: {faces['acting'] / base:.2f}x, art / {args.baseline}: "
             f"{faces['art'] / base:.2f}x" if base else ""))
    if args.json:
        print(json.dumps(report, ensure_ascii=False))


if __name__ == "__main__":
    main()
