"""``troupe show new`` writes a two-role show that ``troupe show check`` passes and ``troupe up``
runs as it is; ``troupe show check`` names each wrong field on a line of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from actors.backends.registry import BACKENDS
from actors.floor import sparse
from app.cli.show import check_show, starter_text
from app.shows import load_show
from infra.settings import load_settings


def troupe(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TROUPE_")}
    env["TROUPE_METRICS_PORT"] = "-1"
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, env=env)


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines and all(line.startswith("troupe: error: ") for line in lines), result.stderr
    return lines


@pytest.fixture
def starter(tmp_path: Path) -> Path:
    path = tmp_path / "my-show.toml"
    result = troupe("show", "new", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {path}: 2 roles, 3 segments")
    return path


def test_a_new_show_passes_its_check(starter: Path) -> None:
    result = troupe("show", "check", str(starter))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok: Stars and Sprouts, 2 roles, 3 segments\n"
    assert result.stderr == ""


def test_the_new_show_has_two_whole_roles_and_a_rundown(starter: Path) -> None:
    show = load_show(starter)
    assert [r.id for r in show.roles] == ["nova", "otto"]
    for role in show.roles:
        assert role.persona and role.voice_variant and len(role.material) >= 12 and role.signoff
    assert 2 <= len(show.segments) <= 3
    assert all(g.brief and g.points for g in show.segments)
    assert any(g.lines for g in show.segments)
    assert {line.to for line in show.script} >= {"otto"} and len(show.script) >= 3
    settings = load_settings(environ={})
    BACKENDS.check(settings, show)
    assert not sparse(show, settings)
    assert starter.read_text("utf-8") == starter_text()


def test_new_refuses_to_overwrite_unless_forced(tmp_path: Path) -> None:
    path = tmp_path / "show.toml"
    path.write_text("# mine\n")
    refused = troupe("show", "new", str(path))
    assert refused.returncode == 2
    assert error_lines(refused) == [f"troupe: error: {path} exists: give --force to overwrite it"]
    assert path.read_text() == "# mine\n"
    forced = troupe("show", "new", str(path), "--force")
    assert forced.returncode == 0, forced.stderr
    assert path.read_text("utf-8") == starter_text()


def test_check_names_each_wrong_field_on_its_own_line(starter: Path) -> None:
    text = starter.read_text("utf-8")
    for old, new in [('variant = "f4"', 'variant = "f9"'),                            # no such espeak voice
                     ('variant = "m2"', 'variant = "m2", backend = "piper"'),          # no such TTS backend
                     ('to = "otto"', 'to = "otis"'),                                   # no such role
                     ('kind = "gift"', 'kind = "tip"')]:                               # no such kind
        assert old in text
        text = text.replace(old, new)
    starter.write_text(text, "utf-8")
    result = troupe("show", "check", str(starter))
    assert result.returncode == 1
    assert result.stdout == ""
    fields = [line.removeprefix(f"troupe: error: {starter}: ").split(":")[0] for line in error_lines(result)]
    assert fields == ["roles[0].voice", "roles[1]", "danmaku[1].to", "danmaku[3].kind"], result.stderr
    assert "'f9'" in result.stderr and "'piper'" in result.stderr and "'otis'" in result.stderr


@pytest.mark.parametrize(
    ("old", "new", "error"),
    [
        ('pitch = 60', 'pitch = 600', "roles[0].voice.pitch: 600 is not in 0..100"),
        ('id = "otto"', 'id = "otto the gardener"', "roles[1].id: 'otto the gardener' must be letters, digits, _ or -"),
        ('leads = ["otto"]', 'leads = ["olga"]', "segments[2].leads: 'olga' is not a role of the show"),
        ('length = 60', 'length = 2', "segments[1].length: 2 s is not in 5..86400"),
        ('"Go water something.",', '"Go water {something}.",', "roles[1].signoff[0]: 'Go water {something}.': said as "
                                                               "written, so no {placeholders}"),
    ],
)
def test_check_names_the_field_the_parser_stops_at(tmp_path: Path, old: str, new: str, error: str) -> None:
    text = starter_text()
    assert old in text
    path = tmp_path / "show.toml"
    path.write_text(text.replace(old, new, 1), "utf-8")
    show, errors = check_show(path, load_settings(environ={}))
    assert show is None and errors == [error]


@pytest.mark.parametrize(
    ("content", "error"),
    [(None, "no such file"), ("title = \n", "show file is not valid TOML: Invalid value (at line 1, column 9)")],
)
def test_a_missing_file_or_bad_toml_is_one_line(tmp_path: Path, content: str | None, error: str) -> None:
    path = tmp_path / "show.toml"
    if content is not None:
        path.write_text(content)
    result = troupe("show", "check", str(path))
    assert result.returncode == 1
    assert error_lines(result) == [f"troupe: error: {path}: {error}"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_troupe_up_runs_the_new_show_as_it_is(starter: Path, tmp_path: Path) -> None:
    # 12 s: the opening line, then both comments (1 s to nova, 2 s to otto) answered in the order
    # they came, each reply about 2.5 s: both roles speak.
    result = troupe("--state-dir", str(tmp_path / "state"), "up", "--show", str(starter), "--duration", "12",
                    "--resolution", "360p", "--out", str(tmp_path / "out"), "--json", timeout_s=200)
    assert result.returncode == 0, result.stderr
    summary = orjson.loads(result.stdout.strip().splitlines()[-1])
    assert summary["danmaku"]["received"] >= 2 and summary["danmaku"]["rejected"] == 0, summary["danmaku"]
    spoken = summary["airtime"]["seconds_by_role"]
    assert spoken.get("nova", 0) > 0 and spoken.get("otto", 0) > 0, spoken  # both roles spoke
    assert Path(summary["mp4"]).stat().st_size > 0
