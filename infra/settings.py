"""Typed settings, read once from ``TROUPE_*`` environment variables and passed down."""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from events.errors import ConfigError
from events.show import RESOLUTIONS
from events.subjects import is_token


class SettingsError(ConfigError):
    """A setting has an invalid value."""


_DEVICE = re.compile(r"cpu|auto|cuda(:[0-9]+)?")


@dataclass(frozen=True, slots=True)
class Settings:
    """Every knob of a Troupe process; each field has a ``TROUPE_<NAME>`` variable."""

    nats_url: str | None = None          # None: start an embedded nats-server
    store_url: str | None = None         # None: SQLite file under state_dir
    state_dir: Path = Path(".troupe")    # embedded NATS data, SQLite store
    out_dir: Path = Path("out")
    metrics_port: int = 0                # 0: a free port; -1: no metrics endpoint
    metrics_host: str = "127.0.0.1"      # 0.0.0.0: scrapable from other hosts (containers)
    resolution: str = "720p"
    fps: int = 25
    seed: int = 7
    max_deliver: int = 5
    ack_wait_s: float = 30.0
    nak_backoff_s: float = 0.2
    fetch_batch: int = 64
    max_inflight: int = 256
    merge_window_ms: int = 1500
    max_danmaku_chars: int = 200
    blocklist: tuple[str, ...] = ()
    cue_deadline_ms: int = 8000          # a reply's speech must start this soon after its cue
    stage_backlog_ms: int = 4000         # speech asked for and not yet spoken stays under this
    self_driven: str = "on"              # "off": the show speaks only when the chat asks (no rundown)
    idle_gap_ms: int = 500               # when nobody waits, the show speaks this long after the speech before
    banter_turns: int = 4                # turns between roles before one goes to the chat
    llm_backend: str = "scripted"        # a name in actors.backends.registry.LLM
    llm_max_sentences: int = 3
    llm_first_sentence_ms: int = 3000    # a model with no sentence by then is stopped: the scripted line instead (0: wait)
    openers: str = "on"                  # "off": a model reply starts with the model's first sentence
    tts_backend: str = "espeak"          # a name in actors.backends.registry.TTS (a role may name its own)
    render_device: str = "cpu"           # "cpu", "cuda", "cuda:N", or "auto" (CUDA when there is one)
    jpeg_quality: int = 80
    face_ease_ms: int = 250              # a face eases into a new expression (and turns) over this long
    face_hold_ms: int = 1200             # ... and keeps an expression at least this long
    face_linger_ms: int = 1500           # ... and goes back to neutral this long after a reply ends
    frame_max_age_s: float = 600.0
    stream_replicas: int = 1             # copies of each stream in a JetStream cluster (3: survives a node's loss)
    lease_ttl_s: float = 1.5             # a standby takes over the director, lipsync, render or sink this long after its holder died
    slow_render_ms: float = 0.0
    render_delay_ms: int = 5
    join_window_s: float = 30.0
    run_grace_s: float = 30.0            # a worker keeps an ended run's state this long, then releases it
    run_idle_s: float = 3600.0           # ... and a run's that never ended once idle this long
    store_frames: str = "digest"         # "full" JPEGs, or "digest" (hash and size) only
    scheduler: str = "troupe"            # llm/tts queue order: "troupe" (role priority) or "fifo"
    interrupt_priority: float = 4.0      # a cue at least this urgent takes the floor
    role_wait_budget_ms: int = 4000      # QoS raises a role's weight while its work waits longer
    video_crf: int = 23
    video_preset: str = "veryfast"
    video_threads: int = 1               # x264 threads per show (0: x264 picks, 1.5 per core: less wall time, 16% more CPU)
    sink_nice: int = 10                  # the sink's encoding thread yields the cores to the renderer (0: equal)
    rtmp_url: str | None = None          # a live RTMP ingest the sink pushes each run to (FLV, H.264 + AAC)
    hls_dir: Path | None = None          # a live HLS playlist per run under here: <dir>/<run>/index.m3u8
    live_keyint_s: float = 2.0           # keyframe interval with a live output (where a viewer joins, a drop resumes)
    live_bitrate_kbps: int = 2500        # the video's bitrate cap with a live output
    http_host: str = "127.0.0.1"         # the HTTP endpoint's address (0.0.0.0: reachable from other hosts)
    http_port: int = 8750                # troupe serve: POST /runs/RUN/danmaku
    preview_token: str | None = None     # the token that may send danmaku over HTTP; None: nobody may
    extra: Mapping[str, str] = field(default_factory=dict)

    def replace(self, **changes: object) -> Settings:
        """A copy with some fields changed (settings are never mutated)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _convert(name: str, raw: str, kind: type) -> object:
    try:
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
# Settings that shape what the deterministic actors emit: recorded in run.started, followed by
# every process that handles the run and by re-execution.
RUN_SETTINGS = (
    "merge_window_ms", "max_danmaku_chars", "blocklist", "cue_deadline_ms", "jpeg_quality", "interrupt_priority",
    "stage_backlog_ms", "self_driven", "idle_gap_ms", "banter_turns", "openers", "llm_backend",
    "face_ease_ms", "face_hold_ms", "face_linger_ms",
)


def run_config(settings: Settings) -> dict[str, object]:
    """The run-scoped settings to record in run.started."""
    return {name: list(v) if isinstance(v := getattr(settings, name), tuple) else v for name in RUN_SETTINGS}


def for_run(settings: Settings, config: Mapping[str, object]) -> Settings:
    """These settings with a run's recorded run-scoped ones applied (unknown keys ignored)."""
    changes = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if k in RUN_SETTINGS}
    return settings.replace(**changes) if changes else settings


def load_settings(environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Build settings from the environment (``TROUPE_*``) and explicit overrides."""
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for name, kind in _KINDS.items():
        raw = env.get(f"TROUPE_{name.upper()}")
        if (raw is None or raw == "") and env.get(f"TROUPE_{name.upper()}_FILE"):
            raw = _from_file(f"TROUPE_{name.upper()}_FILE", env[f"TROUPE_{name.upper()}_FILE"])
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
    if settings.llm_first_sentence_ms < 0:
        raise SettingsError(f"TROUPE_LLM_FIRST_SENTENCE_MS must be 0 or more, not {settings.llm_first_sentence_ms}")
    if settings.llm_max_sentences < 1:
        raise SettingsError("TROUPE_LLM_MAX_SENTENCES must be at least 1")
    if settings.openers not in ("on", "off"):
        raise SettingsError(f"TROUPE_OPENERS must be on or off, not {settings.openers!r}")
    if settings.self_driven not in ("on", "off"):
        raise SettingsError("TROUPE_SELF_DRIVEN must be 'on' or 'off'")
    if not 0 <= settings.idle_gap_ms <= 10000:
        raise SettingsError("TROUPE_IDLE_GAP_MS must be in 0..10000")
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
