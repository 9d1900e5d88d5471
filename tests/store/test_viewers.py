"""The viewers projection's contract, on SQLite and PostgreSQL alike: what it remembers, that a
rebuild gives the same rows, that a failure in the middle of a batch neither skips nor counts
twice, and that a row committed late below the position is not skipped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, insert

from events import codec
from events.cue import CueIssued
from events.danmaku import DanmakuReceived
from events.run import RunStarted
from events.viewer import ViewerNoted, remembered
from store.database import open_engine
from store.recorder import EventWriter
from store.schema import events
from store.viewers import Projector, _Changes, listing, profile, snapshot
from tests.store.test_contract import recorded

DAY = 86_400_000
T0 = 1_760_000_000_000


def started(run: str, replay_of: str | None = None, at_ms: int = T0) -> RunStarted:
    return RunStarted(id=f"{run}-start", run=run, at_ms=at_ms, show={"title": "t"}, seed=1, duration_ms=60_000,
                      replay_of=replay_of)


def said(run: str, n: int, text: str, viewer: str = "twitch:42", user: str = "alice", at_ms: int = T0,
         kind: str = "comment", value: float = 0.0) -> DanmakuReceived:
    return DanmakuReceived(id=f"{run}-d{n}", run=run, at_ms=at_ms + n, text=text, user=user, viewer=viewer,
                           platform=viewer.partition(":")[0], kind=kind, value=value)


def noted(d: DanmakuReceived, kind: str, value: str, detail: str = "") -> ViewerNoted:
    return ViewerNoted(id=d.derive(f"noted:{kind}"), run=d.run, causation=d.id, correlation=d.id, at_ms=d.at_ms,
                       viewer=d.viewer, kind=kind, value=value, detail=detail, said=d.text)


def cue(d: DanmakuReceived, role: str) -> CueIssued:
    return CueIssued(id=d.derive("cue"), run=d.run, role=role, causation=d.id, correlation=d.id, at_ms=d.at_ms,
                     seq=0, user=d.user, text=d.text, danmaku=(d.id,), routed_by="least_busy", viewer=d.viewer)


def two_shows() -> list:  # type: ignore[type-arg]
    """Alice says where she is from in show 1 and comes back in show 2; Bob is anonymous; a
    playback of show 1 and a moderator line are not remembered."""
    d1 = said("s1", 1, "hi all, I'm from Berlin!")
    d2 = said("s1", 2, "what do you think about rust?")
    d3 = said("s1", 3, "have some flowers", kind="gift", value=5.0)
    anon = said("s1", 4, "I'm from Paris", viewer="", user="bob")
    masked = said("s1", 5, "I'm from Rome", viewer="bili:0", user="张***")
    mod = said("s1", 6, "be nice", viewer="twitch:7", user="mod", kind="moderator")
    back = said("s2", 1, "hello again, still learning Rust", at_ms=T0 + 3 * DAY)
    replayed = said("s1r", 1, "I'm from Madrid")
    return [
        started("s1"), d1, noted(d1, "home", "Berlin"), cue(d1, "host"), d2, cue(d2, "guest"), d3, cue(d3, "host"),
        anon, masked, mod, started("s2", at_ms=T0 + 3 * DAY), back, noted(back, "learning", "Rust"), cue(back, "host"),
        started("s1r", replay_of="s1"), replayed, noted(replayed, "home", "Madrid"),
    ]


def write(engine: Engine, evs: list) -> None:  # type: ignore[type-arg]
    writer = EventWriter(engine)
    for start in range(0, len(evs), 4):  # several transactions, as a recorder writes them
        writer.append([recorded(e) for e in evs[start:start + 4]])


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    engine = open_engine(store_url)
    yield engine
    engine.dispose()


def test_identities_that_are_remembered() -> None:
    assert remembered("twitch:42") and remembered("bili:1001") and remembered("yt:UCabc")
    assert not any(remembered(v) for v in ("", "alice", "bili:0", "bili:000", "twitch:", ":42", "x:anonymous"))


def test_a_returning_viewer_is_remembered_across_shows(engine: Engine) -> None:
    write(engine, two_shows())
    progress = Projector(engine).catch_up(now_ms=T0 + 4 * DAY)
    assert progress.viewers == {"twitch:42"}
    alice = profile(engine, "twitch:42")
    assert alice is not None
    assert (alice.name, alice.shows, alice.comments, alice.gifts, alice.gift_value) == ("alice", 2, 3, 1, 5.0)
    assert alice.runs == ("s1", "s2") and alice.first_run == "s1" and alice.last_run == "s2"
    assert {(f["kind"], f["value"]) for f in alice.facts} == {("home", "Berlin"), ("learning", "Rust")}
    home = next(f for f in alice.facts if f["kind"] == "home")
    assert home["danmaku"] == "s1-d1" and home["said"] == "hi all, I'm from Berlin!" and home["run"] == "s1"
    assert [(t["topic"], t["danmaku"]) for t in alice.topics] == [("rust", "s2-d1"), ("rust", "s1-d2"), ("berlin", "s1-d1")]
    assert alice.roles == (("host", 3), ("guest", 1))
    assert profile(engine, "bili:0") is None and [v["id"] for v in listing(engine)] == ["twitch:42"]
    # Caught up: nothing more to read, and a second catch-up changes nothing.
    before = snapshot(engine)
    assert Projector(engine).catch_up().applied == 0 and snapshot(engine) == before
    assert Projector(engine).lag() == 0


def test_rebuild_gives_the_same_read_model(engine: Engine) -> None:
    write(engine, two_shows())
    projector = Projector(engine, batch=3)  # several batches
    projector.catch_up(now_ms=T0)
    once = snapshot(engine)
    assert projector.rebuild(now_ms=T0).viewers == {"twitch:42"}
    assert snapshot(engine) == once


def test_a_failure_in_the_middle_of_a_batch_neither_skips_nor_counts_twice(engine: Engine,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    write(engine, two_shows())
    Projector(engine).catch_up(now_ms=T0)
    clean = snapshot(engine)
    Projector(engine).rebuild(now_ms=T0)  # (the same rows, checked above)
    with engine.begin() as conn:  # start again from nothing
        for table in ("viewer_roles", "viewer_topics", "viewer_facts", "viewer_runs", "viewers", "projections"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    written = 0
    real = _Changes.write

    def dies_in_the_second(self):  # type: ignore[no-untyped-def]
        nonlocal written
        written += 1
        real(self)  # the batch's rows are written...
        if written == 2:
            raise RuntimeError("the process died here")  # ...and the process dies before its position

    monkeypatch.setattr(_Changes, "write", dies_in_the_second)
    with pytest.raises(RuntimeError):
        Projector(engine, batch=5).catch_up(now_ms=T0)  # the first batch (5) commits, the second dies
    monkeypatch.setattr(_Changes, "write", real)
    assert Projector(engine).position()[2] == 5
    Projector(engine, batch=5).catch_up(now_ms=T0)  # a restart goes on from the first batch's end
    assert snapshot(engine) == clean


def test_partitions_together_hold_what_one_projector_does(engine: Engine) -> None:
    evs = two_shows()
    evs += [e for n in range(20) for e in (said("s2", 100 + n, f"I'm from Town{n}", viewer=f"yt:v{n}", user=f"v{n}"),)]
    write(engine, evs)
    Projector(engine).catch_up(now_ms=T0)
    one = snapshot(engine)
    Projector(engine).rebuild(now_ms=T0)
    with engine.begin() as conn:
        for table in ("viewer_roles", "viewer_topics", "viewer_facts", "viewer_runs", "viewers"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    parts = [Projector(engine, k, 3) for k in range(3)]
    held = [p.catch_up(now_ms=T0).viewers for p in parts]
    assert all(held) and sum(len(h) for h in held) == 21 and set.union(*held) == {v["id"] for v in listing(engine)}
    assert snapshot(engine) == one


def test_retention_forgets_a_viewer_not_seen_for_that_long(engine: Engine) -> None:
    write(engine, two_shows() + [said("s2", 9, "hello", viewer="twitch:77", user="carol", at_ms=T0 + 9 * DAY)])
    progress = Projector(engine, retention_days=7).catch_up(now_ms=T0 + 12 * DAY)
    assert progress.expired == 1  # alice, last seen 9 days before; carol 3 days before stays
    assert profile(engine, "twitch:42") is None and profile(engine, "twitch:77") is not None


def test_a_row_committed_late_below_the_position_is_not_skipped(engine: Engine) -> None:
    """PostgreSQL hands out ``pos`` at insert: a transaction still open holds a lower pos than one
    already committed.  The projector reads only below every open transaction, so the late row is
    read when it commits.  (SQLite has one writer at a time: its pos order is its commit order.)"""
    write(engine, [started("s1")])
    late = said("s1", 1, "I'm from Lisbon", viewer="twitch:1", user="early")
    later = said("s1", 2, "I'm from Oslo", viewer="twitch:2", user="late")
    if engine.dialect.name == "sqlite":
        pytest.skip("SQLite commits one writer at a time, in pos order")
    row = EventWriter(engine).row
    open_tx = engine.connect()
    open_tx.begin()
    open_tx.execute(insert(events), [row(recorded(late)) | {"seq": 10}])  # pos n, not committed
    write(engine, [later])                                                # pos n+1, committed
    projector = Projector(engine)
    projector.catch_up(now_ms=T0)
    assert profile(engine, "twitch:1") is None
    open_tx.commit()
    open_tx.close()
    projector.catch_up(now_ms=T0)
    assert profile(engine, "twitch:1") is not None and profile(engine, "twitch:2") is not None
    assert codec.decode(codec.encode(late)) == late
