"""The show's own turns on the floor: when nobody waits, the director gives the floor to the show.

``ShowFloor`` is the director's per-run keeper of everything said that no viewer asked for:
the rundown's verbatim lines, points on the segment's brief, one role answering another,
invitations to the chat (``schedulers.rundown`` decides which), and the operator's controls
(``danmaku.control``: say a line next, move to a segment, hold and resume).  It shares the
floor's schedule with the comments (``schedulers.stage.StagePlan``), and comes after them:

- a turn of the show's is asked for only when no comment waits, ``idle_gap_ms`` after the
  speech before it is estimated to end, and it is one sentence (a comment arriving while it is
  spoken waits for that sentence at most); its priority is below any comment's, so the llm and
  tts queues never serve it first;
- an operator's ``say`` goes before the comments, at the next free floor, never cutting anyone;
- as the show ends, when the next turn would no longer fit, the roles say goodbye: their
  ``signoff`` lines (else the stage's own, in the role's language), the longest that still ends
  before the show does first, each once, until none fits;
- ``hold`` stops the show's own turns (with ``all``, comments and gifts are let go too, with
  the reason ``on_hold``); ``resume`` starts them again.

Each of its events is caused by the run's ``run.started`` (the show's own root), so that
re-execution checks every one of them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from events.base import Event, derive_id
from events.cue import ControlApplied, CueIssued, SegmentStarted
from events.danmaku import CONTROLS, DanmakuRejected, OperatorControl
from events.run import RunStarted
from events.show import Show
from infra.settings import Settings
from schedulers.rundown import LINE, Rundown, RundownPolicy, SegmentChange, SegmentPlan, Turn
from schedulers.stage import StagePlan

SELF_PRIORITY = 0.25  # a turn of the show's: this times the role's weight, below every comment
MAX_SAY_CHARS = 400
SPARSE_GAP_MS = 6000  # a show with nothing to say of its own speaks less: its invitations this much apart
# Goodbyes for roles whose show gives none, by language: short to long, so that the end of the
# show is filled by the longest that fits.
SIGNOFFS = {
    "en": ("Bye for now!", "Thanks for watching, everyone!",
           "That's all from us for now. Thanks for hanging out, and see you next time!",
           "We're just about out of time. Thank you all for watching and chatting with us. "
           "Take care, and see you at the next show!"),
    "zh": ("拜拜！", "谢谢大家的陪伴！", "今天就到这里啦，谢谢大家，我们下次见！",
           "时间差不多了，谢谢大家今天的陪伴和弹幕，好好休息，我们下次直播再见！"),
}


def signoffs(show: Show) -> tuple[tuple[str, str], ...]:
    """Every goodbye the show's roles may say as it ends: (role, line)."""
    return tuple((r.id, line) for r in show.roles
                 for line in r.signoff or SIGNOFFS.get(r.language.split("-")[0].lower(), ()))


def sparse(show: Show, settings: Settings) -> bool:
    """Whether the show gives its roles nothing to say of their own (no material, no points) and
    no role has a model to write it: then its own lines are few (invitations, verbatim lines)."""
    return not show.has_material and all((r.llm_backend or settings.llm_backend) == "scripted" for r in show.roles)


def segment_plans(show: Show) -> tuple[SegmentPlan, ...]:
    """The show's rundown as the scheduler runs it."""
    rundown = show.rundown
    titles = [g.title for g in rundown]
    out = []
    for g in rundown:
        then = -1 if g.then == "next" else 0 if g.then == "loop" else titles.index(g.then)
        lines = tuple((x.role or g.leads[0], x.text) for x in g.lines)
        out.append(SegmentPlan(g.title, int(g.length_s * 1000), g.roles, lines, then, leads=len(g.leads)))
    return tuple(out)


class ShowFloor:
    """The show's own turns and the operator's controls in one run."""

    def __init__(self, run: RunStarted, show: Show, settings: Settings, plan: StagePlan) -> None:
        self.run, self.show, self.settings, self.plan = run, show, settings, plan
        weights = {r.id: r.weight for r in show.roles}
        self.sparse = sparse(show, settings)
        self.rundown = Rundown(segment_plans(show), weights,
                               RundownPolicy(banter_turns=settings.banter_turns, sparse=self.sparse),
                               languages={r.id: r.language for r in show.roles})
        self.says: deque[tuple[OperatorControl, str]] = deque()
        self.held = settings.self_driven == "off"  # a show without its own turns: always held
        self.hold_all = False
        self.closed = False
        self.cues = 0        # cues issued in the run, the chat's and the show's
        self.turns = 0       # the show's own
        self.opened = False
        self.since_ms = 0    # the last control: nothing it allows is due before it
        self.signoffs = signoffs(show)
        self.signed_off: set[int] = set()  # the goodbyes said (their index in ``signoffs``)

    def next_seq(self) -> int:
        self.cues += 1
        return self.cues

    # -- when ------------------------------------------------------------------

    def next_due_ms(self) -> int | None:
        """When the show next has something to do: a segment ends, an operator's line or its
        own turn is due."""
        if self.closed:
            return None
        dues = [d for d in (self._change_due(), self._say_due(), self._own_due()) if d is not None]
        return min(dues) if dues else None

    def _change_due(self) -> int | None:
        if not self.opened:
            return None
        due = self.rundown.due_change_ms()
        return due if due is not None and (not self.plan.end_ms or due < self.plan.end_ms) else None

    def _say_due(self) -> int | None:
        return max(self.since_ms, self.plan.since_ms, self.plan.floor_free_ms - self.plan.policy.ahead_ms) if self.says else None

    def _own_due(self) -> int | None:
        if self.held or not self.opened or len(self.plan):
            return None
        policy = self.plan.policy
        gap = self.settings.idle_gap_ms + (SPARSE_GAP_MS if self.sparse else 0)
        due = max(self.since_ms, self.plan.since_ms, self.plan.floor_free_ms + gap - policy.ahead_ms)
        if self.plan.fits(due, self._speech(self.rundown.next_turn())) or self._signoff(due) is not None:
            return due
        return None

    def _signoff(self, now_ms: int) -> int | None:
        """The goodbye to say now that the next turn no longer fits: the longest not yet said that
        still ends before the show does, a role of the segment's first (None: none fits)."""
        if not self.plan.end_ms:
            return None
        roles = self.rundown.segment.roles
        fitting = [i for i, (role, line) in enumerate(self.signoffs)
                   if i not in self.signed_off and self.plan.fits(now_ms, self.plan.policy.verbatim_ms(line))]
        if not fitting:
            return None
        return max(fitting, key=lambda i: (self.plan.policy.verbatim_ms(self.signoffs[i][1]),
                                           self.signoffs[i][0] in roles, -i))

    def _speech(self, turn: Turn) -> int:
        policy = self.plan.policy
        return policy.verbatim_ms(turn.text) if turn.kind == LINE else policy.own_line_ms + policy.pause_ms

    # -- what ------------------------------------------------------------------

    def opening(self, now_ms: int) -> list[Event]:
        """The rundown's first segment, when the director takes in the run's start (once): the
        show speaks by itself from then on (a worker that joins a run late, or a run started long
        ago, does not catch up on speech nobody heard)."""
        if self.opened:
            return []
        self.opened = True
        now_ms = max(0, now_ms)  # taken in just before the start: the rundown starts with the show
        self.since_ms = max(self.since_ms, now_ms)
        self.rundown.started_ms = self.rundown.planned_ms = now_ms
        return [self._segment_event(SegmentChange(0, now_ms, now_ms, "start"))]

    def changes(self, now_ms: int) -> list[Event]:
        """The segments that ended by ``now_ms`` (each at the time it was due)."""
        if self.closed or not self.opened:
            return []
        return [self._segment_event(c) for c in self.rundown.advance(now_ms)]

    def operator_at(self, now_ms: int) -> list[Event]:
        """An operator's line, when the floor is about to free (before any comment)."""
        if self.closed or not self.says or self.plan.backlog_ms(now_ms) > self.plan.policy.ahead_ms:
            return []
        return self._say(now_ms)

    def at(self, now_ms: int) -> list[Event]:
        """The show's own turn at ``now_ms``, after the comments had theirs, when nobody waits."""
        if self.closed:
            return []
        own = self._own_due()
        if own is None or own > now_ms:
            return []
        self.rundown.forget_stale(now_ms)
        turn = self.rundown.next_turn()
        if not self.plan.fits(own, self._speech(turn)) and (k := self._signoff(own)) is not None:
            return self._goodbye(k, now_ms)  # as ``_own_due`` judged it
        cue = self._turn_cue(turn, now_ms)
        out: list[Event] = [cue]
        if turn.kind == LINE:
            out += [self._segment_event(c) for c in self.rundown.close_lines(now_ms)]
        return out

    def _turn_cue(self, turn: Turn, now_ms: int) -> CueIssued:
        self.turns += 1
        segment = self.show.rundown[turn.segment]
        text = turn.text if turn.kind == LINE else segment.brief
        speech = self._speech(turn)
        cue_id = derive_id(self.run.run, f"turn{self.turns}")
        self.plan.occupy(cue_id, now_ms, speech, turn.role, own=True)
        self.rundown.spoke(turn.role, cue_id, now_ms, speech, turn)
        return self._cue(cue_id, turn.role, text, now_ms, reason=turn.kind, segment=segment.title,
                         follows=turn.follows, addressee=turn.addressee, verbatim=turn.kind == LINE,
                         turn=turn.turn, max_sentences=0 if turn.kind == LINE else 1, point=turn.point,
                         begins_ms=self.plan.begins(cue_id))

    def _goodbye(self, k: int, now_ms: int) -> list[Event]:
        """Goodbye ``k`` as the show ends (not given up for a comment: none would fit now)."""
        self.signed_off.add(k)
        role, line = self.signoffs[k]
        speech = self.plan.policy.verbatim_ms(line)
        cue_id = derive_id(self.run.run, f"signoff{k}")
        self.plan.occupy(cue_id, now_ms, speech, role)
        self.rundown.spoke(role, cue_id, now_ms, speech)
        return [self._cue(cue_id, role, line, now_ms, reason="signoff", verbatim=True,
                          segment=self.rundown.segment.title)]

    def _say(self, now_ms: int) -> list[Event]:
        control, role = self.says.popleft()
        speech = self.plan.policy.verbatim_ms(control.text)
        if not self.plan.fits(now_ms, speech):
            return [self._applied(control, now_ms, "not said: the show ends before the line could be")]
        cue_id = control.derive("say")
        self.plan.occupy(cue_id, now_ms, speech, role)
        self.rundown.spoke(role, cue_id, now_ms, speech)
        return [self._cue(cue_id, role, control.text, now_ms, reason="say", verbatim=True, user=control.user,
                          causation=control.id, segment=self.rundown.segment.title, correlation=control.id)]

    def _cue(self, cue_id: str, role: str, text: str, now_ms: int, *, reason: str, user: str = "",
             causation: str | None = None, correlation: str | None = None, max_sentences: int = 0,
             **fields: object) -> CueIssued:
        spec = self.show.role(role)
        weight = spec.weight if spec is not None else 1.0
        priority = round(weight * SELF_PRIORITY, 3) if reason != "say" else min(
            weight, round(self.settings.interrupt_priority * 0.9, 3))
        return CueIssued(
            id=cue_id, run=self.run.run, role=role, causation=causation or self.run.id,
            correlation=correlation or cue_id, t_ms=now_ms, seq=self.next_seq(), user=user, text=text,
            danmaku=(), routed_by="operator" if reason == "say" else "rundown", priority=priority,
            deadline_ms=now_ms + self.settings.cue_deadline_ms, max_sentences=max_sentences, heard_ms=now_ms,
            reason=reason, **fields,  # type: ignore[arg-type]
        )

    def heard_reply(self, role: str, cue_id: str, now_ms: int, speech_ms: int) -> None:
        """A reply to the chat was asked for: it counts in the speaking shares and the banter."""
        self.rundown.spoke(role, cue_id, now_ms, speech_ms)

    def _segment_event(self, change: SegmentChange) -> SegmentStarted:
        plan = self.rundown.segments[change.index]
        return SegmentStarted(
            id=derive_id(self.run.run, f"segment{change.index}@{change.at_ms}"), run=self.run.run,
            causation=self.run.id, correlation=self.run.id, t_ms=change.at_ms, title=plan.title,
            index=change.index, planned_ms=change.planned_ms, length_ms=plan.length_ms, reason=change.reason,
        )

    # -- the operator ------------------------------------------------------------

    def control(self, event: OperatorControl, now_ms: int) -> list[Event]:
        """Apply an operator's control (or reject it with the reason)."""
        problem = self._invalid(event)
        if problem is not None:
            return [DanmakuRejected(
                id=event.derive("rejected"), run=event.run, causation=event.id, correlation=event.id,
                t_ms=now_ms, reason="bad_control", detail=problem, user=event.user, text=event.text[:200],
            )]
        action = event.action
        self.since_ms = max(self.since_ms, now_ms)
        if action == "say":
            role = event.target or self.rundown.segment.roles[0]
            self.says.append((event, role))
            return [self._applied(event, now_ms, f"{role} says it next, word for word")]
        if action == "segment":
            titles = [g.title for g in self.show.rundown]
            target = None if event.target in ("", "next") else titles.index(event.target)
            change = self.rundown.goto(target, now_ms)
            seg = self._segment_event(change)
            return [seg, self._applied(event, now_ms, f"segment {seg.title!r} starts now")]
        self.held = action == "hold"
        self.hold_all = self.held and event.all
        detail = ("the show's own speech is held" + (", and the chat is let go" if self.hold_all else "")
                  if self.held else "the show speaks by itself again")
        return [self._applied(event, now_ms, detail)]

    def _invalid(self, event: OperatorControl) -> str | None:
        if event.action not in CONTROLS:
            return f"action {event.action!r} is not one of {', '.join(CONTROLS)}"
        if event.action == "say":
            if not event.text.strip():
                return "say: the line is empty"
            if len(event.text) > MAX_SAY_CHARS:
                return f"say: {len(event.text)} characters, the limit is {MAX_SAY_CHARS}"
            if event.target and self.show.role(event.target) is None:
                return f"say: no role {event.target!r} on stage"
        titles = [g.title for g in self.show.rundown]
        if event.action == "segment" and event.target not in ("", "next", *titles):
            known = ", ".join(repr(t) for t in titles)
            return f"segment: no segment {event.target!r} (the rundown has {known})"
        return None

    def _applied(self, event: OperatorControl, now_ms: int, detail: str) -> ControlApplied:
        return ControlApplied(
            id=event.derive("applied"), run=event.run, role=event.target if event.action == "say" else None,
            causation=event.id, correlation=event.id, t_ms=now_ms, action=event.action, detail=detail,
            user=event.user,
        )


def held_back(floor: ShowFloor, kind: str) -> bool:
    """Whether the operator's hold lets this kind of danmaku go (comments and gifts, with ``all``)."""
    return floor.hold_all and kind in ("comment", "gift")


__all__: Sequence[str] = ("SELF_PRIORITY", "SPARSE_GAP_MS", "ShowFloor", "held_back", "segment_plans", "sparse")
