"""The troupe command: clear one-line errors and non-zero exits, publishing from files."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from nats.js import JetStreamContext

from events import codec
from events.subjects import stream_name
from infra.bus import read_stream
from infra.natsserver import EmbeddedNats
from tests.showkit import demo_run


def troupe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TROUPE_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=60, env=full_env,
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
        (["publish", "--run", "bad run", "hi"], {}, "--run must be"),
        (["publish", "--run", "r1"], {}, "give the comment text or --file"),
        (["publish", "--run", "r1", "hi", "--file", "x.jsonl"], {}, "not both"),
        (["publish", "--run", "r1", "--file", "x.jsonl", "--user", "u"], {}, "in a --file each line has its own"),
        (["publish", "--run", "r1", "hi", "--kind", "shout"], {}, "argument --kind: invalid choice"),
        (["publish", "--run", "r1", "hi", "--wait", "-1"], {}, "--wait must be"),
        (["replay", "r1", "--from", "10", "--to", "5"], {}, "--to (5 s) must be after --from (10 s)"),
        (["replay", "r1", "--from", "-1"], {}, "--from must be 0 or more"),
        (["replay", "r1", "--to", "-2"], {}, "--to must be 0 or more"),
        (["replay", "r1", "--types", "cue", "foo"], {}, "unknown event type or family: foo"),
        (["replay", "r1", "--speed", "0"], {}, "--speed must be positive"),
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


@pytest.mark.parametrize(
    ("role", "field"),
    [('pitch = 620', "voice.pitch"), ('rate = 5', "voice.rate")],
)
def test_voice_settings_out_of_range_name_the_field(role: str, field: str) -> None:
    from events.show import ShowError, show_from_dict

    doc = {"roles": [{"id": "a", "voice": dict([role.replace(" ", "").split("=")])}]}
    doc["roles"][0]["voice"] = {k: int(v) for k, v in doc["roles"][0]["voice"].items()}
    with pytest.raises(ShowError, match=rf"roles\[0\]\.{field}"):
        show_from_dict(doc)
    with pytest.raises(ShowError, match=r"roles\[0\]\.weight"):
        show_from_dict({"roles": [{"id": "a", "weight": 0}]})


def test_up_refuses_a_run_id_the_store_holds_before_starting_anything(tmp_path: Path) -> None:
    # Its events would be dropped as duplicates of the first run's. The recorder alone: the store is the point.
    from sqlalchemy import func, select

    from store.database import default_url, open_engine
    from store.schema import events

    up = ("--state-dir", str(tmp_path), "up", "--duration", "2", "--actors", "recorder", "--out", str(tmp_path),
          "--run", "taken")
    assert troupe(*up).returncode == 0
    again = troupe(*up)
    assert again.returncode == 2
    assert re.fullmatch(r"troupe: error: run taken exists in the store \(started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\): "
                        r"choose another --run", one_line_error(again))
    engine = open_engine(default_url(tmp_path))
    with engine.connect() as conn:
        started = conn.execute(select(func.count()).select_from(events)
                               .where(events.c.run == "taken", events.c.type == "run.started")).scalar_one()
    engine.dispose()
    assert started == 1


def test_unreachable_nats_exits_1(tmp_path: Path) -> None:
    result = troupe("--state-dir", str(tmp_path), "--nats", "nats://127.0.0.1:1", "publish", "--run", "r1", "hi")
    assert result.returncode == 1
    assert "cannot connect to NATS" in one_line_error(result)


def test_publish_without_a_running_show_says_how_to_start_one(tmp_path: Path) -> None:
    # A global option after the command, and the value given after it wins.
    result = troupe("--state-dir", "elsewhere", "publish", "--run", "r1", "hi", "--state-dir", str(tmp_path))
    assert result.returncode == 1
    assert one_line_error(result) == (
        f"troupe: error: no running show found in {tmp_path} (start one with troupe up, or give --nats URL)"
    )


def test_global_options_are_taken_after_the_command_and_verbose_logs(tmp_path: Path) -> None:
    result = troupe("publish", "--run", "r1", "hi", "--state-dir", str(tmp_path), "--nats", "nats://127.0.0.1:1", "-v")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("INFO ") and lines[0].endswith("publishing 1 danmaku to run r1 on nats://127.0.0.1:1")
    assert lines[-1].startswith("troupe: error: cannot connect to NATS at nats://127.0.0.1:1")


async def _count(js: JetStreamContext, run: str) -> int:
    info = await js.stream_info("TROUPE_DANMAKU", subjects_filter=f"troupe.{run}.>")
    return sum((info.state.subjects or {}).values()) if info.state.subjects else 0


async def test_publish_from_a_file_is_all_or_nothing(nats_server: EmbeddedNats, js: JetStreamContext, tmp_path: Path) -> None:
    import asyncio

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"user": "a", "text": "fine"}\n{"user": "b", "text": 42}\n')
    await js.publish("troupe.clifile.run.started", codec.encode(demo_run("clifile")))
    result = await asyncio.to_thread(troupe, "--nats", nats_server.url, "publish", "--run", "clifile", "--file", str(bad))
    assert result.returncode == 2
    assert "bad.jsonl:2: payload.text" in one_line_error(result)
    assert await _count(js, "clifile") == 0
    for line, field in (('{"text": "x", "id": 7}', "id"), ('{"text": "x", "kind": 1}', "payload.kind"),
                        ('{"text": "x", "id": "a"}\n{"text": "y", "id": "a"}', "id"), ('["x"]', "JSON object"),
                        ('{"text": "x", "viewer": "no namespace"}', "<platform>:<id>")):
        bad.write_text(line + "\n")
        result = await asyncio.to_thread(troupe, "--nats", nats_server.url, "publish", "--run", "clifile",
                                         "--file", str(bad))
        assert result.returncode == 2 and field in one_line_error(result), result.stderr
    assert await _count(js, "clifile") == 0
    good = tmp_path / "good.jsonl"
    good.write_text('{"user": "a", "text": "one"}\n\n{"user": "b", "text": "two", "to": "host", "id": "b-2", '
                    '"viewer": "twitch:42", "platform": "twitch", "badges": ["subscriber"]}\n')
    result = await asyncio.to_thread(troupe, "--nats", nats_server.url, "publish", "--run", "clifile",
                                     "--file", str(good), "--wait", "0")
    assert result.returncode == 0, result.stderr
    ids = [line.removeprefix("sent ") for line in result.stdout.splitlines()]
    assert len(ids) == 2 and ids[0].startswith("f") and ids[0].endswith("-1") and ids[1] == "b-2"
    assert await _count(js, "clifile") == 2
    sent = [codec.decode(m.data) for m in await read_stream(js, stream_name("danmaku"), ["troupe.clifile.>"])]
    assert [(e.viewer, e.platform, e.badges) for e in sent][1] == ("twitch:42", "twitch", ("subscriber",))
    result = await asyncio.to_thread(troupe, "--nats", nats_server.url, "publish", "--run", "clifile", "hello",
                                     "--user", "z", "--role", "rex", "--kind", "gift", "--wait", "0")
    assert result.returncode == 0 and await _count(js, "clifile") == 3


@pytest.mark.parametrize("entry", [["-m", "app.cli"], ["-c", "import sys; from app.cli import main; sys.exit(main())"]],
                         ids=["python -m app.cli", "the troupe script"])
@pytest.mark.parametrize("args", [["nats-config"], ["show", "check", "app/shows/demo.toml"]],
                         ids=["36 kB at once", "one line, buffered"])
def test_a_reader_that_leaves_early_gets_no_traceback(entry: list[str], args: list[str]) -> None:
    # As ``troupe inspect RUN | head -1`` once head has exited: the pipe's read end is closed before anything
    # is written, so the write fails every time (a real head may leave before or after it).
    import os

    read, write = os.pipe()
    os.close(read)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TROUPE_") and k != "PYTHONUNBUFFERED"}
    try:
        result = subprocess.run([sys.executable, *entry, *args], stdout=write, stderr=subprocess.PIPE, text=True,
                                timeout=60, env=env, cwd=Path(__file__).parent.parent, check=False)
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (1, "")


def test_a_setting_can_come_from_a_file_as_container_secrets_do(tmp_path: Path) -> None:
    from infra.settings import SettingsError, load_settings

    secret = tmp_path / "token"
    secret.write_text("s3cret\n")
    assert load_settings(environ={"TROUPE_PREVIEW_TOKEN_FILE": str(secret)}).preview_token == "s3cret"
    both = {"TROUPE_PREVIEW_TOKEN": "from-env", "TROUPE_PREVIEW_TOKEN_FILE": str(secret)}
    assert load_settings(environ=both).preview_token == "from-env"  # the variable itself wins
    with pytest.raises(SettingsError, match="TROUPE_NATS_URL_FILE: cannot read"):
        load_settings(environ={"TROUPE_NATS_URL_FILE": str(tmp_path / "missing")})


def test_log_lines_can_be_json_and_a_wrong_format_is_one_line(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "TROUPE_LOG_FORMAT": "yaml", "TROUPE_STATE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "app.cli", "runs"], capture_output=True, text=True, env=env,
                         timeout=60, check=False)
    assert out.returncode == 2 and out.stderr.strip() == "troupe: error: TROUPE_LOG_FORMAT must be one of text, json"


def test_the_sinks_encoder_settings_are_checked() -> None:
    from infra.settings import SettingsError, load_settings

    settings = load_settings(environ={"TROUPE_VIDEO_THREADS": "0", "TROUPE_SINK_NICE": "0"})
    assert (settings.video_threads, settings.sink_nice) == (0, 0)
    with pytest.raises(SettingsError, match="TROUPE_VIDEO_THREADS must be 0 .x264 picks. to 16, not -1"):
        load_settings(environ={"TROUPE_VIDEO_THREADS": "-1"})
    with pytest.raises(SettingsError, match="TROUPE_SINK_NICE must be 0 to 19, not 20"):
        load_settings(environ={"TROUPE_SINK_NICE": "20"})
