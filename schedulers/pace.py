"""The floor planned from the roles' own pace: pure arithmetic over what was measured.

A model takes time before its first sentence, and voices differ in how long a sentence lasts;
the stage plan (``schedulers.stage``) was planned from espeak's speed.  ``paced`` turns the
roles' measured pace into the plan's knobs:

- a reply is asked for as long before the floor frees as the slowest role takes to its first
  sentence (with a margin), so that it is ready when the floor frees; at most ``MAX_LEAD_MS``;
- a sentence is expected to last what the roles' middle voice takes, each voice by its upper
  quartile (estimates err long, or the real backlog grows reply after reply; the slowest
  voice alone would leave the floor idle for the others); a line of the show's own half again;
- an opener's speech is part of every reply;
- a role whose writer writes a sentence more slowly than it is spoken gets replies of one
  sentence (the floor would wait on the model), one nearly as slow or slow to start, two.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from schedulers.stage import StagePolicy

MAX_LEAD_MS = 4500  # the comments' wait limit: a reply asked earlier would answer a staler chat
LEAD_MARGIN_MS = 200
MIN_SENTENCE_MS, MAX_SENTENCE_MS = 800, 6000
SLOW_START_MS = 2000       # a first sentence slower than this: replies of at most two sentences
OWN_LINE_FACTOR = 1.5      # a line of the show's own against a reply's sentence (espeak: 2.6 s / 1.7 s)


@dataclass(frozen=True, slots=True)
class Pace:
    """One role's measured pace (ms)."""

    first_sentence_ms: int
    sentence_write_ms: int = 0
    speech_ms: int = 0
    opener_ms: int = 0


@dataclass(frozen=True, slots=True)
class Paced:
    """The plan's knobs from the roles' pace, and why."""

    policy: StagePolicy
    max_sentences: dict[str, int]
    reason: str


def max_sentences(pace: Pace, policy: StagePolicy) -> int:
    """The longest reply a role's writer keeps up with."""
    if pace.speech_ms and pace.sentence_write_ms > pace.speech_ms:
        return 1
    if (pace.speech_ms and pace.sentence_write_ms * 10 > pace.speech_ms * 6) or pace.first_sentence_ms > SLOW_START_MS:
        return min(2, policy.max_sentences)
    return policy.max_sentences


def paced(base: StagePolicy, paces: Mapping[str, Pace]) -> Paced:
    """The base policy with its timing from the roles' pace (the base's where nothing is measured)."""
    if not paces:
        return Paced(base, {}, "nothing measured yet")
    slowest_start = max(paces.items(), key=lambda kv: kv[1].first_sentence_ms)
    lead = min(MAX_LEAD_MS, max(base.lead_ms, _round(slowest_start[1].first_sentence_ms + LEAD_MARGIN_MS)))
    spoken = {role: p.speech_ms for role, p in paces.items() if p.speech_ms}
    sentence = base.sentence_ms
    if spoken:
        middle = sorted(spoken.values())[len(spoken) // 2]  # the roles' middle voice (each its upper quartile)
        sentence = min(MAX_SENTENCE_MS, max(MIN_SENTENCE_MS, _round(middle)))
    opener = _round(max(p.opener_ms for p in paces.values()))
    policy = dataclasses.replace(base, lead_ms=lead, sentence_ms=sentence, opener_ms=opener,
                                 own_line_ms=_round(sentence * OWN_LINE_FACTOR) if spoken else base.own_line_ms)
    caps = {role: max_sentences(p, base) for role, p in sorted(paces.items())}
    slow = [f"{role} {n}" for role, n in caps.items() if n < base.max_sentences]
    reason = (f"first sentence up to {slowest_start[1].first_sentence_ms} ms ({slowest_start[0]}): asked "
              f"{lead} ms ahead; a sentence {sentence} ms" + (f", an opener {opener} ms" if opener else "")
              + (f"; shorter replies: {', '.join(slow)}" if slow else ""))
    return Paced(policy, caps, reason)


def _round(ms: float) -> int:
    """To 100 ms: the plan changes when the pace does, not with every measurement's noise."""
    return int(round(ms / 100.0) * 100)
