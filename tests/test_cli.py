"""The troupe command: clear one-line errors and non-zero exits, publishing from files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from nats.js import JetStreamContext

from infra.natsserver import EmbeddedNats


def troupe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TROUPE_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", *args], capture_output=True, text=True, timeout=60, env=full_env,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("troupe: error: ")
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["up", "--show", "/nonexistent/show.toml"], {}, "cannot read show file"),
        (["up", "--duration", "-1"], {}, "--duration must be positive"),
        (["up", "--actors", "director,juggler"], {}, "unknown actor"),
        (["up"], {"TROUPE_RESOLUTION": "999p"}, "TROUPE_RESOLUTION"),
        (["up"], {"TROUPE_FPS": "fast"}, "TROUPE_FPS"),
        (["publish", "--run", "r1", "hi"], {}, "needs a NATS URL"),
        (["publish", "--run", "bad run", "hi"], {}, "--run must be"),
    ],
)
def test_user_mistakes_get_one_line_and_exit_2(args: list[str], env: dict[str, str], needle: str, tmp_path: Path) -> None:
    result = troupe("--state-dir", str(tmp_path), *args, env=env)
    assert result.returncode == 2
    assert needle in one_line_error(result)


def test_bad_show_file_names_the_field(tmp_path: Path) -> None:
    show = tmp_path / "show.toml"
    show.write_text('[[roles]]\nid = "a b"\n')
    result = troupe("--state-dir", str(tmp_path), "up", "--show", str(show))
    assert result.returncode == 2
    assert "roles[0].id" in one_line_error(result)


def test_unreachable_nats_exits_1(tmp_path: Path) -> None:
    result = troupe("--state-dir", str(tmp_path), "--nats", "nats://127.0.0.1:1", "publish", "--run", "r1", "hi")
    assert result.returncode == 1
    assert "cannot connect to NATS" in one_line_error(result)


async def _count(js: JetStreamContext, run: str) -> int:
    info = await js.stream_info("TROUPE_DANMAKU", subjects_filter=f"troupe.{run}.>")
    return sum((info.state.subjects or {}).values()) if info.state.subjects else 0


async def test_publish_from_a_file_is_all_or_nothing(nats_server: EmbeddedNats, js: JetStreamContext, tmp_path: Path) -> None:
    import asyncio

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"user": "a", "text": "fine"}\n{"user": "b", "text": 42}\n')
    result = await asyncio.to_thread(troupe, "--nats", nats_server.url, "publish", "--run", "clifile", "--file", str(bad))
    assert result.returncode == 2
    assert "bad.jsonl:2: payload.text" in one_line_error(result)
    assert await _count(js, "clifile") == 0
    good = tmp_path / "good.jsonl"
    good.write_text('{"user": "a", "text": "one"}\n\n{"user": "b", "text": "two", "to": "host"}\n')
    result = await asyncio.to_thread(troupe, "--nats", nats_server.url, "publish", "--run", "clifile", "--file", str(good))
    assert result.returncode == 0, result.stderr
    assert await _count(js, "clifile") == 2
    result = await asyncio.to_thread(troupe, "--nats", nats_server.url, "publish", "--run", "clifile", "hello", "--user", "z", "--role", "rex")
    assert result.returncode == 0 and await _count(js, "clifile") == 3
