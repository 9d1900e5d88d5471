"""Typed settings, read once from ``TROUPE_*`` environment variables and passed down.

Each field of ``Settings`` is one setting: its variable is ``TROUPE_<NAME>`` (or
``TROUPE_<NAME>_FILE``, a file holding the value: a container secret), its doc is the field's
``doc`` metadata, and the reference page (``python -m app.reference``) is made from them.

The determinism contract: every setting is the run's unless it is marked the process's own
(``process=True``: where things are, delivery, credentials, a worker's hardware and models, where
its output goes).  ``troupe up`` records the run's settings in ``run.started``; every process
that handles the run, and re-execution (``troupe replay --verify``), follows the recorded
values, not its own: the actor kernel hands a handler ``Context.settings``, the process's
settings with the run's recorded ones applied (``run_settings``).  A new setting is the run's
unless someone marks it otherwise, and a test fails when an actor reads one of the run's
settings from its own process settings.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from events.errors import ConfigError
from events.show import RESOLUTIONS
from events.subjects import is_token
from infra.logs import FORMATS as LOG_FORMATS


class SettingsError(ConfigError):
    """A setting has an invalid value."""


_DEVICE = re.compile(r"cpu|auto|cuda(:[0-9]+)?")
T = TypeVar("T")


def setting(default: T, doc: str, *, secret: bool = False, process: bool = False) -> T:
    """A field of ``Settings`` with its one-line doc; a secret is left out of the settings' repr
    (and is always the process's own); ``process``: the process's own, never recorded in a run."""
    return field(default=default, metadata={"doc": doc, "process": process or secret}, repr=not secret)


@dataclass(frozen=True, slots=True)
class Settings:
    """Every knob of a Troupe process; each field has a ``TROUPE_<NAME>`` variable."""

    # Where things are
    nats_url: str | None = setting(None, "the NATS server, or several comma-separated (a cluster's nodes: a client fails over to the others); unset: troupe up starts an embedded one", process=True)
    store_url: str | None = setting(None, "the event store: sqlite:///path.db or postgresql://user@host:port/db; unset: SQLite in the state dir", process=True)
    state_dir: Path = setting(Path(".troupe"), "the embedded NATS server's data and the SQLite store", process=True)
    out_dir: Path = setting(Path("out"), "where the sink writes <run>.mp4", process=True)
    metrics_port: int = setting(0, "the Prometheus /metrics port (0: a free one, printed; -1: no metrics endpoint)", process=True)
    metrics_host: str = setting("127.0.0.1", "the address /metrics binds (0.0.0.0: scrapable from other hosts and containers)", process=True)
    log_format: str = setting("text", "log lines: text, or json (one object per line, with the actor, run, role and correlation of the event being handled)", process=True)
    # The show clock and the stage
    resolution: str = setting("720p", "the stage's size: 1080p, 720p, 480p or 360p")
    fps: int = setting(25, "frames per second of the show clock (1 to 60)")
    seed: int = setting(7, "the run's seed (replies, blink phases)")
    # Delivery
    max_deliver: int = setting(5, "deliveries of an input before it is dead-lettered", process=True)
    ack_wait_s: float = setting(30.0, "an input not acked this long is delivered again", process=True)
    nak_backoff_s: float = setting(0.2, "the first delay before a failed input is tried again (doubled each time)", process=True)
    fetch_batch: int = setting(64, "the most messages an actor fetches at once", process=True)
    max_inflight: int = setting(256, "the most unacked inputs per actor process", process=True)
    # The director
    merge_window_ms: int = setting(1500, "near-identical danmaku within this window (or while the first one's reply waits or is spoken) share a cue; 0: no merging")
    max_danmaku_chars: int = setting(200, "longer comments are rejected")
    blocklist: tuple[str, ...] = setting((), "comma-separated blocked words, added to the show's (for danmaku and for what a model writes)")
    cue_deadline_ms: int = setting(8000, "a reply's speech must start this soon after its cue, or it is dropped with an event")
    stage_backlog_ms: int = setting(4000, "speech asked for and not yet spoken stays under this; replies are shortened to fit")
    self_driven: str = setting("on", "off: the show speaks only when the chat asks (no rundown turns)")
    idle_gap_ms: int = setting(0, "when nobody waits, the show's own line is asked this much later: up to this much more silence (0 to 10000)")
    reply_pause_ms: int = setting(200, "the pause lipsync leaves between two replies, a turn gap in talk (0 to 3000)")
    deck_ms: int = setting(1500, "the next reply is asked for this long before the floor frees, so it is ready on deck (0 to 10000)")
    banter_turns: int = setting(4, "at most this many turns between roles before one goes to the chat")
    # Viewers remembered
    memory: str = setting("on", "on: the director reads what the stage remembers of a viewer with a platform id from the viewers read model as their comment comes, records it (danmaku.recalled) and the reply uses it; off: every viewer is answered as a stranger")
    recall_wait_ms: int = setting(250, "the longest the director waits for the read model to say what it remembers of a viewer before their comment is answered without it, recorded as not read (0: no read; 0 to 2000)")
    regulars_first: str = setting("off", "on: a returning viewer's comment goes first among comments of the same class and kind (never before one about to go stale: newcomers are not let go for regulars)")
    viewer_retention_days: float = setting(365.0, "the viewers read model forgets a viewer not seen this many days (0: never)", process=True)
    facts: str = setting("rules", "what reads the facts a viewer states about themselves: rules (English and Chinese, in the memory worker); llama_cpp: the rules, and a facts worker (troupe up runs it) reading what they miss with the llama_cpp model (TROUPE_LLAMA_MODEL, else the shipped one)", process=True)
    facts_threads: int = setting(1, "the facts worker's llama.cpp threads (it reads off the cue path: one core leaves the others to the show)", process=True)
    # Replies
    llm_backend: str = setting("scripted", "the LLM backend: scripted, transformers, llama_cpp, openai or vllm (troupe up --llm)")
    llm_max_sentences: int = setting(3, "the longest reply, in sentences")
    llm_max_tokens: int = setting(0, "a model reply's budget of new tokens (0: the backend's own, 72 to 80): a shorter reply holds the floor less long")
    llm_first_sentence_ms: int = setting(3000, "a model with no first sentence this long after it began is stopped and the scripted line said instead (0: wait)")
    openers: str = setting("on", "off: a model reply starts with the model's first sentence, no opener said while it writes")
    llama_model: str | None = setting(None, "the llama_cpp backend's GGUF file (a role's llm.model overrides it); unset: the shipped Qwen2.5-Coder-0.5B", process=True)
    llama_threads: int | None = setting(None, "the llama_cpp backend's decoding threads; unset: the CPUs but one, 1 to 4", process=True)
    llama_contexts: int = setting(4, "roles the llama_cpp backend keeps a context of their own for (about 100 MB each)", process=True)
    openai_base_url: str | None = setting(None, "the openai backend's server, e.g. http://127.0.0.1:11434/v1 (Ollama) or a llama.cpp server's", process=True)
    openai_model: str | None = setting(None, "the model field of the openai backend's requests (a role's llm.model overrides it)", process=True)
    openai_api_key: str | None = setting(None, "the openai backend's bearer key", secret=True, process=True)
    openai_timeout_s: float = setting(10.0, "the openai backend's limit on connecting, the first token and any pause between two tokens", process=True)
    vllm_model: str | None = setting(None, "the vllm backend's model: a folder in the Hugging Face format (a role's llm.model overrides it)", process=True)
    vllm_engine: str = setting("", "a JSON object of vLLM engine arguments over Troupe's defaults, e.g. {\"gpu_memory_utilization\": 0.5}", process=True)
    # Voices and faces
    tts_backend: str = setting("espeak", "the TTS backend of roles whose voice names none: espeak or onnx (troupe up --tts)", process=True)
    face_ease_ms: int = setting(250, "a face eases into a new expression, and turns, over this long (at most the hold)")
    face_hold_ms: int = setting(1200, "a face keeps an expression at least this long")
    face_linger_ms: int = setting(1500, "a face goes back to neutral this long after a reply ends")
    # Rendering
    render_device: str = setting("cpu", "where the renderer draws: cpu, cuda, cuda:N, or auto (CUDA when there is one)", process=True)
    jpeg_quality: int = setting(80, "the frames' JPEG quality")
    frame_max_age_s: float = setting(600.0, "how long the frame stream keeps frames", process=True)
    slow_render_ms: float = setting(0.0, "fault injection: each frame costs this many ms more", process=True)
    render_delay_ms: int = setting(5, "how long after its show time a frame is drawn", process=True)
    # Streams, standbys and run lifetimes
    stream_replicas: int = setting(1, "copies of each stream on a JetStream cluster's nodes (1 to 5; 3 survives a node's loss)", process=True)
    lease_ttl_s: float = setting(1.5, "a standby takes over the director, lipsync, renderer or sink this long after its holder died (0.3 to 60)", process=True)
    spread: str = setting("off", "on: the processes of a stateful kind (director, lipsync, render, sink) share the runs on air, each run held by one of them and taken over by the others when it dies; off: one process runs the kind under its lease, the others stand by", process=True)
    join_window_s: float = setting(30.0, "the renderer and the sink join a run only this soon after its start", process=True)
    run_grace_s: float = setting(30.0, "a worker keeps an ended run's state this long, then releases it", process=True)
    run_idle_s: float = setting(3600.0, "... and a run's that never ended once idle this long", process=True)
    store_frames: str = setting("digest", "digest: frames stored as SHA-256 and size only; full: the JPEGs too", process=True)
    # Scheduling and QoS
    scheduler: str = setting("troupe", "the llm and tts queues' order: troupe (role priority) or fifo", process=True)
    interrupt_priority: float = setting(4.0, "a cue at least this urgent takes the floor from the speaking reply")
    role_wait_budget_ms: int = setting(4000, "QoS raises a role's weight while its oldest work waits longer than this")
    # The video and live outputs
    video_crf: int = setting(23, "H.264 quality (lower: better and larger)", process=True)
    video_preset: str = setting("veryfast", "the x264 preset (speed against size)", process=True)
    video_threads: int = setting(1, "x264 threads per show (0: x264 picks, 1.5 per core: less wall time, about 16% more CPU)", process=True)
    sink_nice: int = setting(10, "the sink's encoding thread yields the cores to the renderer by this much (0: equal; Linux)", process=True)
    rtmp_url: str | None = setting(None, "a live RTMP ingest the sink pushes each run to (FLV, H.264 and AAC; troupe up --rtmp)", process=True)
    hls_dir: Path | None = setting(None, "a live HLS playlist per run under here: <dir>/<run>/index.m3u8 (troupe up --hls)", process=True)
    live_keyint_s: float = setting(2.0, "the keyframe interval with a live output (where a viewer joins, a drop resumes)", process=True)
    live_bitrate_kbps: int = setting(2500, "the video's bitrate cap with a live output", process=True)
    # HTTP
    http_host: str = setting("127.0.0.1", "the address troupe serve and the preview page bind (0.0.0.0: reachable from other hosts)", process=True)
    http_port: int = setting(8750, "the port of troupe serve (POST /runs/RUN/danmaku) and the preview page (0: a free one)", process=True)
    preview_token: str | None = setting(None, "the token that may send danmaku over HTTP and from the preview page; unset: nobody may", secret=True, process=True)
    # Platform chats (troupe bridge, a show's [[sources]])
    twitch_nick: str = setting("", "the Twitch account the bridge logs in as (with TROUPE_TWITCH_TOKEN); unset: anonymous, read only", process=True)
    twitch_token: str | None = setting(None, "that account's OAuth token (scopes chat:read, and chat:edit to post replies)", secret=True, process=True)
    twitch_post_replies: bool = setting(False, "post each reply to a Twitch viewer back into the chat as the account (opt-in; within Twitch's rate limits)", process=True)
    bilibili_cookie: str | None = setting(None, "a logged-in Bilibili cookie (SESSDATA=...; DedeUserID=...; buvid3=...); unset: Bilibili masks viewers' names and sends uid 0", secret=True, process=True)
    bilibili_app_id: int = setting(0, "the Bilibili Open Live app's id (the code route: sources' code, troupe bridge bilibili --code)", process=True)
    bilibili_key_id: str = setting("", "the Open Live app's access key id", process=True)
    bilibili_key_secret: str | None = setting(None, "the Open Live app's access key secret", secret=True, process=True)
    youtube_api_key: str | None = setting(None, "a YouTube Data API key (a public stream's chat, read only)", secret=True, process=True)
    youtube_oauth_token: str | None = setting(None, "a YouTube OAuth access token instead of a key (scope youtube.readonly)", secret=True, process=True)
    youtube_quota: int = setting(10000, "the YouTube Data API units a day the bridge may spend (each poll of the chat costs 5)", process=True)
    extra: Mapping[str, str] = field(default_factory=dict, metadata={"doc": "free-form settings for an embedding app (no variable)"})

    def replace(self, **changes: object) -> Settings:
        """A copy with some fields changed (settings are never mutated)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _convert(name: str, raw: str, kind: type) -> object:
    try:
        if kind is bool:
            word = raw.strip().lower()
            if word not in ("1", "true", "yes", "on", "0", "false", "no", "off", ""):
                raise ValueError(raw)
            return word in ("1", "true", "yes", "on")
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
        if kind is Path:
            return Path(raw)
        if kind is tuple:
            return tuple(w.strip() for w in raw.split(",") if w.strip())
        return raw
    except ValueError:
        raise SettingsError(f"TROUPE_{name.upper()}={raw!r} is not a valid {kind.__name__}") from None


def _kind(annotation: object) -> type:
    """The type an environment string converts to: ``int | None`` -> int, ``tuple[str, ...]`` -> tuple."""
    if typing.get_origin(annotation) is tuple:
        return tuple
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if args:
        return _kind(args[0])
    assert isinstance(annotation, type)
    return annotation


# Derived from the Settings fields, so a new setting is one line in one place.
_KINDS: dict[str, type] = {
    name: _kind(hint) for name, hint in typing.get_type_hints(Settings).items() if name != "extra"
}
# Every setting read from the environment, in the order of the Settings fields.
SETTINGS: tuple[str, ...] = tuple(_KINDS)


def variable(name: str) -> str:
    """The environment variable of a setting (``TROUPE_<NAME>``; ``<it>_FILE`` names a file holding it)."""
    return f"TROUPE_{name.upper()}"


def doc(name: str) -> str:
    """A setting's one-line doc ("" when it has none: a test keeps every setting documented)."""
    return str(Settings.__dataclass_fields__[name].metadata.get("doc", ""))

def run_scoped(name: str) -> bool:
    """Whether a setting is the run's (recorded in run.started and followed by every process that
    handles the run), not the process's own."""
    f = Settings.__dataclass_fields__[name]
    return name != "extra" and not f.metadata.get("process", False)


# The run's settings, in declaration order (every setting not marked the process's own).
RUN_SCOPED = tuple(name for name in Settings.__dataclass_fields__ if run_scoped(name))


def run_config(settings: Settings) -> dict[str, object]:
    """The run's settings to record in run.started."""
    return {name: _plain(getattr(settings, name)) for name in RUN_SCOPED}


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else str(value) if isinstance(value, Path) else value


def run_settings(settings: Settings, config: Mapping[str, object]) -> Settings:
    """These settings with a run's recorded ones applied (keys that are not the run's ignored: a
    run recorded by an older Troupe records fewer, and the process's own fill in the rest)."""
    changes = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if k in RUN_SCOPED}
    return settings.replace(**changes) if changes else settings


def load_settings(environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Build settings from the environment (``TROUPE_*``) and explicit overrides."""
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for name, kind in _KINDS.items():
        raw = env.get(variable(name))
        if (raw is None or raw == "") and env.get(f"{variable(name)}_FILE"):
            raw = _from_file(f"{variable(name)}_FILE", env[f"{variable(name)}_FILE"])
        if raw is not None and raw != "":
            values[name] = _convert(name, raw, kind)
    values.update({k: v for k, v in overrides.items() if v is not None})
    settings = Settings(**values)  # type: ignore[arg-type]
    validate(settings)
    return settings


def _from_file(variable: str, path: str) -> str:
    """A setting read from a file (a container secret: ``TROUPE_PREVIEW_TOKEN_FILE=/run/secrets/token``),
    without its trailing newline."""
    try:
        return Path(path).read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise SettingsError(f"{variable}: cannot read {path}: {exc.strerror}") from None


def validate(settings: Settings) -> None:
    """Reject impossible combinations with a one-line reason."""
    if settings.resolution not in RESOLUTIONS:
        raise SettingsError(f"TROUPE_RESOLUTION must be one of {', '.join(RESOLUTIONS)}")
    if settings.fps <= 0 or settings.fps > 60:
        raise SettingsError("TROUPE_FPS must be in 1..60")
    if not 1 <= settings.stream_replicas <= 5:
        raise SettingsError(f"TROUPE_STREAM_REPLICAS must be 1 to 5, not {settings.stream_replicas}")
    if not 0.3 <= settings.lease_ttl_s <= 60:
        raise SettingsError(f"TROUPE_LEASE_TTL_S must be 0.3 to 60 seconds, not {settings.lease_ttl_s}")
    if settings.max_deliver < 1:
        raise SettingsError("TROUPE_MAX_DELIVER must be at least 1")
    if not 0 <= settings.face_ease_ms <= settings.face_hold_ms or settings.face_linger_ms < 0:
        raise SettingsError("TROUPE_FACE_EASE_MS must be 0 to TROUPE_FACE_HOLD_MS (a face holds an expression at "
                            "least as long as it eases into it), and TROUPE_FACE_LINGER_MS 0 or more")
    if not 0 <= settings.llm_max_tokens <= 4096:
        raise SettingsError(f"TROUPE_LLM_MAX_TOKENS must be 0 (the backend's own) to 4096, not {settings.llm_max_tokens}")
    if settings.llm_first_sentence_ms < 0:
        raise SettingsError(f"TROUPE_LLM_FIRST_SENTENCE_MS must be 0 or more, not {settings.llm_first_sentence_ms}")
    if settings.llm_max_sentences < 1:
        raise SettingsError("TROUPE_LLM_MAX_SENTENCES must be at least 1")
    if settings.spread not in ("on", "off"):
        raise SettingsError(f"TROUPE_SPREAD must be on or off, not {settings.spread!r}")
    if settings.memory not in ("on", "off"):
        raise SettingsError(f"TROUPE_MEMORY must be on or off, not {settings.memory!r}")
    if not 0 <= settings.recall_wait_ms <= 2000:
        raise SettingsError(f"TROUPE_RECALL_WAIT_MS must be 0 to 2000, not {settings.recall_wait_ms}")
    if settings.regulars_first not in ("on", "off"):
        raise SettingsError(f"TROUPE_REGULARS_FIRST must be on or off, not {settings.regulars_first!r}")
    if settings.facts not in ("rules", "llama_cpp"):
        raise SettingsError(f"TROUPE_FACTS must be rules or llama_cpp, not {settings.facts!r}")
    if settings.facts_threads < 1:
        raise SettingsError(f"TROUPE_FACTS_THREADS must be at least 1, not {settings.facts_threads}")
    if settings.viewer_retention_days < 0:
        raise SettingsError(f"TROUPE_VIEWER_RETENTION_DAYS must be 0 or more, not {settings.viewer_retention_days}")
    if settings.openers not in ("on", "off"):
        raise SettingsError(f"TROUPE_OPENERS must be on or off, not {settings.openers!r}")
    if settings.self_driven not in ("on", "off"):
        raise SettingsError("TROUPE_SELF_DRIVEN must be 'on' or 'off'")
    if not 0 <= settings.idle_gap_ms <= 10000:
        raise SettingsError("TROUPE_IDLE_GAP_MS must be in 0..10000")
    if not 0 <= settings.reply_pause_ms <= 3000:
        raise SettingsError(f"TROUPE_REPLY_PAUSE_MS must be 0 to 3000, not {settings.reply_pause_ms}")
    if not 0 <= settings.deck_ms <= 10000:
        raise SettingsError(f"TROUPE_DECK_MS must be 0 to 10000, not {settings.deck_ms}")
    if settings.banter_turns < 1:
        raise SettingsError("TROUPE_BANTER_TURNS must be at least 1")
    if settings.scheduler not in ("troupe", "fifo"):
        raise SettingsError("TROUPE_SCHEDULER must be 'troupe' or 'fifo'")
    if not 0 <= settings.video_threads <= 16:
        raise SettingsError(f"TROUPE_VIDEO_THREADS must be 0 (x264 picks) to 16, not {settings.video_threads}")
    if not 0 <= settings.sink_nice <= 19:
        raise SettingsError(f"TROUPE_SINK_NICE must be 0 to 19, not {settings.sink_nice}")
    if settings.store_frames not in ("full", "digest"):
        raise SettingsError("TROUPE_STORE_FRAMES must be 'full' or 'digest'")
    # Backend names are checked against the backend tables where backends are chosen (actors):
    # here only that they are names.
    for name in ("llm_backend", "tts_backend"):
        if not is_token(getattr(settings, name)):
            raise SettingsError(f"TROUPE_{name.upper()} must be a backend name (letters, digits, _ or -)")
    if not _DEVICE.fullmatch(settings.render_device):
        raise SettingsError("TROUPE_RENDER_DEVICE must be 'cpu', 'cuda', 'cuda:N' or 'auto'")
    _validate_more(settings)


def _validate_more(settings: Settings) -> None:
    """The logs' and the model backends' settings (the backends check them again where they are built)."""
    if settings.log_format not in LOG_FORMATS:
        raise SettingsError(f"TROUPE_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}")
    for name in ("llama_threads", "llama_contexts"):
        value = getattr(settings, name)
        if value is not None and value < 1:
            raise SettingsError(f"{variable(name)} must be a whole number of at least 1, not {value}")
    if not settings.openai_timeout_s > 0:  # also refuses nan
        raise SettingsError(f"TROUPE_OPENAI_TIMEOUT_S must be a number of seconds above 0, not {settings.openai_timeout_s}")
    if settings.vllm_engine:
        try:
            engine = json.loads(settings.vllm_engine)
        except json.JSONDecodeError as exc:
            raise SettingsError(f"TROUPE_VLLM_ENGINE is not JSON: {exc}") from None
        if not isinstance(engine, dict):
            raise SettingsError("TROUPE_VLLM_ENGINE must be a JSON object of engine arguments")
