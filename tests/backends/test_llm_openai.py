"""The openai writer against a real OpenAI-compatible server on loopback: llama-cpp-python's own
``python -m llama_cpp.server`` on the shipped GGUF, killed mid-reply and started again."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from actors.backends.protocols import BackendError, Persona, Prompt
from actors.backends.shipped import QWEN_CODER_05B
from actors.kernel import ListFeed
from actors.llm import LLMActor
from events.cue import CueIssued
from events.qos import ThrottleChanged
from events.utterance import UtteranceChunk, UtteranceCompleted, UtteranceDropped
from infra.settings import load_settings
from tests.showkit import demo_run

pytest.importorskip("llama_cpp.server", reason="the llama extra is not installed (scripts/test.sh installs it)")

from actors.backends.llm_openai import CircuitBreaker, OpenAIError, OpenAIWriter  # noqa: E402

# A llama.cpp server sharing two loaded cores with the suite (and, after a restart, reading its
# first prompt) can pause longer between tokens than the production default (10 s) allows.
LOADED_TIMEOUT_S = 45.0
MIKA = Persona("host", "Mika", "cheerful host who loves games and music", "en")
RUN = demo_run("r1")


@dataclass
class Server:
    """A llama.cpp server process on a port of its own."""

    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(QWEN_CODER_05B.path()), "--model_alias",
             "qwen", "--host", "127.0.0.1", "--port", str(self.port), "--n_threads", "2", "--n_ctx", "2048"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "the llama.cpp server exited"
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.1)  # polling a starting server: it answers within seconds
        raise AssertionError("the llama.cpp server did not answer within 120 s")

    def kill(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = Server(_free_port())
    running.start()
    yield running
    if running.process is not None and running.process.poll() is None:
        running.kill()


def cue(i: int, text: str) -> CueIssued:
    return CueIssued(id=f"cue{i}", run="r1", role="host", correlation=f"d{i}", seq=i, user="ann", text=text,
                     danmaku=(f"d{i}",), routed_by="mention", priority=2.0, max_sentences=3)


def test_settings_that_cannot_work_are_one_line_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TROUPE_OPENAI_BASE_URL", raising=False)
    with pytest.raises(OpenAIError, match="needs TROUPE_OPENAI_BASE_URL"):
        OpenAIWriter(model="m")
    with pytest.raises(OpenAIError, match="not an http"):
        OpenAIWriter(model="m", base_url="ftp://x")
    monkeypatch.delenv("TROUPE_OPENAI_MODEL", raising=False)
    with pytest.raises(OpenAIError, match="needs a model"):
        OpenAIWriter(base_url="http://127.0.0.1:1/v1")


def test_the_key_comes_from_a_file_and_a_role_adapter_names_the_model(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: os.PathLike[str]) -> None:
    key = os.path.join(tmp_path, "key")
    with open(key, "w") as f:
        f.write("sk-test\n")
    monkeypatch.setenv("TROUPE_OPENAI_API_KEY_FILE", key)
    monkeypatch.delenv("TROUPE_OPENAI_API_KEY", raising=False)
    writer = OpenAIWriter(model="base", base_url="http://127.0.0.1:1/v1")
    assert writer.headers()["Authorization"] == "Bearer sk-test"
    rex = Persona("rex", "Rex", "tech nerd", "en", adapter="rex-lora")
    assert writer.request_body(rex, Prompt("c", "ann", "hi", seed=3))["model"] == "rex-lora"
    assert writer.request_body(MIKA, Prompt("c", "ann", "hi"))["model"] == "base"
    assert "sk-test" not in writer.label and "sk-test" not in writer.where


def test_a_replys_token_budget_is_the_setting_else_the_backends_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TROUPE_LLM_MAX_TOKENS", raising=False)
    assert OpenAIWriter(model="m", base_url="http://127.0.0.1:1/v1").request_body(MIKA, Prompt("c", "ann", "hi"))[
        "max_tokens"] == 80
    monkeypatch.setenv("TROUPE_LLM_MAX_TOKENS", "12")
    writer = OpenAIWriter(model="m", base_url="http://127.0.0.1:1/v1")
    assert writer.request_body(MIKA, Prompt("c", "ann", "hi"))["max_tokens"] == 12
    assert OpenAIWriter(model="m", base_url="http://127.0.0.1:1/v1", max_new_tokens=5).max_new_tokens == 5
    for bad in ("many", "-3", "5000"):
        monkeypatch.setenv("TROUPE_LLM_MAX_TOKENS", bad)
        with pytest.raises(BackendError, match="TROUPE_LLM_MAX_TOKENS"):
            OpenAIWriter(model="m", base_url="http://127.0.0.1:1/v1")


def test_the_breaker_opens_after_failures_in_a_row_and_a_probe_closes_it() -> None:
    now = [0.0]
    breaker = CircuitBreaker(trip_after=2, cool_s=5, clock=lambda: now[0])
    breaker.failed()
    breaker.check("the server")  # one failure: still closed
    breaker.failed()
    with pytest.raises(OpenAIError, match="circuit open after 2 failed replies; tried again in 5.0 s"):
        breaker.check("the server")
    now[0] = 5.0
    breaker.check("the server")  # cooled down: the probe may go
    breaker.succeeded()
    assert breaker.opened_at is None and breaker.failures == 0


def test_a_reply_streams_from_the_server(server: Server) -> None:
    writer = OpenAIWriter(model="qwen", base_url=server.url, timeout_s=LOADED_TIMEOUT_S)
    reply = list(writer.stream(MIKA, Prompt("c1", "alice", "what game should we play tonight?", seed=1,
                                            cast=("Mika", "Rex"))))
    assert reply and reply[-1].last and all(s.strip() for s in reply)
    assert not any(tag in " ".join(reply) for tag in ("Mika:", "Rex:", "alice:"))


def test_a_server_killed_mid_reply_drops_the_rest_and_the_show_goes_on(server: Server) -> None:
    writer = OpenAIWriter(model="qwen", base_url=server.url, timeout_s=LOADED_TIMEOUT_S, max_new_tokens=300)
    writer.breaker = CircuitBreaker(trip_after=2, cool_s=1.0)
    tokens = writer.tokens(MIKA, Prompt("c0", "ann", "tell me a very long story about a dragon and a knight"))
    assert next(tokens)  # the server is writing
    server.kill()  # mid-reply: what was sent before it died is still read, then the stream breaks
    with pytest.raises(OpenAIError, match="mid-reply"):
        for _ in tokens:
            pass
    llm = ListFeed(LLMActor(load_settings(environ={}, llm_first_sentence_ms=0), writer=writer), RUN)  # however slow
    llm.handle(ThrottleChanged(id="t", run="r1", window_tokens=400, reason="test"), at_ms=0)
    # While it is down: tried again with backoff, then the circuit opens and refuses at once.
    [down] = [e for e in llm.handle(cue(2, "are you there?"), at_ms=200) if isinstance(e, UtteranceDropped)]
    assert "cannot be reached" in down.reason and "after 3 tries" in down.reason
    started = time.monotonic()
    [refused] = llm.handle(cue(3, "hello?"), at_ms=300)  # the server is known down
    assert isinstance(refused, UtteranceDropped) and "circuit open" in refused.reason
    assert time.monotonic() - started < 1.0  # refused without trying the server
    server.start()
    deadline = time.monotonic() + 5
    while writer.breaker.opened_at is not None and time.monotonic() - writer.breaker.opened_at < 1.0:
        assert time.monotonic() < deadline
        time.sleep(0.05)  # the circuit's cool-down (1 s) is wall-clock time
    back = llm.handle(cue(4, "hi Mika, are you back?"), at_ms=400)
    assert any(isinstance(e, UtteranceChunk) for e in back)
    [done] = [e for e in back if isinstance(e, UtteranceCompleted)]
    assert done.backend.startswith(f"openai:127.0.0.1:{server.port}:qwen")


def test_a_reader_that_stops_closes_the_request(server: Server) -> None:
    writer = OpenAIWriter(model="qwen", base_url=server.url, timeout_s=LOADED_TIMEOUT_S, max_new_tokens=300)
    stream = writer.stream(MIKA, Prompt("c5", "ann", "tell me a very long story about dragons", seed=2))
    assert next(stream).strip()
    stream.close()  # the stage no longer wants it: the connection is closed
    assert list(writer.stream(MIKA, Prompt("c6", "ann", "hello!", seed=2)))
