"""The show's own turns: which segment of the rundown runs, and who says what when nobody waits.

When the floor frees and no comment waits, the director gives it to the show itself: a
``Turn``.  ``Rundown`` decides, as a pure function of what it was told and the times passed in:

- the segment: each runs its planned length, then the one its ``then`` names (the next one,
  the first again, or a title); one started late (the chat held the floor) still ends on its
  planned clock, and one with verbatim lines not yet said runs over until they are said;
- the kind of turn: the segment's verbatim lines first, in order, each once in a run; then
  points on the brief and follow-ups (one role answering what another just said, then going on
  with a point of its own: a conversation passes from role to role), with an
  invitation to the chat at least every ``banter_turns`` turns between roles (a ``sparse``
  show, which gave its roles nothing to say, only invites the chat);
- the role: the segment's role furthest below its share of the speaking time by weight, no
  role taking more than ``max_streak`` self-driven turns in a row, and a follow-up never
  addressed to its own speaker, and always by a role that speaks the language of the line it
  answers (it names something from it).

It counts every line spoken on stage (``spoke``), chat replies too: a reply to the chat
resets the banter count, and the weights share all the speaking time.  Times are show ms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

LINE, BRIEF, FOLLOW_UP, INVITATION = "line", "brief", "follow_up", "invitation"
KINDS = (LINE, BRIEF, FOLLOW_UP, INVITATION)


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    """One segment as the rundown runs it."""

    title: str
    length_ms: int
    roles: tuple[str, ...]                  # the leads first, then the roles that join
    lines: tuple[tuple[str, str], ...] = ()  # (role, text) said verbatim, in order
    then: int = -1                          # the index of the segment that follows (-1: the next)
    leads: int = 1                          # how many of ``roles`` lead it


@dataclass(frozen=True, slots=True)
class RundownPolicy:
    """The knobs of the show's own turns."""

    banter_turns: int = 4        # turns between roles before one goes to the chat
    max_streak: int = 2          # self-driven turns in a row by one role
    follow_window_ms: int = 15000  # a follow-up answers a line said at most this long ago
    follow_ups: int = 2          # follow-ups in a row before a new point on the brief
    sparse: bool = False         # the show gave nothing to say: only its verbatim lines and invitations


@dataclass(frozen=True, slots=True)
class Turn:
    """What the show says next: its kind, who says it, and what it builds on."""

    kind: str
    role: str
    segment: int
    text: str = ""           # the verbatim line (kind "line")
    follows: str = ""        # the utterance a follow-up answers
    addressee: str = ""      # the role a follow-up speaks to
    turn: int = 0            # the role's self-driven turns of this kind before this one (points on the
                             # brief and follow-ups count together: both say the role's material)
    point: int = -1          # a point on the brief: the segment's points before it, in the role's language


@dataclass(frozen=True, slots=True)
class SegmentChange:
    """The rundown moved to segment ``index`` at ``at_ms`` (its plan said ``planned_ms``)."""

    index: int
    at_ms: int
    planned_ms: int
    reason: str              # "start", "planned", "lines", "operator"


@dataclass(slots=True)
class _Last:
    role: str
    utterance: str
    at_ms: int
    kind: str = ""                     # its turn's kind ("": a reply to the chat)


@dataclass(slots=True)
class Rundown:
    """The rundown's state in one run."""

    segments: Sequence[SegmentPlan]
    weights: Mapping[str, float]
    policy: RundownPolicy = field(default_factory=RundownPolicy)
    languages: Mapping[str, str] = field(default_factory=dict)  # role -> its language: a follow-up answers in it
    index: int = 0
    started_ms: int = 0                # when the current segment started
    planned_ms: int = 0                # when its plan said it would start
    said: set[tuple[int, int]] = field(default_factory=set)   # (segment, line) said verbatim
    spoken_ms: dict[str, int] = field(default_factory=dict)   # estimated speech per role
    turns: dict[tuple[str, str], int] = field(default_factory=dict)  # self-driven turns per role and kind
    points: dict[tuple[int, str], int] = field(default_factory=dict)  # points on the brief per segment and language
    banter: int = 0                    # turns between roles since the last line to the chat
    follow_ups: int = 0                # follow-ups in a row
    streak: tuple[str, int] = ("", 0)  # the role of the last self-driven turns and how many
    last: _Last | None = None
    opening: bool = True               # the segment has had no turn of its own yet

    def __post_init__(self) -> None:
        if not self.segments:
            raise ValueError("a rundown has at least one segment")

    @property
    def segment(self) -> SegmentPlan:
        return self.segments[self.index]

    def ends_ms(self) -> int:
        """When the current segment's planned length is over."""
        return self.planned_ms + self.segment.length_ms

    def _pending_line(self, segment: int | None = None) -> int | None:
        """The first verbatim line of a segment (the current one) not said yet."""
        index = self.index if segment is None else segment
        lines = self.segments[index].lines
        return next((i for i in range(len(lines)) if (index, i) not in self.said), None)

    def due_change_ms(self) -> int | None:
        """When the rundown next moves on by itself (None: it waits for a line to be said)."""
        return None if self._pending_line() is not None else self.ends_ms()

    def advance(self, now_ms: int) -> list[SegmentChange]:
        """Move past every segment whose time is up by ``now_ms`` (at the times they were due)."""
        out: list[SegmentChange] = []
        while (due := self.due_change_ms()) is not None and due <= now_ms:  # lengths are >= 5 s
            out.append(self._go(self._following(), due, due, "planned"))
        return out

    def close_lines(self, now_ms: int) -> list[SegmentChange]:
        """After a verbatim line: a segment that ran over only to say its lines ends now."""
        if self._pending_line() is None and now_ms >= self.ends_ms():
            return [self._go(self._following(), now_ms, now_ms, "lines")]
        return []

    def goto(self, target: int | None, now_ms: int) -> SegmentChange:
        """The operator moves the rundown on: to the segment ``target`` (None: the next one)."""
        return self._go(self._following() if target is None else target, now_ms, now_ms, "operator")

    def _following(self) -> int:
        then = self.segment.then
        return (self.index + 1) % len(self.segments) if then < 0 else then

    def _go(self, index: int, at_ms: int, planned_ms: int, reason: str) -> SegmentChange:
        self.index, self.started_ms, self.planned_ms = index, at_ms, planned_ms
        self.follow_ups = 0
        self.opening = True
        return SegmentChange(index, at_ms, planned_ms, reason)

    def next_turn(self) -> Turn:
        """The show's next turn in the current segment."""
        seg = self.segment
        pending = self._pending_line()
        if pending is not None:
            role, text = seg.lines[pending]
            return Turn(LINE, role, self.index, text=text, turn=self._count(role, LINE))
        last = self.last
        leads = seg.roles[:seg.leads]
        if not any(self._able(r) for r in leads):  # the leads have had their turns in a row: another opens
            leads = seg.roles
        if self.banter >= self.policy.banter_turns or self.policy.sparse:  # enough between roles: one to the chat
            role = self._pick(leads if self.opening else seg.roles)
            return Turn(INVITATION, role, self.index, turn=self._count(role, INVITATION))
        if self.opening:  # a segment opens with a point on its brief by a lead
            return self._brief(self._pick(leads))
        if (last is not None and last.kind == FOLLOW_UP and last.role in seg.roles and self._able(last.role)
                and self._deficit(last.role) >= 0):  # who answered goes on with a point of their own
            return self._brief(last.role)
        if last is not None and self.follow_ups < self.policy.follow_ups:
            speaks = self.languages.get(last.role)
            others = [r for r in seg.roles if r != last.role and self.languages.get(r) == speaks]
            if others:
                role = self._pick(others)
                return Turn(FOLLOW_UP, role, self.index, follows=last.utterance, addressee=last.role,
                            turn=self._count(role, FOLLOW_UP))
        return self._brief(self._pick(seg.roles))

    def _brief(self, role: str) -> Turn:
        point = self.points.get((self.index, self.languages.get(role, "")), 0)
        return Turn(BRIEF, role, self.index, turn=self._count(role, BRIEF), point=point)

    def _count(self, role: str, kind: str) -> int:
        return self.turns.get((role, _counted(kind)), 0)

    def _pick(self, roles: Sequence[str]) -> str:
        """The role furthest below its share of the speaking time (leads first on ties), never
        one that has had its ``max_streak`` self-driven turns in a row when another can speak."""
        able = [r for r in roles if self._able(r)] or list(roles)
        return max(able, key=lambda r: (self._deficit(r), -roles.index(r)))

    def _deficit(self, role: str) -> float:
        """How far a role is below its share of the speaking time by weight (ms; negative: above)."""
        total = sum(self.spoken_ms.values())
        weight = sum(self.weights.get(r, 1.0) for r in self.weights) or 1.0
        return self.weights.get(role, 1.0) / weight * total - self.spoken_ms.get(role, 0)

    def _able(self, role: str) -> bool:
        """Whether a role may take the next self-driven turn (it has not had ``max_streak`` in a row)."""
        streak_role, streak = self.streak
        return not (role == streak_role and streak >= self.policy.max_streak)

    def spoke(self, role: str, utterance: str, at_ms: int, speech_ms: int, turn: Turn | None = None) -> None:
        """A line was asked for on stage: a turn of the show's, or (``turn`` None) a reply to the chat."""
        self.spoken_ms[role] = self.spoken_ms.get(role, 0) + speech_ms
        if turn is None or turn.kind == INVITATION:
            self.banter = 0
        else:
            self.banter += 1
        if turn is None:
            self.streak = ("", 0)
        else:
            self.opening = False
            self.turns[role, _counted(turn.kind)] = self.turns.get((role, _counted(turn.kind)), 0) + 1
            if turn.kind == BRIEF:
                key = (turn.segment, self.languages.get(role, ""))
                self.points[key] = self.points.get(key, 0) + 1
            self.streak = (role, self.streak[1] + 1 if self.streak[0] == role else 1)
            line = self._pending_line(turn.segment) if turn.kind == LINE else None
            if line is not None:
                self.said.add((turn.segment, line))
        self.follow_ups = self.follow_ups + 1 if turn is not None and turn.kind == FOLLOW_UP else 0
        self.last = _Last(role, utterance, at_ms, turn.kind if turn is not None else "")

    def forget_stale(self, now_ms: int) -> None:
        """A line said long ago is no longer one to follow up on."""
        if self.last is not None and now_ms - self.last.at_ms > self.policy.follow_window_ms:
            self.last = None


def _counted(kind: str) -> str:
    """The count a turn of this kind is numbered in: points on the brief and follow-ups share one
    (a writer draws both from the role's material, each line once before any comes again)."""
    return "talk" if kind in (BRIEF, FOLLOW_UP) else kind
