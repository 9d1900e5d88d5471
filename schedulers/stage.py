"""The stage's speaking budget: which waiting comment gets the floor next, and which are let go.

One stage, one floor: a chat can outrun it by far (a busy room sends several
comments a second; a reply takes seconds to speak).  ``StagePlan`` keeps the
speech already asked for within a budget and decides, each time the floor is
about to free, which waiting comment is answered:

- a moderator line or a gift takes the floor at once (urgent: the speech in
  progress is cut), behind earlier urgent lines only; then comments addressed
  to a role, then any other comment;
- within a class, a viewer not answered recently before one who was (fairness),
  then the freshest comment (a live room talks about what was just said);
- a comment waits at most its class's wait limit; past it, it is let go
  (``stale``); a viewer has at most one comment waiting (a newer one replaces it,
  ``superseded``, unless the waiting one is addressed and the newer is not:
  then the newer is let go, ``user_waiting``);
- replies get shorter as the waiting room fills, so more viewers are answered;
- nothing is asked for that cannot be spoken before the show's end.

The plan estimates speech from the number of sentences it allows a reply (the
actors downstream enforce what it cannot know: lipsync drops a reply that could
not start before its deadline, and anything that would run past the end).
Everything is a pure function of the inputs and the times passed in.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

MODERATOR, GIFT, ADDRESSED, COMMENT = 0, 1, 2, 3
CLASS_NAMES = ("moderator", "gift", "addressed", "comment")


@dataclass(frozen=True, slots=True)
class StagePolicy:
    """The knobs of the stage budget (all times in ms of show time)."""

    backlog_ms: int = 4000        # speech asked for and not yet spoken stays under this
    lead_ms: int = 300            # a reply is asked for this long before the floor frees
    wait_ms: tuple[int, int, int, int] = (0, 0, 6000, 4500)  # per class: longest wait for the floor
    user_gap_ms: int = 30000      # a viewer answered this recently yields to the others
    sentence_ms: int = 1700       # estimated speech of one sentence (espeak: p50 1.5 s, p90 2.2 s)
    pause_ms: int = 400           # and the pause before the next reply: estimates err long, never
                                  # short, or the real backlog would grow reply after reply
    own_line_ms: int = 2600       # estimated speech of a line of the show's own (one short sentence:
                                  # the scripted writer's with espeak: p50 2.5 s, p90 3.1 s)
    opener_ms: int = 0            # estimated speech of the opener every reply begins with (0: none)
    max_sentences: int = 3
    crowd: int = 3                # this many comments waiting: replies of one sentence

    def sentences(self, waiting: int, backlog_ms: int) -> int:
        """How long a reply may be: shorter as the room fills and as speech queues up."""
        by_room = self.max_sentences if waiting == 0 else (2 if waiting < self.crowd else 1)
        by_backlog = max(1, (self.backlog_ms - backlog_ms) // self.sentence_ms)
        return max(1, min(self.max_sentences, by_room, by_backlog))

    def estimate_ms(self, sentences: int) -> int:
        """Estimated speech of a reply of at most ``sentences`` sentences."""
        return self.opener_ms + sentences * self.sentence_ms + self.pause_ms

    def verbatim_ms(self, text: str) -> int:
        """Estimated speech of a line said word for word: Latin script about 15 characters a
        second, Chinese about 4.5."""
        wide = sum(1 for ch in text if ord(ch) >= 0x2E80)
        return int((len(text) - wide) / 15 * 1000 + wide / 4.5 * 1000) + self.pause_ms


@dataclass(slots=True)
class Candidate:
    """A valid comment waiting for the floor."""

    key: str                      # the danmaku id
    cls: int
    user: str
    arrival_ms: int
    seq: int                      # arrival order (ties)
    attached: list[str] = field(default_factory=list)  # near-duplicates answered with it
    from_ms: int = 0              # its wait limit counts from here: arrival, or the end of the
                                  # show's own line it arrived behind (that wait is not its class's)


@dataclass(frozen=True, slots=True)
class Decision:
    """What the plan decided for one candidate at ``at_ms``."""

    candidate: Candidate
    at_ms: int
    answer: bool                  # True: issue a cue; False: let it go
    reason: str = ""              # why it was let go: stale, superseded, show_ending
    sentences: int = 0
    urgent: bool = False          # takes the floor now (interrupts the speech in progress)


class StagePlan:
    """The floor's estimated schedule and the waiting room of one run."""

    def __init__(self, policy: StagePolicy, end_ms: int = 0) -> None:
        self.policy = policy
        self.end_ms = end_ms              # the show's planned end (0: open-ended)
        self.floor_free_ms = 0            # when the speech asked for so far is estimated to end
        self.urgent_free_ms = 0           # the same for urgent speech only (never cut)
        self.waiting: dict[str, Candidate] = {}
        self.answered: dict[str, int] = {}  # user -> when last answered
        self.own_until_ms = 0             # when the show's own speech asked for is estimated to end
        self._arrivals = 0

    def __len__(self) -> int:
        return len(self.waiting)

    def backlog_ms(self, now_ms: int) -> int:
        """Speech asked for and not yet (estimated) spoken."""
        return max(0, self.floor_free_ms - now_ms)

    def add(self, key: str, cls: int, user: str, now_ms: int) -> list[Decision]:
        """A comment arrives; returns the decisions it causes at once (a replaced comment,
        an urgent line answered now)."""
        self._arrivals += 1
        cand = Candidate(key, cls, user, now_ms, self._arrivals, from_ms=max(now_ms, self.own_until_ms))
        out: list[Decision] = []
        if cls in (MODERATOR, GIFT):
            if not self._fits(now_ms, 1, urgent=True):
                return [Decision(cand, now_ms, False, "show_ending")]
            return [self._answer(cand, now_ms, 1, True)]
        if user:
            old = next((c for c in self.waiting.values() if c.user == user), None)
            if old is not None and old.cls < cls:  # the waiting one matters more: it stays
                return [Decision(cand, now_ms, False, "user_waiting")]
            if old is not None:
                del self.waiting[old.key]
                out.append(Decision(old, now_ms, False, "superseded"))
        self.waiting[key] = cand
        return out + self.decide(now_ms)

    def occupy(self, now_ms: int, speech_ms: int) -> None:
        """Speech asked for that no comment waited for (the show's own line, an operator's)."""
        self.floor_free_ms = max(now_ms, self.floor_free_ms) + speech_ms
        self.own_until_ms = self.floor_free_ms

    def shorten(self, now_ms: int, speech_ms: int, urgent: bool = False) -> None:
        """The reply just answered was asked for ``speech_ms`` shorter than planned (its role's
        writer is slow): the floor frees that much sooner."""
        self.floor_free_ms = max(now_ms, self.floor_free_ms - speech_ms)
        if urgent:
            self.urgent_free_ms = max(now_ms, self.urgent_free_ms - speech_ms)

    def fits(self, now_ms: int, speech_ms: int, urgent: bool = False) -> bool:
        """Would speech this long, asked for now, end before the show does? (Urgent speech
        queues behind urgent speech only.)"""
        if not self.end_ms:
            return True
        start = max(now_ms + self.policy.lead_ms, self.urgent_free_ms if urgent else self.floor_free_ms)
        return start + speech_ms <= self.end_ms

    def attach(self, key: str, duplicate: str) -> bool:
        """Answer ``duplicate`` with the waiting comment ``key`` (False when it is not waiting)."""
        cand = self.waiting.get(key)
        if cand is None:
            return False
        cand.attached.append(duplicate)
        return True

    def next_due_ms(self) -> int | None:
        """When ``decide`` next has something to do (the floor frees, a comment goes stale)."""
        if not self.waiting:
            return None
        free = self.floor_free_ms - self.policy.lead_ms
        stale = min(c.from_ms + self.policy.wait_ms[c.cls] for c in self.waiting.values())
        due = min(free, stale + 1)
        return max(0, min(due, self.end_ms) if self.end_ms else due)

    def decide(self, now_ms: int) -> list[Decision]:
        """Let go of what waited too long; give the floor to the best comment when it frees."""
        policy = self.policy
        if self.end_ms and now_ms >= self.end_ms:
            return self.drain(now_ms, "show_ending")
        out: list[Decision] = []
        for cand in sorted(self.waiting.values(), key=lambda c: c.seq):
            if now_ms - cand.from_ms > policy.wait_ms[cand.cls]:
                del self.waiting[cand.key]
                out.append(Decision(cand, now_ms, False, "stale"))
        while self.waiting and self.backlog_ms(now_ms) <= policy.lead_ms:
            best = min(self.waiting.values(), key=lambda c: self._rank(c, now_ms))
            del self.waiting[best.key]
            sentences = policy.sentences(len(self.waiting), self.backlog_ms(now_ms))
            if not self._fits(now_ms, 1):
                out.append(Decision(best, now_ms, False, "show_ending"))
                continue
            while sentences > 1 and not self._fits(now_ms, sentences):
                sentences -= 1
            out.append(self._answer(best, now_ms, sentences, False))
        return out

    def drain(self, now_ms: int, reason: str) -> list[Decision]:
        """Let go of every waiting comment (the show ended)."""
        out = [Decision(c, now_ms, False, reason) for c in sorted(self.waiting.values(), key=lambda c: c.seq)]
        self.waiting.clear()
        return out

    def _rank(self, cand: Candidate, now_ms: int) -> tuple[int, int, int]:
        last = self.answered.get(cand.user) if cand.user else None
        recently = int(last is not None and now_ms - last < self.policy.user_gap_ms)
        return (cand.cls, recently, -cand.seq)

    def _fits(self, now_ms: int, sentences: int, urgent: bool = False) -> bool:
        """Would a reply of this length, asked for now, end before the show does?"""
        return self.fits(now_ms, self.policy.estimate_ms(sentences), urgent)

    def _answer(self, cand: Candidate, now_ms: int, sentences: int, urgent: bool) -> Decision:
        speech = self.policy.estimate_ms(sentences)
        if urgent:  # everything not urgent that was asked for is cut where it is
            self.urgent_free_ms = max(now_ms, self.urgent_free_ms) + speech
            self.floor_free_ms = self.urgent_free_ms
        else:
            self.floor_free_ms = max(now_ms, self.floor_free_ms) + speech
        if cand.user:
            if len(self.answered) > 4096:  # forget viewers answered long ago: bounded per run
                gap = self.policy.user_gap_ms
                self.answered = {u: t for u, t in self.answered.items() if now_ms - t < gap}
            self.answered[cand.user] = now_ms
        return Decision(cand, now_ms, True, sentences=sentences, urgent=urgent)

    def __iter__(self) -> Iterator[Candidate]:
        return iter(sorted(self.waiting.values(), key=lambda c: c.seq))
