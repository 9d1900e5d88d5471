"""The scripted writer's lines of the show's own: a point on the brief, a follow-up to another
role, an invitation to the chat; in English or Mandarin.

What is worth hearing comes from the show: a point on the brief is one of the segment's
``points`` or the role's own ``material`` (stories, facts, catchphrases), said as written.  The
writer makes up only what needs no knowledge: a follow-up names something from the line it
answers ("Instant noodles, Mika? Now you've got me curious."), and the rundown has the role go
on with a point of its own next; an invitation asks the chat one question about the segment's
topic.  It never splices two keywords into a claim.  Where the show gives no material, a point
on the brief becomes a question to the chat.  The lines stay short, so a comment that arrives
while one is spoken does not wait long.

The role's n-th line of a kind is entry ``(n * stride + offset) mod N`` of its N choices,
``stride`` prime to N: a role says none of them twice before it has said all N.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

MATERIAL, TEMPLATE = "material", "template"

# {heard}: what the line answered said; {to}: the role it answers; {topic}: the segment's; {name}: the speaker.
_EN_FOLLOW = (
    "{heard}, {to}? Now you've got me curious.",
    "Ha, {heard}! Good one, {to}.",
    "{to}, tell me more about {heard} later.",
    "Oh, {heard}? I did not see that coming, {to}.",
    "{heard}, {to}? I'm with you on that one.",
    "Wait, {heard}? {to}, you always surprise me.",
    "{to}, {heard} sounds like a plan to me.",
    "Okay {to}, {heard} is going on my list.",
)
_EN_FOLLOW_BARE = (  # when nothing in the line answered could be named
    "{to}, I'm with you on that one.", "Ha, good one, {to}.", "{to}, you always surprise me.",
)
_EN_INVITE = (
    "Chat, what do you think about {topic}?",
    "Who here is into {topic}? Tell us in the chat!",
    "Chat, what's your favourite thing about {topic}?",
    "Any {topic} stories tonight, chat?",
    "Chat, should {name} try more {topic}?",
    "Tell {name} in the chat: how do you feel about {topic}?",
    "Chat, what got you into {topic}?",
    "Quick poll, chat: love {topic} or skip it?",
    "Chat, teach {name} one thing about {topic}!",
    "What's the best {topic} you ever had, chat?",
)
_EN_INVITE_OPEN = (  # a segment with no topic: questions that need none
    "Chat, what should we talk about next?",
    "What's everyone up to tonight, chat?",
    "Tell {name} something good from your day, chat!",
    "Chat, where are you all watching from?",
    "Quick poll, chat: what are you drinking right now?",
    "Chat, ask {name} anything!",
)
_ZH_FOLLOW = (
    "{heard}？{to}，你让我好奇了。",
    "哈哈，{heard}！说得好，{to}。",
    "{to}，等会儿多讲讲{heard}吧。",
    "{heard}？{to}，没想到呀。",
    "{to}，{heard}这个我同意。",
    "{heard}？{to}，你总是给我惊喜。",
)
_ZH_FOLLOW_BARE = ("{to}，这个我同意。", "哈哈，说得好，{to}。", "{to}，你总是给我惊喜。")
_ZH_INVITE = (
    "弹幕说说，你们怎么看{topic}？",
    "喜欢{topic}的扣个1！",
    "大家最近有什么{topic}的故事吗？",
    "聊聊{topic}吧，弹幕告诉{name}！",
    "说到{topic}，你们更喜欢哪一种？",
    "弹幕告诉{name}，你们第一次接触{topic}是什么时候？",
    "{topic}有什么推荐吗？弹幕说说！",
    "大家投个票：{topic}，爱还是不爱？",
    "你们吃过最难忘的{topic}是什么？",
    "关于{topic}，弹幕教{name}一招吧！",
)
_ZH_INVITE_OPEN = (
    "弹幕说说，接下来想聊点什么？",
    "大家今晚都在忙什么呀？",
    "弹幕告诉{name}，今天有什么开心事？",
    "大家都是从哪里来看的呀？",
    "有什么想问{name}的，尽管发弹幕！",
)
_TABLES = {"en": {"follow_up": _EN_FOLLOW, "bare": _EN_FOLLOW_BARE, "invitation": _EN_INVITE, "open": _EN_INVITE_OPEN},
           "zh": {"follow_up": _ZH_FOLLOW, "bare": _ZH_FOLLOW_BARE, "invitation": _ZH_INVITE, "open": _ZH_INVITE_OPEN}}
_PRIMES = (7919, 104729, 1299709, 15485863, 179424673, 2147483647)


@dataclass(frozen=True, slots=True)
class OwnLine:
    """What a line of the show's own is built from."""

    kind: str                  # "brief", "follow_up" or "invitation"
    language: str              # "en" or "zh"
    role: str
    name: str
    turn: int                  # the role's own lines of this kind before this one
    topics: Sequence[str]      # the segment's topics the role can say, in its language
    to: str = ""               # the role a follow-up speaks to
    heard: str = ""            # what a follow-up names of the line it answers ("": nothing nameable)
    points: Sequence[str] = ()    # the segment's points, said as written, in order (once a run each)
    material: Sequence[str] = ()  # the role's material, said as written
    point: int = -1            # the segment's points said before this brief (-1: not a point)
    seed: int = 0


def _pick(line: OwnLine, n: int, salt: str) -> int:
    """The role's ``turn``-th choice of ``n``, in an order of its own (each once in ``n`` turns)."""
    digest = hashlib.sha256(f"{line.seed}:{line.role}:{line.kind}:{salt}".encode()).digest()
    offset = int.from_bytes(digest[:8], "big") % n
    stride = next(p for p in _PRIMES[int.from_bytes(digest[8:9], "big") % 3:] if math.gcd(p, n) == 1)
    return (line.turn * stride + offset) % n


def own_line(line: OwnLine) -> tuple[str, str]:
    """The role's line and where it came from (``MATERIAL``: the show's words; ``TEMPLATE``).

    A point on the brief is the segment's next point, else the role's ``turn``-th material."""
    table = _TABLES[line.language]
    if line.kind == "brief" and 0 <= line.point < len(line.points):
        return line.points[line.point], MATERIAL
    if line.kind == "brief" and line.material:
        return line.material[_pick(line, len(line.material), "material")], MATERIAL
    if line.kind == "follow_up":
        frames = table["follow_up" if line.heard else "bare"]
        text = frames[_pick(line, len(frames), "")].format(heard=line.heard, to=line.to)
    elif not line.topics:  # an invitation with no topic to name: a question that needs none
        frames = table["open"]
        text = frames[_pick(line, len(frames), "invite")].format(name=line.name)
    else:  # an invitation, or a point on a brief the show gave nothing to say about: a question
        frames, topics = table["invitation"], list(line.topics)
        frame = frames[_pick(line, len(frames), "invite")]  # each frame once in len(frames) turns,
        topic = topics[(line.turn // len(frames) + _pick(line, len(topics), "topic")) % len(topics)]  # then the next topic
        text = frame.format(topic=topic, name=line.name)
    return text[0].upper() + text[1:], TEMPLATE
