"""Preview actor: what a browser watching the show needs, kept per run as the events come.

The actor emits nothing.  Its state for each run (``open_run``, held by its kernel) is a
``Board``: the danmaku feed with each item's outcome (a cue and its role, merged into another,
skipped or rejected with the reason) and the reply it got as the words are written; the roles
with their QoS weights and who holds the floor; the resolution; the live outputs; the latency
of each answer (danmaku -> the first frame showing its speech, by the frame's and the danmaku's
JetStream times, as ``troupe inspect`` measures it); the latest frame; and the speech placed on
the show timeline, for the page's audio.  Listeners (the preview page's feed and media tracks, in the application layer) are
called on the event loop as things change; the actor does no I/O.  The page reads the boards
where the kernel holds them, through ``Boards`` (a run's board shows once the preview was given
the run's start: a run that started before the preview did is left alone).

It plays playbacks too, so that a run recorded in the store can be watched again.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from actors.backends.protocols import fact_parts
from actors.base import Actor, Context
from actors.sink import SAMPLE_RATE, as_rate
from events.audio import AudioChunk
from events.base import Event
from events.cue import CueIssued, CueMerged
from events.danmaku import DanmakuReceived, DanmakuRejected, DanmakuSkipped, DanmakuWaiting
from events.frame import FrameRendered
from events.output import OutputClosed, OutputConnected, OutputDropped
from events.qos import ResolutionChanged
from events.role import RoleDeclared, RoleWeightsChanged
from events.run import RunEnded, RunStarted
from events.show import show_from_dict
from events.utterance import UtteranceChunk, UtteranceCompleted, UtteranceDropped
from events.viseme import VisemeCut, VisemeTrack
from infra.settings import Settings
from schedulers.memory import asks_to_forget

log = logging.getLogger(__name__)
FEED_MAX = 200        # danmaku kept per run (oldest forgotten first)
LATENCIES_MAX = 120   # answers kept for the sparkline
AUDIO_KEEP_MS = 15_000  # speech kept behind the newest placement
UNPLACED_MAX = 128
Message = dict[str, Any]
Listener = Callable[[str, Message], None]         # (run, feed message)
FrameListener = Callable[[str, FrameRendered], None]


@dataclass(slots=True)
class _Speech:
    """A chunk of speech on the show timeline (samples at ``SAMPLE_RATE``)."""

    start: int
    pcm: np.ndarray
    utterance: str
    stop: int | None = None  # cut here (an interruption)


@dataclass(slots=True)
class Board:
    """One run as the preview page shows it."""

    run: RunStarted
    # The page was told of the run (once, however often its start is redelivered).
    shown: bool = False
    roles: dict[str, Message] = field(default_factory=dict)
    feed: OrderedDict[str, Message] = field(default_factory=OrderedDict)
    cues: OrderedDict[str, str] = field(default_factory=OrderedDict)  # cue id -> its danmaku (correlation)
    floor: tuple[str, ...] = ()
    resolution: str = ""
    width: int = 0
    height: int = 0
    latencies: deque[Message] = field(default_factory=lambda: deque(maxlen=LATENCIES_MAX))
    # Correlations whose speech a frame has shown: the speaking role and that frame (no JPEG).
    answered: OrderedDict[str, tuple[str, FrameRendered]] = field(default_factory=OrderedDict)
    outputs: dict[str, Message] = field(default_factory=dict)
    frame: FrameRendered | None = None
    frames: int = 0
    ended: bool = False
    pcm: OrderedDict[str, np.ndarray] = field(default_factory=OrderedDict)  # audio id -> samples, not placed yet
    speech: dict[str, _Speech] = field(default_factory=dict)                # audio id -> placed speech
    placements: dict[str, tuple[int, str]] = field(default_factory=dict)    # audio id -> (start, utterance)
    cuts: dict[str, int] = field(default_factory=dict)                      # utterance -> stop sample

    def summary(self) -> Message:
        run = self.run
        return {
            "run": run.run, "title": run.show.get("title", ""), "fps": run.fps,
            "started_at_ms": run.started_at_ms, "duration_ms": run.duration_ms,
            "replay_of": run.replay_of, "ended": self.ended, "resolution": self.resolution or run.resolution,
            "width": self.width, "height": self.height, "frames": self.frames,
        }

    def state(self) -> Message:
        """Everything the page shows, for a page that just connected."""
        return {
            "type": "state", "run": self.summary(), "roles": list(self.roles.values()),
            "floor": list(self.floor), "feed": list(self.feed.values()),
            "latencies": list(self.latencies), "outputs": list(self.outputs.values()),
        }

    def item(self, danmaku: str) -> Message:
        """The feed item of a danmaku (made when an outcome comes before the danmaku itself)."""
        item = self.feed.get(danmaku)
        if item is None:
            item = self.feed[danmaku] = {
                "id": danmaku, "user": "", "text": "", "to": None, "kind": "comment", "at_ms": None,
                "platform": "", "viewer": "",
                "t_ms": None, "outcome": None, "reason": None, "detail": None, "role": None,
                "into": None, "reply": "", "reply_state": None, "latency_ms": None, "frame": None,
                "returning": False, "regular": False, "recalled": [], "forgotten": False,
            }
            while len(self.feed) > FEED_MAX:
                self.feed.popitem(last=False)
        return item

    def audio(self, start: int, count: int) -> np.ndarray:
        """The speech from sample ``start`` (show time) for ``count`` samples, as int16."""
        out = np.zeros(count, dtype=np.int32)
        end = start + count
        for s in self.speech.values():
            stop = len(s.pcm) if s.stop is None else max(0, min(len(s.pcm), s.stop - s.start))
            lo, hi = max(start, s.start), min(end, s.start + stop)
            if lo < hi:
                out[lo - start:hi - start] += s.pcm[lo - s.start:hi - s.start]
        return np.clip(out, -32768, 32767).astype(np.int16)


class PreviewActor(Actor):
    """Every event a viewer sees in, per-run boards out (to listeners): the preview page's source."""

    name = "preview"
    consumes = (
        RunStarted, RunEnded, RoleDeclared, RoleWeightsChanged, DanmakuReceived, DanmakuRejected,
        DanmakuSkipped, DanmakuWaiting, CueIssued, CueMerged, UtteranceChunk, UtteranceCompleted, UtteranceDropped,
        AudioChunk, VisemeTrack, VisemeCut, FrameRendered, ResolutionChanged,
        OutputConnected, OutputDropped, OutputClosed,
    )
    emits = ()
    plays_replays = True  # a recorded run played back is watched like a live one
    observed = False      # a watcher: its lag is not the show's

    def __init__(self) -> None:
        self.listeners: list[Listener] = []
        self.frame_listeners: list[FrameListener] = []

    def open_run(self, run: RunStarted, settings: Settings) -> Board:
        """The run's board, with its show's roles: their declarations travel on a stream of their
        own and may be taken in before the run's start, when the preview does not hold the run."""
        board = Board(run, resolution=run.resolution)
        for spec in show_from_dict(run.show).roles:
            board.roles[spec.id] = _role_entry(RoleDeclared.of(run.run, spec))
        return board

    def _tell(self, run: str, message: Message) -> None:
        for listener in list(self.listeners):
            try:
                listener(run, message)
            except Exception:
                log.exception("a preview listener failed")

    def _tell_item(self, board: Board, item: Message) -> None:
        self._tell(board.run.run, {"type": "item", "item": item})

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        board: Board | None = ctx.state
        if board is None:  # a run the kernel does not hold (an input after its end)
            return ()
        if isinstance(event, RunStarted):
            if not board.shown:  # not a redelivery
                board.shown = True
                self._tell(event.run, {"type": "run", "run": board.summary()})
                self._tell(event.run, {"type": "roles", "roles": list(board.roles.values())})
            return ()
        method = _HANDLERS.get(type(event))
        if method is not None:
            getattr(self, method)(board, event)
        return ()

    # -- the feed ------------------------------------------------------------------------------

    def _danmaku(self, board: Board, e: DanmakuReceived) -> None:
        item = board.item(e.id)
        item.update(user=e.user, text=e.text, to=e.to, kind=e.kind, at_ms=e.at_ms, t_ms=e.t_ms,
                    platform=e.platform, viewer=e.viewer)
        first = board.answered.get(e.id)
        if first is not None and item["latency_ms"] is None:  # its reply's frame came first (streams differ)
            self._answer(board, item, *first)
        self._tell_item(board, item)

    def _answer(self, board: Board, item: Message, role: str, frame: FrameRendered) -> None:
        """An answer's latency: from the danmaku to the first frame showing its speech."""
        latency = frame.at_ms - item["at_ms"] if item["at_ms"] else None
        item.update(latency_ms=latency, frame=frame.n)
        sample = {"id": item["id"], "role": role, "n": frame.n, "t_ms": frame.t_ms, "latency_ms": latency}
        if latency is not None:
            board.latencies.append(sample)
        self._tell(board.run.run, {"type": "speaking", **sample})

    def _rejected(self, board: Board, e: DanmakuRejected | DanmakuSkipped) -> None:
        item = board.item(e.correlation or e.id)
        item.update(outcome="rejected" if isinstance(e, DanmakuRejected) else "skipped",
                    reason=e.reason, detail=e.detail)
        if not item["text"]:
            item.update(user=e.user, text=e.text)
        self._tell_item(board, item)

    def _waiting(self, board: Board, e: DanmakuWaiting) -> None:
        """A comment let wait for the floor: shown waiting (how many go before it, for whom) until its
        outcome comes (which may come first: the streams differ)."""
        item = board.item(e.correlation or e.causation or e.id)
        if item["outcome"] not in (None, "waiting"):
            return
        detail = f"{e.ahead} ahead" if e.ahead else "next"
        if e.waits_for:
            detail += f", for {e.waits_for}"
        item.update(outcome="waiting", detail=detail)
        if not item["text"]:
            item.update(user=e.user, text=e.text)
        self._tell_item(board, item)

    def _cue(self, board: Board, e: CueIssued) -> None:
        corr = e.correlation or e.id
        board.cues[e.id] = corr
        while len(board.cues) > FEED_MAX * 2:
            board.cues.popitem(last=False)
        item = board.item(corr)
        item.update(outcome="cue", role=e.role)
        if e.recalled:  # what the stage remembered of the viewer when it answered
            item.update(returning=e.returning, regular=e.regular,
                        recalled=[_fact_shown(f) for f in e.facts[:max(e.bears, 1)] if _fact_shown(f)])
        if e.verbatim and not e.viewer and item["viewer"] and asks_to_forget(item["text"]):
            # their !forget, answered: the page forgets what it showed of them too
            for other in board.feed.values():
                if other["viewer"] == item["viewer"] and other is not item:
                    other.update(user="", text="", reply="", recalled=[])
                    self._tell_item(board, other)
            item.update(forgotten=True)
        if e.self_driven and not item["text"]:  # no viewer asked: the feed says why the show speaks
            item.update(user=e.user or "the show", text=f"[{e.reason}] {e.segment}", reason=e.reason)
        self._tell_item(board, item)

    def _merged(self, board: Board, e: CueMerged) -> None:
        item = board.item(e.correlation or e.id)
        item.update(outcome="merged", into=board.cues.get(e.cue, e.cue))
        self._tell_item(board, item)

    def _reply(self, board: Board, e: UtteranceChunk | UtteranceCompleted | UtteranceDropped) -> None:
        if e.correlation is None:
            return
        item = board.item(e.correlation)
        if isinstance(e, UtteranceChunk):
            joiner = "" if e.language == "zh" or not item["reply"] else " "
            item.update(reply=item["reply"] + joiner + e.text, reply_state="writing", role=item["role"] or e.role)
        elif isinstance(e, UtteranceCompleted):
            item.update(reply=e.text or item["reply"], reply_state="done")
        else:
            item.update(reply_state="dropped", detail=e.reason)
        self._tell_item(board, item)

    # -- roles, QoS, outputs -------------------------------------------------------------------

    def _role(self, board: Board, e: RoleDeclared) -> None:
        factor = board.roles.get(e.role or "", {}).get("factor", 1.0)  # QoS's reweighting kept
        board.roles[e.role or ""] = {**_role_entry(e), "factor": factor}
        self._tell(board.run.run, {"type": "roles", "roles": list(board.roles.values())})

    def _weights(self, board: Board, e: RoleWeightsChanged) -> None:
        for role, factor in e.weights.items():
            if role in board.roles:
                board.roles[role]["factor"] = factor
        self._tell(board.run.run, {"type": "roles", "roles": list(board.roles.values()), "reason": e.reason})

    def _resolution(self, board: Board, e: ResolutionChanged) -> None:
        board.resolution = e.after
        self._tell(board.run.run, {"type": "resolution", "before": e.before, "after": e.after,
                                   "reason": e.reason, "t_ms": e.t_ms})

    def _output(self, board: Board, e: OutputConnected | OutputDropped | OutputClosed) -> None:
        out = board.outputs.setdefault(e.output + e.target, {"output": e.output, "target": e.target})
        if isinstance(e, OutputConnected):
            out.update(state="connected", attempt=e.attempt)
        elif isinstance(e, OutputDropped):
            out.update(state="dropped", reason=e.reason, retry_in_ms=e.retry_in_ms,
                       drops=out.get("drops", 0) + 1)
        else:
            out.update(state="closed", packets_sent=e.packets_sent, packets_lost=e.packets_lost,
                       reconnects=e.reconnects)
        self._tell(board.run.run, {"type": "outputs", "outputs": list(board.outputs.values())})

    def _ended(self, board: Board, e: RunEnded) -> None:
        board.ended = True
        self._tell(board.run.run, {"type": "run", "run": board.summary(), "reason": e.reason})

    # -- pictures and speech -------------------------------------------------------------------

    def _frame(self, board: Board, e: FrameRendered) -> None:
        if board.frame is None or e.n > board.frame.n:
            board.frame = e
        board.frames += 1
        board.width, board.height, board.resolution = e.width, e.height, e.resolution
        floor = tuple(sorted({m.role for m in e.speaking}))
        if floor != board.floor:
            board.floor = floor
            self._tell(board.run.run, {"type": "floor", "floor": list(floor), "n": e.n})
        for mark in e.speaking:
            corr = mark.correlation
            if mark.viseme == "sil" or not corr or corr in board.answered:
                continue
            board.answered[corr] = (mark.role, dataclasses.replace(e, jpeg=b""))
            while len(board.answered) > FEED_MAX * 2:
                board.answered.popitem(last=False)
            item = board.item(corr)
            self._answer(board, item, mark.role, e)
            self._tell_item(board, item)
        for listener in list(self.frame_listeners):
            listener(board.run.run, e)

    def _chunk(self, board: Board, e: AudioChunk) -> None:
        pcm = as_rate(e.pcm, e.sample_rate)
        placed = board.placements.get(e.id)
        if placed is not None:
            self._lay(board, e.id, placed[0], placed[1], pcm)
            return
        board.pcm[e.id] = pcm
        while len(board.pcm) > UNPLACED_MAX:
            board.pcm.popitem(last=False)

    def _track(self, board: Board, e: VisemeTrack) -> None:
        start = e.start_ms * SAMPLE_RATE // 1000
        if e.audio in board.placements:  # a redelivery
            return
        board.placements[e.audio] = (start, e.utterance)
        pcm = board.pcm.pop(e.audio, None)
        if pcm is not None:
            self._lay(board, e.audio, start, e.utterance, pcm)
        self._forget_speech(board, start)

    def _lay(self, board: Board, audio: str, start: int, utterance: str, pcm: np.ndarray) -> None:
        board.speech[audio] = _Speech(start, pcm, utterance, board.cuts.get(utterance))

    def _cut(self, board: Board, e: VisemeCut) -> None:
        stop = e.at_ms * SAMPLE_RATE // 1000
        board.cuts[e.utterance] = stop
        for s in board.speech.values():
            if s.utterance == e.utterance:
                s.stop = stop

    @staticmethod
    def _forget_speech(board: Board, newest: int) -> None:
        """Drop speech that ended long before the newest placement (the page is live)."""
        horizon = newest - AUDIO_KEEP_MS * SAMPLE_RATE // 1000
        for audio in [a for a, s in board.speech.items() if s.start + len(s.pcm) < horizon]:
            del board.speech[audio]
        for audio in [a for a, (start, _) in board.placements.items() if start < horizon and a not in board.speech]:
            del board.placements[audio]


class Boards:
    """The preview's boards as the web page reads them, where the preview's kernel holds them
    (``Kernel.states``: each held run's ``Board``), on the event loop the actor runs on."""

    def __init__(self, states: Mapping[str, Any]) -> None:
        self._states = states

    def get(self, run: str) -> Board | None:
        """The run's board, once the preview was given the run's start."""
        board = self._states.get(run)
        return board if isinstance(board, Board) and board.shown else None

    def runs(self) -> list[Message]:
        """The runs on the boards, the newest first."""
        boards = [b for b in list(self._states.values()) if isinstance(b, Board) and b.shown]
        return sorted((b.summary() for b in boards), key=lambda r: -r["started_at_ms"])


def _fact_shown(line: str) -> str:
    """A recalled fact ("home||Berlin", "pet|cat|Miso") as the feed shows it: "home: Berlin"."""
    kind, detail, value = fact_parts(line)
    return f"{detail or kind}: {value}" if value else ""


def _role_entry(e: RoleDeclared) -> Message:
    return {"id": e.role, "name": e.name, "color": e.color, "weight": e.weight, "factor": 1.0}


_HANDLERS: dict[type[Event], str] = {  # the method that takes each type in
    RunEnded: "_ended",
    RoleDeclared: "_role",
    RoleWeightsChanged: "_weights",
    DanmakuReceived: "_danmaku",
    DanmakuRejected: "_rejected",
    DanmakuSkipped: "_rejected",
    DanmakuWaiting: "_waiting",
    CueIssued: "_cue",
    CueMerged: "_merged",
    UtteranceChunk: "_reply",
    UtteranceCompleted: "_reply",
    UtteranceDropped: "_reply",
    ResolutionChanged: "_resolution",
    OutputConnected: "_output",
    OutputDropped: "_output",
    OutputClosed: "_output",
    FrameRendered: "_frame",
    AudioChunk: "_chunk",
    VisemeTrack: "_track",
    VisemeCut: "_cut",
}
