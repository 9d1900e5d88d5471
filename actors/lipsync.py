"""Lipsync actor: places speech on the show timeline and turns phonemes into visemes.

The stage has one floor: an utterance keeps it from its first audio chunk to its
last, and waiting utterances take it in the order their speech arrived, each one
natural pause (``reply_pause_ms``) after the speech before it.  Chunks
of one utterance are placed back to back, in (sentence, part) order, even when
they arrive out of order.  A reply that could not start before its deadline is
dropped whole, nothing is placed past the show's end, and an urgent reply (at the
interrupt priority) takes the floor now: every reply on the timeline beyond this
moment that is not urgent itself is cut where it is.

Lipsync owns the show timeline, so it tells the director where each reply's speech
went (``danmaku.placed``): when its first sentence is placed, and when nothing more
of it will be.  The director plans the floor from that, not from estimates.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.base import Actor, Context
from actors.faces import Change, FacePlanner
from actors.visemes import viseme_for
from events.audio import AudioChunk
from events.base import Event
from events.danmaku import SpeechPlaced
from events.run import RunStarted
from events.show import show_from_dict
from events.utterance import UtteranceDropped
from events.viseme import FaceChanged, VisemeCut, VisemeMark, VisemeTrack
from infra.settings import Settings

ANTICIPATION_MS = 20
# An interruption takes effect this long after it is decided: two frames, so that the cut reaches
# the renderer before it draws the first frame after it (a cut in the past could not be applied to
# frames already drawn, and re-execution, which applies every cut, would draw them differently).
CUT_LEAD_MS = 80


def visemes_of(chunk: AudioChunk, start_ms: int) -> tuple[VisemeMark, ...]:
    """The chunk's phonemes as visemes on the show timeline, gaps filled with sil."""
    marks: list[VisemeMark] = []
    cursor = start_ms
    end = start_ms + chunk.duration_ms
    for p in chunk.phonemes:
        lo, hi = start_ms + p.start_ms, min(end, start_ms + p.end_ms)
        if hi <= lo:
            continue
        if lo > cursor:
            marks.append(VisemeMark("sil", cursor, lo))
        shape = viseme_for(p.ipa)
        lo = max(lo, cursor)
        if marks and marks[-1].viseme == shape and marks[-1].end_ms == lo:
            marks[-1] = VisemeMark(shape, marks[-1].start_ms, hi)
        else:
            marks.append(VisemeMark(shape, lo, hi))
        cursor = hi
    if cursor < end:
        marks.append(VisemeMark("sil", cursor, end))
    if len(marks) > 1 and marks[0].viseme == "sil" and marks[0].end_ms - marks[0].start_ms < ANTICIPATION_MS:
        # Lips move a moment before the sound they make: a sliver of silence at the start
        # of speech is given to the first sound instead of keeping the mouth shut for a frame.
        marks[1] = VisemeMark(marks[1].viseme, marks[0].start_ms, marks[1].end_ms)
        del marks[0]
    return tuple(marks)


@dataclass(slots=True)
class _Utterance:
    id: str
    role: str = ""
    next_key: tuple[int, int] = (0, 0)
    pending: dict[tuple[int, int], AudioChunk] = field(default_factory=dict)
    cursor_ms: int | None = None
    tracks: int = 0
    done: bool = False
    dropped_from: int | None = None  # chunks from this seq on were dropped (deadline, interruption)
    priority: float = 1.0
    deadline_ms: int = 0                # its speech must start by then (0: no deadline)
    first_ms: int | None = None         # where its speech starts on the timeline
    starts: list[tuple[int, int]] = field(default_factory=list)  # (start ms, sentence) of its tracks
    told_start: bool = False            # the director was told where its speech starts


@dataclass(slots=True)
class _Stage:
    """A run's stage, the lipsync actor's state for the run (``open_run``)."""

    faces: FacePlanner
    ease_ms: int                        # the run's face_ease_ms
    pause_ms: int                       # the pause between two replies (the run's reply_pause_ms)
    urgent: float                       # the run's interrupt_priority: a reply this urgent takes the floor
    end_ms: int                         # the show's end (0: none)
    floor_end_ms: int = 0
    speaking: _Utterance | None = None
    waiting: deque[_Utterance] = field(default_factory=deque)
    known: dict[str, _Utterance] = field(default_factory=dict)
    on_air: list[_Utterance] = field(default_factory=list)  # placed speech that may not be over yet
    pause_next: bool = True             # False: the floor was cut free, the next reply starts at once
    untold: dict[str, _Utterance] = field(default_factory=dict)  # not told done to the director yet


class LipsyncActor(Actor):
    """Audio chunks in, viseme tracks on the show timeline out."""

    name = "lipsync"
    consumes = (AudioChunk, UtteranceDropped)
    emits = (VisemeTrack, VisemeCut, FaceChanged, UtteranceDropped, SpeechPlaced)
    takes_over = True

    def __init__(self, lead_ms: int = 0) -> None:
        self.lead_ms = lead_ms

    def open_run(self, run: RunStarted, settings: Settings) -> _Stage:
        roles = [(r.id, r.name) for r in show_from_dict(run.show).roles]
        return _Stage(FacePlanner(roles, settings.face_hold_ms, settings.face_linger_ms), settings.face_ease_ms,
                      settings.reply_pause_ms, settings.interrupt_priority, run.duration_ms)

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        stage: _Stage | None = ctx.state
        if stage is None or not isinstance(event, AudioChunk | UtteranceDropped):
            return ()  # not a run this process holds (an input after its end): no stage to place on
        out = self._dropped(event, stage, ctx) if isinstance(event, UtteranceDropped) else self._chunk(event, stage, ctx)
        return out + self._tell(stage, event, ctx.now_ms)

    @staticmethod
    def _tell(stage: _Stage, cause: Event, now_ms: int) -> list[Event]:
        """Where the replies this input moved were placed: once their first sentence is, and once
        nothing more of them will be (the director plans the floor from it)."""
        out: list[Event] = []
        for utt in list(stage.untold.values()):
            started = utt.first_ms is not None and not utt.told_start
            if not (started or utt.done):
                continue
            utt.told_start = utt.first_ms is not None
            if utt.done:
                del stage.untold[utt.id]
            out.append(SpeechPlaced(
                id=cause.derive(f"placed:{utt.id}"), run=cause.run, role=utt.role or None, causation=cause.id,
                correlation=cause.correlation, t_ms=now_ms, utterance=utt.id,
                start_ms=-1 if utt.first_ms is None else utt.first_ms, end_ms=utt.cursor_ms or 0, done=utt.done,
                floor_ms=stage.floor_end_ms,
            ))
        return out

    def _chunk(self, event: AudioChunk, stage: _Stage, ctx: Context) -> list[Event]:
        utt = stage.known.get(event.utterance)
        out: list[Event] = []
        if utt is None:
            utt = stage.known[event.utterance] = _Utterance(
                event.utterance, role=event.role or "", priority=event.priority, deadline_ms=event.deadline_ms,
            )
            stage.untold[utt.id] = utt
            stage.waiting.append(utt)
            out += self._interrupt(stage, utt, event, ctx)
        key = (event.seq, event.part)
        if key < utt.next_key or key in utt.pending or utt.done:
            return out  # a redelivered chunk that was already placed, or one of a finished reply
        if utt.dropped_from is not None and event.seq >= utt.dropped_from:
            return out  # spoken after its reply was cut
        utt.pending[key] = event
        return out + self._advance(stage, ctx)

    @staticmethod
    def _interrupt(stage: _Stage, utt: _Utterance, chunk: AudioChunk, ctx: Context) -> list[Event]:
        """A reply urgent enough takes the floor now: every reply on the timeline beyond this
        moment that is not urgent itself is cut where it is (one not yet begun, whole)."""
        threshold = stage.urgent
        if utt.priority < threshold:
            return []
        now = ctx.now_ms + CUT_LEAD_MS
        stage.on_air = [u for u in stage.on_air if u.cursor_ms is not None and u.cursor_ms > now]
        victims = [u for u in stage.on_air if u.priority < threshold]
        if stage.speaking is not None and stage.speaking.priority < threshold and stage.speaking not in victims:
            victims.append(stage.speaking)
        out: list[Event] = []
        common: dict[str, Any] = {"run": chunk.run, "causation": chunk.id, "correlation": chunk.correlation,
                                  "t_ms": ctx.now_ms}
        for cut in victims:
            at = max(now, cut.first_ms if cut.first_ms is not None else now)
            unheard = [seq for start, seq in cut.starts if start >= at]
            cut.dropped_from = min(unheard) if unheard else cut.next_key[0] + (0 if cut.next_key[1] == 0 else 1)
            cut.done = True
            cut.pending.clear()
            out += [
                UtteranceDropped(
                    id=chunk.derive(f"cut:{cut.id}"), role=None, utterance=cut.id, from_seq=cut.dropped_from,
                    reason=f"interrupted by {utt.id} (priority {utt.priority:g} >= {threshold:g})", **common,
                ),
                VisemeCut(id=chunk.derive(f"cutat:{cut.id}"), role=None, utterance=cut.id, at_ms=at, by=utt.id, **common),
            ]
            if cut.first_ms is not None:
                out += _face_events(stage.faces.cut(cut.role, at), stage, chunk, f"cutface:{cut.id}", ctx.now_ms, cut.id)
        if stage.speaking is not None and stage.speaking.priority < threshold:
            stage.speaking = None
        stage.on_air = [u for u in stage.on_air if u.priority >= threshold]
        stage.floor_end_ms = max([now, *(u.cursor_ms or now for u in stage.on_air)])
        stage.pause_next = stage.floor_end_ms > now  # after an urgent reply still on air, its pause
        stage.waiting.remove(utt)
        stage.waiting.appendleft(utt)
        return out

    def _dropped(self, event: UtteranceDropped, stage: _Stage, ctx: Context) -> list[Event]:
        """The rest of a reply will not come: it gives up the floor once its earlier chunks are placed."""
        utt = stage.known.get(event.utterance)
        if utt is None:
            utt = stage.known[event.utterance] = _Utterance(event.utterance, role=event.role or "")
            utt.done = True  # nothing of it was ever spoken: ignore stray chunks
            utt.dropped_from = event.from_seq
            stage.untold[utt.id] = utt  # the director is told: none of it will be placed
            return []
        if (event.from_seq == 0 and utt.dropped_from is None and utt.first_ms is not None
                and utt.first_ms > ctx.now_ms + CUT_LEAD_MS):  # placed on deck, not begun: taken off whole
            return self._unplace(stage, utt, event, ctx)
        if utt.dropped_from is None or event.from_seq < utt.dropped_from:
            utt.dropped_from = event.from_seq
        for key in [k for k in utt.pending if k[0] >= event.from_seq]:
            del utt.pending[key]
        out: list[Event] = []
        if (utt.cursor_ms is not None and not utt.done
                and utt.dropped_from <= utt.next_key[0]):  # it spoke, and nothing more of it will come
            out += _face_events(stage.faces.finished(utt.role, utt.cursor_ms), stage, event, "face", ctx.now_ms, utt.id)
        return out + self._advance(stage, ctx)

    def _unplace(self, stage: _Stage, utt: _Utterance, event: UtteranceDropped, ctx: Context) -> list[Event]:
        """A reply dropped while it waits on deck, placed but not begun: it is cut where it starts
        (nothing of it is heard or drawn), and the floor frees where the speech before it ends."""
        assert utt.first_ms is not None
        at = utt.first_ms
        utt.done, utt.dropped_from = True, 0
        utt.pending.clear()
        utt.first_ms = utt.cursor_ms = None  # none of it is spoken: the director is told so
        stage.untold[utt.id] = utt
        if stage.speaking is utt:
            stage.speaking = None
        stage.on_air = [u for u in stage.on_air if u is not utt]
        stage.floor_end_ms = max([0, *((u.cursor_ms or 0) for u in stage.on_air if (u.first_ms or 0) < at)])
        out: list[Event] = [VisemeCut(
            id=event.derive(f"cutat:{utt.id}"), run=event.run, role=None, causation=event.id,
            correlation=event.correlation, t_ms=ctx.now_ms, utterance=utt.id, at_ms=at, by="",
        )]
        out += _face_events(stage.faces.cut(utt.role, at), stage, event, f"cutface:{utt.id}", ctx.now_ms, utt.id)
        return out + self._advance(stage, ctx)

    def _advance(self, stage: _Stage, ctx: Context) -> list[Event]:
        now_ms = ctx.now_ms
        end_ms = stage.end_ms
        out: list[Event] = []
        while True:
            speaking = stage.speaking
            if speaking is not None and speaking.dropped_from is not None and speaking.next_key[0] >= speaking.dropped_from:
                speaking.done = True
                stage.speaking = None
            for waiting in [u for u in stage.waiting if u.dropped_from is not None and u.next_key[0] >= u.dropped_from]:
                waiting.done = True
                stage.waiting.remove(waiting)
            if stage.speaking is None:
                ready = next((u for u in stage.waiting if u.next_key in u.pending), None)
                if ready is None:
                    return out
                stage.waiting.remove(ready)
                pause = stage.pause_ms if stage.pause_next and stage.floor_end_ms else 0
                start = max(now_ms + self.lead_ms, stage.floor_end_ms + pause)
                if ready.deadline_ms and start > ready.deadline_ms and ready.next_key == (0, 0):
                    out.append(self._drop(ready, ready.pending[ready.next_key], now_ms, f"could not start before its deadline: the floor "
                                          f"was free at {start} ms, {start - ready.deadline_ms} ms late"))
                    continue
                stage.speaking = ready
                ready.cursor_ms = start
            utt = stage.speaking
            chunk = utt.pending.pop(utt.next_key, None)
            if chunk is None:
                return out
            assert utt.cursor_ms is not None
            if end_ms and max(utt.cursor_ms, now_ms + self.lead_ms) + chunk.duration_ms > end_ms:
                stage.speaking = None
                out.append(self._drop(utt, chunk, now_ms, f"the show ends at {end_ms} ms", chunk.seq))
                continue
            track = self._place(utt, chunk, now_ms, stage)
            out.append(track)
            changes = stage.faces.spoken(track.role or "", track.start_ms, track.end_ms, chunk.text, chunk.emotion,
                                         first=utt.tracks == 1, sentence=chunk.part == 0, last=chunk.last)
            out += _face_events(changes, stage, chunk, "face", now_ms, utt.id)
            stage.faces.forget_before(now_ms - 60_000)  # bounded over hours: only what is still in force
            utt.next_key = (chunk.seq + 1, 0) if chunk.part_last else (chunk.seq, chunk.part + 1)
            if chunk.last:
                utt.done = True
                stage.speaking = None

    @staticmethod
    def _drop(utt: _Utterance, chunk: AudioChunk, now_ms: int, reason: str, from_seq: int = 0) -> UtteranceDropped:
        """Give up the rest of a reply (from sentence ``from_seq``) that cannot be spoken in time."""
        utt.done, utt.dropped_from = True, from_seq
        utt.pending.clear()
        return UtteranceDropped(
            id=chunk.derive("unspoken"), run=chunk.run, role=chunk.role, causation=chunk.id,
            correlation=chunk.correlation, t_ms=now_ms, utterance=utt.id, reason=reason, from_seq=from_seq,
        )

    def _place(self, utt: _Utterance, chunk: AudioChunk, now_ms: int, stage: _Stage) -> VisemeTrack:
        assert utt.cursor_ms is not None
        start = max(utt.cursor_ms, now_ms + self.lead_ms)
        end = start + chunk.duration_ms
        utt.cursor_ms = end
        if utt.first_ms is None:
            utt.first_ms = start
            stage.on_air.append(utt)
        utt.starts.append((start, chunk.seq))
        stage.floor_end_ms = max(stage.floor_end_ms, end)
        stage.pause_next = True
        utt.tracks += 1
        return VisemeTrack(
            id=chunk.derive("visemes"), run=chunk.run, role=chunk.role, causation=chunk.id,
            correlation=chunk.correlation, t_ms=now_ms, utterance=chunk.utterance,
            audio=chunk.id, seq=utt.tracks - 1, start_ms=start, end_ms=end, text=chunk.text,
            visemes=visemes_of(chunk, start), last=chunk.last, chunk=chunk.seq, chunk_done=chunk.part_last,
        )


def _face_events(changes: list[Change], stage: _Stage, cause: Event, tag: str, now_ms: int,
                 utterance: str) -> list[Event]:
    """The planner's decisions as ``viseme.face`` events, caused by the audio that made them."""
    return [FaceChanged(
        id=cause.derive(f"{tag}{k}"), run=cause.run, role=c.role, causation=cause.id, correlation=cause.correlation,
        t_ms=now_ms, start_ms=c.start_ms, expression=c.expression, look=c.look, gesture=c.gesture,
        ease_ms=stage.ease_ms if c.expression or c.look else 0, reason=c.reason, utterance=utterance,
    ) for k, c in enumerate(changes)]
