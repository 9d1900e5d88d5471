"""The preview actor's boards (what the page shows) and the frame number the video carries."""

from __future__ import annotations

from typing import Any

import av
import numpy as np
import pytest

from actors.kernel import ListFeed
from actors.preview import Boards, PreviewActor
from actors.sink import SAMPLE_RATE
from events.audio import AudioChunk
from events.cue import CueIssued, CueMerged
from events.danmaku import DanmakuReceived, DanmakuRejected, DanmakuWaiting
from events.frame import FrameRendered, SpeakingMark
from events.output import OutputDropped
from events.qos import ResolutionChanged
from events.role import RoleDeclared, RoleWeightsChanged
from events.run import RunEnded
from events.utterance import UtteranceChunk, UtteranceCompleted
from events.viseme import VisemeCut, VisemeTrack
from tests.showkit import demo_run


@pytest.fixture
def watched() -> tuple[ListFeed, list[tuple[str, dict[str, Any]]]]:
    actor = PreviewActor()
    told: list[tuple[str, dict[str, Any]]] = []
    actor.listeners.append(lambda run, message: told.append((run, message)))
    run = demo_run()
    feed = ListFeed(actor, run)
    feed.handle(run, at_ms=0)
    for spec in run.show["roles"][:2]:
        feed.handle(RoleDeclared(id=f"r1-role-{spec['id']}", run="r1", role=spec["id"], name=spec["name"],
                                 persona="", language="en"))
    return feed, told


def _frame(n: int, marks: tuple[SpeakingMark, ...] = (), at_ms: int = 0) -> FrameRendered:
    return FrameRendered(id=f"r1-f{n}", run="r1", n=n, t_ms=n * 40, at_ms=at_ms, width=640, height=360,
                         resolution="360p", speaking=marks, jpeg=b"\xff\xd8")


def test_a_danmaku_shows_with_its_cue_reply_and_latency(watched) -> None:  # type: ignore[no-untyped-def]
    feed, told = watched
    t = 1000
    # The cue can come before the danmaku itself (they are different streams).
    feed.handle(CueIssued(id="d1-cue", run="r1", role="rex", correlation="d1", seq=1, user="ann", text="hi",
                          danmaku=("d1", "d2"), routed_by="mention"), at_ms=t)
    feed.handle(DanmakuReceived(id="d1", run="r1", text="hi @rex", user="ann", at_ms=5000, platform="twitch",
                                viewer="twitch:1337"), at_ms=t)
    feed.handle(CueMerged(id="d2-merged", run="r1", correlation="d2", cue="d1-cue", user="bo", text="hi"), at_ms=t)
    feed.handle(UtteranceChunk(id="u1-0", run="r1", role="rex", correlation="d1", utterance="u1", seq=0,
                               text="Hello Ann.", language="en"), at_ms=t)
    feed.handle(UtteranceChunk(id="u1-1", run="r1", role="rex", correlation="d1", utterance="u1", seq=1,
                               text="Welcome.", language="en", last=True), at_ms=t)
    feed.handle(_frame(30, (SpeakingMark("rex", "d1", "sil"),), at_ms=5900), at_ms=t)
    feed.handle(_frame(31, (SpeakingMark("rex", "d1", "aa"),), at_ms=6200), at_ms=t)
    feed.handle(_frame(32, (SpeakingMark("rex", "d1", "E"),), at_ms=6240), at_ms=t)
    feed.handle(UtteranceCompleted(id="u1-done", run="r1", role="rex", correlation="d1", utterance="u1",
                                   text="Hello Ann. Welcome.", chunks=2, backend="scripted"), at_ms=t)
    board = feed.state()
    assert board is not None
    item = board.feed["d1"]
    assert (item["user"], item["outcome"], item["role"], item["reply"], item["reply_state"]) == (
        "ann", "cue", "rex", "Hello Ann. Welcome.", "done")
    assert (item["latency_ms"], item["frame"]) == (1200, 31)  # the first frame with a non-silent viseme
    assert (item["platform"], item["viewer"]) == ("twitch", "twitch:1337")  # the page shows where it came from
    assert board.feed["d2"]["outcome"] == "merged" and board.feed["d2"]["into"] == "d1"
    assert [s["latency_ms"] for s in board.latencies] == [1200]
    speaking = [m for _, m in told if m["type"] == "speaking"]
    assert speaking == [{"type": "speaking", "id": "d1", "role": "rex", "n": 31, "t_ms": 1240, "latency_ms": 1200}]
    assert [m["floor"] for _, m in told if m["type"] == "floor"] == [["rex"]]
    state = board.state()
    assert [i["id"] for i in state["feed"]] == ["d1", "d2"] and state["floor"] == ["rex"]
    boards = Boards(feed.kernel.states)  # what the page reads: the board the kernel holds
    assert boards.get("r1") is board and [r["run"] for r in boards.runs()] == ["r1"]


def test_rejections_weights_resolution_outputs_and_the_end_are_told(watched) -> None:  # type: ignore[no-untyped-def]
    feed, told = watched
    t = 2000
    feed.handle(DanmakuRejected(id="d9-rejected", run="r1", correlation="d9", reason="blocked",
                                detail="a blocked word", text="badword"), at_ms=t)
    first = feed.state().roles
    role = next(iter(first))
    feed.handle(RoleWeightsChanged(id="w1", run="r1", weights={role: 1.5}, reason="waits"), at_ms=t)
    feed.handle(ResolutionChanged(id="q1", run="r1", before="720p", after="480p", reason="late frames"), at_ms=t)
    feed.handle(OutputDropped(id="o1", run="r1", output="rtmp", target="rtmp://h/live/***", reason="refused",
                              retry_in_ms=500), at_ms=t)
    feed.handle(RunEnded(id="r1-end", run="r1", reason="duration reached", duration_ms=2000), at_ms=t)
    board = feed.state()
    assert board is not None
    assert board.feed["d9"]["outcome"] == "rejected" and board.feed["d9"]["reason"] == "blocked"
    assert board.roles[role]["factor"] == 1.5 and board.resolution == "480p" and board.ended
    assert list(board.outputs.values())[0]["state"] == "dropped"
    kinds = [m["type"] for _, m in told]
    assert {"item", "roles", "resolution", "outputs", "run"} <= set(kinds)
    feed.release()
    assert feed.state() is None and not feed.kernel.holds("r1")
    assert Boards(feed.kernel.states).get("r1") is None and Boards(feed.kernel.states).runs() == []


def test_speech_is_laid_on_the_show_timeline_and_cut(watched) -> None:  # type: ignore[no-untyped-def]
    feed, _ = watched
    t = 1000
    pcm = (np.ones(SAMPLE_RATE, np.int16) * 1000).tobytes()  # 1 s of speech
    track = VisemeTrack(id="t1", run="r1", utterance="u1", audio="a1", seq=0, start_ms=2000, end_ms=3000,
                        text="hi", visemes=())
    feed.handle(track, at_ms=t)  # placed before its audio came
    feed.handle(AudioChunk(id="a1", run="r1", utterance="u1", seq=0, sample_rate=SAMPLE_RATE, offset_ms=0,
                           duration_ms=1000, text="hi", phonemes=(), pcm=pcm), at_ms=t)
    board = feed.state()
    assert board is not None
    at = 2 * SAMPLE_RATE
    assert not board.audio(at - 100, 100).any()
    assert (board.audio(at, 100) == 1000).all()
    feed.handle(VisemeCut(id="c1", run="r1", utterance="u1", at_ms=2500), at_ms=t)
    assert (board.audio(at + SAMPLE_RATE // 2 - 10, 10) == 1000).all()
    assert not board.audio(at + SAMPLE_RATE // 2, 100).any()


def test_runs_that_started_before_the_preview_are_left_alone() -> None:
    actor = PreviewActor()
    told: list[tuple[str, dict[str, Any]]] = []
    actor.listeners.append(lambda run, message: told.append((run, message)))
    feed = ListFeed(actor, demo_run("r9"))  # the run is known, its start was not given to the preview
    assert feed.handle(DanmakuReceived(id="x", run="r9", text="hi")) == []
    boards = Boards(feed.kernel.states)
    assert boards.get("r9") is None and boards.runs() == [] and told == []


def test_the_frame_number_survives_vp8_both_ways() -> None:
    pytest.importorskip("aiortc")  # the preview extra
    from app.webrtc import MARK

    encoder = av.CodecContext.create("libvpx", "w")
    encoder.width, encoder.height, encoder.pix_fmt = 640, 360, "yuv420p"
    encoder.bit_rate = 300_000
    decoder = av.CodecContext.create("libvpx", "r")
    rng = np.random.default_rng(1)
    got = []
    numbers = [0, 1, 4660, 65535, 12345]
    for i, n in enumerate(numbers):
        yuv = rng.integers(0, 255, (540, 640), dtype=np.uint8)  # noise: the hardest background
        MARK.draw(yuv, n)
        frame = av.VideoFrame.from_ndarray(yuv, format="yuv420p")
        frame.pts = i
        for packet in encoder.encode(frame):
            for out in decoder.decode(packet):
                got.append(MARK.read(out.to_ndarray()[:360]))
    for packet in encoder.encode(None):
        for out in decoder.decode(packet):
            got.append(MARK.read(out.to_ndarray()[:360]))
    assert got == numbers


def test_an_answer_whose_frame_came_before_its_danmaku_still_gets_its_latency(watched) -> None:  # type: ignore[no-untyped-def]
    feed, told = watched
    t = 1000
    feed.handle(CueIssued(id="d5-cue", run="r1", role="rex", correlation="d5", seq=1, user="ann", text="hi",
                          danmaku=("d5",), routed_by="mention"), at_ms=t)
    feed.handle(_frame(40, (SpeakingMark("rex", "d5", "aa"),), at_ms=9000), at_ms=t)  # the frames' stream ran ahead
    feed.handle(DanmakuReceived(id="d5", run="r1", text="hi @rex", user="ann", at_ms=8200), at_ms=t)
    board = feed.state()
    assert board is not None
    assert (board.feed["d5"]["latency_ms"], board.feed["d5"]["frame"]) == (800, 40)
    assert [s["latency_ms"] for s in board.latencies] == [800]
    assert [m["latency_ms"] for _, m in told if m["type"] == "speaking"] == [None, 800]


def test_a_comment_shows_waiting_until_its_outcome_comes(watched) -> None:  # type: ignore[no-untyped-def]
    feed, told = watched
    feed.handle(DanmakuReceived(id="d5", run="r1", text="@rex what is a gpu?", user="ann"), at_ms=1000)
    feed.handle(DanmakuWaiting(id="d5-wait", run="r1", causation="d5", correlation="d5", heard_ms=1000,
                               cls="addressed", waits_for="rex", ahead=2, waiting=3), at_ms=1000)
    item = feed.state().feed["d5"]
    assert (item["outcome"], item["detail"]) == ("waiting", "2 ahead, for rex")
    assert told[-1][1]["item"]["outcome"] == "waiting"  # the page is told
    feed.handle(CueIssued(id="d5-cue", run="r1", role="rex", correlation="d5", seq=1, user="ann", text="hi",
                          danmaku=("d5",), routed_by="mention"), at_ms=4000)
    assert feed.state().feed["d5"]["outcome"] == "cue"
    # Its waiting note, delivered after its cue (another stream), does not take the cue back.
    feed.handle(DanmakuReceived(id="d6", run="r1", text="hi", user="bo"), at_ms=4100)
    feed.handle(CueIssued(id="d6-cue", run="r1", role="rex", correlation="d6", seq=2, user="bo", text="hi",
                          danmaku=("d6",), routed_by="free"), at_ms=4100)
    feed.handle(DanmakuWaiting(id="d6-wait", run="r1", causation="d6", correlation="d6", heard_ms=4100,
                               cls="comment"), at_ms=4100)
    assert feed.state().feed["d6"]["outcome"] == "cue"


def test_the_roles_show_from_the_runs_start_whatever_came_first() -> None:
    """A role's declaration travels on a stream of its own: taken in before the run's start (the
    preview does not hold the run yet), it is not lost; the page is told the roles with the run."""
    actor = PreviewActor()
    told: list[tuple[str, dict[str, Any]]] = []
    actor.listeners.append(lambda run, message: told.append((run, message)))
    run = demo_run()
    feed = ListFeed(actor, run)
    spec = run.show["roles"][0]
    feed.handle(RoleDeclared(id=f"r1-role-{spec['id']}", run="r1", role=spec["id"], name=spec["name"],
                             persona="", language="en"), at_ms=0)  # before the start: not held, let go
    feed.handle(RoleWeightsChanged(id="w0", run="r1", weights={spec["id"]: 1.5}, reason="waits"), at_ms=0)
    feed.handle(run, at_ms=0)
    board = feed.state()
    names = [r["name"] for r in run.show["roles"]]
    assert [r["name"] for r in board.roles.values()] == names
    roles = [m for _, m in told if m["type"] == "roles"]
    assert roles and [r["name"] for r in roles[-1]["roles"]] == names
    feed.handle(RoleWeightsChanged(id="w1", run="r1", weights={spec["id"]: 1.5}, reason="waits"), at_ms=10)
    feed.handle(RoleDeclared(id=f"r1-role-{spec['id']}", run="r1", role=spec["id"], name=spec["name"],
                             persona="", language="en"), at_ms=20)  # redelivered: the weight kept
    assert board.roles[spec["id"]]["factor"] == 1.5


def test_a_returning_viewer_is_marked_with_what_was_recalled_and_a_forgotten_one_is_cleared(watched) -> None:  # type: ignore[no-untyped-def]
    feed, _ = watched
    feed.handle(DanmakuReceived(id="d1", run="r1", text="any tips for the weather where I live?", user="ann",
                                viewer="twitch:1337", platform="twitch", at_ms=1000), at_ms=1000)
    feed.handle(CueIssued(id="d1-cue", run="r1", role="rex", correlation="d1", seq=1, user="ann", text="hi",
                          danmaku=("d1",), routed_by="mention", viewer="twitch:1337", recalled="d1-recalled",
                          returning=True, regular=True, facts=("home||Berlin", "pet|cat|Miso"), bears=1), at_ms=1000)
    board = feed.state()
    item = board.feed["d1"]
    assert (item["returning"], item["regular"], item["recalled"]) == (True, True, ["home: Berlin"])
    # Their !forget, answered word for word: the page drops what it showed of them.
    feed.handle(DanmakuReceived(id="d2", run="r1", text="!forget", user="ann", viewer="twitch:1337",
                                platform="twitch", at_ms=2000), at_ms=2000)
    feed.handle(CueIssued(id="d2-cue", run="r1", role="rex", correlation="d2", seq=2, user="ann", text="Done.",
                          danmaku=("d2",), routed_by="mention", verbatim=True), at_ms=2000)
    assert board.feed["d2"]["forgotten"] and (item["user"], item["text"], item["recalled"]) == ("", "", [])
