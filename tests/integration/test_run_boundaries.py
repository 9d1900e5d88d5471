"""Run boundaries on a real nats-server: an ended run takes no new input, and a new show leaves
earlier runs and playbacks alone (no video, no events added to them)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from nats.js import JetStreamContext
from sqlalchemy import select

from app.cli import main
from app.reexec import format_verification, verify
from app.shows import load_show
from app.supervisor import Stage, run_show
from events import codec
from events.base import Event
from events.danmaku import DanmakuReceived, DanmakuRejected
from events.error import DeadLettered
from events.show import Show, show_from_dict
from events.subjects import stream_name, subject_for
from infra.settings import Settings
from store.queries import run_info
from store.schema import events
from tests.conftest import wait_for
from tests.showkit import stream_counts

pytestmark = pytest.mark.timeout(300)


def short_show() -> Show:
    doc = load_show().to_dict()
    doc["script"] = [
        {"at": 0.3, "user": "ann", "text": "hello @rex, what is new?"},
        {"at": 1.0, "user": "bo", "text": "@xiaolu 晚上好"},
    ]
    return show_from_dict(doc)


def stored(engine: Any, run: str) -> dict[str, tuple[str, str | None, str | None]]:
    """The run's stored events: id -> (type, causation, correlation)."""
    with engine.connect() as conn:
        rows = conn.execute(select(events.c.id, events.c.type, events.c.causation, events.c.correlation)
                            .where(events.c.run == run)).all()
    return {r.id: (r.type, r.causation, r.correlation) for r in rows}


async def in_stream(js: JetStreamContext, family: str, run: str, subjects: str = ">") -> list[Event]:
    """Every event of one run and family now in its stream, in stream order."""
    info = await js.stream_info(stream_name(family), subjects_filter=f"troupe.{run}.{subjects}")
    expected = sum((info.state.subjects or {}).values()) if info.state.subjects else 0
    if not expected:
        return []
    sub = await js.subscribe(f"troupe.{run}.{subjects}", ordered_consumer=True, stream=stream_name(family))
    try:
        out = []
        while len(out) < expected:
            out.append(codec.decode((await sub.next_msg(timeout=5)).data))
        return out
    finally:
        await sub.unsubscribe()


async def rejections(js: JetStreamContext, run: str) -> dict[str, DanmakuRejected]:
    """The run's danmaku.rejected on NATS, by what they answer."""
    found = await in_stream(js, "danmaku", run, "danmaku.rejected")
    return {e.causation or "": e for e in found if isinstance(e, DanmakuRejected)}


async def test_danmaku_sent_to_an_ended_run_are_answered_on_nats_and_not_stored(settings: Settings) -> None:
    run = f"late{uuid.uuid4().hex[:6]}"
    late = [
        DanmakuReceived(id=f"{run}-late{i}", run=run, user="fan", text=text, kind=kind)
        for i, (text, kind) in enumerate([
            ("@rex are you still there?", "comment"), ("@rex are you still there??", "comment"),
            ("here is a rocket", "gift"), ("please wrap up", "moderator"), ("晚上好", "comment"),
        ])
    ]
    subject = f"troupe.{run}.danmaku.received"
    async with Stage(settings) as stage:
        await run_show(stage, short_show(), 4.0, run_id=run)
        engine = stage.engine
        before = stored(engine, run)
        assert run_info(engine, run).status == "ended"
        for event in late:
            # (on its kind's subject: a moderator line has one of its own)
            await stage.js.publish(subject_for(event), codec.encode(event), headers={"Nats-Msg-Id": event.id})
        await stage.js.publish(subject, b"{not json", headers={"Nats-Msg-Id": f"{run}-garbage"})
        wanted = {e.id for e in late} | {f"{run}-garbage"}

        async def all_answered() -> bool:
            return wanted <= set(await rejections(stage.js, run))

        await wait_for(all_answered, timeout_s=30, what="an answer to every late danmaku")
        # The director answered; the recorder has had the chance to store (or not) all of it.
        # (Only these two: other kinds' durable consumers may hold other tests' backlog.)
        assert await stage.drain(["director", "recorder"], timeout_s=60)
        answers = await rejections(stage.js, run)
    assert {answers[i].reason for i in wanted} == {"run_ended"}, answers
    assert all(answers[i].correlation == i for i in wanted)
    engine = Stage(settings).engine
    after = stored(engine, run)
    # Nothing of the late danmaku is stored: not them, not their answers, nothing they caused;
    # the one bad message leaves its one dead letter (errors are never dropped).
    # (The run's own actors may still publish their once-a-second observations while other
    # tests' backlog delays the show's drain: those come from within the run, caused by nothing.)
    new = {i: row for i, row in after.items() if i not in before and row[0] != "qos.observed"}
    # (one from each kind that reads the danmaku: the director and the memory worker)
    assert [row[0] for row in new.values()] == ["error.dead_lettered"] * 2, new
    assert not wanted & set(after)
    assert not [i for i, (_, cause, corr) in after.items() if cause in wanted or corr in wanted]
    letters = [e for e in _read(engine, list(new)) if isinstance(e, DeadLettered)]
    assert sorted(e.actor for e in letters) == ["director", "memory"]
    assert all(e.raw == b"{not json" for e in letters)
    assert run_info(engine, run).status == "ended"
    result = await asyncio.to_thread(verify, engine, run)
    assert result.divergence is None, format_verification(result)
    assert result.checked["director"] >= 2


def _read(engine: Any, ids: list[str]) -> list[Event]:
    with engine.connect() as conn:
        bodies = conn.execute(select(events.c.body).where(events.c.id.in_(ids))).scalars().all()
    return [codec.decode(b) for b in bodies]


async def troupe(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in a thread (it has its own event loop); returns (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_a_new_show_leaves_earlier_playbacks_and_ended_runs_alone(
    settings: Settings, capsys: pytest.CaptureFixture[str],
) -> None:
    old, new = f"old{uuid.uuid4().hex[:6]}", f"new{uuid.uuid4().hex[:6]}"
    whole, part = f"{old}-pb", f"{old}-pbcue"
    async with Stage(settings) as stage:
        await run_show(stage, short_show(), 3.0, run_id=old)
    env = ["--nats", str(settings.nats_url), "--state-dir", str(settings.state_dir)]
    # Two playbacks while no show runs: a whole one (it ends) and one of cues and visemes (it
    # never ends); their messages stay in the streams, unread by the show's sink and renderer.
    code, _, err = await troupe(capsys, *env, "replay", old, "--max", "--into", whole)
    assert code == 0, err
    code, _, err = await troupe(capsys, *env, "replay", old, "--max", "--types", "cue", "viseme", "--into", part)
    assert code == 0, err
    engine = Stage(settings).engine
    runs = (old, whole, part)
    before = {r: stored(engine, r) for r in runs}
    late = DanmakuReceived(id=f"{old}-late", run=old, user="fan", text="@rex hello again")
    async with Stage(settings) as stage:
        # A danmaku for the ended run, sent while no director runs: the new show's director finds it.
        await stage.js.publish(f"troupe.{old}.danmaku.received", codec.encode(late), headers={"Nats-Msg-Id": late.id})
        streams = {r: await stream_counts(stage.js, r) for r in runs}
        result = await run_show(stage, short_show(), 3.0, run_id=new)
        answer = (await rejections(stage.js, old)).get(late.id)
        assert answer is not None and answer.reason == "run_ended"
        # What the new show's sink held: no run but the new one (neither playback, nor the ended
        # run), its video finished.
        held = [{r: mux.finished is not None for r, mux in rt.kernel.states.items()} for rt in stage.runtimes
                if rt.actor.name == "sink"]
        for r in runs:  # nothing was published into the earlier runs but that answer
            now = await stream_counts(stage.js, r)
            assert now == {**streams[r], "danmaku": streams[r]["danmaku"] + (r == old)}, (r, streams[r], now)
    assert result.mp4 is not None and result.mp4.exists()
    videos = await asyncio.to_thread(lambda: sorted(p.name for p in Path(settings.out_dir).glob("*.mp4")))
    assert videos == sorted([f"{old}.mp4", f"{new}.mp4"])  # none for a playback
    assert held == [{new: True}]
    for r in runs:
        assert stored(engine, r) == before[r], r
