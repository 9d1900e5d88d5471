"""The scripted writer's lines of the show's own: a point on the brief, a follow-up to another
role, an invitation to the chat; one sentence each, in English or Mandarin.

A line is an opener, a frame and the words put into it (the segment's topic, the role's own
interest, the role addressed).  The role's n-th line of a kind is combination number
``(n * stride + offset) mod N`` of its N combinations, ``stride`` prime to N: so a role never
says the same line twice before it has said N of that kind (N is in the thousands: more
than an hour of show), and roles differ by their own interests and names.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

# {topic}: the segment's (or the line answered); {mine}: one of the role's own interests;
# {to}: the role a follow-up speaks to; {name}: the speaking role.
_EN_OPENERS = ("", "Honestly,", "Okay,", "See,", "Look,", "Well,", "So,", "Yes,", "Hmm,", "Oh,", "Wow,",
               "Real talk,")
_EN_BRIEF = (
    "{topic} beats {mine} tonight.",
    "{topic} feels like {mine} to me.",
    "I'd pick {topic} over {mine}.",
    "{topic} and {mine}, best combo.",
    "{topic} is my new {mine}.",
    "more {topic}, less {mine}.",
    "{topic} needs a bit of {mine}.",
    "{topic} is {mine} for grown-ups.",
    "{topic} first, {mine} later.",
    "I owe {topic} to {mine}.",
    "{topic} is the {mine} of tonight.",
    "{mine} fans love {topic} too.",
    "{topic} makes me skip {mine}.",
    "{topic} plus {mine} is a plan.",
    "give me {topic} and {mine}.",
    "{topic} wins, sorry {mine}.",
)
_EN_REACTIONS = ("", "Oh,", "Hmm,", "Okay,", "Wait,", "Ha,", "See,", "Right,", "Ooh,", "Well,", "So,", "Huh,")
_EN_FOLLOW = (
    "{to}, {topic} over {mine}?",
    "{to}, is {topic} like {mine}?",
    "{to}, {topic} with {mine}, yes?",
    "{to}, more {topic}, less {mine}?",
    "{to}, I'd add {mine} to {topic}.",
    "{to}, {topic} beats {mine}, true.",
    "{to}, {topic} or {mine} first?",
    "{to}, you and your {topic}!",
    "{to}, {topic} needs {mine}.",
    "{to}, {mine} fans agree on {topic}.",
    "{to}, so {topic} is your {mine}?",
    "{to}, {topic} talk, my {mine} weakness.",
)
_EN_INVITE = (
    "chat, {topic} or {mine}?",
    "chat, tell {name} your {topic} pick!",
    "comment your {topic} tips for {name}!",
    "chat, is {topic} better than {mine}?",
    "who here loves {topic}, tell {name}!",
    "drop a comment on {topic} for {name}!",
    "chat, {topic} with {mine}, yes or no?",
    "chat, ask {name} about {topic}!",
)
_ZH_OPENERS = ("", "其实", "说真的，", "我觉得", "嗯，", "哇，", "对了，", "讲真，")
_ZH_BRIEF = (
    "{topic}配{mine}最棒。",
    "{topic}比{mine}好玩。",
    "我选{topic}，不选{mine}。",
    "先{topic}，再{mine}。",
    "{topic}就是新的{mine}。",
    "{topic}加{mine}，完美。",
    "{topic}让我忘了{mine}。",
    "喜欢{mine}也会爱{topic}。",
    "{topic}少不了{mine}。",
    "{topic}赢了{mine}。",
)
_ZH_REACTIONS = ("", "哈哈，", "嗯，", "哇，", "对呀，", "等等，", "诶，", "是吗，")
_ZH_FOLLOW = (
    "{to}，{topic}还是{mine}？",
    "{to}，{topic}像{mine}吗？",
    "{to}，{topic}配{mine}吧？",
    "{to}，{topic}里加点{mine}。",
    "{to}，先{topic}再{mine}？",
    "{to}，{topic}赢了{mine}？",
    "{to}，你也爱{topic}？",
    "{to}，{topic}离不开{mine}。",
)
_ZH_INVITE = (
    "弹幕说说，{topic}还是{mine}？",
    "喜欢{topic}的扣一，{name}看着呢！",
    "{topic}怎么样，告诉{name}！",
    "弹幕投票：{topic}或{mine}！",
    "问{name}{topic}的事吧！",
    "{name}想知道你们的{topic}！",
)
_TABLES: dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "en": {"brief": (_EN_OPENERS, _EN_BRIEF), "follow_up": (_EN_REACTIONS, _EN_FOLLOW), "invitation": (_EN_OPENERS, _EN_INVITE)},
    "zh": {"brief": (_ZH_OPENERS, _ZH_BRIEF), "follow_up": (_ZH_REACTIONS, _ZH_FOLLOW), "invitation": (_ZH_OPENERS, _ZH_INVITE)},
}
_PRIMES = (7919, 104729, 1299709, 15485863, 179424673, 2147483647)


@dataclass(frozen=True, slots=True)
class OwnLine:
    """What a line of the show's own is built from."""

    kind: str                  # "brief", "follow_up" or "invitation"
    language: str              # "en" or "zh"
    role: str
    name: str
    turn: int                  # the role's own lines before this one
    topics: Sequence[str]      # words for {topic}, in the role's language
    mine: Sequence[str]        # the role's own interests, for {mine}
    to: str = ""               # the role a follow-up speaks to
    seed: int = 0


def _sizes(line: OwnLine) -> list[int]:
    """How many lines each frame gives: openers x topics (x interests, where it names one)."""
    openers, frames = _TABLES[line.language][line.kind]
    return [len(openers) * (max(1, len(line.topics)) if "{topic}" in frame else 1)
            * (max(1, len(line.mine)) if "{mine}" in frame else 1) for frame in frames]


def combinations(line: OwnLine) -> int:
    """How many different lines of this kind the role can say."""
    return sum(_sizes(line))


def own_line(line: OwnLine) -> str:
    """The role's line: its ``turn``-th combination, in an order of its own."""
    openers, frames = _TABLES[line.language][line.kind]
    topics, mine = list(line.topics) or ["this"], list(line.mine) or ["this"]
    sizes = _sizes(line)
    n = sum(sizes)
    digest = hashlib.sha256(f"{line.seed}:{line.role}:{line.kind}".encode()).digest()
    offset = int.from_bytes(digest[:8], "big") % n
    stride = next(p for p in _PRIMES[int.from_bytes(digest[8:9], "big") % 3:] if math.gcd(p, n) == 1)
    k = (line.turn * stride + offset) % n
    frame = 0
    while k >= sizes[frame]:  # the frame whose block holds combination k
        k -= sizes[frame]
        frame += 1
    k, opener = divmod(k, len(openers))
    topic = 0
    if "{topic}" in frames[frame]:
        k, topic = divmod(k, len(topics))
    values = {"topic": topics[topic], "mine": mine[k % len(mine)], "to": line.to, "name": line.name}
    text = frames[frame].format(**values)
    head = openers[opener]
    if head:
        text = f"{head} {text}" if line.language == "en" else head + text
    return text[0].upper() + text[1:]
