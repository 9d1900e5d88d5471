"""Any OpenAI-compatible chat server behind the llm actor: a llama.cpp server, ``vllm serve``,
Ollama, a hosted API.  Replies stream as server-sent events (``/chat/completions``,
``stream: true``) and are cut into sentences as they arrive.

- ``TROUPE_OPENAI_BASE_URL`` (e.g. ``http://127.0.0.1:8000/v1``), ``TROUPE_OPENAI_MODEL`` (or a
  role's ``[roles.llm] model``), ``TROUPE_OPENAI_API_KEY`` (or ``TROUPE_OPENAI_API_KEY_FILE``).
- A role's ``[roles.llm] adapter`` names the model field of its requests: with
  ``vllm serve --enable-lora --lora-modules NAME=PATH`` each role speaks with its own LoRA.
- ``TROUPE_OPENAI_TIMEOUT_S`` (default 10): connecting, the first token, and any pause between
  two tokens; past it the request fails.
- A request that fails before any text came (cannot connect, 429 or 5xx) is tried again, at most
  ``RETRIES`` times with a doubling backoff.  Text already out is never asked for twice.
- A circuit breaker: after ``TRIP_AFTER`` failed replies in a row the server is taken as down for
  ``COOL_S`` seconds; a reply asked for meanwhile fails at once, with the reason, and the llm
  actor answers its cue with ``utterance.dropped``.  The first reply after the cool-down is
  the probe: its success closes the circuit again.
- A reply the stage no longer wants (its reader stops) closes the connection: the server
  stops generating.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from actors.backends.protocols import BackendError, Persona, Prompt, env_setting, reply_tokens
from actors.backends.text import ModelWriter, chat_messages

MAX_NEW_TOKENS = 80
TEMPERATURE, TOP_P = 0.6, 0.9
RETRIES = 2               # tries after the first, before any text came
BACKOFF_S = 0.25          # the first retry waits this long, each next one twice as long
TRIP_AFTER = 3            # failed replies in a row that open the circuit
COOL_S = 5.0              # how long an open circuit refuses replies


class OpenAIError(BackendError):
    """The server refused, failed or could not be reached."""


class _Retryable(OpenAIError):
    """A failure before any text came that another try may not meet."""


@dataclass(slots=True)
class CircuitBreaker:
    """Closed while the server answers; open (refusing at once) for ``cool_s`` after ``trip_after``
    failures in a row; then one probe decides."""

    trip_after: int = TRIP_AFTER
    cool_s: float = COOL_S
    failures: int = 0
    opened_at: float | None = None
    clock: Any = time.monotonic

    def check(self, what: str) -> None:
        """Raise while the circuit is open."""
        if self.opened_at is None:
            return
        left = self.opened_at + self.cool_s - self.clock()
        if left > 0:
            raise OpenAIError(f"{what} is down (circuit open after {self.failures} failed replies; "
                              f"tried again in {left:.1f} s)")

    def is_open(self) -> bool:
        """Whether a reply asked for now would be refused."""
        return self.opened_at is not None and self.clock() < self.opened_at + self.cool_s

    def succeeded(self) -> None:
        self.failures, self.opened_at = 0, None

    def failed(self) -> None:
        self.failures += 1
        if self.failures >= self.trip_after:
            self.opened_at = self.clock()  # (re)opened: a failed probe waits another cool-down


class OpenAIWriter(ModelWriter):
    """Writes replies with a chat model on an OpenAI-compatible server."""

    name = "openai"

    def __init__(self, model: str | None = None, base_url: str | None = None, api_key: str | None = None,
                 timeout_s: float | None = None, max_new_tokens: int | None = None) -> None:
        super().__init__()
        url = (base_url or env_setting("TROUPE_OPENAI_BASE_URL")).rstrip("/")
        if not url:
            raise OpenAIError("the openai backend needs TROUPE_OPENAI_BASE_URL (e.g. http://127.0.0.1:8000/v1)")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OpenAIError(f"TROUPE_OPENAI_BASE_URL is not an http(s) URL: {url!r}")
        self.model = model or env_setting("TROUPE_OPENAI_MODEL")
        if not self.model:
            raise OpenAIError("the openai backend needs a model: TROUPE_OPENAI_MODEL or the role's llm.model")
        self._key = api_key if api_key is not None else env_setting("TROUPE_OPENAI_API_KEY")
        raw_timeout = env_setting("TROUPE_OPENAI_TIMEOUT_S")
        try:
            self.timeout_s = timeout_s if timeout_s is not None else float(raw_timeout or 10)
        except ValueError:
            raise OpenAIError(f"TROUPE_OPENAI_TIMEOUT_S must be a number of seconds, not {raw_timeout!r}") from None
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._path = (parts.path or "") + "/chat/completions"
        self.where = f"the server at {parts.scheme}://{parts.netloc}"  # no key, no path: for reasons
        self.max_new_tokens = max_new_tokens = max_new_tokens or reply_tokens(MAX_NEW_TOKENS)
        self.breaker = CircuitBreaker()
        self._lock = threading.Lock()
        self.label = f"openai:{parts.netloc}:{self.model}:t={TEMPERATURE},top_p={TOP_P}"

    def available(self) -> bool:
        """False while the circuit is open (the actor says no opener before a reply that will fail)."""
        return not self.breaker.is_open()

    def headers(self) -> dict[str, str]:
        """The request's headers: JSON in, server-sent events out, the key where there is one."""
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

    @staticmethod
    def stops(persona: Persona, prompt: Prompt) -> list[str]:
        """Speaker tags on a new line, the likeliest first: the OpenAI API takes at most 4 stop
        sequences (the server knows its own chat format's; ``reply_sentences`` cuts any other tag)."""
        names = dict.fromkeys(n for n in (*prompt.cast, prompt.user, persona.name, "User") if n)
        return [f"\n{name}:" for name in names][:4]

    def request_body(self, persona: Persona, prompt: Prompt) -> dict[str, Any]:
        """What is sent: the chat, the model (a role's adapter, where it has one), the sampling."""
        body: dict[str, Any] = {
            "model": persona.adapter or self.model, "messages": chat_messages(persona, prompt), "stream": True,
            "max_tokens": self.max_new_tokens, "temperature": TEMPERATURE, "top_p": TOP_P,
            "stop": self.stops(persona, prompt),
        }
        if prompt.seed is not None:
            body["seed"] = zlib.crc32(f"{prompt.seed}:{prompt.cue_id}".encode())
        return body

    def tokens(self, persona: Persona, prompt: Prompt) -> Iterator[str]:
        """The reply's text as the server streams it; closing the iterator closes the connection."""
        self.breaker.check(self.where)
        body = json.dumps(self.request_body(persona, prompt)).encode()
        conn, response = self._open(body)
        with self._lock:
            self.breaker.succeeded()  # it answered
        try:
            yield from _events(response, self.where)
        except OpenAIError:
            with self._lock:
                self.breaker.failed()
            raise
        finally:
            conn.close()  # also what aborts a reply the stage no longer wants

    def _open(self, body: bytes) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send the request, with bounded retries while nothing has come back."""
        delay = BACKOFF_S
        for attempt in range(RETRIES + 1):
            try:
                return self._send(body)
            except _Retryable as exc:
                if attempt == RETRIES:
                    with self._lock:
                        self.breaker.failed()
                    raise OpenAIError(f"{exc} (after {RETRIES + 1} tries)") from None
                time.sleep(delay)
                delay *= 2
            except OpenAIError:
                with self._lock:
                    self.breaker.failed()
                raise
        raise AssertionError("unreachable")

    def _send(self, body: bytes) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self.timeout_s)
        try:
            conn.request("POST", self._path, body, self.headers())
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise _Retryable(f"{self.where} cannot be reached: {_why(exc)}") from None
        if response.status == 200:
            return conn, response
        detail = _error_detail(response)
        conn.close()
        message = f"{self.where} answered {response.status}{': ' + detail if detail else ''}"
        if response.status == 429 or response.status >= 500:
            raise _Retryable(message)
        raise OpenAIError(message)


def _events(response: http.client.HTTPResponse, where: str) -> Iterator[str]:
    """The text of a chat completion's server-sent events, up to ``[DONE]`` or a finish reason."""
    while True:
        try:
            line = response.readline()
        except (OSError, http.client.HTTPException) as exc:
            raise OpenAIError(f"{where} stopped mid-reply: {_why(exc)}") from None
        if not line:
            raise OpenAIError(f"{where} closed the stream mid-reply")
        line = line.strip()
        if not line.startswith(b"data:"):
            continue  # a blank separator, a comment, an event name
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise OpenAIError(f"{where} sent an event that is not JSON: {data[:80]!r}") from None
        if "error" in chunk:
            raise OpenAIError(f"{where} failed mid-reply: {str(chunk['error'])[:200]}")
        for choice in chunk.get("choices") or ():
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                yield piece
            if choice.get("finish_reason"):
                return


def _error_detail(response: http.client.HTTPResponse) -> str:
    try:
        raw = response.read(2000)
    except (OSError, http.client.HTTPException):
        return ""
    try:
        error = json.loads(raw).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        return str(message or "")[:200]
    except (json.JSONDecodeError, AttributeError):
        return raw.decode("utf-8", "replace").strip()[:200]


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
