"""The stage's speaking budget: which waiting comment gets the floor next, and which are let go.

One stage, one floor: a chat can outrun it by far (a busy room sends several
comments a second; a reply takes seconds to speak).  ``StagePlan`` keeps the
speech already asked for within a budget and decides, each time the floor is
about to free, which waiting comment is answered:

- a moderator line or a gift takes the floor at once (urgent: the speech in
  progress is cut), behind earlier urgent lines only; then comments addressed
  to a role, then any other comment;
- within a class, the comment most worth answering (``schedulers.choice``: a viewer not
  answered recently first, a question before a greeting, one about to go stale, one for a
  role behind its share of the speaking time, then the freshest);
- a comment waits at most its class's wait limit for its speech to begin; one that could
  not be on air within it is let go (``stale``); a viewer has at most one comment waiting (a newer one replaces it,
  ``superseded``, unless the waiting one is addressed and the newer is not:
  then the newer is let go, ``user_waiting``);
- replies get shorter as the waiting room fills, so more viewers are answered;
- nothing is asked for that cannot be spoken before the show's end.

The floor follows the speech actually placed: lipsync tells where each reply's
speech starts and ends (``placed``), and the plan estimates only what is not placed
yet, from the number of sentences it allows a reply.  The next reply is asked for
``ahead_ms`` before the floor frees (a reply "on deck": chosen, written and
synthesized while the current one is spoken), so that it starts one natural pause
(``pause_ms``) after the current one ends.  The actors downstream enforce what the
plan cannot know: lipsync drops a reply that could not start before its deadline,
and anything that would run past the end.  Everything is a pure function of the
inputs and the times passed in.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from schedulers.choice import REMARK, behind, rank

MODERATOR, GIFT, ADDRESSED, COMMENT = 0, 1, 2, 3
RISK_MARGIN_MS = 500  # a comment stale within one short reply and this much more goes first
CLASS_NAMES = ("moderator", "gift", "addressed", "comment")


@dataclass(frozen=True, slots=True)
class StagePolicy:
    """The knobs of the stage budget (all times in ms of show time)."""

    backlog_ms: int = 4000        # speech asked for and not yet spoken stays under this
    lead_ms: int = 300            # a reply takes this long from its cue to its first speech
    deck_ms: int = 1500           # the next reply is asked for at least this long before the floor frees
    wait_ms: tuple[int, int, int, int] = (0, 0, 6000, 4500)  # per class: longest wait for the floor
    user_gap_ms: int = 30000      # a viewer answered this recently yields to the others
    sentence_ms: int = 1700       # estimated speech of one sentence (espeak: p50 1.5 s, p90 2.2 s)
    pause_ms: int = 200           # the natural pause lipsync leaves between two replies
    own_line_ms: int = 2600       # estimated speech of a line of the show's own (one short sentence:
                                  # the scripted writer's with espeak: p50 2.5 s, p90 3.1 s)
    opener_ms: int = 0            # estimated speech of the opener every reply begins with (0: none)
    max_sentences: int = 3
    crowd: int = 3                # this many comments waiting: replies of one sentence

    @property
    def ahead_ms(self) -> int:
        """How long before the floor frees the next reply is asked for: the deck, or longer where
        a role's writer needs longer to its first sentence."""
        return max(self.lead_ms, self.deck_ms)

    def sentences(self, waiting: int, backlog_ms: int) -> int:
        """How long a reply may be: shorter as the room fills and as speech queues up."""
        by_room = self.max_sentences if waiting == 0 else (2 if waiting < self.crowd else 1)
        # The reply on deck is asked for while the one before it is spoken: that speech is not backlog.
        by_backlog = max(1, (self.backlog_ms - max(0, backlog_ms - self.ahead_ms)) // self.sentence_ms)
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
    kind: int = REMARK            # question, remark or greeting (schedulers.choice)
    role: str = ""                # the role it is for, where that is known before routing
    regular: bool = False         # a returning viewer's, ranked first among equals (never past one at risk)


@dataclass(slots=True)
class Speech:
    """Speech asked for (a reply, a line of the show's own, an operator's): estimated until
    lipsync places it, then where it was placed."""

    key: str                      # the cue id
    asked_ms: int
    estimate_ms: int              # its speech and the pause after it, as estimated when asked
    urgent: bool = False
    role: str = ""
    own: bool = False             # a line of the show's own: it gives way to a comment until it begins
    unasked: bool = False         # no comment asked for it (the show's own, an operator's): a comment
                                  # that comes while it is spoken waits for it, its wait counted after it
    start_ms: int | None = None   # placed: where its speech starts
    end_ms: int = 0               # where its speech placed so far ends
    done: bool = False            # nothing more of it will be placed (kept until it is heard: on deck, it may go)
    gone: bool = False            # dropped or cut: no longer planned for
    begins_ms: int = 0            # where its speech begins: as placed, else as planned (``_replan``)

    def ends_ms(self, pause_ms: int) -> int:
        """Where it ends, its pause after it included: as placed when all of it is, else as
        estimated from where it begins (or as placed so far, if that is later)."""
        if self.start_ms is None:
            return self.begins_ms + self.estimate_ms
        if self.done:
            return self.end_ms + pause_ms
        return max(self.end_ms + pause_ms, self.begins_ms + self.estimate_ms)


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
    """The floor's schedule and the waiting room of one run."""

    def __init__(self, policy: StagePolicy, end_ms: int = 0) -> None:
        self.policy = policy
        self.end_ms = end_ms              # the show's planned end (0: open-ended)
        self.floor_free_ms = 0            # when the next reply can start: the speech asked for so far and a pause
        self.urgent_free_ms = 0           # the same for urgent speech only (never cut)
        self.urgent_placed_ms = 0         # where the urgent speech placed so far ends, and a pause
        self.placed_ms = 0                # where the speech lipsync placed so far ends
        self.speech: dict[str, Speech] = {}  # asked for, not all placed yet: in the order asked
        self.waiting: dict[str, Candidate] = {}
        self.answered: dict[str, int] = {}  # user -> when last answered
        self.since_ms = 0                 # the floor last moved earlier then: nothing is decided before it
        self.weights: dict[str, float] = {}  # role -> its weight: its share of the speaking time
        self.spoken: dict[str, int] = {}  # role -> ms of its speech placed so far
        self._arrivals = 0

    def __len__(self) -> int:
        return len(self.waiting)

    def backlog_ms(self, now_ms: int) -> int:
        """Speech asked for and not yet spoken (placed, or estimated where it is not)."""
        return max(0, self.floor_free_ms - now_ms)

    def add(self, key: str, cls: int, user: str, now_ms: int, kind: int = REMARK, role: str = "",
            regular: bool = False) -> list[Decision]:
        """A comment arrives; returns the decisions it causes at once (a replaced comment,
        an urgent line answered now)."""
        self._arrivals += 1
        cand = Candidate(key, cls, user, now_ms, self._arrivals, from_ms=max(now_ms, self._unasked_until()), kind=kind,
                         role=role, regular=regular)
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

    # -- the speech on the floor ---------------------------------------------------

    def ask(self, key: str, now_ms: int, speech_ms: int, urgent: bool = False, role: str = "",
            own: bool = False) -> None:
        """Speech asked for now, estimated ``speech_ms`` (its pause after it included).  Urgent
        speech cuts everything not urgent where it is, and queues behind urgent speech only."""
        if urgent:
            for other in self.speech.values():
                if not other.urgent:
                    other.gone = True
            self.placed_ms = min(self.placed_ms, max(now_ms, self.urgent_placed_ms - self.policy.pause_ms))
        self.speech[key] = Speech(key, now_ms, speech_ms, urgent, role, own)
        self._replan()

    def occupy(self, key: str, now_ms: int, speech_ms: int, role: str = "", own: bool = False) -> None:
        """Speech asked for that no comment waited for (``own``: the show's own line; an operator's)."""
        self.ask(key, now_ms, speech_ms, role=role, own=own)
        self.speech[key].unasked = True

    def _unasked_until(self) -> int:
        """Where the speech no comment asked for is planned to end: as placed, else as estimated
        (a comment's wait is counted from there: it waits for that line, at most)."""
        return max((s.ends_ms(self.policy.pause_ms) for s in self.speech.values() if s.unasked and not s.gone),
                   default=0)

    def on_deck_own(self, after_ms: int) -> list[Speech]:
        """The show's own lines asked for and not placed, estimated to begin after ``after_ms``:
        a comment that comes now takes their place (chat first)."""
        # placed to begin later: lipsync takes it off
        return [s for s in self.speech.values() if s.own and not s.gone and s.begins_ms > after_ms]

    def shorten(self, key: str, speech_ms: int, now_ms: int) -> None:
        """Speech asked for is ``speech_ms`` shorter than estimated (its role's writer is slow)."""
        speech = self.speech.get(key)
        if speech is not None:
            speech.estimate_ms -= min(speech_ms, speech.estimate_ms)
            self._moved(now_ms)

    def drop(self, key: str, now_ms: int) -> None:
        """Speech asked for will not be spoken (its reply was dropped before it began)."""
        speech = self.speech.get(key)
        if speech is not None:
            speech.gone = True
            if speech.start_ms is not None:  # placed to begin later: lipsync takes it off, the floor frees before it
                self.placed_ms = min(self.placed_ms, max(now_ms, speech.start_ms - self.policy.pause_ms))
            self._moved(now_ms)

    def placed(self, key: str, start_ms: int, end_ms: int, done: bool, floor_ms: int, now_ms: int) -> bool:
        """Lipsync placed speech asked for (``start_ms`` -1: none of it); ``floor_ms``: where all
        speech placed so far ends.  False when it is no longer planned for (cut by urgent speech,
        or never asked for here): then it changes nothing."""
        speech = self.speech.get(key)
        if speech is None or speech.done or speech.gone:
            return False
        if start_ms >= 0:
            speech.start_ms = start_ms if speech.start_ms is None else speech.start_ms
            speech.end_ms = max(speech.end_ms, end_ms)
        speech.done = done
        if done and speech.start_ms is not None and speech.role:
            self.spoken[speech.role] = self.spoken.get(speech.role, 0) + speech.end_ms - speech.start_ms
        if done and speech.urgent and speech.start_ms is not None:
            self.urgent_placed_ms = max(self.urgent_placed_ms, speech.end_ms + self.policy.pause_ms)
        self.placed_ms = floor_ms
        self._moved(now_ms)
        return True

    def _moved(self, now_ms: int) -> None:
        """The floor was replanned on what was heard at ``now_ms``: what it makes due is decided
        then, not at a moment before it was known."""
        self.since_ms = max(self.since_ms, now_ms)
        self._replan()

    def _replan(self) -> None:
        """When the floor frees: the speech placed, then what is asked for and not placed yet, by
        its estimate (a reply placed in part: its estimate, or what is placed if that is longer)."""
        pause = self.policy.pause_ms
        free = self.placed_ms + pause if self.placed_ms else 0
        urgent = self.urgent_placed_ms  # urgent speech queues behind urgent speech only
        for key in [k for k, s in self.speech.items() if s.gone or s.done and s.start_ms is None]:
            del self.speech[key]
        for speech in self.speech.values():
            if speech.start_ms is None:
                speech.begins_ms = max(urgent if speech.urgent else free, speech.asked_ms)
                free = speech.ends_ms(pause)
            else:
                speech.begins_ms = speech.start_ms
                free = max(free, speech.ends_ms(pause))
            if speech.urgent:
                urgent = max(urgent, free)
        self.floor_free_ms = free
        self.urgent_free_ms = urgent

    def forget(self, now_ms: int, after_ms: int = 60_000) -> None:
        """Speech asked for ``after_ms`` ago and never placed is not waited for any more (its reply
        was lost: its estimate has long passed)."""
        lost = [k for k, s in self.speech.items() if s.start_ms is None and now_ms - s.asked_ms > after_ms
                or s.done and s.start_ms is not None and s.start_ms <= now_ms]  # and what is on air already
        for key in lost:
            del self.speech[key]
        if lost:
            self._replan()

    # -- the comments ----------------------------------------------------------------

    def fits(self, now_ms: int, speech_ms: int, urgent: bool = False) -> bool:
        """Would speech this long, asked for now, end before the show does? (Urgent speech
        queues behind urgent speech only.)"""
        if not self.end_ms:
            return True
        start = max(now_ms + self.policy.lead_ms, self.urgent_free_ms if urgent else self.floor_free_ms)
        return start + speech_ms - self.policy.pause_ms <= self.end_ms

    def attach(self, key: str, duplicate: str) -> bool:
        """Answer ``duplicate`` with the waiting comment ``key`` (False when it is not waiting)."""
        cand = self.waiting.get(key)
        if cand is None:
            return False
        cand.attached.append(duplicate)
        return True

    def ahead(self, key: str, now_ms: int) -> int:
        """How many waiting comments the floor would go to before the waiting comment ``key``, as
        they rank at ``now_ms`` (0 when it is not waiting)."""
        cand = self.waiting.get(key)
        if cand is None:
            return 0
        mine = self._rank(cand, now_ms)
        return sum(1 for c in self.waiting.values() if c is not cand and self._rank(c, now_ms) < mine)

    def until_ms(self, key: str) -> int:
        """The latest the reply to the waiting comment ``key`` may begin: after it, it is let go
        (``stale``); 0 when it is not waiting."""
        cand = self.waiting.get(key)
        return 0 if cand is None else cand.from_ms + self.policy.wait_ms[cand.cls]

    def next_due_ms(self) -> int | None:
        """When ``decide`` next has something to do (the floor frees, a comment goes stale)."""
        if not self.waiting:
            return None
        free = self.floor_free_ms - self.policy.ahead_ms
        stale = min(c.from_ms + self.policy.wait_ms[c.cls] for c in self.waiting.values()) - self.policy.ahead_ms
        due = min(free, stale + 1)
        return max(self.since_ms, min(due, self.end_ms) if self.end_ms else due)

    def decide(self, now_ms: int) -> list[Decision]:
        """Let go of what waited too long; give the floor to the best comment when it is about to
        free (the next reply goes on deck)."""
        policy = self.policy
        if self.end_ms and now_ms >= self.end_ms:
            return self.drain(now_ms, "show_ending")
        out: list[Decision] = []
        start = self._earliest_start(now_ms)
        for cand in sorted(self.waiting.values(), key=lambda c: c.seq):
            if start - cand.from_ms > policy.wait_ms[cand.cls]:  # it could not be on air in its wait limit
                del self.waiting[cand.key]
                out.append(Decision(cand, now_ms, False, "stale"))
        self.forget(now_ms)
        while self.waiting and self.backlog_ms(now_ms) <= policy.ahead_ms:
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

    def _earliest_start(self, now_ms: int) -> int:
        """The earliest a reply asked for now can begin: when the floor frees, and no sooner than
        the deck allows (a floor estimated to free later may free sooner: it is not counted)."""
        return max(now_ms, min(self.floor_free_ms, now_ms + self.policy.ahead_ms))

    def _rank(self, cand: Candidate, now_ms: int) -> tuple[int, ...]:
        last = self.answered.get(cand.user) if cand.user else None
        recently = last is not None and now_ms - last < self.policy.user_gap_ms
        # Whether it goes stale before the floor is given again (about one short reply from now; a
        # margin, for a reply spoken longer than estimated).
        stale = cand.from_ms + self.policy.wait_ms[cand.cls]
        start = self._earliest_start(now_ms)
        at_risk = stale if stale <= start + self.policy.estimate_ms(1) + RISK_MARGIN_MS else None
        return rank(cand.cls, cand.kind, recently, at_risk, behind(cand.role, self.spoken, self.weights), cand.seq,
                    cand.regular)

    def _fits(self, now_ms: int, sentences: int, urgent: bool = False) -> bool:
        """Would a reply of this length, asked for now, end before the show does?"""
        return self.fits(now_ms, self.policy.estimate_ms(sentences), urgent)

    def _answer(self, cand: Candidate, now_ms: int, sentences: int, urgent: bool) -> Decision:
        """The comment gets the floor: its speech is asked for under the comment's key until the
        director names its cue (``rekey``)."""
        self.ask(cand.key, now_ms, self.policy.estimate_ms(sentences), urgent)
        if cand.user:
            if len(self.answered) > 4096:  # forget viewers answered long ago: bounded per run
                gap = self.policy.user_gap_ms
                self.answered = {u: t for u, t in self.answered.items() if now_ms - t < gap}
            self.answered[cand.user] = now_ms
        return Decision(cand, now_ms, True, sentences=sentences, urgent=urgent)

    def begins(self, key: str) -> int:
        """Where the speech asked for under ``key`` is planned to begin (0: none asked)."""
        speech = self.speech.get(key)
        return 0 if speech is None else speech.begins_ms

    def rekey(self, key: str, cue: str, role: str) -> None:
        """The speech asked for a comment is known from now on by its cue's id (what lipsync tells),
        and spoken by ``role``."""
        speech = self.speech.get(key)
        if speech is not None:  # in the same place: the order asked is the order planned
            speech.key, speech.role = cue, role
            self.speech = {cue if k == key else k: s for k, s in self.speech.items()}

    def __iter__(self) -> Iterator[Candidate]:
        return iter(sorted(self.waiting.values(), key=lambda c: c.seq))
