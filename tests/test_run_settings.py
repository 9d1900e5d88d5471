"""Run-scoped settings by construction: every setting is the run's unless marked the process's own;
the run records them all, every handler follows the recorded ones, and no actor reads one of
the run's settings from its own process settings."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
from pathlib import Path

from actors.director import Director
from actors.facts import FactsActor
from actors.kernel import Kernel
from actors.lipsync import LipsyncActor
from actors.llm import LLMActor
from actors.memory import MemoryActor
from actors.preview import PreviewActor
from actors.qos import QosActor
from actors.recorder import RecorderActor
from actors.render import RenderActor
from actors.sink import SinkActor
from actors.tts import TTSActor
from app.registry import NAMES, actor_class
from events.run import RunStarted
from infra.settings import RUN_SCOPED, Settings, load_settings, run_config, run_scoped, run_settings
from tests.showkit import demo_run

ACTORS = (Director, FactsActor, LipsyncActor, LLMActor, MemoryActor, PreviewActor, QosActor, RecorderActor, RenderActor, SinkActor, TTSActor)
EXEMPT = "process's own"  # a line reading the process's value of a run's setting on purpose says why


def test_every_setting_is_the_run_s_unless_marked_the_process_s_own() -> None:
    fields = [f.name for f in dataclasses.fields(Settings) if f.name != "extra"]
    assert set(RUN_SCOPED) == {n for n in fields if run_scoped(n)}
    # Secrets and where things are never go into a run's record.
    for name in ("nats_url", "store_url", "openai_api_key", "twitch_token", "bilibili_cookie", "preview_token"):
        assert not run_scoped(name), name
    for name in ("merge_window_ms", "role_wait_budget_ms", "interrupt_priority", "llm_max_sentences", "jpeg_quality"):
        assert run_scoped(name), name


def test_a_run_records_every_one_of_its_settings_as_json_and_follows_it() -> None:
    changed = load_settings(environ={}, role_wait_budget_ms=4321, blocklist=("boo",), merge_window_ms=0)
    config = run_config(changed)
    assert set(config) == set(RUN_SCOPED)
    json.dumps(config)  # it travels in run.started
    other = load_settings(environ={}, role_wait_budget_ms=10, nats_url="nats://elsewhere:4222")
    followed = run_settings(other, config)
    assert followed.role_wait_budget_ms == 4321 and followed.blocklist == ("boo",) and followed.merge_window_ms == 0
    assert followed.nats_url == "nats://elsewhere:4222"  # the process's own stays its own
    assert run_settings(other, {"role_wait_budget_ms": 7, "unknown": 1}).role_wait_budget_ms == 7  # an older run


def test_the_kernel_hands_each_handler_the_run_s_settings_not_the_process_s() -> None:
    recorded = load_settings(environ={}, role_wait_budget_ms=4321)
    run: RunStarted = dataclasses.replace(demo_run(), config=run_config(recorded))
    kernel: Kernel[object] = Kernel(QosActor(load_settings(environ={}, role_wait_budget_ms=5)))
    taken = kernel.take(run, run, 0)
    assert taken.ctx is not None and taken.ctx.settings is not None
    assert taken.ctx.settings.role_wait_budget_ms == 4321


def _reads(cls: type) -> list[tuple[int, str, str]]:
    """(line, setting, the line's text) of each ``self.settings.<name>`` in a class's own source."""
    source = inspect.getsource(cls)
    lines = source.splitlines()
    start = inspect.getsourcelines(cls)[1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "settings" and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "self"):
            found.append((start + node.lineno - 1, node.attr, lines[node.lineno - 1]))
    return found


def test_no_actor_reads_one_of_the_run_s_settings_from_its_process_settings() -> None:
    wrong = []
    for cls in ACTORS:
        for line, name, text in _reads(cls):
            if name in Settings.__dataclass_fields__ and run_scoped(name) and EXEMPT not in text:
                wrong.append(f"{Path(inspect.getfile(cls)).name}:{line} {cls.__name__} reads self.settings.{name}")
    assert not wrong, "read the run's settings (ctx.settings_over(...)) instead:\n" + "\n".join(wrong)


def test_every_actor_is_looked_at() -> None:
    assert {actor_class(name) for name in NAMES} <= set(ACTORS)
