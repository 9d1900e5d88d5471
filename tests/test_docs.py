"""The docs cannot drift from the code silently: the generated reference is current, the site
builds strictly, every ``TROUPE_*`` name and every ``troupe ...`` command line in the docs is one
the code knows, the producers' JSON Schemas agree with the decoder, and the show file's table of
keys is what its parser reads."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from app import reference
from app.cli import parser as troupe_parser
from app.publish import danmaku_from
from app.reference import cli, events
from app.reference.settings import OTHER_VARIABLES, names, unknown_names
from events import codec
from events.danmaku import DanmakuReceived, OperatorControl
from events.errors import DecodeError
from events.show import show_from_dict
from events.show_schema import SHOW_KEYS
from infra.settings import SETTINGS, SettingsError, doc, load_settings, variable

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[1]


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


# -- the generated reference -----------------------------------------------------------------


def test_the_generated_reference_is_what_the_code_generates_now() -> None:
    problems = reference.stale()
    assert not problems, "\n".join(problems)


def test_every_cli_argument_has_help_text() -> None:
    assert cli.missing_help() == []


def test_every_setting_has_a_doc() -> None:
    assert [variable(n) for n in SETTINGS if not doc(n).strip()] == []


def test_the_variables_read_ad_hoc_before_are_settings_and_read_from_files_too(tmp_path: Path) -> None:
    for name in ("TROUPE_LLAMA_MODEL", "TROUPE_LLAMA_THREADS", "TROUPE_LLAMA_CONTEXTS", "TROUPE_VLLM_MODEL",
                 "TROUPE_VLLM_ENGINE", "TROUPE_OPENAI_TIMEOUT_S", "TROUPE_OPENAI_BASE_URL", "TROUPE_LOG_FORMAT"):
        assert name in {variable(n) for n in SETTINGS}, name
    secret = tmp_path / "timeout"
    secret.write_text("2.5\n")
    assert load_settings({"TROUPE_OPENAI_TIMEOUT_S_FILE": str(secret)}).openai_timeout_s == 2.5
    with pytest.raises(SettingsError, match="TROUPE_LOG_FORMAT must be one of text, json"):
        load_settings({"TROUPE_LOG_FORMAT": "yaml"})
    with pytest.raises(SettingsError, match="TROUPE_VLLM_ENGINE is not JSON"):
        load_settings({"TROUPE_VLLM_ENGINE": "{oops"})


def test_no_module_reads_a_troupe_variable_but_through_the_settings_or_a_backends_env_setting() -> None:
    """A backend reads its own variables with ``env_setting`` (``_FILE`` too), and each is a setting."""
    settings = {variable(n) for n in SETTINGS}
    ad_hoc, unknown = [], []
    for package in ("app", "actors", "events", "infra", "store", "schedulers"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text("utf-8")
            ad_hoc += [f"{path.relative_to(ROOT)}: {m}" for m in re.findall(r"(?:environ\.get|getenv)\(\"TROUPE_\w+", text)]
            unknown += [f"{path.relative_to(ROOT)}: {m}" for m in re.findall(r"env_setting\(\"(TROUPE_\w+)\"", text)
                        if m not in settings]
    assert ad_hoc == [] and unknown == []


# -- the site --------------------------------------------------------------------------------


def _mkdocs() -> list[str]:
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    return [sys.executable, "-m", "mkdocs"]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_mkdocs(), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
                          capture_output=True, text=True, timeout=100, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()


def test_a_broken_link_or_a_page_left_out_of_the_nav_fails_the_build(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    docs.mkdir()
    config.update(docs_dir=str(docs), nav=[{"Home": "index.md"}])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    (docs / "index.md").write_text("# Home\n\nSee [the page](gone.md).\n")
    done = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and "gone.md" in done.stderr
    (docs / "index.md").write_text("# Home\n")
    (docs / "stray.md").write_text("# Stray\n")
    done = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and "stray.md" in done.stderr


# -- names and command lines in the docs ------------------------------------------------------


def test_every_troupe_name_in_the_docs_is_a_setting_or_a_known_variable() -> None:
    unknown = [f"{path.relative_to(ROOT)}:{no}: {name}" for path in _pages()
               for no, line in enumerate(path.read_text("utf-8").splitlines(), 1) for name in unknown_names(line)]
    assert unknown == [], "not a setting (infra/settings.py) nor in app/reference/settings.py OTHER_VARIABLES:\n" \
        + "\n".join(unknown)


def test_the_other_variables_are_the_ones_compose_and_the_scripts_read() -> None:
    files = [ROOT / "docker-compose.yml", ROOT / ".env.example", *sorted((ROOT / "scripts").glob("*.sh"))]
    read = {f"{path.name}: {m}" for path in files for m in re.findall(r"TROUPE_[A-Z0-9_]+", path.read_text("utf-8"))
            if m not in names() and not m.endswith("_")}
    assert read == set(), "add them to OTHER_VARIABLES in app/reference/settings.py"
    everywhere = "\n".join(p.read_text("utf-8") for p in [*files, *(ROOT / "tests").rglob("*.py")])
    assert [n for n in OTHER_VARIABLES if n.split("<")[0] not in everywhere] == []


_FENCE = re.compile(r"^\s*```+\s*(\w*)")
_SHELLS = {"bash", "sh", "console", "shell"}
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
_SKIP = {"time", "env", "nohup", "exec", "sudo"}
_PLACEHOLDER = re.compile(r"<[A-Za-z][\w .:/-]*>")


def command_lines(text: str) -> Iterator[tuple[int, str]]:
    """Each shell command in the fenced shell blocks of a Markdown text, with its line number:
    continuation lines joined, a console block's prompts (``$ ``) taken, heredocs left out."""
    lang, start, pending, heredoc = None, 0, "", None
    for no, line in enumerate(text.splitlines(), 1):
        fence = _FENCE.match(line)
        if fence and (lang is None or not fence.group(1)):
            lang, pending, heredoc = (fence.group(1) or "text") if lang is None else None, "", None
            continue
        if lang not in _SHELLS:
            continue
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        if not pending:
            start = no
            if lang == "console":
                if not line.lstrip().startswith("$ "):
                    continue
                line = line.lstrip()[2:]
        pending += line
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        found = _HEREDOC.search(pending)
        heredoc = found.group(1) if found else None
        yield start, pending
        pending = ""


def troupe_arguments(command: str) -> Iterator[list[str]]:
    """The arguments of each ``troupe`` (or ``python -m app.cli``) call in one shell command: split
    at pipes, ``&&``, ``;`` and ``$(...)``, redirections and leading ``NAME=value`` left out, and a
    ``<placeholder>`` kept as one word."""
    holders = {f"PLACEHOLDER{i}X": m for i, m in enumerate(dict.fromkeys(_PLACEHOLDER.findall(command)))}
    for sentinel, original in holders.items():
        command = command.replace(original, sentinel)
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = [holders.get(t, t) for t in lexer]
    except ValueError:  # an unclosed quote: not a command line a reader can type
        return
    words: list[str] = []
    for token in [*tokens, ";"]:
        if token and set(token) <= set("|&;()"):
            yield from _troupe_call(words)
            words = []
        else:
            words.append(token)


def _troupe_call(words: list[str]) -> Iterator[list[str]]:
    while words and (words[0] in _SKIP or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0])):
        words = words[1:]
    if words[1:3] == ["-m", "app.cli"] and Path(words[0]).name.startswith("python"):
        words = ["troupe", *words[3:]]
    if not words or Path(words[0]).name != "troupe":
        return
    args: list[str] = []
    redirected = False
    for i, word in enumerate(words[1:], 1):
        if redirected:
            redirected = False
        elif set(word) <= set("<>&"):
            redirected = True  # the word after a redirection is its target
        elif not (word.isdigit() and i + 1 < len(words) and set(words[i + 1]) <= set("<>&")):
            args.append(word)
    yield args


def _parse(args: list[str]) -> str | None:
    """Why the CLI's parser refuses these arguments (None: it takes them)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            troupe_parser().parse_args(args)
        except SystemExit as exc:
            if exc.code not in (0, None):
                return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}"
    return None


def test_every_troupe_command_line_in_the_docs_parses() -> None:
    wrong, checked = [], 0
    for path in _pages():
        for no, command in command_lines(path.read_text("utf-8")):
            for args in troupe_arguments(command):
                checked += 1
                reason = _parse(args)
                if reason is not None:
                    wrong.append(f"{path.relative_to(ROOT)}:{no}: troupe {shlex.join(args)}: {reason}")
    assert wrong == [], "\n".join(wrong)
    assert checked > 0


def test_command_lines_are_found_as_a_reader_types_them() -> None:
    text = ("```bash\nTROUPE_LLM_BACKEND=openai troupe up --duration 5 \\\n  --show my.toml | tee log\n"
            "cat > x.toml <<'EOF'\ntroupe nonsense\nEOF\n```\n\n```console\n$ troupe runs --json\ntroupe output\n```\n"
            "```toml\ntroupe = 1\n```\n")
    found = [(no, args) for no, c in command_lines(text) for args in troupe_arguments(c)]
    assert found == [(2, ["up", "--duration", "5", "--show", "my.toml"]), (10, ["runs", "--json"])]
    line = 'RUN=$(troupe runs --limit 1 --json | jq -r ".[0].id"); troupe say --run <run id> "Hi; there" 2>&1 >log &'
    assert list(troupe_arguments(line)) == [["runs", "--limit", "1", "--json"], ["say", "--run", "<run id>", "Hi; there"]]
    assert _parse(["up", "--duration", "5"]) is None
    assert "unrecognized arguments: --bogus" in (_parse(["up", "--bogus"]) or "")


# -- what producers send ------------------------------------------------------------------------


def _schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((ROOT / "docs" / "reference" / "schemas" / name).read_text())
    return schema


def _valid(schema: dict[str, Any], doc: object) -> bool:
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema).is_valid(doc)


def _decodes(doc: object) -> bool:
    try:
        codec.decode(orjson.dumps(doc), {"id": "n1", "run": "r1", "at_ms": 1})
    except DecodeError:
        return False
    return True


DANMAKU_OK: list[object] = [
    {"type": "danmaku.received", "payload": {"text": "hello"}},
    {"type": "danmaku.received", "v": 1, "id": "d1", "run": "r1", "role": None, "t_ms": 5,
     "payload": {"text": "hi @host", "user": "ann", "to": "host", "kind": "gift", "extra": 1}, "more": True},
    orjson.loads(codec.encode(DanmakuReceived(id="d2", run="r1", text="hey", user="bo", kind="moderator"))),
]
DANMAKU_BAD: list[object] = [
    {"type": "danmaku.received", "payload": {"user": "ann"}},
    {"type": "danmaku.received", "payload": {"text": 5}},
    {"type": "danmaku.received", "payload": {"text": "hi", "to": 3}},
    {"type": "danmaku.received", "v": 2, "payload": {"text": "hi"}},
    {"type": "danmaku.received", "t_ms": "soon", "payload": {"text": "hi"}},
    {"type": "danmaku.received", "payload": ["hi"]},
    ["danmaku.received"],
]
CONTROL_OK: list[object] = [
    {"type": "danmaku.control", "payload": {"action": "hold", "all": True}},
    orjson.loads(codec.encode(OperatorControl(id="c1", run="r1", action="say", text="Back soon!", target="host"))),
]
CONTROL_BAD: list[object] = [
    {"type": "danmaku.control", "payload": {"text": "no action"}},
    {"type": "danmaku.control", "payload": {"action": "hold", "all": "yes"}},
]


@pytest.mark.parametrize(("name", "good", "bad"), [("danmaku.received.json", DANMAKU_OK, DANMAKU_BAD),
                                                  ("danmaku.control.json", CONTROL_OK, CONTROL_BAD)])
def test_the_schemas_take_what_the_decoder_takes_and_refuse_what_it_refuses(
        name: str, good: list[object], bad: list[object]) -> None:
    schema = _schema(name)
    assert schema == events.schema(events.PRODUCED[name])
    for message in good:
        assert _decodes(message) and _valid(schema, message), message
    for message in bad:
        assert not _decodes(message) and not _valid(schema, message), message
    other = "danmaku.control" if name == "danmaku.received.json" else "danmaku.received"
    assert not _valid(schema, {"type": other, "payload": {"text": "hi", "action": "hold"}})


@pytest.mark.parametrize(("item", "ok"), [
    ({"text": "hi"}, True), ({"text": "hi", "user": "a", "to": "host", "kind": "comment", "id": "x1"}, True),
    ({"user": "a"}, False), ({"text": "hi", "id": ""}, False), ({"text": 5}, False), ("hi", False),
])
def test_an_http_or_file_item_is_valid_exactly_when_the_endpoint_takes_it(item: object, ok: bool) -> None:
    schema = _schema("danmaku.received.json")
    item_schema = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": "#/$defs/item"}
    try:
        danmaku_from(item, "d1", "r1", 1)
        taken = True
    except DecodeError:
        taken = False
    assert taken == ok and _valid(item_schema, item) == ok


# -- the show file's keys -----------------------------------------------------------------------


class _Read(dict[str, Any]):
    """A table of a show that notes each key the parser looks at (``roles[].voice.pitch``)."""

    def __init__(self, path: str, items: dict[str, Any], seen: set[str]) -> None:
        super().__init__(items)
        self.path, self.seen = path, seen

    def _note(self, key: object) -> None:
        self.seen.add(f"{self.path}.{key}" if self.path else str(key))

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return super().__contains__(key)

    def __getitem__(self, key: str) -> Any:
        self._note(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self._note(key)
        return super().get(key, default)


def _sample(prefix: str, seen: set[str]) -> _Read:
    """A show (or one of its tables) with every key of the table below ``prefix``, at its example."""
    items: dict[str, Any] = {}
    for key in SHOW_KEYS:
        head, _, rest = key.path.removeprefix(prefix).partition(".")
        if not key.path.startswith(prefix) or rest or "[" in head:
            continue
        path = prefix + head
        if key.type == "table":
            items[head] = _sample(path + ".", seen)
        elif "tables" in key.type:
            tables = [_sample(path + "[].", seen)] if any(k.path.startswith(path + "[].") for k in SHOW_KEYS) else []
            items[head] = [*(key.example or []), *tables] if "strings or tables" in key.type else tables
        else:
            items[head] = key.example
    return _Read(prefix.removesuffix("."), items, seen)


def test_the_show_files_table_of_keys_is_what_the_parser_reads() -> None:
    seen: set[str] = set()
    sample = _sample("", seen)
    # A source names one target (channel, room, code, video or chat): one source per target key.
    source = dict(sample["sources"][0])
    targets = {"channel": "twitch", "room": "bilibili", "code": "bilibili", "video": "youtube", "chat": "youtube"}
    common = {k: v for k, v in source.items() if k not in targets}
    sample["sources"] = [_Read("sources[]", {**common, "platform": p, key: source[key]}, seen)
                         for key, p in targets.items()]
    show = show_from_dict(sample)  # the examples make a valid show
    assert [s.platform for s in show.sources] == list(targets.values())
    assert show.roles[0].voice_pitch == 62 and show.segments[0].lines[1].role == "host"
    table = {k.path for k in SHOW_KEYS}
    assert sorted(seen - table) == [], "read by events/show.py, missing from events/show_schema.py"
    assert sorted(table - seen) == [], "in events/show_schema.py, never read by events/show.py"
