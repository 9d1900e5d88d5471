"""How a run used its air time, from the store alone: who spoke and for how long, what the chat
asked for against what the show said by itself, the silences, and the rundown as planned
against as run.

Speech is what lipsync placed on the show timeline (viseme tracks, after the recorded cuts):
what was heard, not what was asked for.  A track belongs to the cue whose reply it speaks (the
utterance id is the cue id), and the cue says why it was spoken (``reason``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select

from actors.visemes import apply_cuts
from events import codec
from events.cue import ControlApplied, CueIssued, SegmentStarted
from events.danmaku import DanmakuSkipped
from events.run import RunStarted
from events.utterance import UtteranceCompleted, UtteranceDropped
from events.viseme import VisemeCut, VisemeTrack
from infra.metrics import drop_reason
from store.schema import events

TYPES = ("run.started", "run.ended", "cue.issued", "cue.segment", "cue.control", "viseme.track", "viseme.cut",
         "utterance.completed", "utterance.dropped", "danmaku.skipped")


@dataclass(frozen=True, slots=True)
class Spoken:
    """One stretch of placed speech."""

    role: str
    start_ms: int
    end_ms: int
    cue: CueIssued | None


def _merged(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _overlap(spans: Sequence[tuple[int, int]], lo: int, hi: int) -> int:
    return sum(max(0, min(b, hi) - max(a, lo)) for a, b in spans)


def airtime(engine: Engine, run: str) -> dict[str, Any]:
    """The run's air time (see the module's docstring); empty for a run that is not recorded."""
    query = select(events.c.body).where(events.c.run == run, events.c.type.in_(TYPES)).order_by(events.c.pos)
    with engine.connect() as conn:
        recorded = [codec.decode(body) for (body,) in conn.execute(query)]
    started = next((e for e in recorded if isinstance(e, RunStarted)), None)
    if started is None:
        return {}
    ended = next((e for e in recorded if e.type == "run.ended"), None)
    duration = getattr(ended, "duration_ms", 0) or started.duration_ms
    cues = {e.id: e for e in recorded if isinstance(e, CueIssued)}
    tracks = apply_cuts((e for e in recorded if isinstance(e, VisemeTrack)),
                        (e for e in recorded if isinstance(e, VisemeCut)))
    spoken = [Spoken(t.role or "", max(0, t.start_ms), min(t.end_ms, duration or t.end_ms), cues.get(t.utterance))
              for t in tracks.values() if t.end_ms > t.start_ms]
    union = _merged([(s.start_ms, s.end_ms) for s in spoken if s.end_ms > s.start_ms])
    edges = [0, *(x for span in union for x in span), duration]
    silences = [b - a for a, b in zip(edges[::2], edges[1::2], strict=False)]
    own = _merged([(s.start_ms, s.end_ms) for s in spoken if s.cue is not None and s.cue.self_driven])
    chat = _merged([(s.start_ms, s.end_ms) for s in spoken if s.cue is None or not s.cue.self_driven])
    per_role: Counter[str] = Counter()
    for s in spoken:
        per_role[s.role] += s.end_ms - s.start_ms
    total = sum(b - a for a, b in union)
    return {
        "duration_ms": duration,
        "speaking_share": round(total / duration, 3) if duration else None,
        "chat_share": round(sum(b - a for a, b in chat) / duration, 3) if duration else None,
        "self_share": round(sum(b - a for a, b in own) / duration, 3) if duration else None,
        "longest_silence_ms": max(silences) if silences else duration,
        "seconds_by_role": {role: round(ms / 1000, 1) for role, ms in sorted(per_role.items())},
        "segments": _segments(recorded),
        "own_lines": _own_lines(recorded, cues, tracks.values()),
        "waits_behind_own_ms": _waits_behind(cues, spoken, own),
        "floor": _floor(recorded, cues, spoken, union),
        "controls": [{"t_ms": e.t_ms, "action": e.action, "detail": e.detail, "user": e.user}
                     for e in recorded if isinstance(e, ControlApplied)],
    }


def _segments(recorded: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"title": e.title, "planned_ms": e.planned_ms, "started_ms": e.t_ms, "drift_ms": e.t_ms - e.planned_ms,
             "length_ms": e.length_ms, "reason": e.reason}
            for e in recorded if isinstance(e, SegmentStarted)]


def _own_lines(recorded: Sequence[Any], cues: dict[str, CueIssued], tracks: Any) -> dict[str, Any]:
    """The show's own lines: by kind, repeats, verbatim lines said, turns between roles."""
    own = [c for c in cues.values() if c.self_driven]
    heard = {t.utterance for t in tracks}
    texts = [e.text for e in recorded if isinstance(e, UtteranceCompleted)
             and e.utterance in cues and cues[e.utterance].self_driven and not cues[e.utterance].verbatim]
    verbatim = [c for c in own if c.verbatim and c.reason == "line"]
    sources = Counter(e.source or "unknown" for e in recorded if isinstance(e, UtteranceCompleted)
                      and e.utterance in cues and cues[e.utterance].self_driven)
    banter, longest = 0, 0
    for cue in sorted(cues.values(), key=lambda c: c.seq):
        banter = banter + 1 if cue.reason in ("brief", "follow_up") else 0
        longest = max(longest, banter)
    return {
        "by_kind": dict(Counter(c.reason for c in own).most_common()),
        "by_source": dict(sources.most_common()),  # material (the show's), template, model, verbatim
        "repeated": sum(n - 1 for n in Counter(texts).values() if n > 1),
        "verbatim_said": [c.text for c in verbatim if c.id in heard],
        "verbatim_asked": len(verbatim),
        "most_turns_between_roles": longest,
    }


def _waits_behind(cues: dict[str, CueIssued], spoken: Sequence[Spoken], own: Sequence[tuple[int, int]]) -> list[int]:
    """Per answered comment: how much of its wait (arrival to its reply's first speech) was the
    show's own speech."""
    first: dict[str, int] = {}
    for s in spoken:
        if s.cue is not None and s.cue.danmaku:
            first[s.cue.id] = min(s.start_ms, first.get(s.cue.id, s.start_ms))
    return [_overlap(own, cues[c].heard_ms, at) for c, at in sorted(first.items())]


def _floor(recorded: Sequence[Any], cues: dict[str, CueIssued], spoken: Sequence[Spoken],
           union: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """How the floor was handed on: the silences between two stretches of speech while something
    waited (a comment for the floor, or speech asked for and not begun), the speaking share while
    anything waited, and the replies dropped (before any of them was spoken, or cut), by reason."""
    first: dict[str, int] = {}
    for s in spoken:
        if s.cue is not None:
            first[s.cue.id] = min(s.start_ms, first.get(s.cue.id, s.start_ms))
    waits = [(c.heard_ms if c.danmaku else c.t_ms, first[c.id]) for c in cues.values() if c.id in first]
    waits += [(e.heard_ms, e.t_ms) for e in recorded if isinstance(e, DanmakuSkipped)]
    waited = _merged([(a, b) for a, b in waits if b > a])
    gaps = [b - a for (_, a), (b, _) in zip(union, union[1:], strict=False)
            if any(lo <= a and hi >= b for lo, hi in waited)]
    span = sum(b - a for a, b in waited)
    heard = sum(_overlap(union, a, b) for a, b in waited)
    ordered = sorted(gaps)
    dropped: dict[str, Counter[str]] = {"before_speech": Counter(), "cut": Counter()}
    for e in recorded:
        if isinstance(e, UtteranceDropped) and e.utterance in cues:
            when = "cut" if e.utterance in first else "before_speech"
            dropped[when][drop_reason(e.reason)] += 1
    return {
        "gaps_ms": {"n": len(gaps), "p50": _rank(ordered, 50), "p95": _rank(ordered, 95),
                    "max": ordered[-1] if ordered else None},
        "speaking_share_waiting": round(heard / span, 3) if span else None,
        "dropped": {k: dict(sorted(v.items())) for k, v in dropped.items()},
    }


def _rank(ordered: Sequence[int], q: int) -> int | None:
    """Nearest-rank percentile of sorted values (None of none)."""
    return ordered[max(0, -(-len(ordered) * q // 100) - 1)] if ordered else None

