"""The show: roles and a danmaku script, read from TOML and carried in ``run.started``."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from events.errors import ConfigError
from events.sources import Source, SourceError, sources_from
from events.subjects import is_token

# The stage's resolutions, largest first: (width, height) by name.  The one table: settings,
# the renderer, the sink and the QoS ladder all read it.
RESOLUTIONS: dict[str, tuple[int, int]] = {
    "1080p": (1920, 1080), "720p": (1280, 720), "480p": (854, 480), "360p": (640, 360),
}


def resolution_name(height: int) -> str:
    """The name of a resolution by its height (``480p`` for 480)."""
    return next((name for name, (_, h) in RESOLUTIONS.items() if h == height), f"{height}p")


def blocked(text: str, words: Iterable[str]) -> bool:
    """Whether ``text`` contains one of the blocked ``words`` (ignoring case; empty words never
    match): the one check for danmaku and for what a model writes."""
    folded = text.casefold()
    return any(word and word.casefold() in folded for word in words)


class ShowError(ConfigError):
    """A show file is invalid; the message names the field."""


@dataclass(frozen=True, slots=True)
class RoleSpec:
    """One role as the show declares it."""

    id: str
    name: str
    persona: str
    language: str
    keywords: tuple[str, ...] = ()
    weight: float = 1.0
    voice_variant: str | None = None
    voice_pitch: int = 50
    voice_rate: int = 175
    voice_backend: str | None = None     # the role's own TTS backend; None: the settings'
    color: str = "#888888"
    shape: str = "round"
    avatar: str = ""                     # a folder of layered art (look.avatar); "": the procedural figure
    avatar_digest: str = ""              # sha256 of that art, fixed when the show is loaded (run.started)
    llm_backend: str | None = None       # the role's own LLM backend; None: the settings'
    llm_model: str | None = None         # the model (a path) the role's LLM backend loads
    llm_adapter: str | None = None       # a LoRA adapter (a folder) on that model, for backends that take one
    # Short lines the role opens a model reply with while the model writes ("{user}" is the
    # viewer's name); empty: the scripted writer's, chosen by what the comment is.
    llm_openers: tuple[str, ...] = ()
    # What the role has to say of its own, in its own voice (stories, facts, catchphrases): the
    # scripted writer's lines of the show's own are drawn from it (and a model is told of it).
    material: tuple[str, ...] = ()
    # How the role says goodbye as the show ends (said as written, each once, the longest that
    # still fits first); empty: the stage's own sign-offs in the role's language.
    signoff: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ScriptLine:
    """A scripted danmaku: at ``at_s`` seconds of show time, ``user`` says ``text``."""

    at_s: float
    user: str
    text: str
    to: str | None = None
    kind: str = "comment"
    viewer: str = ""      # the viewer's platform id ("twitch:123"): the stage remembers them by it


@dataclass(frozen=True, slots=True)
class SegmentLine:
    """A line of a segment said word for word (a product introduction, a sponsor read), by
    ``role`` (None: the segment's first lead)."""

    text: str
    role: str | None = None


@dataclass(frozen=True, slots=True)
class Segment:
    """One part of the rundown: what it is about, how long it runs, who leads and who joins,
    the lines said verbatim, and what follows (``then``: "next", "loop" or another title)."""

    title: str
    brief: str
    length_s: float
    leads: tuple[str, ...]
    joins: tuple[str, ...] = ()
    lines: tuple[SegmentLine, ...] = ()
    then: str = "next"
    topics: tuple[str, ...] = ()     # what it talks about, in a few words (default: its title)
    background: str = ""             # the stage's back wall while it runs (see Show.background); "": the show's
    points: tuple[str, ...] = ()     # points on its brief, written out: the lines its roles make of it

    @property
    def roles(self) -> tuple[str, ...]:
        return (*self.leads, *(r for r in self.joins if r not in self.leads))


_COLOUR = re.compile(r"^#[0-9a-fA-F]{6}$")
OPEN_SEGMENT_S = 3600.0  # a show without a rundown: one open segment, looped


def open_segment(roles: tuple[RoleSpec, ...]) -> Segment:
    """The rundown of a show that has none: the roles talk about their personas' interests."""
    interests = ", ".join(dict.fromkeys(k for r in roles for k in r.keywords[:2])) or "the show"
    return Segment(title="open talk", brief=f"the roles chat about what they love: {interests}",
                   length_s=OPEN_SEGMENT_S, leads=tuple(r.id for r in roles), then="loop",
                   topics=tuple(dict.fromkeys(k for r in roles for k in r.keywords[:2])))


@dataclass(frozen=True, slots=True)
class Show:
    """A show: its title, roles, blocklist, danmaku script and rundown."""

    title: str
    roles: tuple[RoleSpec, ...]
    script: tuple[ScriptLine, ...] = ()
    blocklist: tuple[str, ...] = ()
    segments: tuple[Segment, ...] = ()
    # The stage's back wall: "" (the starry default), a colour "#rrggbb", or a PNG or JPEG image
    # (a path); a segment may name its own.  ``art``: each image's path and sha256, fixed when the
    # show is loaded (run.started), so that frames are drawn again only with the same pictures.
    background: str = ""
    art: tuple[tuple[str, str], ...] = ()
    sources: tuple[Source, ...] = ()  # live chats bridged into the show (events.sources)

    @property
    def rundown(self) -> tuple[Segment, ...]:
        """The segments the show runs: its own, or one open segment."""
        return self.segments or (open_segment(self.roles),)

    def role(self, role_id: str) -> RoleSpec | None:
        return next((r for r in self.roles if r.id == role_id), None)

    @property
    def has_material(self) -> bool:
        """Whether the show gives its roles anything to say of their own (material, points)."""
        return any(r.material for r in self.roles) or any(g.points for g in self.segments)

    def background_of(self, segment: str | None) -> str:
        """The back wall while segment ``segment`` (a title; None: before any) runs."""
        own = next((g.background for g in self.segments if g.title == segment), "") if segment else ""
        return own or self.background

    @property
    def backgrounds(self) -> tuple[str, ...]:
        """Every back wall the show may show, the show's own first."""
        walls = [self.background, *(g.background for g in self.segments if g.background)]
        return tuple(dict.fromkeys(walls))

    def to_dict(self) -> dict[str, Any]:
        """The show as plain data (as carried in ``run.started``)."""
        return {
            "title": self.title,
            "blocklist": list(self.blocklist),
            **({"background": self.background} if self.background else {}),
            **({"art": [list(a) for a in self.art]} if self.art else {}),
            "roles": [
                {
                    "id": r.id, "name": r.name, "persona": r.persona, "language": r.language,
                    "keywords": list(r.keywords), "weight": r.weight,
                    "voice": {"variant": r.voice_variant, "pitch": r.voice_pitch, "rate": r.voice_rate,
                              "backend": r.voice_backend},
                    "look": {"color": r.color, "shape": r.shape,
                             **({"avatar": r.avatar, "avatar_digest": r.avatar_digest} if r.avatar else {})},
                    "llm": {"backend": r.llm_backend, "model": r.llm_model, "adapter": r.llm_adapter,
                            "openers": list(r.llm_openers)},
                    **({"material": list(r.material)} if r.material else {}),
                    **({"signoff": list(r.signoff)} if r.signoff else {}),
                }
                for r in self.roles
            ],
            "script": [
                {"at": s.at_s, "user": s.user, "text": s.text, "to": s.to, "kind": s.kind,
                 **({"viewer": s.viewer} if s.viewer else {})}
                for s in self.script
            ],
            "segments": [
                {"title": g.title, "brief": g.brief, "length": g.length_s, "leads": list(g.leads),
                 "joins": list(g.joins), "lines": [{"text": x.text, "role": x.role} for x in g.lines],
                 "then": g.then, "topics": list(g.topics), **({"background": g.background} if g.background else {}),
                 **({"points": list(g.points)} if g.points else {})}
                for g in self.segments
            ],
            **({"sources": [s.to_dict() for s in self.sources]} if self.sources else {}),
        }


def _get(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = ...) -> Any:
    if key not in doc:
        if default is ...:
            raise ShowError(f"{where}.{key}: missing")
        return default
    value = doc[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ShowError(f"{where}.{key}: wrong type {type(value).__name__}")
    return value


def _role(doc: Mapping[str, Any], i: int) -> RoleSpec:
    where = f"roles[{i}]"
    role_id = _get(doc, "id", str, where)
    if not is_token(role_id):
        raise ShowError(f"{where}.id: {role_id!r} must be letters, digits, _ or -")
    language = _get(doc, "language", str, where, "en")
    if language not in ("en", "zh"):
        raise ShowError(f"{where}.language: {language!r} is not 'en' or 'zh'")
    voice = _get(doc, "voice", dict, where, {})
    look = _get(doc, "look", dict, where, {})
    shape = _get(look, "shape", str, f"{where}.look", "round")
    if shape not in ("round", "square", "tall"):
        raise ShowError(f"{where}.look.shape: {shape!r} is not round, square or tall")
    pitch = int(_get(voice, "pitch", int, f"{where}.voice", 50))
    if not 0 <= pitch <= 100:
        raise ShowError(f"{where}.voice.pitch: {pitch} is not in 0..100")
    rate = int(_get(voice, "rate", int, f"{where}.voice", 175))
    if not 80 <= rate <= 450:
        raise ShowError(f"{where}.voice.rate: {rate} words a minute is not in 80..450")
    backend = _get(voice, "backend", (str, type(None)), f"{where}.voice", None)
    if backend is not None and not is_token(backend):
        raise ShowError(f"{where}.voice.backend: {backend!r} must be a backend name (letters, digits, _ or -)")
    llm = _get(doc, "llm", dict, where, {})
    llm_backend = _get(llm, "backend", (str, type(None)), f"{where}.llm", None)
    if llm_backend is not None and not is_token(llm_backend):
        raise ShowError(f"{where}.llm.backend: {llm_backend!r} must be a backend name (letters, digits, _ or -)")
    llm_model = _get(llm, "model", (str, type(None)), f"{where}.llm", None)
    llm_adapter = _get(llm, "adapter", (str, type(None)), f"{where}.llm", None)
    openers = _get(llm, "openers", list, f"{where}.llm", [])
    for k, opener in enumerate(openers):
        if not isinstance(opener, str) or not opener.strip() or len(opener) > 60:
            raise ShowError(f"{where}.llm.openers[{k}]: an opener is a short line of text (1 to 60 characters)")
        if opener.replace("{user}", "").count("{") or opener.replace("{user}", "").count("}"):
            raise ShowError(f"{where}.llm.openers[{k}]: {opener!r} may use only the placeholder {{user}}")
    weight = float(_get(doc, "weight", (int, float), where, 1.0))
    if not 0 < weight <= 100:
        raise ShowError(f"{where}.weight: {weight:g} is not above 0 (and at most 100)")
    return RoleSpec(
        id=role_id, name=_get(doc, "name", str, where, role_id),
        persona=_get(doc, "persona", str, where, ""), language=language,
        keywords=tuple(str(k) for k in _get(doc, "keywords", list, where, [])),
        weight=weight, voice_variant=_get(voice, "variant", (str, type(None)), f"{where}.voice", None),
        voice_pitch=pitch, voice_rate=rate, voice_backend=backend,
        color=_get(look, "color", str, f"{where}.look", "#888888"), shape=shape,
        avatar=_get(look, "avatar", str, f"{where}.look", ""),
        avatar_digest=_get(look, "avatar_digest", str, f"{where}.look", ""),
        llm_backend=llm_backend, llm_model=llm_model, llm_adapter=llm_adapter,
        llm_openers=tuple(o.strip() for o in openers), material=_said(doc, "material", where),
        signoff=_said(doc, "signoff", where),
    )


MAX_SAID_CHARS = 300
MAX_SAID = 500


def _said(doc: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    """A list of lines a role may say (a role's material, a segment's points)."""
    lines = _get(doc, key, list, where, [])
    if len(lines) > MAX_SAID:
        raise ShowError(f"{where}.{key}: {len(lines)} lines, at most {MAX_SAID}")
    for k, line in enumerate(lines):
        if not isinstance(line, str) or not 1 <= len(line.strip()) <= MAX_SAID_CHARS:
            raise ShowError(f"{where}.{key}[{k}]: a line is a string of 1 to {MAX_SAID_CHARS} characters")
        if "{" in line or "}" in line:
            raise ShowError(f"{where}.{key}[{k}]: {line[:40]!r}: said as written, so no {{placeholders}}")
    return tuple(line.strip() for line in lines)


def _roles_of(doc: Mapping[str, Any], key: str, where: str, known: set[str]) -> tuple[str, ...]:
    value = _get(doc, key, (list, str), where, [])
    ids = (value,) if isinstance(value, str) else tuple(value)
    for role in ids:
        if not isinstance(role, str) or role not in known:
            raise ShowError(f"{where}.{key}: {role!r} is not a role of the show")
    return ids


def _segment_line(raw: Any, where: str, known: set[str]) -> SegmentLine:
    if isinstance(raw, str):
        text, role = raw, None
    elif isinstance(raw, dict):
        text = _get(raw, "text", str, where)
        role = _get(raw, "role", (str, type(None)), where, None)
        if role is not None and role not in known:
            raise ShowError(f"{where}.role: {role!r} is not a role of the show")
    else:
        raise ShowError(f"{where}: wrong type {type(raw).__name__} (a string or a table with text)")
    if not text.strip():
        raise ShowError(f"{where}: the line is empty")
    if len(text) > 400:
        raise ShowError(f"{where}: {len(text)} characters, a verbatim line has at most 400")
    return SegmentLine(text.strip(), role)


def _segment(doc: Any, i: int, known: set[str]) -> Segment:
    where = f"segments[{i}]"
    if not isinstance(doc, dict):
        raise ShowError(f"{where}: wrong type {type(doc).__name__} (a table)")
    title = _get(doc, "title", str, where).strip()
    if not title or len(title) > 80:
        raise ShowError(f"{where}.title: a title has 1 to 80 characters")
    length = float(_get(doc, "length", (int, float), where))
    if not 5 <= length <= 24 * 3600:
        raise ShowError(f"{where}.length: {length:g} s is not in 5..86400")
    leads = _roles_of(doc, "leads", where, known)
    if not leads:
        raise ShowError(f"{where}.leads: a segment needs at least one lead role")
    lines = tuple(_segment_line(x, f"{where}.lines[{j}]", known)
                  for j, x in enumerate(_get(doc, "lines", list, where, [])))
    return Segment(
        title=title, brief=_get(doc, "brief", str, where, "").strip() or title, length_s=length, leads=leads,
        joins=_roles_of(doc, "joins", where, known), lines=lines, then=_get(doc, "then", str, where, "next"),
        topics=_topics(doc, where) or (title,), background=background(_get(doc, "background", str, where, ""),
                                                                     f"{where}.background"),
        points=_said(doc, "points", where),
    )


def background(value: str, where: str) -> str:
    """A back wall as a show names it: "", a colour "#rrggbb", or a PNG or JPEG file."""
    value = value.strip()
    if not value or _COLOUR.match(value) or value.lower().endswith((".png", ".jpg", ".jpeg")):
        return value
    raise ShowError(f"{where}: {value!r} is not a colour like \"#203040\" or a .png or .jpg image")


def _topics(doc: Mapping[str, Any], where: str) -> tuple[str, ...]:
    topics = _get(doc, "topics", list, where, [])
    for j, topic in enumerate(topics):
        if not isinstance(topic, str) or not 1 <= len(topic.strip()) <= 40:
            raise ShowError(f"{where}.topics[{j}]: a topic is a string of 1 to 40 characters")
    return tuple(t.strip() for t in topics)


def _rundown(doc: Mapping[str, Any], roles: tuple[RoleSpec, ...]) -> tuple[Segment, ...]:
    known = {r.id for r in roles}
    segments = tuple(_segment(g, i, known) for i, g in enumerate(_get(doc, "segments", list, "show", [])))
    titles = [g.title for g in segments]
    for i, g in enumerate(segments):
        if titles.count(g.title) > 1:
            raise ShowError(f"segments[{i}].title: {g.title!r} is used by two segments")
        if g.then not in ("next", "loop") and g.then not in titles:
            raise ShowError(f"segments[{i}].then: {g.then!r} is not 'next', 'loop' or a segment's title")
    return segments


def show_from_dict(doc: Mapping[str, Any]) -> Show:
    """Validate plain data (a parsed TOML file or a ``run.started`` show) into a Show."""
    meta = doc.get("show", doc)
    roles = tuple(_role(r, i) for i, r in enumerate(_get(doc, "roles", list, "show")))
    if not 1 <= len(roles) <= 8:
        raise ShowError("show.roles: a show has 1 to 8 roles")
    if len({r.id for r in roles}) != len(roles):
        raise ShowError("show.roles: role ids must be unique")
    lines = []
    for i, line in enumerate(_get(doc, "danmaku", list, "show", doc.get("script", []))):
        where = f"danmaku[{i}]"
        lines.append(ScriptLine(
            at_s=float(_get(line, "at", (int, float), where)), user=_get(line, "user", str, where, ""),
            text=_get(line, "text", str, where), to=_get(line, "to", (str, type(None)), where, None),
            kind=_get(line, "kind", str, where, "comment"), viewer=_get(line, "viewer", str, where, ""),
        ))
    return Show(
        title=str(meta.get("title", "Troupe show")), roles=roles,
        script=tuple(sorted(lines, key=lambda s: s.at_s)),
        blocklist=tuple(str(w) for w in _get(meta, "blocklist", list, "show", [])),
        segments=_rundown(doc, roles),
        background=background(_get(meta, "background", str, "show", ""), "show.background"),
        art=tuple((str(a[0]), str(a[1])) for a in _get(meta, "art", list, "show", [])),
        sources=_sources(doc, roles),
    )


def _sources(doc: Mapping[str, Any], roles: tuple[RoleSpec, ...]) -> tuple[Source, ...]:
    try:
        return sources_from(doc.get("sources", []), {r.id for r in roles})
    except SourceError as exc:
        raise ShowError(str(exc)) from None


def show_from_toml(text: str) -> Show:
    """Parse and validate a show file's text."""
    try:
        return show_from_dict(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise ShowError(f"show file is not valid TOML: {exc}") from None
