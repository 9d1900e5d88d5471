"""What happened in a recorded run, and why: the report behind ``troupe inspect``.

Latencies follow the correlation chain of each danmaku (its id is the chain's
correlation): the first event of each hop, by the wall-clock time it was emitted.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine

from app.airtime import airtime
from app.summary import OUTCOMES, live_outputs, quantiles
from events.base import Event
from events.cue import CueIssued, StagePaced
from events.danmaku import (
    DanmakuGap,
    DanmakuReceived,
    DanmakuRejected,
    DanmakuSkipped,
    DanmakuWaiting,
    RolePaceMeasured,
)
from events.error import DeadLettered
from events.errors import StoreError
from events.frame import FrameRendered
from events.run import RunOwned, RunStarted
from events.utterance import UtteranceDropped
from events.viewer import ViewerRecalled
from events.viseme import FaceChanged, VisemeCut
from store.queries import Row, iter_rows, run_info

DECISIONS = frozenset({"qos.resolution_changed", "qos.throttle_changed", "qos.anomaly", "role.weights_changed"})
HOPS = ("cue.issued", "utterance.chunk", "audio.chunk", "viseme.track", "frame.rendered")
_HOP_NAMES = {
    "cue.issued": "director", "utterance.chunk": "llm", "audio.chunk": "tts",
    "viseme.track": "lipsync", "frame.rendered": "render",
}


def _speaks_in(frame: FrameRendered) -> set[str]:
    return {m.correlation for m in frame.speaking if m.viseme != "sil" and m.correlation}


def _firsts(rows: Sequence[Row]) -> dict[str, dict[str, int]]:
    """Per correlation: wall-clock ms of its danmaku and of the first event of each hop."""
    first: dict[str, dict[str, int]] = defaultdict(dict)
    for row in rows:
        e = row.event
        if isinstance(e, FrameRendered):
            for speaking in _speaks_in(e):
                first[speaking].setdefault("frame.rendered", e.at_ms)
            continue
        key = "danmaku.received" if isinstance(e, DanmakuReceived) else e.type
        corr = e.id if isinstance(e, DanmakuReceived) else e.correlation
        if corr and (key == "danmaku.received" or key in HOPS):
            hops = first[corr]
            hops[key] = min(e.at_ms, hops.get(key, e.at_ms))
    return first


def _hop_latencies(first: dict[str, dict[str, int]], corrs: Sequence[str]) -> dict[str, Any]:
    per_hop: dict[str, list[float]] = defaultdict(list)
    for corr in corrs:
        hops = first.get(corr, {})
        prev = hops.get("danmaku.received")
        if prev is None:
            continue
        for hop in HOPS:
            at = hops.get(hop)
            if at is None:
                break
            per_hop[_HOP_NAMES[hop]].append(float(at - prev))
            prev = at
        if "frame.rendered" in hops:
            per_hop["total"].append(float(hops["frame.rendered"] - hops["danmaku.received"]))
    return {name: quantiles(per_hop[name]) for name in (*_HOP_NAMES.values(), "total") if per_hop[name]}


def report(engine: Engine, run: str) -> dict[str, Any]:
    """The whole-run report (``troupe inspect RUN --json``)."""
    info = run_info(engine, run)
    rows = list(iter_rows(engine, run))
    counts = Counter(r.event.type for r in rows)
    first = _firsts(rows)
    roles: dict[str, dict[str, Any]] = {
        role: {"cues": 0, "merged": 0, "utterances": 0, "dropped": 0, "speech_ms": 0, "correlations": []}
        for role in info.roles
    }
    qos, errors, rejected, skipped, drops, chat, gaps = [], [], [], [], [], [], []
    cue_role: dict[str, str] = {}
    for row in rows:
        e = row.event
        role = roles.setdefault(e.role, {"cues": 0, "merged": 0, "utterances": 0, "dropped": 0,
                                         "speech_ms": 0, "correlations": []}) if e.role else None
        if e.type == "cue.issued" and role is not None:
            role["cues"] += 1
            role["correlations"].append(e.correlation)
            cue_role[e.id] = e.role or ""
        elif e.type == "utterance.completed" and role is not None:
            role["utterances"] += 1
        elif isinstance(e, UtteranceDropped):
            drops.append(e)
        elif e.type == "audio.chunk" and role is not None:
            role["speech_ms"] += getattr(e, "duration_ms", 0)
        elif e.type in DECISIONS:
            qos.append(_public(e))
        elif isinstance(e, DanmakuRejected):
            rejected.append(e)
        elif isinstance(e, DanmakuSkipped):
            skipped.append(e)
        elif isinstance(e, DanmakuReceived):
            chat.append(e)
        elif isinstance(e, DanmakuGap):
            gaps.append(e)
        elif isinstance(e, DeadLettered):
            errors.append({"t_ms": e.t_ms, "type": e.type, "actor": e.actor, "subject": e.subject,
                           "reason": e.reason, "deliveries": e.deliveries})
    for row in rows:
        if row.event.type == "cue.merged":
            target = cue_role.get(getattr(row.event, "cue", ""))
            if target in roles:
                roles[target]["merged"] += 1
    for drop in {d.utterance: d for d in drops}.values():  # a cut names no role: its cue's
        owner = drop.role or cue_role.get(drop.utterance)
        if owner in roles:
            roles[owner]["dropped"] += 1
    for stats in roles.values():
        stats["latency_ms"] = _hop_latencies(first, stats.pop("correlations"))
    by_reason = Counter(e.reason for e in rejected)
    return {
        "run": {
            "id": info.id, "status": info.status, "started_at_ms": info.started_at_ms,
            "duration_ms": info.duration_ms, "seed": info.seed, "replay_of": info.replay_of,
            "roles": list(info.roles),
        },
        "events": dict(sorted(counts.items())),
        "roles": roles,
        "latency_ms": _hop_latencies(first, [c for c, h in first.items() if "danmaku.received" in h]),
        "qos": qos,
        "rejected": {
            "count": len(rejected), "by_reason": dict(by_reason.most_common()),
            "examples": [{"t_ms": e.t_ms, "reason": e.reason, "detail": e.detail, "text": e.text[:60]}
                         for e in rejected[:5]],
        },
        "skipped": {
            "count": len(skipped), "by_reason": dict(Counter(e.reason for e in skipped).most_common()),
            "examples": [{"t_ms": e.t_ms, "reason": e.reason, "detail": e.detail, "text": e.text[:60]}
                         for e in skipped[:5]],
        },
        # A reply dropped on purpose: why (the reason without its numbers and ids) and how often.
        "dropped": dict(Counter(_gist(e.reason) for e in drops).most_common()),
        "chat": _chat(chat, gaps),
        "outputs": live_outputs(engine, run),
        "errors": errors,
        "airtime": airtime(engine, run),
        # The roles' measured pace (the last told per role) and the floor planned from it.
        "pace": {
            "measured": {e.role: {k: getattr(e, k) for k in ("backend", "first_sentence_ms", "sentence_write_ms",
                                                             "speech_ms", "opener_ms", "replies")}
                         for e in (r.event for r in rows) if isinstance(e, RolePaceMeasured) and e.role},
            "planned": [{"t_ms": e.t_ms, "lead_ms": e.lead_ms, "sentence_ms": e.sentence_ms,
                         "opener_ms": e.opener_ms, "max_sentences": e.max_sentences, "reason": e.reason}
                        for e in (r.event for r in rows) if isinstance(e, StagePaced)],
        },
        "faces": _faces(rows),
        # Which process held each stateful actor's share of the run, from when, and why (TROUPE_SPREAD=on).
        "owners": [{"t_ms": e.t_ms, "kind": e.kind, "holder": e.holder, "previous": e.previous, "reason": e.reason,
                    "runs_held": e.runs_held} for e in (r.event for r in rows) if isinstance(e, RunOwned)],
    }


def _chat(received: Sequence[DanmakuReceived], gaps: Sequence[DanmakuGap]) -> dict[str, Any]:
    """Where the danmaku came from: per platform ("" for a producer's), how many, from how many
    viewers it identified, the gifts' value per currency; and each bridge's gaps."""
    platforms: dict[str, dict[str, Any]] = {}
    for e in received:
        p = platforms.setdefault(e.platform, {"danmaku": 0, "viewers": set(), "gifts": 0, "value": Counter()})
        p["danmaku"] += 1
        if e.viewer:
            p["viewers"].add(e.viewer)
        if e.kind == "gift":
            p["gifts"] += 1
            if e.value:
                p["value"][e.currency] += e.value
    return {
        "platforms": {name: {"danmaku": p["danmaku"], "viewers": len(p["viewers"]), "gifts": p["gifts"],
                             "value": {c: round(v, 2) for c, v in sorted(p["value"].items())}}
                      for name, p in sorted(platforms.items())},
        "gaps": [{"t_ms": g.t_ms, "platform": g.platform, "source": g.source, "seconds": (g.until_ms - g.from_ms) / 1000,
                  "reason": g.reason, "missed": None if g.missed < 0 else g.missed} for g in gaps],
    }


def _faces(rows: Sequence[Row]) -> dict[str, Any]:
    """What the faces did (``viseme.face``): per role, the expressions it took, the roles it
    turned to and its nods; and the first changes, each with its reason."""
    changes = sorted((e for e in (r.event for r in rows) if isinstance(e, FaceChanged)), key=lambda e: e.start_ms)
    by_role: dict[str, dict[str, Any]] = {}
    for e in changes:
        role = by_role.setdefault(e.role or "", {"expressions": Counter(), "looks": Counter(), "nods": 0})
        if e.expression:
            role["expressions"][e.expression] += 1
        if e.look:
            role["looks"][e.look] += 1
        role["nods"] += e.gesture == "nod"
    return {
        "by_role": {r: {"expressions": dict(v["expressions"]), "looks": dict(v["looks"]), "nods": v["nods"]}
                    for r, v in by_role.items()},
        "first": [{"t_ms": e.start_ms, "role": e.role, "change": e.expression or (f"looks at {e.look}" if e.look else
                                                                                e.gesture), "reason": e.reason}
                  for e in changes[:12]],
    }


def _gist(reason: str) -> str:
    """A drop's reason without the numbers and ids in it: 'interrupted by', 'deadline passed', ..."""
    words = []
    for word in reason.split(":")[0].split():
        if any(c.isdigit() for c in word) or word.startswith("("):
            break
        words.append(word)
    return " ".join(words) or reason


def _public(e: Event) -> dict[str, Any]:
    doc: dict[str, Any] = {"t_ms": e.t_ms, "type": e.type}
    doc.update({k: v for k, v in e.payload().items() if not isinstance(v, bytes)})
    return doc


def chain(engine: Engine, run: str, correlation: str) -> dict[str, Any]:
    """One danmaku's whole causal chain with the time spent at each hop (``--correlation``)."""
    run_info(engine, run)
    rows = list(iter_rows(engine, run))
    members = [r for r in rows if r.event.correlation == correlation or r.event.id == correlation]
    frame = next((r for r in rows if isinstance(r.event, FrameRendered) and correlation in _speaks_in(r.event)), None)
    if frame is not None:
        members.append(frame)
    if not members:
        raise StoreError(f"no events with correlation {correlation!r} in run {run!r}")
    started = next((r.event for r in rows if isinstance(r.event, RunStarted)), None)
    offset = started.started_at_ms if started is not None else 0

    def wall(e: Event) -> int:
        # A cut's at_ms is the show time the speech stops (its payload); it was decided at t_ms.
        return offset + e.t_ms if isinstance(e, VisemeCut) else e.at_ms

    members.sort(key=lambda r: (wall(r.event), r.seq))
    by_id = {r.event.id: r.event for r in members}
    root_at = wall(members[0].event)
    steps = []
    for r in members:
        e = r.event
        cause = by_id.get(e.causation or "")
        steps.append({
            "pos": r.pos, "seq": r.seq, "type": e.type, "id": e.id, "role": e.role, "causation": e.causation,
            "t_ms": e.t_ms, "at_ms": wall(e), "since_start_ms": wall(e) - root_at,
            # For the first speaking frame there is no causation link: time since the visemes.
            "hop_ms": wall(e) - wall(cause) if cause is not None else None,
        })
    return {"run": run, "correlation": correlation, "events": steps,
            "total_ms": max(wall(r.event) for r in members) - root_at,
            "waited": _waited(correlation, [r.event for r in members]),
            "recalled": _recalled([r.event for r in members])}


def _recalled(chain: Sequence[Event]) -> dict[str, Any] | None:
    """What the stage remembered of the comment's viewer (its ``danmaku.recalled``), and what the
    cue took of it (None: not a remembered viewer's)."""
    recall = next((e for e in chain if isinstance(e, ViewerRecalled)), None)
    if recall is None:
        return None
    cue = next((e for e in chain if isinstance(e, CueIssued) and e.recalled == recall.id), None)
    return {"id": recall.id, "viewer": recall.viewer, "known": recall.known, "shows": recall.shows,
            "facts": list(recall.facts), "bears": list(recall.bears), "forget": recall.forget,
            "reason": recall.reason, "returning": cue.returning if cue else None, "used_by": cue.id if cue else None}


def _waited(danmaku: str, chain: Sequence[Event]) -> dict[str, Any] | None:
    """How a comment waited for the floor (its ``danmaku.waiting``): from when, in which class,
    behind how many, and how long until its outcome (None: it did not wait; ``ms`` None: no
    outcome yet)."""
    waiting = next((e for e in chain if isinstance(e, DanmakuWaiting) and e.causation == danmaku), None)
    if waiting is None:
        return None
    outcome = next((e for e in chain if e.causation == danmaku and e.type in OUTCOMES), None)
    return {
        "from_ms": waiting.heard_ms, "cls": waiting.cls, "form": waiting.form, "waits_for": waiting.waits_for,
        "ahead": waiting.ahead, "waiting": waiting.waiting, "until_ms": waiting.until_ms, "joined": waiting.joined,
        "outcome": outcome.type if outcome is not None else None,
        "ms": outcome.t_ms - waiting.heard_ms if outcome is not None else None,
    }


def format_report(doc: dict[str, Any]) -> str:
    r = doc["run"]
    lines = [
        f"run {r['id']}  status {r['status']}  duration {_ms(r['duration_ms'])}  seed {r['seed']}"
        + (f"  (playback of {r['replay_of']})" if r["replay_of"] else ""),
        "",
        "events: " + ", ".join(f"{t} {n}" for t, n in doc["events"].items()),
        "",
        f"{'role':<10} {'cues':>5} {'merged':>6} {'replies':>7} {'dropped':>7} {'speech':>8}  latency p50/p99 ms per hop",
    ]
    for role, s in doc["roles"].items():
        hops = "  ".join(f"{h} {_q(v)}" for h, v in s["latency_ms"].items())
        lines.append(f"{role:<10} {s['cues']:>5} {s['merged']:>6} {s['utterances']:>7} {s['dropped']:>7} "
                     f"{s['speech_ms'] / 1000:>7.1f}s  {hops}")
    lines.append("all roles: " + "  ".join(f"{h} {_q(v)}" for h, v in doc["latency_ms"].items()))
    lines += ["", f"QoS decisions: {len(doc['qos'])}"]
    lines += [f"  {_ms(q['t_ms'])} {q['type']}: " + ", ".join(
        f"{k}={v}" for k, v in q.items() if k not in ("t_ms", "type")) for q in doc["qos"]]
    lines += _format_chat(doc.get("chat") or {})
    rej = doc["rejected"]
    lines += ["", f"rejected danmaku: {rej['count']}" + (
        " (" + ", ".join(f"{k} {v}" for k, v in rej["by_reason"].items()) + ")" if rej["count"] else "")]
    lines += [f"  {_ms(x['t_ms'])} {x['reason']}: {x['detail']}" for x in rej["examples"]]
    skip = doc["skipped"]
    lines += ["", f"skipped danmaku (valid, not answered): {skip['count']}" + (
        " (" + ", ".join(f"{k} {v}" for k, v in skip["by_reason"].items()) + ")" if skip["count"] else "")]
    lines += [f"  {_ms(x['t_ms'])} {x['reason']}: {x['text']}" for x in skip["examples"]]
    lines += ["", "replies dropped: " + (", ".join(f"{k} {v}" for k, v in doc["dropped"].items()) or "0")]
    lines += format_airtime(doc.get("airtime") or {})
    pace = doc.get("pace") or {}
    if pace.get("measured"):
        lines += ["", "pace (measured on each role's writer and voice):"]
        lines += [f"  {role}: {m['backend']}, first sentence {m['first_sentence_ms']} ms, "
                  f"{m['sentence_write_ms']} ms between sentences, a sentence spoken {m['speech_ms']} ms"
                  + (f", an opener {m['opener_ms']} ms" if m["opener_ms"] else "") + f" ({m['replies']} replies)"
                  for role, m in pace["measured"].items()]
        lines += [f"  {_ms(x['t_ms'])} floor planned: {x['reason']}" for x in pace["planned"]]
    faces = doc.get("faces") or {}
    if faces.get("by_role"):
        lines += ["", "faces (viseme.face: what each role's face did, and why):"]
        lines += [f"  {role}: " + ", ".join(f"{k} {v}" for k, v in f["expressions"].items())
                  + ("; looked at " + ", ".join(f"{k} {v}" for k, v in f["looks"].items()) if f["looks"] else "")
                  + (f"; nodded {f['nods']}" if f["nods"] else "") for role, f in faces["by_role"].items()]
        lines += [f"  {_ms(x['t_ms'])} {x['role']} {x['change']}: {x['reason']}" for x in faces["first"]]
    for out in doc["outputs"]:
        sent = "-" if out["packets_sent"] is None else out["packets_sent"]
        lines += ["", f"live output {out['output']} {out['target']}: connected {out['connected']}x, "
                  f"{len(out['drops'])} drops, {out['reconnects']} reconnects, packets sent {sent}, "
                  f"lost {'-' if out['packets_lost'] is None else out['packets_lost']}"]
        lines += [f"  {_ms(d['t_ms'])} dropped: {d['reason']}" for d in out["drops"]]
    if doc.get("owners"):
        lines += ["", "held by (the process holding each actor's state of the run):"]
        lines += [f"  {_ms(o['t_ms'])} {o['kind']}: " + (f"{o['holder']} ({o['runs_held']} runs)" if o["holder"] else
                  f"let go by {o['previous']}") + f": {o['reason']}" for o in doc["owners"]]
    lines += ["", f"errors: {len(doc['errors'])}"]
    lines += [f"  {_ms(x['t_ms'])} {x['actor']} {x['subject']}: {x['reason']} ({x['deliveries']} deliveries)"
              for x in doc["errors"]]
    return "\n".join(lines)


def _format_chat(chat: dict[str, Any]) -> list[str]:
    platforms = chat.get("platforms") or {}
    if not platforms or set(platforms) == {""}:
        return []  # no platform's chat: nothing more to say than the counts above
    lines = ["", "chat by platform:"]
    for name, p in platforms.items():
        value = ", ".join(f"{v:g} {c}" for c, v in p["value"].items())
        lines.append(f"  {name or 'producers'}: {p['danmaku']} danmaku from {p['viewers']} identified viewers, "
                     f"{p['gifts']} gifts" + (f" ({value})" if value else ""))
    for g in chat.get("gaps") or []:
        missed = "the platform does not say what was missed" if g["missed"] is None else f"{g['missed']} missed"
        lines.append(f"  {_ms(g['t_ms'])} {g['source']} down {g['seconds']:.1f} s ({g['reason']}); {missed}")
    return lines


def format_airtime(air: dict[str, Any]) -> list[str]:
    """The air-time lines of the report: shares, silences, seconds by role, the rundown, controls."""
    if not air:
        return []
    pct = lambda x: "-" if x is None else f"{x * 100:.0f}%"  # noqa: E731
    own = air["own_lines"]
    lines = ["", f"air time: speaking {pct(air['speaking_share'])} (chat {pct(air['chat_share'])}, the show's own "
             f"{pct(air['self_share'])}), longest silence {_ms(air['longest_silence_ms'])}",
             "  seconds by role: " + ", ".join(f"{r} {s:.1f}" for r, s in air["seconds_by_role"].items()),
             "  the show's own lines: " + (", ".join(f"{k} {n}" for k, n in own["by_kind"].items()) or "none")
             + (" (from " + ", ".join(f"{k} {n}" for k, n in own.get("by_source", {}).items()) + ")"
                if own.get("by_source") else "")
             + f"; repeated {own['repeated']}; verbatim said {len(own['verbatim_said'])}/{own['verbatim_asked']};"
             f" at most {own['most_turns_between_roles']} turns between roles without the chat"]
    floor = air.get("floor") or {}
    if floor:
        gaps = floor["gaps_ms"]
        drops = "; ".join(f"{when.replace('_', ' ')}: " + ", ".join(f"{k} {n}" for k, n in kinds.items())
                          for when, kinds in floor["dropped"].items() if kinds) or "none"
        lines += [f"  floor: {gaps['n']} gaps while something waited, p50/p95/max {_ms(gaps['p50'])}/"
                  f"{_ms(gaps['p95'])}/{_ms(gaps['max'])}; speaking {pct(floor['speaking_share_waiting'])} of the "
                  f"time anything waited; replies dropped: {drops}"]
    lines += ["", f"rundown: {len(air['segments'])} segments started"]
    lines += [f"  {_ms(g['started_ms'])} {g['title']} ({g['reason']}; planned {_ms(g['planned_ms'])}, "
              f"{g['length_ms'] // 1000} s)" for g in air["segments"]]
    lines += ["", f"operator controls: {len(air['controls'])}"]
    lines += [f"  {_ms(c['t_ms'])} {c['action']}" + (f" by {c['user']}" if c["user"] else "") + f": {c['detail']}"
              for c in air["controls"]]
    return lines


def format_chain(doc: dict[str, Any]) -> str:
    lines = [f"correlation {doc['correlation']} in run {doc['run']}: {doc['total_ms']} ms from first to last"]
    w = doc.get("waited")
    if w:
        behind = f"{w['ahead']} ahead of it" if w["ahead"] else "first in line"
        lines.append(
            f"waited from {w['from_ms']} ms ({_ms(w['from_ms'])}) for the floor: {w['cls']} {w['form']}"
            + (f" for {w['waits_for']}" if w["waits_for"] else "")
            + (f", joined {w['joined']}" if w["joined"] else "")
            + f", {behind} of {w['waiting']} waiting, let go unless on air by {_ms(w['until_ms'])}; "
            + (f"{w['outcome']} after {w['ms']} ms" if w["outcome"] else "no outcome recorded"))
    r = doc.get("recalled")
    if r and r["forget"]:
        lines.append(f"recalled ({r['id']}): {r['reason']}")
    elif r and r["known"]:
        lines.append(f"recalled ({r['id']}): {r['viewer'] or 'a forgotten viewer'}, {r['shows']} earlier shows"
                     + (f"; facts {', '.join(r['facts'])}" if r["facts"] else "")
                     + (f"; this comment bears on {', '.join(r['bears'])}" if r["bears"] else "")
                     + (f"; greeted back by {r['used_by']}" if r["returning"] else
                        f"; used by {r['used_by']}" if r["used_by"] else "; no cue took it"))
    elif r:
        lines.append(f"recalled ({r['id']}): a first-time viewer" + (f" ({r['reason']})" if r["reason"] else ""))
    lines.append(f"{'+ms':>7} {'hop ms':>7} {'show t':>8}  {'type':<20} {'role':<8} id")
    for s in doc["events"]:
        hop = "" if s["hop_ms"] is None else str(s["hop_ms"])
        lines.append(f"{s['since_start_ms']:>7} {hop:>7} {_ms(s['t_ms']):>8}  {s['type']:<20} {s['role'] or '':<8} {s['id']}")
    return "\n".join(lines)


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value / 1000:.2f}s"


def _q(stats: dict[str, Any]) -> str:
    return f"{stats['p50']:.0f}/{stats['p99']:.0f}"
