"""What a viewer's comment says about them, and what a new comment bears on: pure rules, in
English and Chinese.

- ``extract_facts``: the short facts a viewer states about themselves ("I'm from Berlin", "my
  cat is called Miso", "我在学日语"), as ``Fact``.  Rules, not a model: the same
  comment always gives the same facts, and each fact is recorded with its comment
  (``danmaku.noted``), so the read model rebuilds to the same result.
- ``topic_of``: the thing a comment talks about, in a word or two (the read model keeps a
  viewer's last few).
- ``bearing``: which of a viewer's facts a new comment bears on ("any tips for the weather where
  I live?" bears on where they are from), so that a reply refers to it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Fact:
    """A short fact a viewer stated about themselves: its ``kind`` (``home``, ``learning``,
    ``pet``, ``job``, ``favourite``, ``name``), the ``value`` it names ("Berlin", "Rust", "Miso"),
    a ``detail`` where the kind needs one (the pet's animal, the favourite's category), and the
    ``language`` it was said in.  A newer fact of the same ``key`` replaces an older one."""

    kind: str
    value: str
    detail: str = ""
    language: str = "en"

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.detail}" if self.detail else self.kind

    @property
    def line(self) -> str:
        """The fact as a recall carries it: ``kind|detail|value``."""
        return f"{self.kind}|{self.detail}|{self.value}"

    @classmethod
    def parse(cls, line: str) -> Fact:
        """The fact of a ``kind|detail|value`` line (a value may hold ``|``)."""
        kind, _, rest = line.partition("|")
        detail, _, value = rest.partition("|")
        return cls(kind, value, detail)

MAX_VALUE_CHARS = 32
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
# A value ends at punctuation, a conjunction or a clause that goes on.
_EN_STOP = re.compile(
    r"[,.;:!?()\[\]\"“”]|\s(?:and|but|so|because|btw|lol|haha|right now|now|too|though|actually|"
    r"these days|at the moment|atm|for|since|which|who|where|when|if|with)\b", re.IGNORECASE)
_ZH_STOP = re.compile(r"[，。！？；、,.!?;:：~～（）()\s]|的时候|但是|不过|因为|所以|而且|哈哈|呢|啊|呀|吧|了")
_NAME = r"([A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2})"   # a capitalised name of up to three words
_PETS_EN = ("cat", "dog", "kitten", "puppy", "parrot", "rabbit", "bunny", "hamster", "turtle", "fish", "snake", "bird")
_PETS_ZH = {"猫": "cat", "猫咪": "cat", "狗": "dog", "狗狗": "dog", "兔子": "rabbit", "仓鼠": "hamster", "鹦鹉": "parrot",
            "乌龟": "turtle", "鱼": "fish"}
# "我在X" names a place unless X is something being done ("我在学日语", "我在看直播").
_ZH_NOT_PLACE = ("学", "看", "听", "玩", "吃", "做", "写", "想", "等", "打", "追", "用", "练", "读", "干", "忙", "睡",
                 "喝", "开", "跑", "逛", "洗", "找", "刷", "画", "唱", "加班", "工作", "家", "这", "那", "哪", "直播",
                 "线", "上班", "上课", "上学", "上网", "路上", "努力", "准备", "考虑", "试", "听歌", "房间", "床")
_NOT_LEARNT = frozenset(["a", "an", "the", "so", "from", "how", "about", "that", "this", "it", "more", "lots", "much", "something", "stuff", "things", "here", "with", "what"])
_PLACE_WORDS = r"([a-z][a-z'-]{2,}(?:\s+[a-z][a-z'-]{2,})?)"   # a place in lower case, as chat writes it
_NOT_PLACE_EN = frozenset(["the", "a", "an", "here", "there", "work", "home", "school", "nowhere", "earth", "space", "future", "past", "chat", "youtube", "twitch", "bilibili", "internet"])

# (kind, pattern, group of the value, detail): English rules, tried in order.
_EN_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("home", re.compile(rf"\b(?:i'?m|i am|im)\s+(?:originally\s+)?from\s+{_NAME}")),
    ("home", re.compile(rf"\b(?:i|we)\s+live\s+in\s+{_NAME}")),
    ("home", re.compile(rf"\b(?:i'?m|i am|im)\s+from\s+{_PLACE_WORDS}")),
    ("home", re.compile(rf"\b(?:i|we)\s+live\s+in\s+{_PLACE_WORDS}")),
    ("home", re.compile(rf"\b(?:greetings|hello|hi|hey|watching)\s+from\s+{_NAME}")),
    ("home", re.compile(rf"\bmy\s+(?:home\s*town|city|country)\s+is\s+{_NAME}")),
    ("learning", re.compile(r"\b(?:i'?m|i am|im)\s+(?:currently\s+|still\s+)?(?:learning|studying)\s+([\w#+.\- ]+)", re.IGNORECASE)),
    ("learning", re.compile(r"\bi\s+(?:started\s+)?(?:learn|study)(?:ing)?\s+([\w#+.\- ]+)", re.IGNORECASE)),
    ("job", re.compile(r"\bi\s+work\s+as\s+(?:an?\s+)?([\w\- ]+)", re.IGNORECASE)),
    ("job", re.compile(r"\bmy\s+job\s+is\s+(?:an?\s+)?([\w\- ]+)", re.IGNORECASE)),
    ("name", re.compile(rf"\b(?:call\s+me|my\s+name\s+is|my\s+name's)\s+{_NAME}")),
)
_EN_PET = re.compile(
    r"\bmy\s+(" + "|".join(_PETS_EN) + r")(?:'s\s+name\s+is|\s+is\s+(?:called|named)|\s+(?:called|named)|\s+is)?\s+"
    r"([A-Z][\w'-]*)")
_EN_PET_HAVE = re.compile(
    r"\bi\s+have\s+an?\s+(" + "|".join(_PETS_EN) + r")\s+(?:called|named)\s+([A-Z][\w'-]*)", re.IGNORECASE)
_EN_FAVOURITE = re.compile(r"\bmy\s+fav(?:ou?rite|e)?\s+([a-z]+)\s+is\s+([\w'\- ]+)", re.IGNORECASE)

_ZH_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("learning", re.compile(r"我(?:最近|现在)?(?:正)?在学(?:习)?([^\s，。！？,.!?]{1,12})")),
    ("learning", re.compile(r"我(?:最近|现在)?(?:开始)?学(?:习)?([^\s，。！？,.!?了]{1,12})")),
    ("home", re.compile(r"我(?:是)?来自([^\s，。！？,.!?]{1,12})")),
    ("home", re.compile(r"我(?:现在)?住在([^\s，。！？,.!?]{1,12})")),
    ("home", re.compile(r"我是([\u4e00-\u9fff]{1,6})人")),
    ("home_at", re.compile(r"我(?:现在)?在([\u4e00-\u9fff]{2,8})")),
    ("job", re.compile(r"我(?:的工作)?是(?:一名|一个|个)([\u4e00-\u9fff]{2,8})")),
    ("job", re.compile(r"我的工作是([^\s，。！？,.!?]{2,12})")),
    ("name", re.compile(r"(?:叫我|我叫|我的名字是)([^\s，。！？,.!?]{1,12})")),
)
# "我的猫叫咪咪", "我家有只猫叫花花", "家里养了一只狗叫豆豆" (but not "我朋友家里的狗叫…").
_ZH_PET = re.compile(r"(?:我|(?<![\u4e00-\u9fff])家里)(?:家里?|们家)?(?:的|里)?(?:养的|养了|养着|有)?"
                     r"(?:一只|只|一条|条)?(猫咪|猫|狗狗|狗|兔子|仓鼠|鹦鹉|乌龟|鱼)(?:的名字|名字)?(?:叫做|名叫|叫)"
                     r"([^\s，。！？,.!?]{1,12})")
_ZH_FAVOURITE = re.compile(r"我最喜欢的([\u4e00-\u9fff]{1,4})是([^\s，。！？,.!?]{1,12})")

# What a comment asks that a fact of a kind bears on.
_BEARS_EN: dict[str, tuple[str, ...]] = {
    "home": ("where i live", "where i'm from", "where im from", "my city", "my town", "my country", "my place",
             "near me", "around here", "over here", "weather", "visit", "travel", "local", "time zone", "timezone",
             "my area", "my hometown", "hometown"),
    "learning": ("study", "studying", "studies", "studied", "learn", "learning", "learned", "learnt", "practice",
                 "practise", "practicing", "practising", "practiced", "exam", "exams", "lesson", "lessons",
                 "homework", "progress", "course", "tips for learning", "language", "pronunciation", "grammar",
                 "vocab", "vocabulary", "fluent", "fluency"),
    "job": ("work", "working", "job", "shift", "shifts", "boss", "office", "career", "colleague", "colleagues",
            "coworker", "coworkers"),
    "pet": ("my cat", "my dog", "my pet", "kitty", "puppy", "kitten", "pets"),
}
_BEARS_ZH: dict[str, tuple[str, ...]] = {
    "home": ("我这里", "我这边", "我们这", "我住的", "我的城市", "家乡", "老家", "天气", "旅游", "我那边", "本地"),
    "learning": ("学", "考试", "练习", "作业", "进步", "课"),
    "job": ("工作", "上班", "老板", "加班", "同事"),
    "pet": ("我的猫", "我家猫", "我的狗", "宠物", "猫", "狗"),
}


def language_of(text: str) -> str:
    return "zh" if _CJK.search(text) else "en"


def _cut(value: str, stop: re.Pattern[str]) -> str:
    m = stop.search(value)
    value = value[: m.start()] if m else value
    return " ".join(value.split())[:MAX_VALUE_CHARS].strip(" '-")


def _learning_en(value: str) -> str:
    words = value.split()
    # "learning to cook": the verb is the thing; "learning Rust with friends": cut at "with".
    return " ".join(words[:3])


def extract_facts(text: str) -> list[Fact]:
    """The facts a comment states about its viewer, one per key, in the order said."""
    text = unicodedata.normalize("NFKC", text)
    found: dict[str, Fact] = {}

    def keep(fact: Fact) -> None:
        if fact.value and fact.key not in found:
            found[fact.key] = fact

    if language_of(text) == "zh":
        for m in _ZH_PET.finditer(text):
            keep(Fact("pet", _cut(m.group(2), _ZH_STOP), _PETS_ZH.get(m.group(1), "pet"), "zh"))
        for m in _ZH_FAVOURITE.finditer(text):
            keep(Fact("favourite", _cut(m.group(2), _ZH_STOP), m.group(1), "zh"))
        for kind, pattern in _ZH_RULES:
            for m in pattern.finditer(text):
                value = _cut(m.group(1), _ZH_STOP)
                if kind == "home_at" and value.startswith(_ZH_NOT_PLACE) or len(value) < 2:
                    continue
                keep(Fact("home" if kind == "home_at" else kind, value, "", "zh"))
        return list(found.values())
    for m in _EN_PET.finditer(text):
        keep(Fact("pet", m.group(2), m.group(1).lower(), "en"))
    for m in _EN_PET_HAVE.finditer(text):
        keep(Fact("pet", m.group(2), m.group(1).lower(), "en"))
    for m in _EN_FAVOURITE.finditer(text):
        keep(Fact("favourite", _cut(m.group(2), _EN_STOP), m.group(1).lower(), "en"))
    for kind, pattern in _EN_RULES:
        flags = pattern.flags
        # The name rules keep their case-sensitive capital; the verb before them may be in any case.
        target = text if flags & re.IGNORECASE else _lower_lead(text)
        for m in pattern.finditer(target):
            value = _cut(m.group(1), _EN_STOP)
            if kind == "home" and value.islower():
                if value.split()[0] in _NOT_PLACE_EN:
                    continue
                value = value.title()
            if kind == "learning":
                value = _learning_en(value)
                if not value or value.casefold().split()[0] in _NOT_LEARNT:
                    continue
            if kind == "job" and value.casefold().split()[:1] in (["here"], ["from"], ["home"]):
                continue
            keep(Fact(kind, value, "", "en"))
    return list(found.values())


# -- facts a model read -------------------------------------------------------------------

KINDS = ("home", "learning", "pet", "job", "favourite", "name")
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|im|i've|my|me|we|we're|our|call me)\b", re.IGNORECASE)
# What a comment says where it states a fact of a kind: a model's fact of that kind is kept only
# where one of these is said (a small model mixes the kinds up: "my fave band is Radiohead" as a job).
_KIND_CUES_EN: dict[str, tuple[str, ...]] = {
    "home": ("from", "live", "living", "grew up", "born", "home", "hometown", "city", "country", "moved to", "based in",
             "here in", "in "),
    "learning": ("learn", "study", "studying", "practis", "practic", "course", "class", "lesson", "teaching myself"),
    "job": ("work", "job", "shift", "as a", "as an", "i'm a", "i am a", "im a", "career", "employed", "for a living",
            "boss", "office"),
    "name": ("call me", "calls me", "name", "i'm", "i am", "im "),
    "favourite": ("fav", "love", "like", "best"),
}
_KIND_CUES_ZH: dict[str, tuple[str, ...]] = {
    "home": ("来自", "住", "老家", "家乡", "人", "在", "长大", "出生"),
    "learning": ("学", "练", "课"),
    "job": ("工作", "上班", "职业", "是个", "是一名", "是一个", "当", "做"),
    "name": ("叫", "名字"),
    "favourite": ("喜欢", "最爱"),
}
_NOT_A_VALUE = frozenset(["i", "me", "my", "you", "we", "it", "here", "there", "home", "none", "null", "n/a",
                          "unknown", "我", "你", "这里", "那里"])


# Somebody else's: a model's fact from a comment that names one is not the writer's ("my
# friend's dog Rex", "我朋友在学法语").
_OTHERS_EN = re.compile(r"\b(?:friend|sister|brother|mom|mum|dad|mother|father|wife|husband|girlfriend|boyfriend|"
                        r"son|daughter|cousin|aunt|uncle|neighbou?r|roommate|flatmate|colleague|coworker|"
                        r"grandma|grandpa|kid|kids)(?:'s|s)?\b", re.IGNORECASE)
_OTHERS_ZH = ("朋友", "姐姐", "妹妹", "哥哥", "弟弟", "妈妈", "爸爸", "老婆", "老公", "女朋友", "男朋友", "儿子", "女儿",
              "同事", "室友", "邻居", "同学")


def may_state_facts(text: str) -> bool:
    """Whether a comment may state something about its writer: it speaks in the first person, or
    says a word a fact is said with ("grew up in Lisbon", "最近在自学吉他": chat often drops the
    I); the only comments worth a model's reading."""
    text = unicodedata.normalize("NFKC", text)
    if language_of(text) == "zh":
        return "我" in text or any(cue in text for cues in _KIND_CUES_ZH.values() for cue in cues if len(cue) > 1) \
            or "学" in text
    folded = text.casefold()
    return _FIRST_PERSON.search(text) is not None or any(
        re.search(rf"\b{re.escape(cue.strip())}", folded) for cues in _KIND_CUES_EN.values() for cue in cues
        if cue.strip() not in ("in", "like", "love", "best"))


def facts_from_model(found: object, text: str) -> list[Fact]:
    """The facts of a model's answer (``[{"kind", "value", "detail"}]``) that hold up against the
    comment: a known kind, a value said word for word in the comment (a small model's guesses and
    inventions are dropped, never remembered), at most ``MAX_VALUE_CHARS``; a pet's animal and a
    favourite's category said in it too.  One per key, in the order given."""
    text = unicodedata.normalize("NFKC", text)
    folded = text.casefold()
    zh = language_of(text) == "zh"
    if (any(w in text for w in _OTHERS_ZH) if zh else _OTHERS_EN.search(text) is not None):
        return []  # somebody else's, as likely as the writer's
    out: dict[str, Fact] = {}
    for item in found if isinstance(found, list) else ():
        if not isinstance(item, dict):
            continue
        kind, value, detail = (str(item.get(k) or "").strip() for k in ("kind", "value", "detail"))
        value = " ".join(unicodedata.normalize("NFKC", value).split()).strip(" .,!?;:'\"。，！？")
        if kind not in KINDS or len(value) > MAX_VALUE_CHARS or len(value) < (1 if zh else 2):
            continue
        if value.casefold() not in folded or value.casefold() in _NOT_A_VALUE:
            continue
        detail = detail.casefold().strip()
        if kind == "pet":
            animal = _animal_said(detail, text, folded, zh)
            if animal is None or value.casefold() in _PETS_EN or value in _PETS_ZH:
                continue  # no animal in the comment ("what do you think about cats?"), or the animal as its name
            detail = animal
        elif not any(cue in folded for cue in (_KIND_CUES_ZH if zh else _KIND_CUES_EN)[kind]):
            continue  # nothing in the comment says a fact of this kind
        if kind == "favourite":
            detail = detail if detail and detail in folded else _category_said(text, folded, zh)
            if not detail:
                continue  # a favourite what: the comment does not say
        if kind not in ("pet", "favourite"):
            detail = ""
        if kind == "home" and value.islower():
            value = value.title()
        fact = Fact(kind, value, detail, "zh" if zh else "en")
        out.setdefault(fact.key, fact)
    return list(out.values())


_LEADS = re.compile(r"\b(I'?m|I am|Im|I|We|Greetings|Hello|Hi|Hey|Watching|My|Call)\b")


def _lower_lead(text: str) -> str:
    """The text with the words a name rule begins with in lower case (the name keeps its capital)."""
    return _LEADS.sub(lambda m: m.group(0).lower(), text)


def bearing(text: str, facts: Iterable[Fact]) -> list[Fact]:
    """Those of ``facts`` the comment bears on: it asks about the kind of thing a fact is
    ("the weather where I live" and where they are from), or names its value ("how's Miso?")."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    zh = language_of(text) == "zh"
    out: list[Fact] = []
    for fact in facts:
        value = fact.value.casefold()
        cues = (_BEARS_ZH if zh else _BEARS_EN).get(fact.kind, ())
        named = len(value) >= 2 and value in folded
        if named or any(_says(cue, folded, zh) for cue in cues) or fact.kind == "pet" and fact.detail in folded:
            out.append(fact)
    return out


def _says(cue: str, folded: str, zh: bool) -> bool:
    if zh or " " in cue:
        return cue in folded
    return re.search(rf"\b{re.escape(cue)}\b", folded) is not None


_EN_WORD = re.compile(r"[A-Za-z][A-Za-z'+#-]{2,15}")
_EN_COMMON = frozenset(
    ["the", "and", "you", "your", "are", "was", "were", "what", "how", "who", "why", "when", "where", "which", "this", "that", "with", "have", "has", "for", "from", "not", "but", "can", "could", "would", "should", "will", "just", "like", "really", "very", "much", "more", "some", "any", "about", "think", "know", "want", "does", "did", "doing", "there", "their", "they", "them", "then", "than", "been", "being", "its", "it's", "i'm", "i've", "i'd", "you're", "hello", "hey", "hi", "thanks", "thank", "please", "lol", "haha", "yes", "yeah", "okay", "ok", "today", "tonight", "everyone", "anyone", "something", "anything", "going", "get", "got", "make", "also", "still", "here", "stream", "love", "good", "great", "nice", "cool", "called", "named", "learning", "studying", "favourite", "favorite", "live", "work", "call", "name", "from", "again", "back", "all"])
_ZH_FILL = re.compile(r"来自|喜欢|学习|大家|主播|什么|怎么|为什么|可以|一[个名位只条些点下]|最近|现在|"
                      r"[你我他她它们的了吗呢吧啊呀是在有和就都也还很太好不没这那哪学叫家最住看想要会说听去过着得地人对哈嗯]+")


def topic_of(text: str) -> str:
    """What a comment talks about, in a word or two: its longest uncommon English word, or a 2-4
    character Chinese span between function words; "" when it names nothing."""
    text = unicodedata.normalize("NFKC", text)
    if language_of(text) == "zh":
        spans = [s for s in _ZH_FILL.split("".join(_CJK.findall(text)) or "") if len(s) >= 2]
        return max(spans, key=len)[:4] if spans else ""
    words = [w for w in _EN_WORD.findall(text) if w.casefold() not in _EN_COMMON]
    return max(words, key=len).casefold() if words else ""


def facts_first(facts: Sequence[Fact], bears: Sequence[Fact]) -> list[Fact]:
    """The facts with those a comment bears on first."""
    return [*bears, *(f for f in facts if f not in bears)]


_CATEGORY_EN = re.compile(r"\bfav(?:ou?rite|e)?\s+([a-z]+)")
_CATEGORY_ZH = re.compile(r"最(?:喜欢|爱)的([\u4e00-\u9fff]{1,4}?)(?:是|就是|叫)")


def _category_said(text: str, folded: str, zh: bool) -> str:
    """What kind of thing a comment says a favourite is ("my fave game", "最喜欢的游戏是"), or ""."""
    m = _CATEGORY_ZH.search(text) if zh else _CATEGORY_EN.search(folded)
    return m.group(1) if m and (zh or m.group(1) not in ("is", "of", "thing")) else ""


def _animal_said(detail: str, text: str, folded: str, zh: bool) -> str | None:
    """The pet's animal (in English) as the comment says it: the model's ``detail`` where the
    comment says it, else the first animal it names; None where it names none."""
    said = {en for word, en in _PETS_ZH.items() if word in text} if zh else \
        {a for a in _PETS_EN if re.search(rf"\b{a}s?\b", folded)}
    animal = _PETS_ZH.get(detail, detail)
    if animal in said:
        return animal
    return sorted(said)[0] if said else None


# -- a viewer asking to be forgotten ------------------------------------------------------

FORGET_COMMANDS = frozenset({"!forget", "!forgetme", "!forget me", "!忘记我", "!忘了我", "！忘记我", "！忘了我"})


def asks_to_forget(text: str) -> bool:
    """Whether a comment is a viewer's ``!forget`` (English or Chinese, any case, alone on the line)."""
    return " ".join(text.split()).casefold() in FORGET_COMMANDS


def forgotten_line(text: str) -> str:
    """What the stage says to a viewer it has just forgotten, in the language they asked in: no
    name, no fact (the reply is stored after the forgetting)."""
    if language_of(text) == "zh" or "忘" in text:
        return "好的，你告诉过我们的一切都已经忘掉了。欢迎你随时重新认识我们！"
    return "Done: everything you told us is forgotten. You're always welcome to start fresh with us!"
