"""Re-execution: run the deterministic actors again on a recorded run and find where they diverge.

In process, without NATS.  Each deterministic actor gets its recorded inputs in
the order it handled them (its stream's order) at the show time it handled them
(the ``t_ms`` of what it emitted then), and what it emits is compared with what
was recorded, field by field (the wall-clock ``at_ms`` and a frame's measured
lateness are observations, not outputs).  Model outputs (LLM text, TTS audio) and
timing (which viseme track a frame found) are inputs: they come from the store.

- director: danmaku in, cues / merges / rejections / skips out, each danmaku at the
  show time the director took it in (``heard_ms``: a comment may wait for the floor),
  and its clock run up to its last recorded decision;
- lipsync: audio chunks in, viseme tracks out;
- render: each recorded frame is drawn again from its viseme track and its JPEG
  digest compared with the recorded one.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import itertools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import Engine

from actors.base import Actor, ClockedActor
from actors.kernel import Kernel, Recorded, Tick, admit, handling_order, replay
from app.registry import REEXECUTED, Wiring, entry
from events import codec
from events.base import Event
from events.errors import ConfigError
from events.frame import FaceMark, FrameRendered
from events.run import RunEnded, RunStarted
from events.subjects import family_of
from events.viseme import FaceChanged, VisemeCut, VisemeTrack
from infra.metrics import Metrics
from infra.settings import Settings, load_settings
from store.queries import Row, in_stream_order, iter_rows, run_info, run_started

ACTORS = REEXECUTED
IGNORED = {"at_ms"}
IGNORED_PAYLOAD = {"late_ms", "jpeg", "encoder"}
# A frame to draw again: n, its track, its resolution, the faces it drew, its back wall (actors.render.Job).
Job = tuple[int, VisemeTrack | None, str, tuple[FaceMark, ...] | None, str]


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first event whose re-execution differs from the recording."""

    actor: str
    pos: int                      # store position of the recorded event (or of the input)
    event_id: str
    type: str
    what: str                     # "differs", "missing" (recorded, not re-emitted), "unexpected"
    expected: dict[str, Any] | None
    actual: dict[str, Any] | None
    chain: tuple[dict[str, Any], ...]  # the causal chain that led to it, root first


@dataclass(slots=True)
class Verification:
    run: str
    show_ms: int
    checked: dict[str, int] = field(default_factory=dict)
    divergence: Divergence | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = self.divergence
        return {
            "run": self.run, "divergences": 0 if d is None else 1, "checked": self.checked,
            "seconds": round(self.seconds, 3), "show_ms": self.show_ms,
            "x_realtime": round(self.show_ms / 1000 / self.seconds, 1) if self.seconds else None,
            "first_divergence": None if d is None else {
                "actor": d.actor, "pos": d.pos, "id": d.event_id, "type": d.type, "what": d.what,
                "expected": d.expected, "actual": d.actual, "chain": list(d.chain),
            },
        }


def comparable(event: Event, digest: str | None = None) -> dict[str, Any]:
    """An event as compared: its JSON without observations, plus its blob's digest."""
    json_part, blob = codec.split(codec.encode(event))
    doc = orjson.loads(json_part)
    for key in IGNORED:
        doc.pop(key, None)
    payload = doc.get("payload", {})
    for key in IGNORED_PAYLOAD:
        payload.pop(key, None)
    if isinstance(event, FrameRendered) and event.encoder is not None:
        # JPEG from a GPU encoder differs in its bytes from the CPU's: what the frame shows
        # (number, size, who speaks, the track drawn) is compared, not its bytes.
        doc["blob_sha256"] = f"not compared: encoded by {event.encoder}"
    elif blob is not None or digest is not None:
        doc["blob_sha256"] = digest if digest is not None else hashlib.sha256(blob or b"").hexdigest()
    return doc


def _recorded_digest(row: Row) -> str | None:
    if row.blob_digest is not None:
        return row.blob_digest
    if isinstance(row.event, FrameRendered):
        return hashlib.sha256(row.event.jpeg).hexdigest()
    return None


class _Recording:
    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        self.by_id = {r.event.id: r for r in rows}
        self.by_cause: dict[str, list[Row]] = {}
        for r in rows:
            if r.event.causation:
                self.by_cause.setdefault(r.event.causation, []).append(r)

    def chain(self, event_id: str) -> tuple[dict[str, Any], ...]:
        out = []
        seen = set()
        row = self.by_id.get(event_id)
        while row is not None and row.event.id not in seen:
            seen.add(row.event.id)
            out.append({"pos": row.pos, "type": row.event.type, "id": row.event.id, "t_ms": row.event.t_ms})
            row = self.by_id.get(row.event.causation or "")
        return tuple(reversed(out))


def _recorded_inputs(actor: Actor, run: RunStarted, rows: list[Row]) -> dict[str, list[Recorded]]:
    """An actor's recorded inputs, per family in stream order: those it takes (``admit``), up to
    the run's end (not fed: the recording ends there, and a clocked actor's clock is run up to its
    last recorded decision instead)."""
    out: dict[str, list[Recorded]] = {}
    for row in in_stream_order(rows, tuple(actor.consumes)):
        if not isinstance(row.event, RunEnded) and admit(actor, row.event, run).handled:
            out.setdefault(family_of(row.event.type), []).append(Recorded(row.event, row.stream_seq))
    return out


def _replay_handler(
    name: str, actor: Actor, run: RunStarted, rows: list[Row], owned: frozenset[str], rec: _Recording,
    clocked: bool = False,
) -> Iterator[Divergence | int]:
    """Feed one actor's kernel its recorded inputs in the order it took them in, each at the show
    time it was handled (``handling_order``: its outputs record both), and, when ``clocked``, its
    clock up to its last recorded output; yields divergences, and the count checked at the end."""
    produced: set[str] = set()
    checked = 0
    inputs = _recorded_inputs(actor, run, rows)
    mine = [r.event for r in rec.rows if r.event.type in owned]
    by_id = {r.event.id: r for r in rows}
    schedule = handling_order(inputs, mine)
    # Its clock ticked where its outputs say; a recording whose outputs do not say: run up to its last decision.
    ticks = any(isinstance(item, Tick) for item in schedule)
    last = max((e.t_ms for e in mine), default=0) if clocked and not ticks else None
    for event, outputs in replay(Kernel(actor), run, schedule, last):
        row = by_id.get(event.id) if event is not None else None
        for out in outputs:
            produced.add(out.id)
            recorded = rec.by_id.get(out.id)
            actual = comparable(out)
            if recorded is None:
                cause = out.causation if row is None else row.event.id
                cause_row = rec.by_id.get(cause or "")
                yield Divergence(name, row.pos if row is not None else cause_row.pos if cause_row else 0,
                                 out.id, out.type, "unexpected", None, actual, rec.chain(cause or ""))
                continue
            expected = comparable(recorded.event, _recorded_digest(recorded))
            for stamp in ("seen", "ticked_ms"):  # recorded before outputs said what their actor had taken in
                if stamp not in expected:
                    actual.pop(stamp, None)
            checked += 1
            if expected != actual:
                yield Divergence(name, recorded.pos, out.id, out.type, "differs", expected, actual,
                                 rec.chain(out.id))
    handled = {r.event.id for family in inputs.values() for r in family}
    for row in rec.rows:
        if row.event.type in owned and row.event.id not in produced and row.event.causation in handled:
            yield Divergence(name, row.pos, row.event.id, row.event.type, "missing",
                             comparable(row.event, _recorded_digest(row)), None, rec.chain(row.event.id))
    yield checked


def _frames(run: RunStarted, settings: Settings, rec: _Recording, workers: int) -> Iterator[Divergence | int]:
    from actors.render import Redrawer, batches
    from actors.visemes import apply_cuts, as_drawn

    frames = sorted((r for r in rec.rows if isinstance(r.event, FrameRendered)), key=lambda r: r.event.n)  # type: ignore[attr-defined]
    whole = {r.event.id: r.event for r in rec.rows if isinstance(r.event, VisemeTrack)}
    tracks = apply_cuts(whole.values(), (r.event for r in rec.rows if isinstance(r.event, VisemeCut)))
    redraw = Redrawer(run, settings, memo_size=512,
                      faces=(r.event for r in in_stream_order(rec.rows, FaceChanged)))
    jobs: list[tuple[Row, Job]] = []
    for row in frames:
        frame = row.event
        assert isinstance(frame, FrameRendered)
        redraw.prepare(frame.resolution, frame.background)
        track_row = rec.by_id.get(frame.track) if frame.track else None
        if frame.track and (track_row is None or not isinstance(track_row.event, VisemeTrack)):
            yield Divergence("render", row.pos, frame.id, frame.type, "differs", comparable(frame, _recorded_digest(row)),
                             None, rec.chain(frame.id))
            continue
        track = as_drawn(frame.track, frame.track_end_ms, whole, tracks)
        jobs.append((row, (frame.n, track, frame.resolution, frame.faces, frame.background)))

    def draw(batch: Sequence[tuple[Row, Job]]) -> list[tuple[Row, dict[str, Any]]]:
        drawn = redraw.draw_batch([job for _, job in batch])  # a GPU's batch, on a GPU
        return [(row, comparable(dataclasses.replace(  # drawn again, as the renderer's tick stamped it
            frame, encoder=row.event.encoder, seen=row.event.seen,  # type: ignore[attr-defined]
            ticked_ms=row.event.ticked_ms)))
                for (row, _), frame in zip(batch, drawn, strict=True)]

    checked = 0
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for row, actual in itertools.chain.from_iterable(pool.map(draw, batches(jobs))):
            checked += 1
            expected = comparable(row.event, _recorded_digest(row))
            if expected != actual:
                yield Divergence("render", row.pos, row.event.id, row.event.type, "differs", expected, actual,
                                 rec.chain(row.event.id))
                break
    yield checked


def verify(
    engine: Engine, run: str, actors: Sequence[str] = ACTORS, settings: Settings | None = None,
    workers: int | None = None, build: Callable[[str, Settings], Actor] | None = None,
) -> Verification:
    """Re-execute the deterministic actors of a recorded run; the first divergence, if any."""
    started = time.perf_counter()
    info = run_info(engine, run)
    rows = list(iter_rows(engine, run))
    start = run_started(rows)
    settings = settings or load_settings(environ={})
    rec = _Recording(rows)
    result = Verification(run, info.duration_ms or max((r.event.t_ms for r in rows), default=0))
    found: list[Divergence] = []
    make = build or _build
    for name in actors:
        if name not in ACTORS:
            raise ValueError(f"cannot re-execute {name!r}; one of {', '.join(ACTORS)}")
        if name == "render":  # its frames drawn again from what each records it drew
            stream = _frames(start, settings, rec, workers or min(4, os.cpu_count() or 1))
        else:
            actor = make(name, settings)
            emits = frozenset(cls.type for cls in actor.emits)
            stream = _replay_handler(name, actor, start, rows, emits, rec, clocked=isinstance(actor, ClockedActor))
        for item in stream:
            if isinstance(item, Divergence):
                found.append(item)
            else:
                result.checked[name] = item
    result.divergence = min(found, key=lambda d: d.pos) if found else None
    result.seconds = time.perf_counter() - started
    return result


def _build(name: str, settings: Settings) -> Actor:
    return entry(name).build(Wiring(settings, Metrics(), _no_store))


def _no_store() -> Engine:
    raise ConfigError("re-execution builds no actor that writes to the store")


def format_verification(v: Verification) -> str:
    checked = ", ".join(f"{n} {c}" for n, c in v.checked.items())
    head = f"re-executed {checked} events of run {v.run} in {v.seconds:.2f} s"
    d = v.divergence
    if d is None:
        return f"{head}\n0 divergences"
    lines = [head, f"1 divergence (the first): {d.actor} {d.what} {d.type} {d.event_id} at store position {d.pos}"]
    if d.expected is not None and d.actual is not None:
        for key in sorted(set(_flat(d.expected)) | set(_flat(d.actual))):
            a, b = _flat(d.expected).get(key), _flat(d.actual).get(key)
            if a != b:
                lines.append(f"  {key}: expected {_short(a)}, got {_short(b)}")
    elif d.expected is not None:
        lines.append(f"  expected {_short(d.expected)}; re-execution did not emit it")
    else:
        lines.append(f"  re-execution emitted {_short(d.actual)}; the recording has no such event")
    lines.append("  causal chain:")
    lines += [f"    #{c['pos']} {c['type']} {c['id']} at {c['t_ms']} ms" for c in d.chain]
    return "\n".join(lines)


def _flat(doc: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in doc.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _short(value: Any, limit: int = 160) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
