"""Deterministic "scripted" LLM backend: seeded in-persona replies from a reply library."""

from __future__ import annotations

import random
import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from actors.backends.own_lines import OwnLine, own_line
from actors.backends.protocols import Persona, Prompt, ReplyWriter, Sentence, fact_parts
from actors.backends.replies import (
    COMPLIMENT_WORDS,
    EN_STOPWORDS,
    GENERIC_TOPIC,
    GIFT_WORDS,
    GREETING_WORDS,
    INJECTION_COMPACT,
    INJECTION_PHRASES,
    INJECTION_RAW,
    LIBRARY,
    OPENERS,
    QUESTION_MARKERS,
    QUESTION_STARTS,
    TOPIC_THEMES,
    TOPIC_WORDS,
    ZH_STOPWORDS,
)

__all__ = ["MAX_NAME_CHARS", "MAX_SENTENCES", "MAX_TOPIC_CHARS", "ScriptedLLM"]

MAX_NAME_CHARS: Final = 16
"""Longest viewer/persona name put into a reply."""
MAX_TOPIC_CHARS: Final = 16
"""Longest {topic} taken from a comment (well under the 24-char raw-text cap)."""
MAX_SENTENCES: Final = 3
"""Most sentences (= stream chunks) in one reply."""
_TAIL_CHANCE: Final = 0.4  # how often a short sign-off sentence is appended
_MAX_MERGED: Final = 999  # a bigger count reads oddly on air and gains nothing
_SCAN_CHARS: Final = 120  # how much of a comment theme/topic detection reads

_CJK: Final = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN: Final = re.compile(f"[{_CJK}]+")
_HAS_CJK: Final = re.compile(f"[{_CJK}]")
# A name a viewer told the stage in Latin script (their cat Miso, Berlin, Rust): a Chinese reply
# says it as written, as bilingual chat does ("Miso还好吗？").
_LATIN_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9' .-]{0,23}")
# Word tokens for matching English terms; CJK is excluded so "我爱minecraft" still yields
# "minecraft" as its own token.
_TOKEN: Final = re.compile(f"[^\\W_{_CJK}]+")
_NON_ALNUM: Final = re.compile(r"[\W_]+")
_EN_WORD: Final = re.compile(r"[A-Za-z]+")
# Braces (format injection), control chars, lone surrogates (unencodable) and bidi
# overrides (they would reorder the rest of the spoken/displayed line).
_UNSAFE: Final = re.compile(
    "[{}\x00-\x1f\x7f-\x9f\ud800-\udfff\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]"
)
# Sentence enders are removed from names so a name can never add a chunk boundary.
_TERMINATORS: Final = re.compile("[.!?\u3002\uff01\uff1f\uff0e\uff61\u2026\u203c\u2047-\u2049]+")
_SENTENCE_END: Final = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])(?![.!?\u3002\uff01\uff1f])\s*")
_PLACEHOLDER: Final = re.compile(r"\{(user|topic|name|n)\}")
_ZH_MULTI: Final = tuple(w for w in ZH_STOPWORDS if len(w) > 1)
_ZH_SINGLE: Final = re.compile("[" + "".join(w for w in ZH_STOPWORDS if len(w) == 1) + "]")


@dataclass(frozen=True, slots=True)
class _Term:
    """A detection term, normalised once: CJK terms match the compact text, others words."""

    form: str
    cjk: bool


@dataclass(frozen=True, slots=True)
class _Doc:
    """A comment normalised a few ways for cheap substring and set matching."""

    norm: str  # NFKC + casefold
    spaced: str  # " tok tok " (non-CJK word tokens, space padded)
    compact: str  # letters and digits only
    tokens: frozenset[str]  # the non-CJK word tokens
    first: str  # first token ("" if none), for "starts with" checks


def _term(word: str) -> _Term | None:
    norm = unicodedata.normalize("NFKC", word).casefold()
    if _HAS_CJK.search(norm):
        compact = _NON_ALNUM.sub("", norm)
        return _Term(compact, True) if compact else None
    tokens = _TOKEN.findall(norm)
    return _Term(f" {' '.join(tokens)} ", False) if tokens else None


def _terms(words: Sequence[str]) -> tuple[_Term, ...]:
    return tuple(t for t in map(_term, words) if t is not None)


@dataclass(frozen=True, slots=True)
class _Matcher:
    """A group of detection terms split by kind so each kind is checked the cheap way."""

    words: frozenset[str]  # single words: set lookups against the comment's tokens
    phrases: tuple[str, ...]  # space-padded multi-word phrases, searched in _Doc.spaced
    cjk: tuple[str, ...]  # CJK strings, searched in _Doc.compact
    forms: frozenset[str]

    @classmethod
    def of(cls, words: Sequence[str]) -> _Matcher:
        """Prepare a word list (English and Chinese mixed)."""
        terms = _terms(words)
        plain = [t.form for t in terms if not t.cjk]
        return cls(
            frozenset(f.strip() for f in plain if f.count(" ") == 2),
            tuple(f for f in plain if f.count(" ") > 2),
            tuple(t.form for t in terms if t.cjk),
            frozenset(t.form for t in terms),
        )

    def found(self, doc: _Doc) -> bool:
        """True if any term occurs in the comment."""
        return (
            not self.words.isdisjoint(doc.tokens)
            or any(map(doc.spaced.__contains__, self.phrases))
            or any(map(doc.compact.__contains__, self.cjk))
        )

    def count(self, doc: _Doc) -> int:
        """How many distinct terms the comment contains."""
        return (
            len(self.words.intersection(doc.tokens))
            + sum(map(doc.spaced.__contains__, self.phrases))
            + sum(map(doc.compact.__contains__, self.cjk))
        )

    def starts(self, doc: _Doc) -> bool:
        """True if the comment begins with a term."""
        return (
            doc.first in self.words
            or doc.spaced.startswith(self.phrases)  # str.startswith takes a tuple
            or doc.compact.startswith(self.cjk)
        )


_GREETING: Final = _Matcher.of(GREETING_WORDS)
_QUESTION_STARTS: Final = _Matcher.of(QUESTION_STARTS)
_QUESTION_MARKERS: Final = _Matcher.of(QUESTION_MARKERS)
_COMPLIMENT: Final = _Matcher.of(COMPLIMENT_WORDS)
_GIFT: Final = _Matcher.of(GIFT_WORDS)
_INJECTION: Final = _Matcher.of(INJECTION_PHRASES)
_TOPICS: Final[Mapping[str, _Matcher]] = MappingProxyType(
    {theme: _Matcher.of(TOPIC_WORDS[theme]) for theme in TOPIC_THEMES}
)


def _doc(text: str) -> _Doc:
    norm = unicodedata.normalize("NFKC", text).casefold()
    tokens = _TOKEN.findall(norm)
    return _Doc(
        norm,
        f" {' '.join(tokens)} ",
        _NON_ALNUM.sub("", norm),
        frozenset(tokens),
        tokens[0] if tokens else "",
    )


def _has(doc: _Doc, term: _Term) -> bool:
    return term.form in (doc.compact if term.cjk else doc.spaced)


def _is_injection(doc: _Doc) -> bool:
    return (
        _INJECTION.found(doc)
        or any(map(doc.compact.__contains__, INJECTION_COMPACT))
        or any(map(doc.norm.__contains__, INJECTION_RAW))
    )


def _is_question(doc: _Doc) -> bool:
    return (
        "?" in doc.norm  # NFKC already folded the full-width "？"
        or _QUESTION_STARTS.starts(doc)
        or _QUESTION_MARKERS.found(doc)
        or doc.compact.endswith("呢")
    )


def _theme_of(term: _Term) -> str:
    """Map a matched persona keyword to a topic theme, else the generic theme."""
    for theme in TOPIC_THEMES:
        if term.form.strip() == theme or term.form in _TOPICS[theme].forms:
            return theme
    return "generic"


def _read(prompt: Prompt, keywords: Sequence[str]) -> tuple[_Doc, str, str, str]:
    """A comment read for its reply: the whole of it, its opening, its theme and the persona
    keyword it matched. Themes and topics come from the opening only (it is what the viewer leads
    with, and it bounds the cost); the injection check always reads the whole comment; a gift is
    thanked whatever its message says."""
    text = _UNSAFE.sub("", prompt.text)
    doc = _doc(text)
    head = text[:_SCAN_CHARS]
    if _is_injection(doc):
        return doc, head, "deflect", ""
    if prompt.gift:
        return doc, head, "gift", ""
    theme, keyword = _pick_theme(doc if head == text else _doc(head), keywords, prompt.merged)
    return doc, head, theme, keyword


def _pick_theme(doc: _Doc, keywords: Sequence[str], merged: int) -> tuple[str, str]:
    """Choose (theme, matched persona keyword or "") by simple keyword detection."""
    if merged > 1:
        return "merged", ""
    if _GIFT.found(doc):
        return "gift", ""
    terms = [(keyword, term) for keyword in keywords if (term := _term(keyword)) is not None]
    for keyword, term in terms:
        if _has(doc, term):
            return _theme_of(term), keyword
    # A keyword naming a theme ("games") also claims that theme's words ("minecraft").
    for _, term in terms:
        theme = _theme_of(term)
        if theme != "generic" and _TOPICS[theme].found(doc):
            return theme, ""
    if _GREETING.starts(doc):
        return "greeting", ""
    if _is_question(doc):
        return "question", ""
    if _GREETING.found(doc):
        return "greeting", ""
    if _COMPLIMENT.found(doc):
        return "compliment", ""
    hits = [(_TOPICS[theme].count(doc), theme) for theme in TOPIC_THEMES]
    best = max(hits, key=lambda hit: hit[0])  # max() keeps the first on ties
    return (best[1], "") if best[0] else ("generic", "")


def _clean(raw: str, limit: int) -> str:
    """Sanitise user-supplied text for a name slot: no braces/controls/sentence enders."""
    text = _TERMINATORS.sub(" ", _UNSAFE.sub("", raw))
    return " ".join(text.split())[:limit].strip()


def _en_topic(text: str) -> str:
    """Longest English non-stopword (3..16 letters), first one on ties."""
    words = [
        w
        for w in _EN_WORD.findall(unicodedata.normalize("NFKC", text))
        if 3 <= len(w) <= MAX_TOPIC_CHARS and w.casefold() not in EN_STOPWORDS
    ]
    return max(words, key=len) if words else ""


def _zh_topic(text: str) -> str:
    """A 2-4 character Chinese span between function words; never a long run."""
    runs = " ".join(_CJK_RUN.findall(text))
    for word in _ZH_MULTI:  # longest first, so "好吃" goes before "好"
        runs = runs.replace(word, " ")
    spans = [s for s in _ZH_SINGLE.sub(" ", runs).split() if len(s) >= 2]
    short = [s for s in spans if len(s) <= 4]
    if short:
        return max(short, key=len)
    # Chinese noun phrases are head-final, so the last two characters are the best guess.
    return max(spans, key=len)[-2:] if spans else ""


def _fits(lang: str, text: str) -> bool:
    """True if text can be spoken inside a reply in lang without switching script."""
    if lang == "zh":
        return _CJK_RUN.fullmatch(text) is not None
    return _HAS_CJK.search(text) is None


def _topic(lang: str, theme: str, text: str, keyword: str) -> str:
    """The {topic} value: matched persona keyword, else a salient comment word, else default."""
    keyword = _clean(keyword, MAX_TOPIC_CHARS)
    if keyword and _fits(lang, keyword):
        return keyword
    found = _zh_topic(text) if lang == "zh" else _en_topic(text)
    if found:
        return found
    return LIBRARY[lang].default_topic.get(theme, GENERIC_TOPIC[lang])


def _heard(lang: str, follows: str, known: Sequence[str], cast: Sequence[str] = ()) -> str:
    """What a follow-up names of the line it answers: a topic or keyword the line says, else its
    most telling word (never a name on stage); "" when nothing can be named."""
    folded = unicodedata.normalize("NFKC", follows).casefold()
    spaced = f" {' '.join(_TOKEN.findall(folded))} "
    for word in sorted(known, key=len, reverse=True):
        term = unicodedata.normalize("NFKC", word).casefold()
        if len(term) >= 2 and _fits(lang, word) and (
                (_HAS_CJK.search(term) and term in folded) or f" {term} " in spaced):
            return _clean(word, MAX_TOPIC_CHARS)
    if lang == "zh":
        found = _zh_topic(follows)
        return _clean(found, MAX_TOPIC_CHARS) if found and _fits(lang, found) else ""
    names = {n.casefold() for n in cast}
    words = [w for w in _EN_WORD.findall(unicodedata.normalize("NFKC", follows))
             if 4 <= len(w) <= MAX_TOPIC_CHARS and w.casefold() not in EN_STOPWORDS
             and w.casefold() not in _VAGUE and w.casefold() not in names and not w.casefold().endswith("ly")]
    return max(words, key=len) if words else ""


# Words too vague to name as what a line was about ("whenever", "honestly").
_VAGUE: Final = frozenset(
    ["whenever", "always", "never", "really", "still", "every", "single", "honestly", "actually", "tonight", "something", "nothing", "everyone", "anyone", "someone", "thing", "things", "would", "could", "should", "about", "there", "their", "which", "while", "other", "being", "because", "though", "through", "without", "within", "before", "after", "again", "until", "since", "where", "these", "those", "whole", "times"])


def _language(code: str) -> str:
    """Normalise a language tag ("zh-CN", "ZH", "en-US") to a library key."""
    return "zh" if code.strip().lower().startswith("zh") else "en"


def _fitting(lang: str, words: Sequence[str]) -> list[str]:
    """The words a line in ``lang`` can say (no switch of script), cleaned for a slot."""
    return list(dict.fromkeys(w for w in (_clean(x, MAX_TOPIC_CHARS * 2) for x in words) if w and _fits(lang, w)))


# How a theme's templates (or a kind of the show's own line) are said.
THEME_EMOTIONS: Final = MappingProxyType({
    "greeting": "happy", "compliment": "happy", "gift": "happy", "merged": "surprised", "question": "thinking",
    "games": "happy", "music": "happy", "food": "happy", "tech": "thinking", "generic": "neutral",
    "deflect": "neutral", "brief": "neutral", "follow_up": "thinking", "invitation": "happy",
})


# What the stage remembers of a viewer, said first: a welcome back, and what their comment bears on
# (or, for a viewer back, the newest thing they told the stage).
_WELCOME = {"en": ("Welcome back, {user}!", "Good to see you again, {user}!", "{user}, you're back!"),
            "zh": ("欢迎回来，{user}！", "{user}又来啦！", "好久不见，{user}！")}
_RECALL = {
    "en": {"home": ("How are things in {value}?", "Is it nice in {value} today?"),
           "learning": ("Still learning {value}?", "How is the {value} going?"),
           "pet": ("How is {value} the {detail}?", "Give {value} a pat from us!"),
           "job": ("Busy day as a {value}?",), "favourite": ("Still into {value}?",),
           "name": ("Good to see you, {value}!",)},
    "zh": {"home": ("{value}那边最近怎么样？", "{value}今天天气好吗？"), "learning": ("{value}学得怎么样了？", "还在学{value}吗？"),
           "pet": ("{value}还好吗？",), "job": ("{value}的工作忙吗？",), "favourite": ("还喜欢{value}吗？",),
           "name": ("{value}，好久不见！",)},
}
_REGULAR_GIFT = {"en": ("Thank you again, {user}, you're a true regular!", "{user}, you spoil us every show, thank you!"),
                 "zh": ("又收到{user}的礼物，谢谢老朋友！", "{user}每次都这么支持我们，谢谢！")}


def _memory(lang: str, prompt: Prompt, user: str, seed: str) -> tuple[str, ...]:
    """The sentences a reply begins with from what the stage remembers of the viewer: a welcome
    back (``returning``), then the fact the comment bears on, else (back) their newest one; a fact
    is said only where it can be in the role's language (a Latin-script name in Chinese too)."""
    rng = random.Random(seed)
    out: list[str] = []
    if prompt.returning and not prompt.gift:
        out.append(rng.choice(_WELCOME[lang]).replace("{user}", user))
    if prompt.facts and (prompt.bears or prompt.returning) and not prompt.gift:
        kind, detail, value = fact_parts(prompt.facts[0])
        value = _clean(value, MAX_TOPIC_CHARS * 2)
        lines = _RECALL[lang].get(kind)
        if lines and value and (_fits(lang, value.replace(" ", "") if lang == "zh" else value)
                                or lang == "zh" and _LATIN_NAME.fullmatch(value) is not None) \
                and not _is_injection(_doc(value)):
            line = rng.choice(lines)
            out.append(line.replace("{value}", value).replace("{detail}", _clean(detail, MAX_TOPIC_CHARS) or "pet"))
    return tuple(out)


class ScriptedLLM(ReplyWriter):
    """Writes deterministic in-persona replies from a reply library; no model needed."""

    name = "scripted"
    instant = True  # the whole reply at once: no opener is said before it

    def __init__(self, seed: int = 0) -> None:
        """Remember the seed of prompts that carry none; with role and cue id it fixes every reply."""
        self._seed = seed

    def stream(self, persona: Persona, prompt: Prompt) -> Iterator[str]:
        """Yield the reply one sentence at a time (1-3 trimmed, non-empty chunks), each saying
        whether it is the last (the reply is known whole)."""
        theme, sentences = self._written(persona, prompt)
        emotion = THEME_EMOTIONS.get(prompt.kind or theme)
        for i, text in enumerate(sentences):
            source = getattr(text, "source", None) or "template"
            yield Sentence(text, last=i == len(sentences) - 1, emotion=emotion, source=source)

    @staticmethod
    def is_injection(text: str) -> bool:
        """Whether a comment tries to steer the writer (new instructions, a new role, the prompt)."""
        return _is_injection(_doc(_UNSAFE.sub("", text)))

    def opener(self, persona: Persona, prompt: Prompt, avoid: Sequence[str] = (),
               choices: Sequence[str] = ()) -> Sentence:
        """A short line that fits the comment, said at once while a model writes the rest: a
        welcome back for a returning viewer (``Prompt.returning``), else one of ``choices`` (a
        role's own), else by the comment's theme; varied per cue, never one of ``avoid`` where
        another fits."""
        lang = _language(persona.language)
        theme = self._theme(persona, prompt)
        table = OPENERS[lang]
        # A viewer back from an earlier show is welcomed back first, whatever the model writes.
        choices = _WELCOME[lang] if prompt.returning else choices or table.get(theme) or table["generic"]
        rng = random.Random(f"{self._seed if prompt.seed is None else prompt.seed}:{persona.role}:{prompt.cue_id}:open")
        user = _clean(prompt.user, MAX_NAME_CHARS)
        if not user or _is_injection(_doc(user)):
            user = LIBRARY[lang].default_user
        said = [c.replace("{user}", user) for c in choices]
        fresh = [c for c in said if c not in avoid] or said
        return Sentence(rng.choice(fresh), last=False, emotion=THEME_EMOTIONS.get(theme))

    def _theme(self, persona: Persona, prompt: Prompt) -> str:
        doc, _, theme, _ = _read(prompt, persona.keywords)
        if theme in TOPIC_THEMES:
            return "question" if _is_question(doc) else "generic"
        return theme

    def _own_line(self, persona: Persona, prompt: Prompt) -> Sentence:
        """A line of the show's own (see ``own_lines``): the show's material, or a question."""
        lang = _language(persona.language)
        kind = prompt.kind if prompt.kind in ("follow_up", "invitation") else "brief"
        topics = _fitting(lang, prompt.topics) or _fitting(lang, persona.keywords)
        name = _clean(persona.name, MAX_NAME_CHARS) or persona.role
        seed = self._seed if prompt.seed is None else prompt.seed
        def mine(lines: Sequence[str]) -> tuple[str, ...]:  # those in the role's language
            return tuple(line for line in lines if (_HAS_CJK.search(line) is not None) == (lang == "zh"))

        text, source = own_line(OwnLine(
            kind, lang, persona.role, name, prompt.turn, topics,
            to=_clean(prompt.addressee, MAX_NAME_CHARS) or LIBRARY[lang].default_user,
            heard=_heard(lang, prompt.follows, (*prompt.topics, *persona.keywords), prompt.cast)
            if kind == "follow_up" else "",
            points=mine(prompt.points), material=mine(prompt.material), point=prompt.point, seed=seed))
        return Sentence(text, last=True, emotion=THEME_EMOTIONS.get(kind), source=source)

    def reply(self, persona: Persona, prompt: Prompt) -> str:
        """Return the full reply: the stream's chunks joined as the language expects."""
        pack = LIBRARY[_language(persona.language)]
        return pack.joiner.join(self._sentences(persona, prompt))

    def _sentences(self, persona: Persona, prompt: Prompt) -> tuple[str, ...]:
        return self._written(persona, prompt)[1]

    def _written(self, persona: Persona, prompt: Prompt) -> tuple[str, tuple[str, ...]]:
        """The reply's theme (or the own line's kind) and its sentences."""
        if prompt.kind:
            return prompt.kind, (self._own_line(persona, prompt),)
        lang = _language(persona.language)
        pack = LIBRARY[lang]
        # String seeds are hashed with SHA-512 by random.Random, so this is stable across
        # processes (unlike the salted built-in hash()).
        seed = self._seed if prompt.seed is None else prompt.seed
        rng = random.Random(f"{seed}:{persona.role}:{prompt.cue_id}")
        _, head, theme, keyword = _read(prompt, persona.keywords)

        user = _clean(prompt.user, MAX_NAME_CHARS)
        if not user or _is_injection(_doc(user)):
            user = pack.default_user
        values = {
            "user": user,
            "name": _clean(persona.name, MAX_NAME_CHARS)
            or _clean(persona.role, MAX_NAME_CHARS)
            or pack.default_self,
            # Deflections must not echo anything from an injection attempt.
            "topic": "" if theme == "deflect" else _topic(lang, theme, head, keyword),
            "n": str(max(2, min(prompt.merged, _MAX_MERGED))),
        }

        # The welcome back and the fact said as one piece: a reply the pace cuts to one sentence
        # still greets the viewer back and asks about what they told the stage.
        memory = _memory(lang, prompt, user, f"{seed}:{persona.role}:{prompt.cue_id}:memory")
        memory = (("" if lang == "zh" else " ").join(memory),) if memory else ()
        template = rng.choice(pack.themes[theme])
        if prompt.gift and prompt.regular:  # a regular's gift is thanked as one
            template = random.Random(f"{seed}:{persona.role}:{prompt.cue_id}:regular").choice(_REGULAR_GIFT[lang])
        # Split the template, not the rendered text, so user text can never move a boundary.
        parts = [p for p in _SENTENCE_END.split(template) if p.strip()]
        if len(parts) < MAX_SENTENCES and rng.random() < _TAIL_CHANCE:
            parts.append(rng.choice(pack.tails))
        # One-pass substitution: inserted values are never re-scanned as templates.
        rendered = (_PLACEHOLDER.sub(lambda m: values[m.group(1)], p).strip() for p in parts)
        return theme, (*memory, *rendered)[:MAX_SENTENCES]
