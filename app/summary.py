"""The end-of-show summary, computed from the event store alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import Engine, func, select

from app.airtime import airtime
from events import codec
from events.show import RESOLUTIONS
from schedulers.baseline import nearest_rank
from store.schema import events


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) or None for no values."""
    return float(nearest_rank(sorted(values), q)) if values else None


def quantiles(values: Sequence[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": percentile(values, 50), "p99": percentile(values, 99)}


def event_counts(engine: Engine, run: str) -> dict[str, int]:
    """How many events of each type the store holds for a run."""
    query = select(events.c.type, func.count()).where(events.c.run == run).group_by(events.c.type)
    with engine.connect() as conn:
        return {t: int(n) for t, n in conn.execute(query)}


def first_speaking_frames(engine: Engine, run: str) -> dict[str, int]:
    """Per correlation: when the first frame showing a non-silent viseme of its reply was published."""
    first: dict[str, int] = {}
    query = select(events.c.at_ms, events.c.body).where(events.c.run == run, events.c.type == "frame.rendered")
    with engine.connect() as conn:
        for at_ms, body in conn.execute(query):
            header, _ = codec.split(body)
            for mark in orjson.loads(header)["payload"].get("speaking", []):
                corr = mark["correlation"]
                if mark["viseme"] != "sil" and corr:
                    first[corr] = min(at_ms, first.get(corr, at_ms))
    return first


def frame_lags(engine: Engine, run: str, started_at_ms: int) -> list[float]:
    """Per frame: ms between its show time and its publication."""
    query = select(events.c.t_ms, events.c.at_ms).where(events.c.run == run, events.c.type == "frame.rendered")
    with engine.connect() as conn:
        return [float(at - started_at_ms - t) for t, at in conn.execute(query)]


def reply_latencies(engine: Engine, run: str) -> dict[str, dict[str, float]]:
    """Per danmaku id: ms to its first audio chunk, and to the first frame showing its speech."""
    received: dict[str, int] = {}
    first_audio: dict[str, int] = {}
    query = (
        select(events.c.type, events.c.id, events.c.correlation, events.c.at_ms)
        .where(events.c.run == run)
        .where(events.c.type.in_(["danmaku.received", "audio.chunk"]))
    )
    with engine.connect() as conn:
        for type_, id_, corr, at_ms in conn.execute(query):
            if type_ == "danmaku.received":
                received[id_] = at_ms
            elif corr:
                first_audio[corr] = min(at_ms, first_audio.get(corr, at_ms))
    first_frame = first_speaking_frames(engine, run)
    return {
        "audio": {c: float(first_audio[c] - t) for c, t in received.items() if c in first_audio},
        "frame": {c: float(first_frame[c] - t) for c, t in received.items() if c in first_frame},
    }


def frame_timing(engine: Engine, run: str) -> dict[str, Any]:
    """Did the stage keep the show clock: frames drawn vs due, and how late they were published."""
    bounds = select(events.c.type, events.c.body).where(
        events.c.run == run, events.c.type.in_(["run.started", "run.ended"])
    )
    started_at = duration = fps = None
    with engine.connect() as conn:
        for type_, body in conn.execute(bounds):
            payload = orjson.loads(body)["payload"]
            if type_ == "run.started":
                started_at, fps = payload["started_at_ms"], payload["fps"]
            else:
                duration = payload["duration_ms"]
    if started_at is None:
        return {}
    lags = frame_lags(engine, run, started_at)
    # Frames whose show time is before the end (n * 1000 / fps < duration), as the renderer counts.
    expected = -(-duration * fps // 1000) if duration is not None and fps else None
    return {
        "expected": expected, "rendered": len(lags),
        "publish_lag_ms": {"p50": percentile(lags, 50), "p99": percentile(lags, 99)},
    }


def resolution_changes(engine: Engine, run: str) -> list[dict[str, Any]]:
    """The QoS resolution decisions of a run: show time, from, to, reason."""
    query = select(events.c.body).where(events.c.run == run, events.c.type == "qos.resolution_changed").order_by(events.c.t_ms)
    with engine.connect() as conn:
        out = []
        for (body,) in conn.execute(query):
            doc = orjson.loads(body)
            p = doc["payload"]
            out.append({"t_ms": doc["t_ms"], "from": p["before"], "to": p["after"], "reason": p["reason"]})
    return out


def frame_lates(engine: Engine, run: str) -> list[tuple[int, float]]:
    """Per frame drawn: its show time and how late it was drawn against it (ms)."""
    query = select(events.c.t_ms, events.c.body).where(events.c.run == run, events.c.type == "frame.rendered")
    with engine.connect() as conn:
        return [(t, float(orjson.loads(codec.split(body)[0])["payload"].get("late_ms", 0.0)))
                for t, body in conn.execute(query)]


def frame_lateness(engine: Engine, run: str, changes: list[dict[str, Any]], budget_ms: float) -> dict[str, Any]:
    """Frame lateness p99 (when each frame was drawn against its show time): over the whole run,
    and before / after the first downgrade when there was one."""
    frames = frame_lates(engine, run)
    out: dict[str, Any] = {"budget": budget_ms, "p99": percentile([late for _, late in frames], 99)}
    down = next((c for c in changes if _rung(c["to"]) > _rung(c["from"])), None)
    if down is not None:
        out["first_downgrade_ms"] = down["t_ms"]
        out["p99_before"] = percentile([late for t, late in frames if t <= down["t_ms"]], 99)
        out["p99_after"] = percentile([late for t, late in frames if t > down["t_ms"]], 99)
    return out


OUTCOMES = {"cue.issued": "answered", "cue.merged": "merged", "danmaku.skipped": "skipped",
            "danmaku.rejected": "rejected"}


def dropped_replies(engine: Engine, run: str) -> int:
    """Replies (cues) of which something was written and not spoken: deadline, interruption, show end."""
    query = select(events.c.body).where(events.c.run == run, events.c.type == "utterance.dropped")
    with engine.connect() as conn:
        return len({orjson.loads(body)["payload"]["utterance"] for (body,) in conn.execute(query)})


def danmaku_outcomes(engine: Engine, run: str) -> dict[str, Any]:
    """Every danmaku's one outcome: answered (its own cue), merged, skipped (with reasons), rejected;
    ``none`` counts those without one and ``twice`` those with more than one (both should be 0)."""
    query = select(events.c.type, events.c.id, events.c.correlation, events.c.body).where(
        events.c.run == run, events.c.type.in_(["danmaku.received", *OUTCOMES]),
    )
    received: set[str] = set()
    outcome: dict[str, list[str]] = {}
    reasons: dict[str, int] = {}
    with engine.connect() as conn:
        for type_, id_, corr, body in conn.execute(query):
            if type_ == "danmaku.received":
                received.add(id_)
                continue
            outcome.setdefault(corr or id_, []).append(OUTCOMES[type_])
            if type_ == "danmaku.skipped":
                reason = orjson.loads(body)["payload"]["reason"]
                reasons[reason] = reasons.get(reason, 0) + 1
    counts = {name: 0 for name in OUTCOMES.values()}
    for d in received:
        for name in outcome.get(d, [])[:1]:
            counts[name] += 1
    return {
        "received": len(received), **counts, "skipped_by_reason": dict(sorted(reasons.items())),
        "none": sum(1 for d in received if d not in outcome),
        "twice": sum(1 for d in received if len(outcome.get(d, [])) > 1),
    }


def live_outputs(engine: Engine, run: str) -> list[dict[str, Any]]:
    """Each live output of a run: where, packets sent and lost, drops (with their reasons) and reconnects."""
    query = (select(events.c.body).where(events.c.run == run, events.c.type.like("output.%"))
             .order_by(events.c.t_ms, events.c.pos))
    outputs: dict[tuple[str, str], dict[str, Any]] = {}
    with engine.connect() as conn:
        for (body,) in conn.execute(query):
            doc = orjson.loads(body)
            p = doc["payload"]
            out = outputs.setdefault((p["output"], p["target"]), {
                "output": p["output"], "target": p["target"], "connected": 0, "drops": [], "reconnects": 0,
                "packets_sent": None, "packets_lost": None,
            })
            if doc["type"] == "output.connected":
                out["connected"] += 1
            elif doc["type"] == "output.dropped":
                out["drops"].append({"t_ms": doc["t_ms"], "reason": p["reason"]})
            elif doc["type"] == "output.closed":
                out.update(packets_sent=p["packets_sent"], packets_lost=p["packets_lost"], reconnects=p["reconnects"])
    return list(outputs.values())


def summarise(engine: Engine, run: str, mp4: str | None, fps: int = 25) -> dict[str, Any]:
    """The summary object ``troupe up --json`` prints."""
    counts = event_counts(engine, run)
    lat = {hop: list(by_id.values()) for hop, by_id in reply_latencies(engine, run).items()}
    changes = resolution_changes(engine, run)
    return {
        "run": run,
        "mp4": mp4,
        "outputs": live_outputs(engine, run),
        "events": dict(sorted(counts.items())),
        "latency_ms": {
            "danmaku_to_first_audio": quantiles(lat["audio"]),
            "danmaku_to_first_viseme_frame": quantiles(lat["frame"]),
        },
        "frames": frame_timing(engine, run),
        "resolution_changes": changes,
        "frame_lateness_ms": frame_lateness(engine, run, changes, 1000 / fps),
        "danmaku": danmaku_outcomes(engine, run),
        "dropped": dropped_replies(engine, run),
        "rejected": counts.get("danmaku.rejected", 0),
        "merged": counts.get("cue.merged", 0),
        "skipped": counts.get("danmaku.skipped", 0),
        "dead_lettered": counts.get("error.dead_lettered", 0),
        "airtime": airtime(engine, run),
    }


def _rung(resolution: str) -> int:
    """How far down the ladder a resolution is (0: the largest)."""
    return list(RESOLUTIONS).index(resolution)
