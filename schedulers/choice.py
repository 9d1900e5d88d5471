"""What a waiting comment asks of the stage, and which of the waiting comments a busy floor takes.

A busy room sends far more than the stage can answer; the floor goes, within a class
(moderator, gift, addressed, other), to the comment most worth answering:

- a viewer not answered recently before one who was (fairness);
- a question before a remark, a remark before a bare greeting or reaction ("hi", "666",
  "哈哈哈": the tenth "hi" is merged into the one waiting and acknowledged in one line);
- a comment that would go stale before the floor frees again, before one that can still wait,
  the soonest stale first (an addressed question is not let go while fresher ones take every turn);
- a comment for a role behind its share of the speaking time (by weight), before one for a role
  ahead of it;
- then, of comments addressed to a role, the oldest (a viewer who asked a role directly waits in
  line: a fresher question to the same role does not push it back until it goes stale); of the
  rest, the freshest (a live room talks about what was just said).

Pure: text in, a kind out; candidates and times in, a rank out.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

QUESTION, REMARK, GREETING = 0, 1, 2
ADDRESSED_CLASS = 2  # schedulers.stage.ADDRESSED (the classes: moderator, gift, addressed, comment)
KIND_NAMES = ("question", "remark", "greeting")

_GREETINGS = frozenset({
    "hi", "hii", "hiii", "hello", "helo", "hey", "heya", "hiya", "yo", "sup", "hola", "hallo", "bonjour", "ciao",
    "howdy", "greetings", "gm", "gn", "morning", "evening", "goodmorning", "goodevening", "goodnight", "goodafternoon",
    "hieveryone", "helloeveryone", "heyeveryone", "hiall", "helloall", "hichat", "hellochat", "hithere",
    "hellothere", "heythere", "lol", "lmao", "haha", "hahaha", "xd", "gg", "wow", "nice", "cool", "awesome",
    "pog", "poggers", "kekw", "lul", "omg", "ok", "okay", "yes", "no", "yay", "welcome", "wb", "o7", "first",
    "你好", "您好", "大家好", "主播好", "晚上好", "早上好", "下午好", "中午好", "早安", "晚安", "早", "嗨", "哈喽",
    "哈啰", "来了", "我来了", "打卡", "签到", "前排", "沙发", "哈哈", "哈哈哈", "呵呵", "嘿嘿", "草", "好耶",
    "牛", "牛逼", "厉害", "可爱", "加油", "主播加油", "冲", "awsl", "yyds", "hhh", "hhhh",
})
_WORD_GREETINGS = frozenset({"hi", "hello", "hey", "yo", "hiya", "heya", "sup", "hola", "hallo"})
_QUESTION_WORDS = frozenset({
    "what", "whats", "why", "how", "hows", "where", "when", "who", "whos", "which", "whose", "can", "could", "would",
    "should", "will", "do", "does", "did", "is", "are", "was", "were", "have", "has", "any", "anyone", "recommend",
    "explain", "tell",
})
_QUESTION_ZH = ("吗", "呢", "什么", "怎么", "为什么", "哪", "几", "多少", "谁", "如何", "是不是", "有没有", "能不能",
                "可不可以", "推荐", "么")
_ZH_WHO = frozenset({"主播", "大家", "晚上", "早上", "下午", "中午", "主播晚上", "主播早上", "大家晚上", "各位", "老师"})
_STRIP = re.compile(r"[\W_]+", re.UNICODE)
_WORDS = re.compile(r"[a-z']+")
_REPEATS = re.compile(r"(.)\1{2,}")
# A role or a viewer a comment is addressed to ("@host"): its name, group 1.
MENTION = re.compile(r"@([\w\-]+)", re.UNICODE)


def comment_kind(text: str) -> int:
    """QUESTION, REMARK or GREETING (a greeting, or a bare reaction with nothing to answer)."""
    folded = unicodedata.normalize("NFKC", text).casefold().strip()
    bare = _STRIP.sub("", folded)
    if not bare or bare.isdigit() or bare in _GREETINGS or _REPEATS.sub(r"\1\1", bare) in _GREETINGS:
        return GREETING  # "666", "哈哈哈哈哈", "hiiiii", "hello!!!"
    if "?" in folded or "？" in folded or any(q in folded for q in _QUESTION_ZH):
        return QUESTION
    unmentioned = " ".join(w for w in folded.split() if not w.startswith("@"))
    words = [w.replace("'", "") for w in _WORDS.findall(unmentioned)]
    if words and words[0] in _QUESTION_WORDS:
        return QUESTION
    rest = _STRIP.sub("", unmentioned)
    if words and len(words) <= 3 and (words[0] in _WORD_GREETINGS or rest in _GREETINGS):
        return GREETING  # "hi @rex", "hello everyone", "hey rex"
    if not words and len(rest) <= 6 and (rest in _GREETINGS or rest.endswith("好") and rest[:-1] in _ZH_WHO):
        return GREETING  # "@小鹿 你好", "主播晚上好"
    return REMARK


def behind(role: str, spoken_ms: Mapping[str, int], weights: Mapping[str, float], slack: float = 0.8,
           min_total_ms: int = 10_000) -> bool:
    """Whether a role has spoken less than ``slack`` of its share of the speech so far (its weight
    against the others'); never before ``min_total_ms`` of speech (too little to judge)."""
    total = sum(spoken_ms.values())
    weight_sum = sum(weights.values())
    if not role or total < min_total_ms or weight_sum <= 0 or role not in weights:
        return False
    return spoken_ms.get(role, 0) / total < slack * weights[role] / weight_sum


def rank(cls: int, kind: int, recently: bool, stale_ms: int | None, role_behind: bool, seq: int,
         regular: bool = False) -> tuple[int, ...]:
    """A waiting comment's rank within the waiting room (lowest first); see the module's docstring.
    ``stale_ms``: when it goes stale, if that is before the floor frees again (None: it can wait);
    of those, the soonest first.  ``regular``: a returning viewer's, ranked first among equals
    (``TROUPE_REGULARS_FIRST``), after every comment about to go stale: a newcomer's comment is
    never let go for a regular's."""
    at_risk = stale_ms is not None
    order = seq if cls == ADDRESSED_CLASS else -seq
    return (cls, int(recently), kind, int(not at_risk), stale_ms or 0, int(not role_behind), int(not regular), order)
