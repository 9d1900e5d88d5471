"""Re-execution: run the deterministic actors again on a recorded run and find where they diverge.

In process, without NATS.  Each deterministic actor gets its recorded inputs in
the order it took them in, at the show time it handled them, with its clock's
ticks where they were (``actors.kernel.handling_order``: its recorded outputs say
all three), and what it emits is compared with what was recorded, field by field
(the wall-clock ``at_ms`` is an observation, not an output).  Model outputs (LLM text, TTS audio) and
timing (which viseme track a frame found) are inputs: they come from the store.

- director: danmaku in, cues / merges / rejections / skips out, each danmaku at the
  show time the director took it in (``heard_ms``: a comment may wait for the floor),
  and its clock run up to its last recorded decision;
- lipsync: audio chunks in, viseme tracks out;
- render: viseme tracks, cuts, faces, segments and resolution changes in, frames (their JPEG
  digests compared) and frame observations out, its clock ticked where it ticked; where the run
  was taken over, rebuilt there as the process that took it over did.

Measurements of the machine (``Event.measured``: what a frame cost to draw) are not compared.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import Engine

from actors.base import Actor, ClockedActor
from actors.kernel import Fed, Kernel, Recorded, Tick, admit, handling_order, replay, take_over
from app.registry import REEXECUTED, Wiring, entry
from events import codec
from events.base import Event
from events.errors import ConfigError
from events.frame import FrameRendered
from events.run import RunEnded, RunOwned, RunStarted
from events.subjects import family_of
from events.viewer import redact
from infra.metrics import Metrics
from infra.settings import Settings, load_settings
from store.forget import redacted_ids
from store.queries import Row, in_stream_order, iter_rows, run_info, run_started

ACTORS = REEXECUTED
IGNORED = {"at_ms"}
IGNORED_PAYLOAD = {"jpeg", "encoder"}


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
    past_redaction: bool = False  # the actor had been fed a blanked input (a forgotten viewer's) before it


@dataclass(slots=True)
class Verification:
    run: str
    show_ms: int
    checked: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # actor -> why it was not re-executed
    divergence: Divergence | None = None
    # A forgotten viewer's events, blanked in the store (``store.forget``): re-executed from the
    # blanked inputs, the outputs from the first of them on may differ, and are not judged.
    redacted: int = 0
    unchecked: dict[str, int] = field(default_factory=dict)  # actor -> differing outputs past a redaction
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = self.divergence
        return {
            "run": self.run, "divergences": 0 if d is None else 1, "checked": self.checked, "skipped": self.skipped,
            "redacted": self.redacted, "unchecked": self.unchecked,
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
    for key in (*IGNORED_PAYLOAD, *event.measured):
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


def _recorded_inputs(actor: Actor, run: RunStarted, rows: list[Row], mine: Sequence[Event] = ()) -> dict[str, list[Recorded]]:
    """An actor's recorded inputs, per family in stream order: those it takes (``admit``), up to
    the run's end (not fed: the recording ends there, and a clocked actor's clock is run up to its
    last recorded decision instead), but for the renderer, whose frames the end bounds, and for an
    actor whose outputs (``mine``) say it had taken the end in: the director planned the floor from
    a reply's pace measured after the end, its output stamped with the end (``Event.seen``)."""
    out: dict[str, list[Recorded]] = {}
    # The renderer's end bounds the frames it draws: where its frames say it took the end in, it is fed.
    ends = isinstance(actor, ClockedActor) and actor.resumes_from is not None
    for row in in_stream_order(rows, tuple(actor.consumes)):
        if (ends or not isinstance(row.event, RunEnded) or _taken_in(row, mine)) \
                and admit(actor, row.event, run).handled:
            out.setdefault(family_of(row.event.type), []).append(Recorded(row.event, row.stream_seq))
    return out


def _taken_in(row: Row, outputs: Sequence[Event]) -> bool:
    """Whether an actor's outputs say it had taken in the input stored as ``row`` (its stream
    position in their ``seen``)."""
    family = family_of(row.event.type)
    return row.stream_seq is not None and any(e.seen and e.seen.get(family, 0) >= row.stream_seq for e in outputs)


def _replay_handler(
    name: str, actor: Actor, run: RunStarted, rows: list[Row], owned: frozenset[str], rec: _Recording,
    redacted: frozenset[str] = frozenset(),
) -> Iterator[Divergence | int]:
    """Feed one actor's kernel its recorded inputs in the order it took them in, each at the show
    time it was handled, and its clock's ticks where they were (``handling_order``: its outputs
    record all three); yields divergences, and the count checked at the end.

    A clocked actor whose outputs record no ticks (recorded before they did) has its clock run up to
    its last recorded decision instead.  Where the run was taken over and its state rebuilt (a
    ``run.owned`` that says so), an actor that goes on from its last output (the renderer) is
    rebuilt there too, in a fresh kernel, as the process that took it over did (``take_over``)."""
    produced: set[str] = set()
    checked = 0
    mine = [r.event for r in rec.rows if r.event.type in owned]
    inputs = _recorded_inputs(actor, run, rows, mine)
    by_id = {r.event.id: r for r in rows}
    schedule = handling_order(inputs, mine)
    ticks = any(isinstance(item, Tick) for item in schedule)
    clocked = isinstance(actor, ClockedActor)
    last = max((e.t_ms for e in mine), default=0) if clocked and not ticks else None
    done: list[Fed | Tick] = []  # what the kernel was fed so far: what a takeover rebuilt from
    parts = list(_held(actor, rec, schedule))
    blanked: list[int] = []  # the store position of the first blanked input handed to the kernel

    def watched(items: list[Fed | Tick]) -> Iterator[Fed | Tick]:
        for item in items:
            if not blanked and not isinstance(item, Tick) and item[1].id in redacted:
                row = by_id.get(item[1].id)
                blanked.append(row.pos if row is not None else 0)
            yield item

    for k, (owner, segment) in enumerate(parts):
        kernel: Kernel[Event] = Kernel(actor)
        kernel.record(run.run, mine)  # what it read from outside the run (the director's recalls): as recorded
        if owner is not None:  # taken over here: a fresh kernel, the run's past handed to it again
            resumed = rec.by_id.get(owner.resumed)
            take_over(kernel, run, [item for item in done if isinstance(item, Fed)], None,
                      resumed.event if resumed is not None else None)
        done += segment
        for event, outputs in replay(kernel, run, watched(segment), last if k == len(parts) - 1 else None):
            row = by_id.get(event.id) if event is not None else None
            tainted = bool(blanked)
            for out in outputs:
                produced.add(out.id)
                recorded = rec.by_id.get(out.id)
                actual = comparable(out)
                if recorded is None:
                    cause = out.causation if row is None else row.event.id
                    cause_row = rec.by_id.get(cause or "")
                    yield Divergence(name, row.pos if row is not None else cause_row.pos if cause_row else 0,
                                     out.id, out.type, "unexpected", None, actual, rec.chain(cause or ""), tainted)
                    continue
                if out.id in redacted:  # compared as the store keeps it: blanked
                    actual = comparable(redact(out))
                expected = comparable(recorded.event, _recorded_digest(recorded))
                for stamp in ("seen", "ticked_ms"):  # recorded before outputs said what their actor had taken in
                    if stamp not in expected:
                        actual.pop(stamp, None)
                if str(expected.get("blob_sha256", "")).startswith("not compared"):  # a GPU's JPEG
                    actual["blob_sha256"] = expected["blob_sha256"]
                checked += 1
                if expected != actual:
                    yield Divergence(name, recorded.pos, out.id, out.type, "differs", expected, actual,
                                     rec.chain(out.id), tainted or _blanked_chain(rec, out.id, redacted))
    handled = {r.event.id for family in inputs.values() for r in family}
    for row in rec.rows:
        if row.event.type in owned and row.event.id not in produced and (
                row.event.causation in handled or row.event.ticked_ms is not None):
            yield Divergence(name, row.pos, row.event.id, row.event.type, "missing",
                             comparable(row.event, _recorded_digest(row)), None, rec.chain(row.event.id),
                             (bool(blanked) and row.pos > blanked[0]) or _blanked_chain(rec, row.event.id, redacted))
    yield checked


def _blanked_chain(rec: _Recording, event_id: str, redacted: frozenset[str]) -> bool:
    """Whether a recorded event follows from a blanked one (its causal chain holds one)."""
    return bool(redacted) and any(c["id"] in redacted for c in rec.chain(event_id))


def _untimed(actor: Actor, rec: _Recording, owned: frozenset[str]) -> bool:
    """An actor whose clock decides what it draws, not when (no ``clock_marks``: the renderer), whose
    outputs were recorded before they said when its clock made them: its ticks cannot be placed."""
    if not isinstance(actor, ClockedActor) or actor.clock_marks:
        return False
    mine = [r.event for r in rec.rows if r.event.type in owned]
    return bool(mine) and all(e.ticked_ms is None for e in mine)


def _held(actor: Actor, rec: _Recording, schedule: list[Fed | Tick]) -> Iterator[tuple[RunOwned | None, list[Fed | Tick]]]:
    """The schedule cut where a process took the run over and rebuilt its state, for an actor that
    goes on from its last output (``resumes_from``): the takeover, and what came after it, up to
    the next; the first part has none.  A takeover goes before the first tick made after its rebuild
    began (the last holder's clock stopped before it: it died, or let the run go)."""
    takeovers = sorted((r.event for r in rec.rows if isinstance(r.event, RunOwned) and r.event.kind == actor.name
                        and r.event.holder and r.event.rebuilt), key=lambda e: e.t_ms)
    if not isinstance(actor, ClockedActor) or actor.resumes_from is None:
        takeovers = []
    owner: RunOwned | None = None
    part: list[Fed | Tick] = []
    for item in schedule:
        if isinstance(item, Tick) and takeovers and item.at_ms >= takeovers[0].t_ms:
            yield owner, part
            while takeovers and item.at_ms >= takeovers[0].t_ms:  # a takeover that never ticked: the last counts
                owner = takeovers.pop(0)
            part = []
        part.append(item)
    yield owner, part


def verify(
    engine: Engine, run: str, actors: Sequence[str] = ACTORS, settings: Settings | None = None,
    build: Callable[[str, Settings], Actor] | None = None,
) -> Verification:
    """Re-execute the deterministic actors of a recorded run; the first divergence, if any."""
    started = time.perf_counter()
    info = run_info(engine, run)
    rows = list(iter_rows(engine, run))
    start = run_started(rows)
    settings = settings or load_settings(environ={})
    rec = _Recording(rows)
    result = Verification(run, info.duration_ms or max((r.event.t_ms for r in rows), default=0))
    redacted = frozenset(redacted_ids(engine, run))
    result.redacted = len(redacted)
    found: list[Divergence] = []
    make = build or _build
    for name in actors:
        if name not in ACTORS:
            raise ValueError(f"cannot re-execute {name!r}; one of {', '.join(ACTORS)}")
        actor = make(name, settings)
        emits = frozenset(cls.type for cls in actor.emits)
        if _untimed(actor, rec, emits):
            result.skipped[name] = "its outputs record no tick times (recorded before they did): not re-executed"
            continue
        for item in _replay_handler(name, actor, start, rows, emits, rec, redacted):
            if isinstance(item, Divergence) and item.past_redaction:
                result.unchecked[name] = result.unchecked.get(name, 0) + 1  # fed a blanked input before it
            elif isinstance(item, Divergence):
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
    head += "".join(f"\nnot re-executed: {name}: {why}" for name, why in v.skipped.items())
    if v.redacted:
        past = ", ".join(f"{n} {c}" for n, c in v.unchecked.items()) or "none"
        head += (f"\n{v.redacted} events were blanked when a viewer was forgotten: outputs that differ after "
                 f"an actor was fed one are not judged (re-executed from blanked inputs): {past}")
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
