"""Director: validates danmaku, routes each to a role, merges near-duplicates into one cue."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from actors.base import Actor, Context, Input
from actors.show import Show, show_from_dict
from events.base import Event, derive_id
from events.cue import CueIssued, CueMerged
from events.danmaku import DanmakuReceived, DanmakuRejected
from infra.settings import Settings, for_run

KINDS = ("comment", "gift", "moderator")
MAX_USER_CHARS = 64
SPEECH_ESTIMATE_MS = 3000
_MENTION = re.compile(r"@([\w\-]+)", re.UNICODE)
_PUNCT = re.compile(r"[\W_]+", re.UNICODE)
_WORD = re.compile(r"[a-z0-9']+")


def _mentions(keyword: str, folded: str, words: set[str]) -> bool:
    """Latin keywords match whole words ("eat" not in "weather"); CJK ones match anywhere."""
    return keyword in words if keyword.isascii() else keyword in folded


def _priority(weight: float, kind: str, interrupt: float) -> float:
    """A cue's priority: the role's weight, doubled for a gift; a moderator line always interrupts."""
    if kind == "moderator":
        return max(interrupt, weight)
    return weight * (2.0 if kind == "gift" else 1.0)


def normalise(text: str) -> str:
    """The comparison key of a comment: case-folded, NFKC, punctuation and spaces removed."""
    return _PUNCT.sub("", unicodedata.normalize("NFKC", text).casefold())


def bad_characters(text: str) -> str | None:
    """A description of the first control/unpaired character, or None."""
    for ch in text:
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Cs", "Co", "Cn") and ch not in ("\n", "\t") or ch in "\u202e\u202d\u2066\u2067\u2068":
            return f"U+{ord(ch):04X}"
    return None


@dataclass(slots=True)
class _Recent:
    key: str
    cue: str
    t_ms: int


@dataclass(slots=True)
class _RunState:
    show: Show
    settings: Settings
    cues: int = 0
    busy_until: dict[str, int] = field(default_factory=dict)
    recent: deque[_Recent] = field(default_factory=lambda: deque(maxlen=64))


class Director(Actor):
    """Turns danmaku into cues: which role answers what."""

    name = "director"
    inputs = (Input("danmaku", ("troupe.*.danmaku.received", "troupe.*.danmaku.received.>")),)
    accepts_unknown_runs = True

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._runs: dict[str, _RunState] = {}

    def _state(self, ctx: Context) -> _RunState:
        assert ctx.run is not None
        state = self._runs.get(ctx.run.run)
        if state is None:
            state = _RunState(show_from_dict(ctx.run.show), for_run(self.settings, ctx.run.config))
            self._runs[ctx.run.run] = state
        return state

    def undecodable(self, key: str, raw: bytes, reason: str, ctx: Context) -> Sequence[Event]:
        if ctx.run is None:
            return ()  # no run to answer in: the dead letter alone records it
        sample = raw[:200].decode("utf-8", "replace")
        return [DanmakuRejected(
            id=derive_id(key, "rejected"), run=ctx.run.run,
            t_ms=ctx.now_ms, reason="malformed", detail=reason, text=sample,
        )]

    def handle(self, event: Event, ctx: Context) -> Sequence[Event]:
        if not isinstance(event, DanmakuReceived):
            return ()
        reason = self._reject_reason(event, ctx)
        if reason is not None:
            code, detail = reason
            return [DanmakuRejected(
                id=event.derive("rejected"), run=event.run, causation=event.id,
                correlation=event.id, t_ms=ctx.now_ms, reason=code, detail=detail,
                user=event.user[:MAX_USER_CHARS], text=event.text[:200],
            )]
        state = self._state(ctx)
        key = normalise(event.text)
        merged = self._merge_target(state, key, ctx.now_ms)
        if merged is not None:
            return [CueMerged(
                id=event.derive("merged"), run=event.run, role=None, causation=event.id,
                correlation=event.id, t_ms=ctx.now_ms, cue=merged, user=event.user, text=event.text,
            )]
        role, routed_by = self._route(state, event, ctx.now_ms)
        spec = state.show.role(role)
        assert spec is not None
        state.cues += 1
        cue = CueIssued(
            id=event.derive("cue"), run=event.run, role=role, causation=event.id,
            correlation=event.id, t_ms=ctx.now_ms, seq=state.cues, user=event.user,
            text=event.text, danmaku=(event.id,), routed_by=routed_by,
            priority=_priority(spec.weight, event.kind, state.settings.interrupt_priority),
            deadline_ms=ctx.now_ms + state.settings.cue_deadline_ms,
        )
        state.recent.append(_Recent(key, cue.id, ctx.now_ms))
        start = max(ctx.now_ms, state.busy_until.get(role, 0))
        state.busy_until[role] = start + SPEECH_ESTIMATE_MS
        return [cue]

    def _reject_reason(self, event: DanmakuReceived, ctx: Context) -> tuple[str, str] | None:
        if ctx.run is None:
            return "unknown_run", f"no run {event.run!r} has started"
        state = self._state(ctx)
        settings = state.settings
        text = event.text
        if not text.strip():
            return "empty", "the comment is empty"
        if len(text) > settings.max_danmaku_chars:
            return "too_long", f"{len(text)} characters, the limit is {settings.max_danmaku_chars}"
        bad = bad_characters(text) or bad_characters(event.user)
        if bad is not None:
            return "control_characters", f"contains the control character {bad}"
        if len(event.user) > MAX_USER_CHARS:
            return "bad_user", f"user name over {MAX_USER_CHARS} characters"
        if event.kind not in KINDS:
            return "bad_kind", f"kind {event.kind!r} is not one of {', '.join(KINDS)}"
        if event.to is not None and state.show.role(event.to) is None:
            return "unknown_role", f"no role {event.to!r} on stage"
        folded = text.casefold()
        for word in (*settings.blocklist, *state.show.blocklist):
            if word and word.casefold() in folded:
                return "blocked", "contains a blocked word"
        return None

    def _merge_target(self, state: _RunState, key: str, now_ms: int) -> str | None:
        window = state.settings.merge_window_ms
        if window <= 0:  # merging is off
            return None
        for recent in reversed(state.recent):
            if now_ms - recent.t_ms > window:
                break
            if recent.key == key or (
                len(key) >= 8 and difflib.SequenceMatcher(None, key, recent.key).ratio() >= 0.9
            ):
                return recent.cue
        return None

    def _route(self, state: _RunState, event: DanmakuReceived, now_ms: int) -> tuple[str, str]:
        show = state.show
        if event.to is not None:
            return event.to, "addressed"
        by_name = {r.id.casefold(): r.id for r in show.roles} | {r.name.casefold(): r.id for r in show.roles}
        for mention in _MENTION.findall(event.text):
            mentioned = by_name.get(mention.casefold())
            if mentioned is not None:
                return mentioned, "mention"
        for spec in show.roles:
            if spec.name.casefold() in event.text.casefold():
                return spec.id, "name"
        folded = event.text.casefold()
        words = set(_WORD.findall(folded))
        scores = {r.id: sum(1 for k in r.keywords if _mentions(k.casefold(), folded, words)) for r in show.roles}
        best = max(scores.values())
        if best > 0:
            return next(r.id for r in show.roles if scores[r.id] == best), "keyword"
        least = min(show.roles, key=lambda r: (max(now_ms, state.busy_until.get(r.id, 0)), -r.weight))
        return least.id, "least_busy"

