"""The debugging commands on a recorded demo: runs, inspect, replay (playback and --verify), export."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path
from typing import Any

import av
import orjson
import pytest
from sqlalchemy import select, update

from actors.director import Director
from actors.lipsync import LipsyncActor
from app.cli import main
from app.reexec import verify
from app.summary import event_counts
from events import codec
from events.base import Event, registry
from events.cue import CueIssued
from events.danmaku import DanmakuWaiting
from events.viseme import VisemeTrack
from infra.settings import RUN_SCOPED, Settings, variable
from schedulers.stage import StagePolicy
from store.recorder import EventWriter, Recorded
from store.schema import events
from tests.showkit import demo_run

pytestmark = pytest.mark.timeout(300)


def env_args(settings: Any) -> list[str]:
    return ["--nats", settings.nats_url, "--state-dir", str(settings.state_dir)]


async def troupe(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in a thread (it has its own event loop); returns (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_runs_lists_the_recorded_run(demo, capsys) -> None:  # type: ignore[no-untyped-def]
    settings, result, engine, _ = demo
    code, out, _ = await troupe(capsys, *env_args(settings), "runs", "--json")
    assert code == 0
    row = next(r for r in orjson.loads(out) if r["id"] == result.run)
    assert row["status"] == "ended" and row["duration_ms"] == 20000
    assert row["roles"] == ["host", "xiaolu", "rex"] and row["errors"] == 0
    assert row["events"] == sum(event_counts(engine, result.run).values())
    code, out, _ = await troupe(capsys, *env_args(settings), "runs")
    assert code == 0 and result.run in out and "ended" in out


async def test_inspect_reports_roles_latencies_and_one_causal_chain(demo, capsys) -> None:  # type: ignore[no-untyped-def]
    settings, result, engine, _ = demo
    code, out, _ = await troupe(capsys, *env_args(settings), "inspect", result.run, "--json")
    assert code == 0
    doc = orjson.loads(out)
    counts = event_counts(engine, result.run)
    assert doc["events"] == counts
    assert sum(r["cues"] for r in doc["roles"].values()) == counts["cue.issued"]
    hops = doc["latency_ms"]
    assert set(hops) == {"director", "llm", "tts", "lipsync", "render", "total"}
    # The director's hop holds the wait for the floor (at most a comment class's limit), and a reply's
    # speech starts within its cue's deadline (lipsync drops it otherwise): the designed bound.
    bound = max(StagePolicy().wait_ms) + settings.cue_deadline_ms + 1000
    assert 0 < hops["total"]["p50"] <= hops["total"]["p99"] <= bound, hops
    # llm, tts and lipsync take well under a second (with the cores busy: p99 under 100 ms).
    assert all(hops[h]["p99"] < 1000 for h in ("llm", "tts", "lipsync")), hops
    # The render hop (placed speech -> the first frame showing it) holds the time a reply placed
    # behind the one on air waits for its turn: within the stage's backlog budget.
    assert hops["render"]["p99"] <= StagePolicy().backlog_ms + 1000, hops
    cue = next(e for e in _events(engine, result.run, "cue.issued") if e.danmaku)  # type: ignore[attr-defined]
    code, out, _ = await troupe(capsys, *env_args(settings), "inspect", result.run, "--correlation", cue.correlation, "--json")
    assert code == 0
    chain = orjson.loads(out)
    types = [s["type"] for s in chain["events"]]
    assert types[0] == "danmaku.received"
    for hop in ("cue.issued", "utterance.chunk", "audio.chunk", "viseme.track", "frame.rendered"):
        assert hop in types
    assert types.index("cue.issued") < types.index("utterance.chunk") < types.index("audio.chunk")
    # A comment that waited for the floor: its chain says from when, and how long until its outcome.
    waited = _events(engine, result.run, "danmaku.waiting")[0]
    assert isinstance(waited, DanmakuWaiting) and waited.correlation is not None
    code, out, _ = await troupe(capsys, *env_args(settings), "inspect", result.run,
                                "--correlation", waited.correlation, "--json")
    assert code == 0
    w = orjson.loads(out)["waited"]
    assert w["from_ms"] == waited.heard_ms and w["outcome"] is not None and w["ms"] >= 0, w
    # Each role's pace as its llm worker measured it, and the floor planned from it (with why).
    measured = doc["pace"]["measured"]
    assert set(measured) <= set(doc["roles"]) and measured, doc["pace"]
    assert all(m["backend"] == "scripted" and m["replies"] >= 1 for m in measured.values())
    assert counts.get("cue.paced", 0) == len(doc["pace"]["planned"])
    code, out, _ = await troupe(capsys, *env_args(settings), "inspect", result.run)
    assert code == 0 and "latency p50/p99" in out and "rejected danmaku" in out
    assert "pace (measured on each role's writer and voice):" in out


def _events(engine: Any, run: str, type_: str) -> list[Event]:
    with engine.connect() as conn:
        rows = conn.execute(select(events.c.body).where(events.c.run == run, events.c.type == type_)
                            .order_by(events.c.pos)).scalars().all()
    return [codec.decode(b) for b in rows]


async def test_verify_finds_no_divergence_in_a_recorded_run(demo, capsys) -> None:  # type: ignore[no-untyped-def]
    settings, result, engine, _ = demo
    code, out, _ = await troupe(capsys, *env_args(settings), "replay", result.run, "--verify")
    assert code == 0, out
    assert out.strip().endswith("0 divergences"), out
    # Every recorded frame is drawn again through the renderer's own ticks, with its once-a-second
    # observations: the frames of 20 s at 25 fps (n < 500), less any the renderer skipped when it
    # fell behind (tests/integration/test_show.py counts those).
    counts = event_counts(engine, result.run)
    drawn = counts["frame.rendered"]
    assert drawn <= 500
    checked = drawn + counts["qos.frames_observed"]
    assert "director" in out and "lipsync" in out and re.search(rf"\brender {checked}\b", out), out


# A value other than the default for every run-scoped setting (a new one must be added here).
OTHER_VALUES = {
    "resolution": "360p", "fps": "30", "seed": "99", "merge_window_ms": "0", "max_danmaku_chars": "20",
    "blocklist": "hello,game", "cue_deadline_ms": "900", "stage_backlog_ms": "1000", "self_driven": "off",
    "idle_gap_ms": "9000", "reply_pause_ms": "2500", "deck_ms": "0", "banter_turns": "1", "llm_backend": "openai",
    "llm_max_sentences": "1", "llm_max_tokens": "5", "llm_first_sentence_ms": "1", "openers": "off",
    "face_ease_ms": "0", "face_hold_ms": "100", "face_linger_ms": "0", "jpeg_quality": "20",
    "interrupt_priority": "0.5", "role_wait_budget_ms": "1", "memory": "off", "recall_wait_ms": "2000",
    "regulars_first": "on",
}


async def test_verify_follows_the_run_s_settings_not_the_shell_s(demo, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A verify in a shell where every setting an actor reads for the run is set otherwise still
    finds no divergence: the run recorded its settings, and the kernel gives the handlers those."""
    assert set(OTHER_VALUES) == set(RUN_SCOPED)
    settings, result, _, _ = demo
    for name, value in OTHER_VALUES.items():
        assert value != str(getattr(Settings(), name)), name
        monkeypatch.setenv(variable(name), value)
    code, out, _ = await troupe(capsys, *env_args(settings), "replay", result.run, "--verify")
    assert code == 0, out
    assert out.strip().endswith("0 divergences"), out


async def test_verify_points_at_the_first_event_a_changed_handler_gets_wrong(demo) -> None:  # type: ignore[no-untyped-def]
    settings, result, engine, _ = demo

    class LateLipsync(LipsyncActor):  # places every track one millisecond later than it did
        def handle(self, event, ctx):  # type: ignore[no-untyped-def]
            return [dataclasses.replace(t, start_ms=t.start_ms + 1) if isinstance(t, VisemeTrack) else t
                    for t in super().handle(event, ctx)]

    def build(name: str, s: Any) -> Any:
        return LateLipsync() if name == "lipsync" else Director(s)

    v = await asyncio.to_thread(verify, engine, result.run, ("director", "lipsync"), settings, build)
    d = v.divergence
    assert d is not None and d.actor == "lipsync" and d.what == "differs"
    with engine.connect() as conn:
        first_track = conn.execute(select(events.c.pos, events.c.id).where(
            events.c.run == result.run, events.c.type == "viseme.track").order_by(events.c.pos).limit(1)).one()
    assert (d.pos, d.event_id) == tuple(first_track)
    assert d.expected is not None and d.actual is not None
    assert d.actual["payload"]["start_ms"] == d.expected["payload"]["start_ms"] + 1
    assert [c["type"] for c in d.chain] == [  # the show's first line: its root is the run's start
        "run.started", "cue.issued", "utterance.chunk", "audio.chunk", "viseme.track",
    ]

    class Contrary(Director):  # routes every comment to the first role
        def _route(self, state, event):  # type: ignore[no-untyped-def]
            return state.show.roles[0].id, "contrary"

    v = await asyncio.to_thread(verify, engine, result.run, ("director",), settings,
                                lambda name, s: Contrary(s))
    d = v.divergence
    first_cue = [e for e in _events(engine, result.run, "cue.issued") if e.danmaku][0]  # type: ignore[attr-defined]
    assert isinstance(first_cue, CueIssued)
    assert d is not None and (d.event_id, d.what) == (first_cue.id, "differs")
    assert d.actual is not None and d.actual["payload"]["routed_by"] == "contrary"
    assert [c["type"] for c in d.chain] == ["danmaku.received", "cue.issued"]


async def test_playback_into_a_new_run_records_the_same_events(demo, capsys) -> None:  # type: ignore[no-untyped-def]
    settings, result, engine, _ = demo
    into = f"{result.run}-again"
    code, out, err = await troupe(capsys, *env_args(settings), "replay", result.run, "--max", "--into", into, "--json")
    assert code == 0, err
    assert orjson.loads(out)["published"] == sum(event_counts(engine, result.run).values())
    code, out, _ = await troupe(capsys, *env_args(settings), "inspect", into, "--json")
    assert code == 0
    doc = orjson.loads(out)
    assert doc["events"] == event_counts(engine, result.run)
    assert doc["run"]["replay_of"] == result.run
    # The playback is a run of its own: the same causal structure under new ids.
    cue = _events(engine, into, "cue.issued")[0]
    code, out, _ = await troupe(capsys, *env_args(settings), "inspect", into, "--correlation", cue.correlation, "--json")
    assert code == 0 and "viseme.track" in [s["type"] for s in orjson.loads(out)["events"]]


async def test_playback_of_a_slice_at_speed(demo, capsys) -> None:  # type: ignore[no-untyped-def]
    settings, result, engine, _ = demo
    into = f"{result.run}-slice"
    code, out, err = await troupe(capsys, *env_args(settings), "replay", result.run, "--speed", "20",
                                  "--from", "2", "--to", "6", "--types", "cue", "viseme", "--into", into, "--json")
    assert code == 0, err
    doc = orjson.loads(out)
    counts = event_counts(engine, into)
    # only the families asked for (every type of them: a reply cut on deck is a viseme.cut), and the run's start
    assert set(counts) <= {"run.started", *(t for t in registry.types() if t.split(".")[0] in ("cue", "viseme"))}
    assert {"cue.issued", "viseme.track"} <= set(counts)
    assert counts["run.started"] == 1
    with engine.connect() as conn:
        ts = conn.execute(select(events.c.t_ms).where(events.c.run == into, events.c.type != "run.started")).scalars().all()
    assert ts and all(2000 <= t < 6000 for t in ts)
    span_s = (max(ts) - min(ts)) / 1000  # the slice's events, paced at 20x
    assert span_s / 20 * 0.8 <= doc["seconds"] < 4.0, (span_s, doc)


async def test_export_re_renders_the_run_from_the_store(demo, capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings, result, _, _ = demo
    out_file = tmp_path / "again.mp4"
    code, out, err = await troupe(capsys, *env_args(settings), "export", result.run, str(out_file))
    assert code == 0, err
    with av.open(str(out_file)) as container:
        video = container.streams.video[0]
        audio = container.streams.audio[0]
        assert (video.codec_context.width, video.codec_context.height) == (1280, 720)
        assert abs(float(video.duration * video.time_base) - 20.0) < 0.2
        assert abs(float(audio.duration * audio.time_base) - 20.0) < 0.3
    assert not await asyncio.to_thread(lambda: list(tmp_path.glob(".troupe-export-*")))


async def test_user_mistakes_are_one_line_errors(demo, capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings, result, _, _ = demo
    code, _, err = await troupe(capsys, *env_args(settings), "inspect", "nope")
    assert code == 1 and err.count("\n") == 1 and "no run 'nope'" in err
    code, _, err = await troupe(capsys, "--state-dir", str(tmp_path / "empty"), "runs")
    assert code == 1 and "no store at" in err and err.count("\n") == 1
    code, _, err = await troupe(capsys, "--store", "postgresql://postgres@127.0.0.1:1/x", "runs")
    assert code == 1 and "cannot open the store" in err and err.count("\n") == 1
    code, _, err = await troupe(capsys, *env_args(settings), "replay", result.run, "--into", "bad id!")
    assert code == 1 and "not a valid run id" in err


async def test_a_corrupt_row_and_an_unknown_type_are_one_line_errors(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from store.database import open_engine

    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_engine(url)
    start = demo_run("c1")
    EventWriter(engine).append([Recorded(start, codec.encode(start), "troupe.c1.run.started")])
    for argv in (["inspect", "c1"], ["replay", "c1", "--verify"], ["export", "c1", str(tmp_path / "x.mp4")]):
        with engine.begin() as conn:
            conn.execute(update(events).where(events.c.id == "c1-start").values(body=b"{not json"))
        code, _, err = await troupe(capsys, "--store", url, *argv)
        assert code == 1 and err.count("\n") == 1 and "cannot be read" in err, (argv, err)
        future = orjson.dumps({"type": "hologram.beamed", "v": 1, "id": "c1-start", "run": "c1", "payload": {}})
        with engine.begin() as conn:
            conn.execute(update(events).where(events.c.id == "c1-start").values(body=future))
        code, _, err = await troupe(capsys, "--store", url, *argv)
        assert code == 1 and err.count("\n") == 1 and "hologram.beamed" in err, (argv, err)
    assert not (tmp_path / "x.mp4").exists()
