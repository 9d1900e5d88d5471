"""Faces that act: what each role's face does on the show timeline.

Lipsync decides (``FacePlanner``), as it places speech, and says so with ``viseme.face`` events;
the renderer, the preview, export and re-execution all read the same events
(``FaceTimeline``), so a face in a frame is a pure function of the recorded run and the time.

- **The speaker's expression follows the sentence's emotion** (``utterance.chunk.emotion``,
  carried on ``audio.chunk``): eased in over ``face_ease_ms`` (quintic ease-out) and held at
  least ``face_hold_ms``, so a face never flickers from sentence to sentence (a change due
  sooner waits for the hold to end).  ``face_linger_ms`` after a reply ends, it eases back to
  neutral.
- **Listeners turn to the speaker** when an utterance starts; the speaker looks at a role its
  sentence names, else at the audience.
- **A role named in a sentence reacts when the sentence starts**: it nods, and a question
  makes it thinking.
- A change replaces what earlier changes planned for the same part of the same face from its
  start on: a role that speaks again before its face went back to neutral keeps its face.

Every change starts where speech is placed (never before it), so it reaches the renderer
before the frames it changes are drawn.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from actors.backends.protocols import BLEND_STEPS, GAZE_STEPS, NOD_STEPS
from events.frame import FaceMark
from events.viseme import AUDIENCE, EXPRESSIONS, FaceChanged

NOD_MS = 600          # a nod: down and up again
WANDER_MS = 5200      # an idle listener's eyes drift and come back over this long
_QUESTION = re.compile(r"[?？]\s*[\"'”’)）]*\s*$")


def ease_out(u: float) -> float:
    """Quintic ease-out on [0, 1]: fast at first, settling softly (monotonic, 0 -> 0, 1 -> 1)."""
    u = min(1.0, max(0.0, u))
    return 1.0 - (1.0 - u) ** 5


def is_question(text: str) -> bool:
    return bool(_QUESTION.search(text))


@dataclass(slots=True)
class Plan:
    """One part of one face (its expression, or where it looks) as planned: ``(start, value)`` in
    time order; setting a value at ``t`` replaces what was planned from ``t`` on."""

    default: str
    starts: list[int] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    eases: list[int] = field(default_factory=list)  # how long each change eases in (ms)

    def at(self, t: int) -> tuple[int, str, str]:
        """At ``t``: since when, what, and what it was before (the value eased from)."""
        i = bisect.bisect_right(self.starts, t) - 1
        if i < 0:
            return 0, self.default, self.default
        return self.starts[i], self.values[i], self.values[i - 1] if i > 0 else self.default

    def eased(self, t: int) -> tuple[str, str, float]:
        """At ``t``: what, what it eases from, and how far into it (eased, 1: all of it)."""
        i = bisect.bisect_right(self.starts, t) - 1
        if i < 0:
            return self.default, self.default, 1.0
        before = self.values[i - 1] if i > 0 else self.default
        if before == self.values[i]:
            return self.values[i], before, 1.0
        ease = self.eases[i]
        return self.values[i], before, ease_out((t - self.starts[i]) / ease) if ease > 0 else 1.0

    def later(self, t: int) -> bool:
        """Whether something is planned from ``t`` on."""
        return bool(self.starts) and self.starts[-1] >= t

    def set(self, t: int, value: str, ease_ms: int = 0) -> None:
        i = bisect.bisect_left(self.starts, t)
        del self.starts[i:], self.values[i:], self.eases[i:]
        self.starts.append(t)
        self.values.append(value)
        self.eases.append(ease_ms)

    def forget_before(self, t: int) -> None:
        """Drop what ended before ``t`` (the entry in force at ``t`` and the one before it stay)."""
        i = bisect.bisect_right(self.starts, t) - 2
        if i > 0:
            del self.starts[:i], self.values[:i], self.eases[:i]


@dataclass(frozen=True, slots=True)
class Change:
    """A change ``FacePlanner`` decided: lipsync sends it as a ``viseme.face`` event."""

    role: str
    start_ms: int
    expression: str = ""
    look: str = ""
    gesture: str = ""
    reason: str = ""


class FacePlanner:
    """Decides one run's face changes as lipsync places its speech (deterministic: a function of
    the placements alone)."""

    def __init__(self, roles: Sequence[tuple[str, str]], hold_ms: int, linger_ms: int) -> None:
        self.roles = tuple(r for r, _ in roles)
        self.names = {r: name for r, name in roles}
        self.hold_ms, self.linger_ms = hold_ms, linger_ms
        self.expressions = {r: Plan("neutral") for r in self.roles}
        self.looks = {r: Plan(AUDIENCE) for r in self.roles}

    def named(self, text: str, speaker: str) -> list[str]:
        """The other roles a sentence names (by their name or id, whole words)."""
        folded = text.casefold()
        out = []
        for role in self.roles:
            if role == speaker:
                continue
            for word in {self.names[role].casefold(), role.casefold()}:
                if word and (re.search(rf"(?<!\w){re.escape(word)}(?!\w)", folded) if word.isascii() else word in folded):
                    out.append(role)
                    break
        return out

    def spoken(self, role: str, start_ms: int, end_ms: int, text: str, emotion: str, first: bool,
               sentence: bool, last: bool) -> list[Change]:
        """Speech placed: ``role`` says (a part of) a sentence from ``start_ms`` to ``end_ms``.
        ``first``: the utterance's first part; ``sentence``: a sentence's first part; ``last``:
        the utterance's last part."""
        if role not in self.expressions:
            return []
        out: list[Change] = []
        named = self.named(text, role) if sentence else []
        if first:
            for other in self.roles:
                if other != role and other not in named:
                    out += self._look(other, start_ms, role, "listens")
        if sentence:
            out += self._look(role, start_ms, named[0] if named else AUDIENCE,
                              f"speaks to {self.names[named[0]]}" if named else "speaks to the audience")
            label = emotion if emotion in EXPRESSIONS else "neutral"
            out += self._express(role, start_ms, label, f"says a {label} sentence")
            question = is_question(text)
            for other in named:
                out += self._look(other, start_ms, role, "is named")
                out.append(Change(other, start_ms, gesture="nod", reason=f"named by {self.names[role]}"))
                if question:
                    out += self._express(other, start_ms, "thinking", f"asked by {self.names[role]}")
        if last:
            out += self.finished(role, end_ms)
        return out

    def finished(self, role: str, end_ms: int) -> list[Change]:
        """``role``'s speech ends at ``end_ms`` (its last sentence, or the rest of its reply
        dropped): the faces go back to neutral ``linger_ms`` later."""
        if role not in self.expressions:
            return []
        back = end_ms + self.linger_ms
        return [c for other in self.roles if self.expressions[other].at(back)[1] != "neutral"
                for c in self._express(other, back, "neutral", f"{self.names[role]} finished")]

    def cut(self, role: str, at_ms: int) -> list[Change]:
        """``role``'s speech was cut at ``at_ms``: its face goes back to neutral there."""
        if role not in self.expressions:
            return []
        return self._express(role, at_ms, "neutral", "was interrupted", hold=False)

    def _express(self, role: str, t: int, label: str, reason: str, hold: bool = True) -> list[Change]:
        plan = self.expressions[role]
        since, current, _ = plan.at(t)
        if current == label:
            if not plan.later(t + 1):
                return []
            at = t  # something else was planned later (a return to neutral): it is replaced
        else:
            at = max(t, since + self.hold_ms) if hold and plan.starts else t
        plan.set(at, label)
        return [Change(role, at, expression=label, reason=reason)]

    def _look(self, role: str, t: int, target: str, reason: str) -> list[Change]:
        plan = self.looks[role]
        if plan.at(t)[1] == target and not plan.later(t + 1):
            return []
        plan.set(t, target)
        return [Change(role, t, look=target, reason=reason)]

    def forget_before(self, t: int) -> None:
        for plan in (*self.expressions.values(), *self.looks.values()):
            plan.forget_before(t)


@dataclass(frozen=True, slots=True)
class Face:
    """One role's face in one frame."""

    expression: str = "neutral"
    previous: str = "neutral"   # the expression it eases from
    blend: float = 1.0          # how far into ``expression`` (eased; 1: all of it)
    gaze: float = 0.0           # -1 (far left) .. 1 (far right); 0: the audience
    nod: float = 0.0            # 0..1: how far the head is down


def mark(role: str, face: Face) -> FaceMark:
    """``face`` in the steps it is drawn in (what a frame records)."""
    blend = round(min(1.0, max(0.0, face.blend)) * BLEND_STEPS)
    return FaceMark(role, face.expression, face.previous if blend < BLEND_STEPS else face.expression, blend,
                    round(max(-1.0, min(1.0, face.gaze)) * GAZE_STEPS), round(min(1.0, max(0.0, face.nod)) * NOD_STEPS))


def drawn(m: FaceMark) -> Face:
    """What a recorded mark draws."""
    return Face(m.expression, m.previous, m.blend / BLEND_STEPS, m.gaze / GAZE_STEPS, m.nod / NOD_STEPS)


class FaceTimeline:
    """The faces of one run as its ``viseme.face`` events say (taken in the order they were
    emitted), at any show time."""

    def __init__(self, roles: Sequence[str], seed: int = 0) -> None:
        self.roles = tuple(roles)
        self.slot = {r: i for i, r in enumerate(self.roles)}
        self.expressions = {r: Plan("neutral") for r in self.roles}
        self.looks = {r: Plan(AUDIENCE) for r in self.roles}
        self.nods: dict[str, list[int]] = {r: [] for r in self.roles}
        self._phase = {r: (seed * 7919 + i * 1777) % WANDER_MS for i, r in enumerate(self.roles)}

    @classmethod
    def of(cls, roles: Sequence[str], seed: int, events: Iterable[FaceChanged]) -> FaceTimeline:
        """The timeline of a recorded run's ``viseme.face`` events, in the order they were emitted."""
        timeline = cls(roles, seed)
        for event in events:
            timeline.add(event)
        return timeline

    def add(self, event: FaceChanged) -> None:
        role = event.role or ""
        if role not in self.expressions:
            return
        if event.expression:
            self.expressions[role].set(event.start_ms, event.expression, event.ease_ms)
        if event.look:
            self.looks[role].set(event.start_ms, event.look, event.ease_ms)
        if event.gesture == "nod":
            bisect.insort(self.nods[role], event.start_ms)

    def forget_before(self, t: int) -> None:
        for plan in (*self.expressions.values(), *self.looks.values()):
            plan.forget_before(t)
        for role, nods in self.nods.items():
            self.nods[role] = [n for n in nods if n + NOD_MS > t]

    def face(self, role: str, t: int, speaking: bool) -> Face:
        expression, previous, blend = self.expressions[role].eased(t)
        look, looked, turned = self.looks[role].eased(t)
        before = self._direction(role, looked)
        gaze = before + (self._direction(role, look) - before) * turned
        if not speaking:  # idle eyes drift a little and come back: a listener never freezes
            gaze += 0.12 * math.sin(2 * math.pi * ((t + self._phase[role]) % WANDER_MS) / WANDER_MS)
        nod = 0.0
        i = bisect.bisect_right(self.nods[role], t) - 1
        if i >= 0 and t - self.nods[role][i] < NOD_MS:
            nod = math.sin(math.pi * (t - self.nods[role][i]) / NOD_MS)
        return Face(expression, previous, blend, max(-1.0, min(1.0, gaze)), nod)

    def _direction(self, role: str, look: str) -> float:
        """Where ``role`` looks to see ``look``: toward its slot on stage (neighbours half way)."""
        if look not in self.slot or look == role:
            return 0.0
        return max(-1.0, min(1.0, (self.slot[look] - self.slot[role]) / 2))
