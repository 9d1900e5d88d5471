"""What the stage remembers of a viewer is read by the director as their comment comes, from the
viewers read model (a real SQLite store, projected), and recorded (``danmaku.recalled``) before
what it decides: no hop through another actor on the cue's way, and re-execution takes the
recorded recall instead of reading the read model, which has moved on since."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from actors.backends.protocols import Prompt
from actors.backends.text import remembered
from actors.director import Director
from actors.kernel import Kernel, ListFeed, take_over
from actors.memory import Looked, Reader
from app.reexec import format_verification, verify
from events import codec
from events.base import Event
from events.cue import CueIssued
from events.danmaku import DanmakuReceived, DanmakuWaiting
from events.run import RunStarted
from events.subjects import subject_for
from events.utterance import UtteranceChunk, UtteranceDropped
from events.viewer import ViewerNoted, ViewerRecalled
from infra.settings import Settings, load_settings
from store.database import open_engine
from store.recorder import EventWriter, Recorded
from store.viewers import Projector
from tests.showkit import demo_run

RUN = demo_run()  # run r1
EARLIER = demo_run("r0")


def _settings(**kw: object) -> Settings:
    return load_settings(environ={}, self_driven="off", **kw)  # type: ignore[arg-type]


def said(run: RunStarted, n: int, text: str, viewer: str, user: str = "alice", at: int = 0,
         kind: str = "comment") -> DanmakuReceived:
    return DanmakuReceived(id=f"{run.run}-d{n}", run=run.run, text=text, user=user, viewer=viewer,
                           platform=viewer.partition(":")[0], kind=kind, at_ms=run.started_at_ms + at, t_ms=at)


def _away() -> Engine:
    raise OSError("the store is away")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Engine]:
    """A store whose read model knows alice (twitch:1) and zoe (twitch:2) from an earlier show,
    each having said where they are from."""
    engine = open_engine(f"sqlite:///{tmp_path / 'store.db'}")
    rows: list[Event] = [EARLIER]
    for n, (viewer, user, home) in enumerate((("twitch:1", "alice", "Berlin"), ("twitch:2", "zoe", "Osaka"))):
        d = said(EARLIER, n, f"hi all, I'm from {home}!", viewer, user)
        rows += [d, ViewerNoted(id=d.derive("noted:home"), run=d.run, causation=d.id, correlation=d.id,
                                viewer=viewer, kind="home", value=home, said=d.text)]
    EventWriter(engine).append([Recorded(e, codec.encode(e), subject_for(e)) for e in rows])
    Projector(engine).catch_up()
    yield engine
    engine.dispose()


def test_a_returning_viewers_comment_is_taken_in_at_once_with_what_the_read_model_holds(store: Engine) -> None:
    feed = ListFeed(Director(_settings(), Reader(lambda: store)), RUN)
    feed.handle(RUN, at_ms=0)
    asks = said(RUN, 1, "how is the weather where I live?", "twitch:1")
    recall, *decided = feed.handle(asks, at_ms=40)  # read as it comes: recorded first, then the cue
    assert isinstance(recall, ViewerRecalled) and (recall.danmaku, recall.causation, recall.t_ms) == (asks.id, asks.id, 40)
    assert (recall.known, recall.shows, recall.bears, recall.reason) == (True, 1, ("home||Berlin",), "")
    [cue] = [e for e in decided if isinstance(e, CueIssued)]
    assert (cue.recalled, cue.returning, cue.regular, cue.bears, cue.heard_ms) == (recall.id, True, True, 1, 40)
    assert cue.facts[0] == "home||Berlin"
    # A viewer the read model does not know is recorded as such; an anonymous one is read for nothing.
    new = said(RUN, 2, "first time here, hello", "twitch:9", "neo", at=100)
    [fresh] = [e for e in feed.handle(new, at_ms=100) if isinstance(e, ViewerRecalled)]
    assert (fresh.known, fresh.shows, fresh.reason) == (False, 0, "")
    anonymous = said(RUN, 3, "hello from nobody", "", "anon", at=200)
    assert not [e for e in feed.handle(anonymous, at_ms=200) if isinstance(e, ViewerRecalled)]
    # Comments taken in while a reply holds the floor carry their recall to the cue made later.
    busy = said(RUN, 4, "is it sunny where I live right now?", "twitch:2", "zoe", at=300)
    out = feed.handle(busy, at_ms=300)
    assert [type(e) for e in out] == [ViewerRecalled, DanmakuWaiting]
    [later] = [e for e in feed.advance(60_000) if isinstance(e, CueIssued) and e.correlation == busy.id]
    assert (later.recalled, later.returning, later.bears, later.heard_ms) == (out[0].id, True, 1, 300)


def test_a_returning_viewer_is_greeted_back_when_a_line_of_the_show_s_own_gives_way(store: Engine) -> None:
    """The show carries itself: its own line waits on deck and gives way to the comment, cued at
    once, with what the stage remembers of its viewer (it was cued as a stranger's when the
    recall came over another actor a few ms later)."""
    feed = ListFeed(Director(load_settings(environ={}), Reader(lambda: store)), RUN)
    feed.handle(RUN, at_ms=0)
    feed.advance(19_000)
    out = feed.handle(said(RUN, 1, "how is the weather where I live", "twitch:2", "zoe", at=19_000), at_ms=19_000)
    assert any(isinstance(e, UtteranceDropped) and e.reason.startswith("yielded") for e in out)
    [cue] = [e for e in out if isinstance(e, CueIssued)]
    assert (cue.correlation, cue.returning, cue.bears) == ("r1-d1", True, 1)


def test_a_forget_is_recorded_without_a_read_and_a_store_that_does_not_answer_costs_the_limit_at_most(
        store: Engine) -> None:
    hung = threading.Event()

    def slow() -> Engine:  # a store that does not answer (until the test ends)
        hung.wait(30)
        return store

    reader = Reader(slow)
    try:
        feed = ListFeed(Director(_settings(recall_wait_ms=50), reader), RUN)
        feed.handle(RUN, at_ms=0)
        [recall] = [e for e in feed.handle(said(RUN, 1, "where am I from?", "twitch:1"), at_ms=10)
                    if isinstance(e, ViewerRecalled)]
        assert (recall.known, recall.reason) == (False, "the store did not answer within 50 ms")
        # While that read hangs, none is tried (each would cost the limit): answered at once.
        assert reader.look("twitch:1", 2000) == Looked(None, "the store has not answered an earlier read yet")
        [forget] = [e for e in feed.handle(said(RUN, 2, "!forget", "twitch:2", "zoe", at=20), at_ms=20)
                    if isinstance(e, ViewerRecalled)]
        assert (forget.forget, forget.known, forget.facts) == (True, False, ())
        hung.set()  # the store answers again: so are the reads
        deadline = time.monotonic() + 30
        while (looked := reader.look("twitch:1", 2000)).profile is None and time.monotonic() < deadline:
            time.sleep(0.01)  # (the hung read finishing on its thread)
        assert looked.profile is not None and looked.profile.name == "alice"
    finally:
        hung.set()
        reader.close()


def test_re_execution_takes_the_recorded_recall_and_reads_nothing(store: Engine, tmp_path: Path) -> None:
    """Re-execution reads no read model (it may have moved on since, or be gone): a director built
    with none at all, and one whose store is away, take the recorded recalls and re-execute the
    run with 0 divergences, the recalls compared too."""
    settings = _settings()
    feed = ListFeed(Director(settings, Reader(lambda: store)), RUN)
    out = feed.handle(RUN, at_ms=0)
    chat = [said(RUN, 1, "how is the weather where I live?", "twitch:1", at=50),
            said(RUN, 2, "is it sunny where I live right now?", "twitch:2", "zoe", at=400),
            said(RUN, 3, "hello, I'm new", "twitch:9", "neo", at=900),
            said(RUN, 4, "!forget", "twitch:2", "zoe", at=1500)]
    for d in chat:
        out += feed.advance(d.t_ms)
        out += feed.handle(d, at_ms=d.t_ms)
    out += feed.advance(60_000)
    recalls = [e for e in out if isinstance(e, ViewerRecalled)]
    assert [(r.known, r.forget) for r in recalls] == [(True, False), (True, False), (False, False), (False, True)]
    engine = open_engine(f"sqlite:///{tmp_path / 'run.db'}")
    rows = [Recorded(RUN, codec.encode(RUN), subject_for(RUN), 1)]
    rows += [Recorded(d, codec.encode(d), subject_for(d), n + 2) for n, d in enumerate(chat)]
    rows += [Recorded(e, codec.encode(e), subject_for(e)) for e in out if e.id != RUN.id]
    EventWriter(engine).append(rows)

    for build in (lambda _, s: Director(s), lambda _, s: Director(s, Reader(_away))):
        result = verify(engine, "r1", actors=("director",), settings=settings, build=build)
        assert result.divergence is None, format_verification(result)
        assert result.checked["director"] == len(out)  # every output, the recalls among them
    engine.dispose()


def test_a_standby_taking_the_director_over_takes_the_recorded_recalls(store: Engine) -> None:
    """The holder dies mid-show; the standby rebuilds the run from the store (``rebuild_run``:
    the kernel handed the director's recorded outputs, then its inputs again), its own store away:
    it takes the recorded recalls, emits nothing new, and decides on as the holder would have."""
    settings = _settings()
    live = ListFeed(Director(settings, Reader(lambda: store)), RUN)
    stored = live.handle(RUN, at_ms=0)
    chat = [said(RUN, 1, "how is the weather where I live?", "twitch:1", at=50),
            said(RUN, 2, "is it sunny where I live right now?", "twitch:2", "zoe", at=400)]  # waits for the floor
    feed: list[tuple[int, Event]] = [(0, RUN)]
    for d in chat:
        stored += live.advance(d.t_ms)
        stored += live.handle(d, at_ms=d.t_ms)
        feed.append((d.t_ms, d))
    after = live.advance(60_000)  # the holder would have cued zoe with her recall
    assert any(isinstance(e, CueIssued) and e.correlation == "r1-d2" and e.returning for e in after)
    kernel: Kernel[Event] = Kernel(Director(settings, Reader(_away)))
    kernel.record(RUN.run, stored)
    last_ms = max(e.t_ms for e in stored if type(e) in Director.clock_marks)
    emitted = take_over(kernel, RUN, feed, last_ms, None)
    assert {e.id for e in emitted} <= {e.id for e in stored}  # nothing new to publish
    recalls = [e for e in stored if isinstance(e, ViewerRecalled)]
    assert [e for e in emitted if isinstance(e, ViewerRecalled)] == recalls and recalls[0].known
    assert list(kernel.tick(RUN, 60_000)) == after


def test_a_model_reply_to_a_returning_viewer_opens_with_a_welcome_back(store: Engine) -> None:
    """A model writer (a 0.5B model greeted 1 returning viewer of 8 when told to): the director's
    opener, said at once while the model writes, welcomes them back, and the model is told so."""
    feed = ListFeed(Director(_settings(llm_backend="llama_cpp"), Reader(lambda: store)), RUN)
    feed.handle(RUN, at_ms=0)
    out = feed.handle(said(RUN, 1, "how is the weather where I live?", "twitch:1"), at_ms=40)
    [cue] = [e for e in out if isinstance(e, CueIssued)]
    [opener] = [e for e in out if isinstance(e, UtteranceChunk)]
    assert cue.returning and opener.text in ("Welcome back, alice!", "Good to see you again, alice!",
                                             "alice, you're back!") and cue.opener == opener.text
    prompt = Prompt(cue_id=cue.id, user="alice", text=cue.text, returning=True, facts=cue.facts, bears=1,
                    opener=opener.text)
    told = remembered(prompt, "alice")
    assert "you have welcomed them back" in told and "welcome them back by name first" not in told
    assert "is from Berlin" in told
    # A stranger's opener is the usual one.
    new = [e for e in feed.handle(said(RUN, 2, "hello, what game tonight?", "twitch:9", "neo", at=60_000), at_ms=60_000)
           if isinstance(e, UtteranceChunk)]
    assert new and "back" not in new[0].text
