"""The show file's keys as ``events.show`` reads them: one row per key, with its type, default,
a one-line doc and a valid example.

The reference page (``docs/reference/show-file.md``, by ``python -m app.reference``) is made
from this table, and a test (``tests/test_docs.py``) parses a show built from the examples and
fails when the parser reads a key the table lacks, or the table holds a key the parser never
reads.  A path's ``[]`` stands for each item of an array (``roles[].voice.pitch``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REQUIRED: Any = ...  # the default of a key a show must give


class Derived(str):
    """A default worked out from other keys ("the id"), shown as words, not as a value."""


@dataclass(frozen=True, slots=True)
class ShowKey:
    """One key of a show file: where it is, its TOML type, its default, what it means and an
    example value (None for a table or an array of tables: their rows' examples fill it).
    ``written`` is False for what Troupe fills in when it loads a show (in ``run.started``)."""

    path: str
    type: str
    default: Any
    doc: str
    example: Any = None
    written: bool = True


_NAME = "letters, digits, _ or -"
SHOW_KEYS: tuple[ShowKey, ...] = (
    ShowKey("show", "table", {}, "the show's own settings (they may also stand at the top level)"),
    ShowKey("show.title", "string", "Troupe show", "the show's title (the preview page, run.started)", "Friday night"),
    ShowKey("show.blocklist", "array of strings", [], "words no comment and no model sentence may contain "
            "(ignoring case), added to TROUPE_BLOCKLIST", ["spamlink"]),
    ShowKey("show.background", "string", "", 'the stage\'s back wall: "" (the starry default), a colour "#rrggbb", '
            "or a .png or .jpg image (relative to the show file)", "#203040"),
    ShowKey("show.art", "array", [], "each background image's path and sha256, fixed when the show is loaded",
            [["wall.png", "0" * 64]], written=False),
    ShowKey("roles", "array of tables", REQUIRED, "the roles: 1 to 8, ids unique"),
    ShowKey("roles[].id", "string", REQUIRED, f"the role's id ({_NAME}): subjects, @mentions, --role", "host"),
    ShowKey("roles[].name", "string", Derived("the id"), "the name on stage and in prompts", "Mika"),
    ShowKey("roles[].persona", "string", "", "who the role is, in a sentence (a model is told)", "a cheerful host"),
    ShowKey("roles[].language", "string", "en", "en or zh", "en"),
    ShowKey("roles[].keywords", "array of strings", [], "topic words: a comment naming most of a role's goes to it",
            ["games"]),
    ShowKey("roles[].weight", "number", 1.0, "the role's priority for the floor (above 0, at most 100)", 2.0),
    ShowKey("roles[].voice", "table", {}, "how the role sounds"),
    ShowKey("roles[].voice.variant", "string", None, "the voice variant (espeak: f2, m3, ...; onnx: a speaker)", "f2"),
    ShowKey("roles[].voice.pitch", "integer", 50, "pitch, 0 to 100", 62),
    ShowKey("roles[].voice.rate", "integer", 175, "words a minute, 80 to 450", 185),
    ShowKey("roles[].voice.backend", "string", None, f"the role's own TTS backend ({_NAME}); none: "
            "TROUPE_TTS_BACKEND", "espeak"),
    ShowKey("roles[].look", "table", {}, "how the role looks"),
    ShowKey("roles[].look.color", "string", "#888888", "the role's colour, #rrggbb", "#e76f51"),
    ShowKey("roles[].look.shape", "string", "round", "the procedural figure's shape: round, square or tall", "tall"),
    ShowKey("roles[].look.avatar", "string", "", 'a folder of layered art, relative to the show file (troupe avatar '
            'checks one); "": the procedural figure', "avatars/pip"),
    ShowKey("roles[].look.avatar_digest", "string", "", "the sha256 of that art, fixed when the show is loaded",
            "0" * 64, written=False),
    ShowKey("roles[].llm", "table", {}, "how the role's replies are written"),
    ShowKey("roles[].llm.backend", "string", None, f"the role's own LLM backend ({_NAME}); none: TROUPE_LLM_BACKEND",
            "openai"),
    ShowKey("roles[].llm.model", "string", None, "the model the role's backend loads (a path; for openai, the "
            "model's name)", "qwen2.5:0.5b"),
    ShowKey("roles[].llm.adapter", "string", None, "a LoRA adapter (a folder) on that model, for a backend that "
            "takes one", "adapters/host"),
    ShowKey("roles[].llm.openers", "array of strings", [], "short lines (1 to 60 characters; {user}: the viewer's "
            "name) said while a model writes", ["Oh, {user}!"]),
    ShowKey("roles[].material", "array of strings", [], "what the role has to say of its own (stories, facts): at "
            "most 500 lines of 1 to 300 characters, said as written", ["My first stream had three viewers."]),
    ShowKey("roles[].signoff", "array of strings", [], "how the role says goodbye as the show ends (each once, the "
            "longest that still fits first); none: the stage's own", ["That's all for tonight!"]),
    ShowKey("danmaku", "array of tables", [], "a scripted chat, sent as the show runs"),
    ShowKey("danmaku[].at", "number", REQUIRED, "when, in seconds of show time", 3.5),
    ShowKey("danmaku[].user", "string", "", "the viewer's name", "ann"),
    ShowKey("danmaku[].text", "string", REQUIRED, "the comment", "hello everyone"),
    ShowKey("danmaku[].to", "string", None, "the role it addresses", "host"),
    ShowKey("danmaku[].kind", "string", "comment", "comment, gift or moderator", "comment"),
    ShowKey("danmaku[].viewer", "string", "", "the viewer's platform id, <platform>:<id>: the stage remembers them "
            "by it across shows", "twitch:12345"),
    ShowKey("script", "array of tables", [], "the danmaku script as run.started carries it (read when there is "
            "no danmaku key)", [], written=False),
    ShowKey("segments", "array of tables", [], "the rundown, in order; none: one open segment, looped"),
    ShowKey("segments[].title", "string", REQUIRED, "1 to 80 characters, unique in the show", "Opening"),
    ShowKey("segments[].brief", "string", Derived("the title"), "what it is about (a model is told)", "say hello"),
    ShowKey("segments[].length", "number", REQUIRED, "how long it runs, in seconds (5 to 86400)", 60),
    ShowKey("segments[].leads", "string or array of strings", REQUIRED, "the role or roles who lead it (at least "
            "one)", ["host"]),
    ShowKey("segments[].joins", "string or array of strings", [], "roles who join in", []),
    ShowKey("segments[].lines", "array of strings or tables", [], "lines said word for word (a sponsor read, at "
            "most 400 characters): a string, or a table with text and role", ["Welcome to the show!"]),
    ShowKey("segments[].lines[].text", "string", REQUIRED, "a table line's text", "Thanks to our sponsor."),
    ShowKey("segments[].lines[].role", "string", None, "who says it; none: the segment's first lead", "host"),
    ShowKey("segments[].then", "string", "next", "what follows: next, loop, or a segment's title", "next"),
    ShowKey("segments[].topics", "array of strings", Derived("[the title]"), "what it talks about, in a few words (1 to 40 "
            "characters each)", ["games"]),
    ShowKey("segments[].background", "string", "", "the back wall while it runs (as show.background); \"\": the "
            "show's", "#102030"),
    ShowKey("segments[].points", "array of strings", [], "points on its brief, written out: the lines its roles "
            "make of it (as material)", ["We play a new game tonight."]),
    ShowKey("sources", "array of tables", [], "live chats troupe up bridges into the show's run (as troupe bridge "
            "does); credentials are settings (TROUPE_TWITCH_TOKEN, ...), never in the file"),
    ShowKey("sources[].platform", "string", REQUIRED, "twitch, bilibili or youtube", "twitch"),
    ShowKey("sources[].channel", "string", None, "twitch: the channel's name (one target key per source)",
            "mychannel"),
    ShowKey("sources[].room", "integer or string", None, "bilibili: the live room's number (the web route)", 21452505),
    ShowKey("sources[].code", "string", None, "bilibili: the streamer's identity code (the Open Live route)",
            "ABCDEF123456"),
    ShowKey("sources[].video", "string", None, "youtube: the live stream's video id", "jfKfPfyJRdk"),
    ShowKey("sources[].chat", "string", None, "youtube: a live chat's id, instead of the video's", "Cg0KC2pmS2ZQ"),
    ShowKey("sources[].to", "string", None, "the role every message of this chat addresses; none: the director "
            "reads each comment", "host"),
    ShowKey("sources[].rate", "number", 20.0, "comments a second published at most (0: no cap); the rest are "
            "danmaku.skipped (rate_cap), gifts always pass", 20),
    ShowKey("sources[].server", "string", "", "another endpoint than the platform's: twitch, ircs://host:port or "
            "irc://host:port; bilibili and youtube, an API's base URL", ""),
)
