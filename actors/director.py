"""Director: validates danmaku, routes each to a role, merges near-duplicates into one cue,
and keeps the stage live: comments wait for the floor in ``schedulers.stage.StagePlan``,
which answers what matters within seconds and lets the rest go with a reason; when nobody
waits, the show takes the floor itself (``actors.floor.ShowFloor``: the rundown, the operator).

Its inputs are one ordered log: the danmaku stream carries the comments and the operator's
controls, so re-execution hands them over in the order the director took them."""

from __future__ import annotations

import dataclasses
import difflib
import re
import unicodedata
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.backends.llm_scripted import ScriptedLLM
from actors.backends.protocols import Persona, Prompt, Sentence
from actors.base import ClockedActor, Context
from actors.floor import ShowFloor, held_back
from actors.memory import Looked, Reader, forgotten, recalled
from events.base import Event, derive_id
from events.cue import (
    ControlApplied,
    CueIssued,
    CueMerged,
    FloorFollowed,
    SegmentStarted,
    StagePaced,
)
from events.danmaku import (
    DanmakuReceived,
    DanmakuRejected,
    DanmakuSkipped,
    DanmakuWaiting,
    OperatorControl,
    RolePaceMeasured,
    SpeechPlaced,
    viewer_problem,
)
from events.run import RunEnded, RunStarted
from events.show import RoleSpec, Show, blocked, show_from_dict
from events.utterance import UtteranceChunk, UtteranceDropped
from events.viewer import ViewerRecalled, remembered
from infra.settings import Settings
from schedulers.choice import GREETING, KIND_NAMES, MENTION, comment_kind
from schedulers.memory import asks_to_forget, forgotten_line, language_of
from schedulers.pace import Pace, paced
from schedulers.stage import (
    ADDRESSED,
    CLASS_NAMES,
    COMMENT,
    GIFT,
    MODERATOR,
    RISK_MARGIN_MS,
    Decision,
    StagePlan,
    StagePolicy,
)

KINDS = ("comment", "gift", "moderator")
MAX_USER_CHARS = 64
SKIP_DETAIL = {
    "stale": "the stage was busy: not answered within {wait} ms",
    "superseded": "the same viewer sent a newer comment while this one waited",
    "user_waiting": "the same viewer has a comment waiting for the floor already",
    "show_ending": "the show ends before a reply could be spoken",
    "run_ending": "the show ended while it waited",
    "on_hold": "the operator holds the show: the chat is not answered",
}
_PUNCT = re.compile(r"[\W_]+", re.UNICODE)
_WORD = re.compile(r"[a-z0-9']+")


def _mentions(keyword: str, folded: str, words: set[str]) -> bool:
    """Latin keywords match whole words ("eat" not in "weather"); CJK ones match anywhere."""
    return keyword in words if keyword.isascii() else keyword in folded


OPENERS_KEPT = 3  # a role's last openers in a run: none of them is said again next
_SCRIPTED = ScriptedLLM()  # the openers' library (pure: the run's seed and the cue pick one)
# A reply whose speech is estimated to start this soon is left to be said: it may already be on air.
SUPERSEDE_MARGIN_MS = 500


def _priority(weight: float, kind: str, interrupt: float, urgent: bool) -> float:
    """A cue's priority: the role's weight, doubled for a gift; an urgent line (a moderator's or a
    gift) gets the interrupt priority and takes the floor."""
    base = weight * (2.0 if kind == "gift" else 1.0)
    # Only urgent lines take the floor: any other stays below the interrupt priority.
    return max(interrupt, base) if urgent else min(base, round(interrupt * 0.9, 3))


def normalise(text: str) -> str:
    """The comparison key of a comment: case-folded, NFKC, punctuation and spaces removed."""
    return _PUNCT.sub("", unicodedata.normalize("NFKC", text).casefold())


# Bidirectional embeddings, overrides and isolates: they reorder what viewers see.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Characters that draw nothing although they are letters or marks (fillers, grapheme joiner).
_FILLERS = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u180e\u3164\uffa0")


def bad_characters(text: str, allowed: str = "\n\t") -> str | None:
    """The first control character (C0, C1, a bidi override or isolate) or surrogate, private-use
    or unassigned character, as ``U+XXXX``, or None; ``allowed`` controls are let through."""
    for ch in text:
        if ch in allowed:
            continue
        if unicodedata.category(ch) in ("Cc", "Cs", "Co", "Cn") or ch in _BIDI_CONTROLS:
            return f"U+{ord(ch):04X}"
    return None


def blank(text: str) -> bool:
    """True when nothing of the text shows: only spaces and invisible characters (zero-width ones,
    the soft hyphen, BOM, word joiner and other format characters, variation selectors, fillers)."""
    return all(
        ch.isspace() or unicodedata.category(ch) in ("Cf", "Zs", "Zl", "Zp") or ch in _FILLERS
        or "\ufe00" <= ch <= "\ufe0f" or "\U000e0100" <= ch <= "\U000e01ef"
        for ch in text
    )


def _similar(key: str, other: str) -> bool:
    """Nearly the same comment: equal keys, or long ones that differ in a character or two."""
    return key == other or (len(key) >= 8 and difflib.SequenceMatcher(None, key, other).ratio() >= 0.9)


@dataclass(slots=True)
class _Recent:
    key: str
    cue: str
    t_ms: int
    until_ms: int  # the reply's estimated end: a repeat before it is answered by the same reply
    kind: str = "comment"
    user: str = ""      # the viewer as the stage tells them apart (DanmakuReceived.who)
    start_ms: int = 0   # the reply's estimated start: before it, a newer comment of its viewer supersedes it
    role: str = ""
    cls: int = COMMENT
    dropped: bool = False


@dataclass(slots=True)
class _Waiting:
    event: DanmakuReceived
    key: str
    attached: dict[str, DanmakuReceived] = field(default_factory=dict)
    greeting: str | None = None   # a bare greeting: the role it greets ("" for the room); else None
    heard: dict[str, int] = field(default_factory=dict)  # an attached duplicate -> when it was taken in
    form: int = 0                 # what it asks (schedulers.choice: question, remark, greeting)
    role: str = ""                # the role it waits for ("": the least busy when it is answered)
    recall: ViewerRecalled | None = None  # what the stage remembered of its viewer (danmaku.recalled)


@dataclass(slots=True)
class _RunState:
    """What the director keeps for one run (``Director.open_run``); the kernel holds it."""

    run: RunStarted
    show: Show
    settings: Settings
    plan: StagePlan
    floor: ShowFloor
    busy_until: dict[str, int] = field(default_factory=dict)
    base: StagePolicy = field(default_factory=StagePolicy)       # the plan's knobs before any pace
    paces: dict[str, Pace] = field(default_factory=dict)          # role -> its measured pace
    caps: dict[str, int] = field(default_factory=dict)            # role -> its longest reply, by its pace
    recent: deque[_Recent] = field(default_factory=lambda: deque(maxlen=64))
    waiting: dict[str, _Waiting] = field(default_factory=dict)  # danmaku id -> it and its duplicates
    openers: dict[str, deque[str]] = field(default_factory=dict)  # role -> its last openers
    greeted: set[str] = field(default_factory=set)  # viewers answered in this run (greeted back once)


class Director(ClockedActor):
    """Turns danmaku into cues: which role answers what."""

    name = "director"
    consumes = (DanmakuReceived, OperatorControl, RolePaceMeasured, SpeechPlaced, RunStarted, RunEnded)
    emits = (CueIssued, CueMerged, DanmakuRejected, DanmakuSkipped, DanmakuWaiting, SegmentStarted, ControlApplied,
             StagePaced, FloorFollowed, UtteranceChunk, UtteranceDropped, ViewerRecalled)
    accepts_unknown_runs = True
    takes_over = True
    clock_marks = (CueIssued, CueMerged, DanmakuRejected, DanmakuSkipped, DanmakuWaiting, SegmentStarted,
                   ControlApplied, StagePaced, FloorFollowed)
    reads_recorded = (ViewerRecalled,)  # what it read of a viewer: re-execution takes the recorded one

    def __init__(self, settings: Settings, recall: Reader | None = None) -> None:
        """``recall`` reads what the stage remembers of a viewer from the read model (None: nothing
        is read, as where no store is wired; a recorded recall is still taken)."""
        self.settings = settings
        self._recall = recall

    # -- what the stage remembers of a viewer: read ahead, recorded -------------

    def prepares(self, event: Event) -> bool:
        return self._recall is not None and isinstance(event, DanmakuReceived) and event.kind != "moderator" \
            and remembered(event.viewer)

    def prepare(self, event: Event, ctx: Context) -> Looked | None:
        """A remembered viewer's comment: their profile, read from the read model within
        ``TROUPE_RECALL_WAIT_MS`` (on a thread beside the handler; a comment never waits longer)."""
        settings = ctx.settings_over(self.settings)
        if self._recall is None or not self.prepares(event) or settings.memory != "on" \
                or settings.recall_wait_ms <= 0 or event.derive("recalled") in ctx.recorded:
            return None
        assert isinstance(event, DanmakuReceived)
        if asks_to_forget(event.text):  # nothing is recalled for a !forget: no read
            return None
        return self._recall.look(event.viewer, settings.recall_wait_ms)

    def close(self) -> None:
        if self._recall is not None:
            self._recall.close()

    def open_run(self, run: RunStarted, settings: Settings) -> _RunState:
        """The run's stage: its show, the plan of its floor (from the run's settings) and the floor
        the show takes itself when nobody waits."""
        policy = StagePolicy(backlog_ms=settings.stage_backlog_ms, pause_ms=settings.reply_pause_ms,
                             deck_ms=settings.deck_ms)
        show = show_from_dict(run.show)
        plan = StagePlan(policy, run.duration_ms)
        plan.weights = {r.id: r.weight for r in show.roles}
        return _RunState(run, show, settings, plan, ShowFloor(run, show, settings, plan), base=policy)

    # -- the clock: comments waiting for the floor, the show's own turns --------

    def next_tick(self, state: _RunState) -> int | None:
        return _earliest(state.plan.next_due_ms(), state.floor.next_due_ms())

    def tick(self, ctx: Context) -> Sequence[Event]:
        state: _RunState | None = ctx.state
        return [] if state is None else self._catch_up(state, ctx.now_ms)

    def _catch_up(self, state: _RunState, now_ms: int) -> list[Event]:
        """Every decision due by ``now_ms``, each at the show time it was due: the outcome depends
        only on the inputs and when they were handled, never on when the clock woke up.  At each
        moment the rundown moves on first, then an operator's line goes, then the comments are
        decided, then the show's own turn."""
        out: list[Event] = []
        plan, floor = state.plan, state.floor
        while (due := _earliest(plan.next_due_ms(), floor.next_due_ms())) is not None \
                and due <= now_ms:
            out += floor.changes(due)
            out += floor.operator_at(due)
            comments = plan.next_due_ms()
            if comments is not None and comments <= due:
                out += self._outcomes(state, plan.decide(due))
            out += floor.at(due)
        return out

    def undecodable(self, key: str, raw: bytes, reason: str, ctx: Context) -> Sequence[Event]:
        """A malformed danmaku is answered too, linked to the message: its causation and correlation
        are ``key``, the message's id (its JSON ``id``, its Nats-Msg-Id, else its place in the stream)."""
        if ctx.run is None:
            return ()  # no run to answer in: the dead letter alone records it
        code, detail = ("run_ended", f"run {ctx.run.run!r} has ended") if ctx.ended else ("malformed", reason)
        sample = raw[:200].decode("utf-8", "replace")
        return [DanmakuRejected(
            id=derive_id(key, "rejected"), run=ctx.run.run, causation=key, correlation=key,
            t_ms=ctx.now_ms, reason=code, detail=detail, text=sample,
        )]

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        state: _RunState | None = ctx.state
        if ctx.run is None or ctx.ended or state is None:
            return self._outside(event, ctx)
        if isinstance(event, RunStarted):  # the rundown's first segment (once, however often it comes)
            return state.floor.opening(ctx.now_ms)
        out = self._catch_up(state, ctx.now_ms)
        if isinstance(event, RunEnded):  # the show stops speaking by itself
            state.floor.closed = True
        elif isinstance(event, OperatorControl):
            out += state.floor.control(event, ctx.now_ms)
            if state.floor.hold_all:  # the comments waiting go too (moderator lines never wait)
                out += self._outcomes(state, state.plan.drain(ctx.now_ms, "on_hold"))
        elif isinstance(event, DanmakuReceived):
            out += self._take(state, event, ctx.now_ms, ctx)
        elif isinstance(event, RolePaceMeasured):
            out += self._paced(state, event, ctx.now_ms)
        elif isinstance(event, SpeechPlaced):
            out += self._placed(state, event, ctx.now_ms)
        return out

    @staticmethod
    def _placed(state: _RunState, event: SpeechPlaced, now: int) -> list[Event]:
        """Where a reply's speech was placed: the floor is planned from it from now on.  Said every
        time, with when it was taken in (re-execution hands the placement over at that moment)."""
        state.plan.placed(event.utterance, event.start_ms, event.end_ms, event.done, event.floor_ms, now)
        return [FloorFollowed(
            id=event.derive("floor"), run=event.run, role=event.role, causation=event.id, correlation=event.correlation,
            t_ms=now, utterance=event.utterance, start_ms=event.start_ms, end_ms=event.end_ms, done=event.done,
            free_ms=state.plan.floor_free_ms, ahead_ms=state.plan.policy.ahead_ms, heard_ms=now,
        )]

    def _paced(self, state: _RunState, event: RolePaceMeasured, now: int) -> list[Event]:
        """A role's measured pace: the floor is planned from it from now on (said with its reason
        when the plan changes)."""
        if event.role is None or state.show.role(event.role) is None:
            return []
        state.paces[event.role] = Pace(event.first_sentence_ms, event.sentence_write_ms, event.speech_ms,
                                       event.opener_ms)
        planned = paced(state.base, state.paces)
        if planned.policy == state.plan.policy and planned.max_sentences == state.caps:
            return []
        state.plan.policy, state.caps = planned.policy, planned.max_sentences
        p = planned.policy
        return [StagePaced(
            id=event.derive("paced"), run=event.run, causation=event.id, correlation=event.id, t_ms=now,
            lead_ms=p.lead_ms, sentence_ms=p.sentence_ms, own_line_ms=p.own_line_ms, opener_ms=p.opener_ms,
            max_sentences=dict(planned.max_sentences), reason=planned.reason, heard_ms=now,
        )]

    @staticmethod
    def _outside(event: Event, ctx: Context) -> list[Event]:
        """An input for a run that is unknown (``ctx.run`` is None), over (a late one, ``ctx.ended``)
        or not held here (no ``ctx.state``: this director was not given the run's start, nor handed
        the run, or it let the run go): a viewer's or an operator's is answered with a rejection."""
        if not isinstance(event, DanmakuReceived | OperatorControl):
            return []
        if ctx.run is None:
            code, detail = "unknown_run", f"no run {event.run!r} has started"
        elif ctx.ended:
            code, detail = "run_ended", f"run {event.run!r} has ended"
        else:
            code, detail = "unknown_run", f"run {event.run!r} is not on this director's stage"
        return [DanmakuRejected(id=event.derive("rejected"), run=event.run, causation=event.id,
                                correlation=event.id, t_ms=ctx.now_ms, reason=code, detail=detail,
                                user=event.user[:MAX_USER_CHARS],
                                text=event.text[:200] if isinstance(event, DanmakuReceived) else "")]

    def _take(self, state: _RunState, event: DanmakuReceived, now: int, ctx: Context) -> list[Event]:
        """Reject a danmaku, merge it with the same comment, or let it wait for the floor: then
        (and when it joins a waiting duplicate) it is said when it was taken in (``danmaku.waiting``),
        its outcome coming later.  A remembered viewer's comment is taken in with what the stage
        remembers of them (``danmaku.recalled``, said first)."""
        reason = self._reject_reason(state, event)
        if reason is not None:
            code, detail = reason
            return [DanmakuRejected(
                id=event.derive("rejected"), run=event.run, causation=event.id,
                correlation=event.id, t_ms=now, reason=code, detail=detail,
                user=event.user[:MAX_USER_CHARS], text=event.text[:200],
            )]
        recall = self._recalled(state, event, now, ctx)
        if recall is None:
            return self._take_in(state, event, now)
        return [recall, *self._take_in(state, event, now, recall)]

    def _recalled(self, state: _RunState, event: DanmakuReceived, now: int, ctx: Context) -> ViewerRecalled | None:
        """What the stage remembers of a comment's viewer: as the run recorded it (re-execution, a
        takeover), else as ``prepare`` read it (a read that failed or timed out is recorded as
        such: the viewer is answered as a stranger); None for a viewer it does not remember."""
        if state.settings.memory != "on" or event.kind == "moderator" or not remembered(event.viewer):
            return None
        recorded = ctx.recorded.get(event.derive("recalled"))
        if isinstance(recorded, ViewerRecalled):
            return recorded
        if _forgets(state, event):
            return forgotten(event, now)
        if self._recall is None or state.settings.recall_wait_ms <= 0:
            return None
        return recalled(event, ctx.prepared if isinstance(ctx.prepared, Looked) else Looked(None, "not read"), now)

    def _take_in(self, state: _RunState, event: DanmakuReceived, now: int,
                 recall: ViewerRecalled | None = None) -> list[Event]:
        """A valid comment, with what the stage recalls of its viewer where that came: merged with the
        same comment, or waiting for the floor."""
        if held_back(state.floor, event.kind):
            return [DanmakuSkipped(
                id=event.derive("skipped"), run=event.run, causation=event.id, correlation=event.id, t_ms=now,
                reason="on_hold", detail=SKIP_DETAIL["on_hold"], user=event.user, text=event.text, heard_ms=now,
            )]
        key = normalise(event.text)
        kind = comment_kind(event.text)
        addressee = self._addressee(state, event)
        greeting = (addressee[0] if addressee else "") if kind == GREETING and event.kind == "comment" else None
        if event.kind != "moderator":  # a repeated comment (or gift) is answered once
            waiting = self._waiting_duplicate(state, key, greeting) if event.kind == "comment" else None
            if waiting is not None:  # answered (or let go) together with the comment it repeats
                waiting.attached[event.id] = event
                waiting.heard[event.id] = now
                state.plan.attach(waiting.event.id, event.id)
                return [self._waits(state, event, waiting, now)]
            merged = self._merge_target(state, key, event.kind, now)
            if merged is not None:
                return [CueMerged(
                    id=event.derive("merged"), run=event.run, role=None, causation=event.id,
                    correlation=event.id, t_ms=now, cue=merged, user=event.user, text=event.text, heard_ms=now,
                )]
        superseded = (self._supersede(state, event, now) + self._yield_own(state, event, now)
                      + self._make_room(state, event, now))
        role = addressee[0] if addressee else _keyword_role(state, event) or ""
        state.waiting[event.id] = waiting = _Waiting(event, key, greeting=greeting, form=kind, role=role,
                                                      recall=recall)
        regular = state.settings.regulars_first == "on" and recall is not None and recall.shows > 0
        out = superseded + self._outcomes(state, state.plan.add(event.id, self._class(state, event), event.who, now,
                                                                kind, role, regular))
        if event.id in state.waiting:  # not answered at once: it waits for the floor
            out.append(self._waits(state, event, waiting, now))
        return out

    @staticmethod
    def _waits(state: _RunState, event: DanmakuReceived, waiting: _Waiting, now: int) -> DanmakuWaiting:
        """A comment taken in at ``now`` waits for the floor, itself or (a near-duplicate) with the
        waiting comment it joined: said, with that comment's place in the waiting room."""
        plan, key = state.plan, waiting.event.id
        cand = plan.waiting.get(key)  # always there: the director's waiting room and the plan's go together
        return DanmakuWaiting(
            id=event.derive("waiting"), run=event.run, causation=event.id, correlation=event.id, t_ms=now,
            heard_ms=now, cls=CLASS_NAMES[cand.cls if cand is not None else COMMENT], form=KIND_NAMES[waiting.form],
            waits_for=waiting.role, ahead=plan.ahead(key, now), waiting=len(plan), free_ms=plan.floor_free_ms,
            until_ms=plan.until_ms(key), joined="" if key == event.id else key, user=event.user, text=event.text,
        )

    def _supersede(self, state: _RunState, event: DanmakuReceived, now: int) -> list[Event]:
        """A viewer writes again before the reply asked for (early, while the floor was busy) to their
        last comment is estimated to start: that reply is dropped, and the newer comment waits
        (unless the older one mattered more: addressed, and the newer is not)."""
        if event.kind != "comment" or not event.who:
            return []
        cls = self._class(state, event)
        for recent in reversed(state.recent):
            if (recent.user == event.who and recent.kind == "comment" and not recent.dropped
                    and cls <= recent.cls and recent.start_ms - SUPERSEDE_MARGIN_MS > now):
                recent.dropped = True
                state.plan.drop(recent.cue, now)
                return [UtteranceDropped(
                    id=event.derive("superseded"), run=event.run, role=recent.role, causation=event.id,
                    correlation=event.id, t_ms=now, utterance=recent.cue,
                    reason=f"superseded: {event.user[:MAX_USER_CHARS]} wrote again before the reply was spoken",
                )]
        return []

    @staticmethod
    def _yield_own(state: _RunState, event: DanmakuReceived, now: int) -> list[Event]:
        """A comment comes while a line of the show's own waits on deck (asked for, estimated to
        begin more than ``SUPERSEDE_MARGIN_MS`` from now): the line gives way, the comment waits in
        its place.  Chat comes first."""
        out: list[Event] = []
        for speech in state.plan.on_deck_own(now + SUPERSEDE_MARGIN_MS):
            state.plan.drop(speech.key, now)
            out.append(UtteranceDropped(
                id=event.derive(f"yield:{speech.key}"), run=event.run, role=speech.role or None, causation=event.id,
                correlation=event.id, t_ms=now, utterance=speech.key,
                reason="yielded: a comment came before the show's own line began",
            ))
        return out

    def _make_room(self, state: _RunState, event: DanmakuReceived, now: int) -> list[Event]:
        """A comment addressed to a role comes while a reply to a lesser comment waits on deck (asked
        for, estimated to begin more than ``SUPERSEDE_MARGIN_MS`` from now), and it could not be on
        air within its wait limit behind that reply: the reply gives way (the last asked first), so
        that a viewer who named a role is not let go while an unaddressed remark is spoken."""
        cls = self._class(state, event)
        if event.kind != "comment" or cls != ADDRESSED:
            return []
        plan = state.plan
        if plan.floor_free_ms - now <= plan.policy.wait_ms[cls] - RISK_MARGIN_MS:
            return []  # it can wait its turn
        for recent in reversed(state.recent):
            if (recent.kind == "comment" and not recent.dropped and recent.cls > cls
                    and plan.begins(recent.cue) - SUPERSEDE_MARGIN_MS > now):
                recent.dropped = True
                plan.drop(recent.cue, now)
                return [UtteranceDropped(
                    id=event.derive("room"), run=event.run, role=recent.role or None, causation=event.id,
                    correlation=event.id, t_ms=now, utterance=recent.cue,
                    reason="yielded: a comment addressed to a role came before the reply began",
                )]
        return []

    def _class(self, state: _RunState, event: DanmakuReceived) -> int:
        if event.kind == "moderator":
            return MODERATOR
        if event.kind == "gift" or _forgets(state, event):
            return GIFT  # (a viewer's !forget is answered as soon as a gift: it is short, and theirs)
        return COMMENT if self._addressee(state, event) is None else ADDRESSED

    def _outcomes(self, state: _RunState, decisions: list[Decision]) -> list[Event]:
        out: list[Event] = []
        for d in decisions:
            waiting = state.waiting.pop(d.candidate.key)
            if d.answer:
                out += self._cue(state, waiting, d)
            else:
                detail = SKIP_DETAIL[d.reason].format(wait=state.plan.policy.wait_ms[d.candidate.cls])
                out += [DanmakuSkipped(
                    id=e.derive("skipped"), run=e.run, causation=e.id, correlation=e.id, t_ms=d.at_ms,
                    reason=d.reason, detail=detail, user=e.user, text=e.text,
                    heard_ms=waiting.heard.get(e.id, d.candidate.arrival_ms),
                ) for e in (waiting.event, *waiting.attached.values())]
        return out

    def _cue(self, state: _RunState, waiting: _Waiting, d: Decision) -> list[Event]:
        event, now = waiting.event, d.at_ms
        role, routed_by = self._route(state, event)
        spec = state.show.role(role)
        assert spec is not None
        settings = state.settings
        sentences = min(d.sentences, state.caps.get(role, d.sentences))
        cue_id = event.derive("cue")
        state.plan.rekey(d.candidate.key, cue_id, role)
        if sentences < d.sentences:  # the role's writer is slow: a shorter reply, the floor frees sooner
            state.plan.shorten(cue_id, (d.sentences - sentences) * state.plan.policy.sentence_ms, now)
        cue = CueIssued(
            id=cue_id, run=event.run, role=role, causation=event.id,
            correlation=event.id, t_ms=now, seq=state.floor.next_seq(), user=event.user,
            text=event.text, danmaku=(event.id, *waiting.attached), routed_by=routed_by,
            priority=_priority(spec.weight, event.kind, settings.interrupt_priority, d.urgent),
            deadline_ms=now + settings.cue_deadline_ms, max_sentences=sentences, heard_ms=d.candidate.arrival_ms,
            gift=event.kind == "gift", begins_ms=state.plan.begins(cue_id), viewer=event.viewer,
            **_remembered(state, event, waiting.recall),
        )
        if _forgets(state, event):
            # A viewer's !forget: said done, word for word, with nothing of them (the projector
            # forgets them at its recall; this reply is blanked with the rest of their chains).
            cue = dataclasses.replace(cue, text=forgotten_line(event.text), verbatim=True, viewer="",
                                      recalled="", returning=False, regular=False, facts=(), bears=0)
        opener = self._opener(state, spec, cue)
        said: list[Event] = []
        if opener is not None:
            cue = dataclasses.replace(cue, opener=str(opener))
            said.append(UtteranceChunk(
                id=cue.derive("chunk0"), run=cue.run, role=role, causation=cue.id, correlation=cue.correlation,
                t_ms=now, utterance=cue.id, seq=0, text=str(opener), language=spec.language, last=False,
                priority=cue.priority, deadline_ms=cue.deadline_ms, emotion=opener.emotion or "neutral",
            ))
        speech = state.plan.policy.estimate_ms(sentences)
        start = max(now, state.busy_until.get(role, 0))
        state.busy_until[role] = start + speech
        state.floor.heard_reply(role, cue.id, now, speech)
        state.recent.append(_Recent(waiting.key, cue.id, now, state.plan.floor_free_ms, event.kind, event.who,
                                    state.plan.floor_free_ms - speech, role, d.candidate.cls))
        merged = [CueMerged(  # each duplicate taken in when it came (its danmaku.waiting says so too)
            id=e.derive("merged"), run=e.run, role=None, causation=e.id, correlation=e.id, t_ms=now,
            cue=cue.id, user=e.user, text=e.text, heard_ms=waiting.heard[e.id],
        ) for e in waiting.attached.values()]
        return [cue, *said, *merged]

    @staticmethod
    def _opener(state: _RunState, spec: RoleSpec, cue: CueIssued) -> Sentence | None:
        """What the role says at once while a model writes its reply to a viewer: a short line that
        fits the comment (the role's own openers, else the scripted library's), none of the role's
        last ones again.  Sent to TTS with the cue, so a voice is on stage as soon as the floor
        frees, whatever the llm worker is busy with ("Ha, nice try, alice!" for a comment that
        tries to steer the writer: the scripted writer deflects the rest).  None where the role's
        writer is instant (scripted), or with ``TROUPE_OPENERS=off``."""
        settings = state.settings
        if settings.openers == "off" or (spec.llm_backend or settings.llm_backend) == "scripted" or cue.verbatim:
            return None
        persona = Persona(spec.id, spec.name, spec.persona, spec.language, spec.keywords, spec.llm_adapter)
        prompt = Prompt(cue_id=cue.id, user=cue.user, text=cue.text, seed=state.run.seed, gift=cue.gift,
                        returning=cue.returning and not cue.gift)  # (a gift is thanked first)
        recent = state.openers.setdefault(spec.id, deque(maxlen=OPENERS_KEPT))
        opener = _SCRIPTED.opener(persona, prompt, avoid=tuple(recent), choices=spec.llm_openers)
        recent.append(str(opener))
        return opener

    @staticmethod
    def _reject_reason(state: _RunState, event: DanmakuReceived) -> tuple[str, str] | None:
        settings = state.settings
        text = event.text
        if blank(text):
            return "empty", "the comment is empty"
        if len(text) > settings.max_danmaku_chars:
            return "too_long", f"{len(text)} characters, the limit is {settings.max_danmaku_chars}"
        bad = bad_characters(text)
        if bad is not None:
            return "control_characters", f"contains the control character {bad}"
        bad = bad_characters(event.user, allowed="")
        if bad is not None:
            return "bad_user", f"the user name contains the control character {bad}"
        if len(event.user) > MAX_USER_CHARS:
            return "bad_user", f"user name over {MAX_USER_CHARS} characters"
        bad = viewer_problem(event)
        if bad is not None:
            return "bad_viewer", bad
        if event.kind not in KINDS:
            return "bad_kind", f"kind {event.kind!r} is not one of {', '.join(KINDS)}"
        if event.to is not None and state.show.role(event.to) is None:
            return "unknown_role", f"no role {event.to!r} on stage"
        if blocked(text, (*settings.blocklist, *state.show.blocklist)):
            return "blocked", "contains a blocked word"
        return None

    def _merge_target(self, state: _RunState, key: str, kind: str, now_ms: int) -> str | None:
        """The cue a repeat joins: one asked for within the merge window, or whose reply is not over."""
        if state.settings.merge_window_ms <= 0:  # merging is off
            return None
        for recent in reversed(state.recent):
            if now_ms - recent.t_ms > state.settings.merge_window_ms and now_ms > recent.until_ms:
                continue
            if recent.kind == kind and (_similar(key, recent.key) or kind == "gift" and now_ms < recent.until_ms):
                return recent.cue  # gifts arriving while one is thanked are thanked together
        return None

    @staticmethod
    def _waiting_duplicate(state: _RunState, key: str, greeting: str | None) -> _Waiting | None:
        """The waiting comment this one repeats: nearly the same text, or (a bare greeting) a greeting
        of the same role waiting already: the tenth "hi" is acknowledged with the first, in one line."""
        if state.settings.merge_window_ms <= 0:
            return None
        return next((w for w in state.waiting.values()
                     if _similar(key, w.key) or greeting is not None and w.greeting == greeting), None)

    @staticmethod
    def _addressee(state: _RunState, event: DanmakuReceived) -> tuple[str, str] | None:
        """The role a comment is addressed to (``to``, an @mention, the role's name), if any."""
        show = state.show
        if event.to is not None:
            return event.to, "addressed"
        by_name = {r.id.casefold(): r.id for r in show.roles} | {r.name.casefold(): r.id for r in show.roles}
        for mention in MENTION.findall(event.text):
            mentioned = by_name.get(mention.casefold())
            if mentioned is not None:
                return mentioned, "mention"
        for spec in show.roles:
            if spec.name.casefold() in event.text.casefold():
                return spec.id, "name"
        return None

    def _route(self, state: _RunState, event: DanmakuReceived) -> tuple[str, str]:
        show = state.show
        addressed = self._addressee(state, event)
        if addressed is not None:
            return addressed
        if event.kind == "moderator":  # the stage's voice of the house: the segment's lead answers
            return state.floor.rundown.segment.roles[0], "segment_lead"
        keyword = _keyword_role(state, event)
        if keyword is not None:
            return keyword, "keyword"
        # The role whose last reply ended longest ago (one floor: spread the talk over the roles),
        # of those that speak the comment's language where any does (a Chinese comment is not
        # answered in English while a role speaks Chinese).
        language = language_of(event.text)
        speakers = [r for r in show.roles if r.language == language] or show.roles
        least = min(speakers, key=lambda r: (state.busy_until.get(r.id, 0), -r.weight))
        return least.id, "least_busy"


def _keyword_role(state: _RunState, event: DanmakuReceived) -> str | None:
    """The role whose persona keywords the comment names most (None: none of them)."""
    show = state.show
    folded = event.text.casefold()
    words = set(_WORD.findall(folded))
    scores = {r.id: sum(1 for k in r.keywords if _mentions(k.casefold(), folded, words)) for r in show.roles}
    best = max(scores.values())
    return next(r.id for r in show.roles if scores[r.id] == best) if best > 0 else None


def _forgets(state: _RunState, event: DanmakuReceived) -> bool:
    """A viewer the stage remembers asks to be forgotten (``!forget``): answered as soon as a gift,
    word for word and without their name."""
    return state.settings.memory == "on" and remembered(event.viewer) and asks_to_forget(event.text)


def _remembered(state: _RunState, event: DanmakuReceived, recall: ViewerRecalled | None) -> dict[str, Any]:
    """What a cue carries of what the stage remembered of its viewer: greeted back at their first
    reply in a show they came back to, a regular (earlier shows, or gifts), what they said before."""
    if recall is None or not recall.known:
        if event.viewer:
            state.greeted.add(event.viewer)
        return {}
    first = event.viewer not in state.greeted
    state.greeted.add(event.viewer)
    return {"recalled": recall.id, "returning": first and recall.shows > 0,
            "regular": recall.shows > 0 or recall.gifts > 0, "facts": recall.facts, "bears": len(recall.bears)}


def _earliest(*dues: int | None) -> int | None:
    known = [d for d in dues if d is not None]
    return min(known) if known else None
