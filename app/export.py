"""Export: re-render a recorded run to an MP4 from the store alone (no LLM, no TTS).

Frames are drawn again from the recorded viseme tracks (each recorded frame from
the track it showed, at its resolution; frames missing from the store from the
latest track started by then), the recorded audio is laid where lipsync placed it,
and both go through the sink's muxer.  The file appears only when complete.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from actors.kernel import Kernel, replay
from events.audio import AudioChunk
from events.base import Event
from events.cue import SegmentStarted
from events.errors import StoreError
from events.frame import FrameRendered
from events.run import RunEnded
from events.viseme import FaceChanged, VisemeCut, VisemeTrack
from infra.settings import Settings
from store.queries import in_stream_order, iter_rows, run_info, run_started


@dataclass(frozen=True, slots=True)
class ExportResult:
    path: Path
    frames: int
    duration_ms: int
    seconds: float


def export(engine: Engine, run: str, out: Path, settings: Settings, workers: int | None = None) -> ExportResult:
    from actors.render import Redrawer, batches, frame_count
    from actors.sink import SinkActor
    from actors.visemes import apply_cuts, as_drawn

    begun = time.perf_counter()
    info = run_info(engine, run)
    rows = list(iter_rows(engine, run))
    start = run_started(rows)
    whole = {r.event.id: r.event for r in rows if isinstance(r.event, VisemeTrack)}
    tracks = sorted(apply_cuts(whole.values(), (r.event for r in rows if isinstance(r.event, VisemeCut))).values(),
                    key=lambda t: t.start_ms)
    starts = [t.start_ms for t in tracks]
    by_id = {t.id: t for t in tracks}
    recorded = {r.event.n: r.event for r in rows if isinstance(r.event, FrameRendered)}
    duration_ms = info.duration_ms or max([t.end_ms for t in tracks] + [f.t_ms + 40 for f in recorded.values()] + [0])
    total = frame_count(duration_ms, start.fps)
    if total <= 0:
        raise StoreError(f"run {run!r} has nothing to export (no duration, no frames, no speech)")
    redraw = Redrawer(start, settings, faces=(r.event for r in in_stream_order(rows, FaceChanged)),
                      segments=(r.event for r in rows if isinstance(r.event, SegmentStarted)))
    jobs = []
    resolution = start.resolution
    for n in range(total):
        frame = recorded.get(n)
        faces = None  # a frame never drawn: its faces from the run's viseme.face events, its wall by the rundown
        wall = redraw.wall_at(n * 1000 // start.fps)
        if frame is not None:
            resolution, faces, wall = frame.resolution, frame.faces, frame.background
            track = as_drawn(frame.track, frame.track_end_ms, whole, by_id)
        else:
            i = bisect.bisect_right(starts, n * 1000 // start.fps) - 1
            track = tracks[i] if i >= 0 else None
        redraw.prepare(resolution, wall)
        jobs.append((n, track, resolution, faces, wall))

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".troupe-export-") as tmp:
        sink = SinkActor(settings.replace(out_dir=Path(tmp)))

        def inputs() -> Iterator[tuple[int, Event]]:
            """The sink's inputs, all at show time 0: it lays each where its times say, and the
            run's end writes out what it still holds (the live sink's clock is not needed)."""
            yield 0, start
            for row in rows:
                if isinstance(row.event, AudioChunk | VisemeTrack | VisemeCut):
                    yield 0, row.event
            with concurrent.futures.ThreadPoolExecutor(workers or min(4, os.cpu_count() or 1)) as pool:
                # A worker takes a batch of frames (a GPU drawer draws and encodes them together).
                for frames in pool.map(redraw.draw_batch, batches(jobs)):
                    for frame in frames:
                        yield 0, frame
            yield 0, RunEnded(id=f"{run}-export-end", run=run, reason="export", duration_ms=duration_ms)

        kernel: Kernel[Event] = Kernel(sink)
        for _, outputs in replay(kernel, start, inputs()):  # the sink's reports: not published
            for _ in outputs:
                pass
        mux = kernel.state(run)
        kernel.release(run)  # the file is finished (the audio it still waits for, silent)
        sink.close()
        written = mux.finished if mux is not None else None
        if written is None or not written.exists():
            raise StoreError(f"the video of run {run!r} was not written")
        os.replace(written, out)
    return ExportResult(out, total, duration_ms, time.perf_counter() - begun)
