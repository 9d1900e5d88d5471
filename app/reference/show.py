"""The show file page, from the table of keys next to the parser (``events.show_schema``)."""

from __future__ import annotations

from app.reference.markdown import cell, code, header, table, value
from events.show_schema import REQUIRED, SHOW_KEYS, Derived, ShowKey

_SECTIONS = {"show": "The show", "roles": "Roles", "danmaku": "A scripted chat", "segments": "The rundown",
             "sources": "Live chats (Twitch, Bilibili, YouTube)"}


def _default(key: ShowKey) -> str:
    if key.default is REQUIRED:
        return "required"
    if isinstance(key.default, Derived):
        return cell(key.default)
    if key.default == {}:
        return ""
    return code(value(key.default)).replace("(unset)", "none") if key.default is not None else "none"


def page() -> str:
    """``docs/reference/show-file.md``."""
    lines = header("The show file", "`events/show_schema.py` (a test keeps it equal to what the parser in "
                   "`events/show.py` reads)",
                   "A show is a TOML file: its title, one to eight roles, a scripted chat and a rundown of "
                   "segments. `troupe show new FILE` writes one to start from, `troupe show check FILE` "
                   "checks one, `troupe up --show FILE` runs it. A path's `[]` stands for each item of an "
                   "array of tables (`[[roles]]`).")
    unplaced = [k.path for k in SHOW_KEYS if k.written and k.path.split("[")[0].split(".")[0] not in _SECTIONS]
    if unplaced:  # a key with no section would be left off the page
        raise ValueError(f"show keys in no section of the reference: {', '.join(unplaced)}")
    for top, title in _SECTIONS.items():
        rows = [[code(k.path), k.type, _default(k), cell(k.doc)] for k in SHOW_KEYS
                if k.written and k.path.split("[")[0].split(".")[0] == top]
        lines += [f"## {title}", "", *table(["key", "type", "default", "what it is"], rows)]
    lines += ["## Filled in by Troupe", "", "Troupe fills these in when it loads a show and carries them in "
              "`run.started`; a show file does not set them.", ""]
    lines += table(["key", "type", "what it is"],
                   ([code(k.path), k.type, cell(k.doc)] for k in SHOW_KEYS if not k.written))
    return "\n".join(lines)
