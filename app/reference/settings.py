"""The settings page, from ``infra.settings``, and the other ``TROUPE_*`` variables: those the
compose file, the scripts and the tests read, which are not settings of a Troupe process."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from app.natsauth import users
from app.reference.markdown import cell, code, header, table, value
from events.subjects import FAMILIES, stream_name
from infra.settings import RUN_SCOPED, SETTINGS, Settings, doc, variable

# Variables that are not settings: name -> (who reads it, what it is).  A test keeps this table
# equal to what docker-compose.yml, .env.example and scripts/ name, and the docs to both tables.
OTHER_VARIABLES: dict[str, tuple[str, str]] = {
    "TROUPE_NATS_PASS_<USER>": ("compose, nats.conf", "the NATS password of one service's user (see [NATS "
                                "permissions](nats-permissions.md)); nats-server reads it, and the service's TROUPE_NATS_URL is "
                                "built from it"),
    "TROUPE_DB_PASSWORD": ("compose", "the PostgreSQL password of the troupe user (the event store)"),
    "TROUPE_BRIDGE_ARGS": ("compose", "what the bridge service (profile bridge) reads: twitch --channel NAME, "
                           "bilibili --room N or youtube --video ID; its credentials come from bridge.env"),
    "TROUPE_SHOW_DURATION": ("compose", "the show service's run length in seconds (300); a new run follows each"),
    "TROUPE_VLLM_MODEL_DIR": ("compose", "the host folder with the vLLM model, mounted read-only at /models/llm "
                              "(profile gpu)"),
    "TROUPE_PREVIEW_HOST_PORT": ("compose", "the host port of the preview page (8750, on 127.0.0.1)"),
    "TROUPE_RTMP_HOST_PORT": ("compose", "the host port of the RTMP server (1935, on 127.0.0.1)"),
    "TROUPE_HLS_HOST_PORT": ("compose", "the host port of the HLS server (8888, on 127.0.0.1)"),
    "TROUPE_PROMETHEUS_HOST_PORT": ("compose", "the host port of Prometheus (9090, on 127.0.0.1)"),
    "TROUPE_GRAFANA_HOST_PORT": ("compose", "the host port of Grafana (3000, on 127.0.0.1)"),
    "TROUPE_TEST_PG_URL": ("scripts/test.sh, tests", "a PostgreSQL server for the store tests (else one of "
                           "their own)"),
    "TROUPE_ENGINE_TEST": ("scripts/test-compose.sh", "0 leaves out the test of the compose stack on a "
                           "container engine"),
    "TROUPE_ENGINE_CACHE": ("scripts/test-compose.sh", "the container engine's image store folder"),
    "TROUPE_ENGINE_CACHE_GB": ("scripts/test-compose.sh", "the size the image store is pruned to (16)"),
    "TROUPE_ENGINE_REBUILD": ("scripts/test-compose.sh", "0 skips the timed rebuild of the images"),
    "TROUPE_ENGINE_DIR": ("scripts/test-compose.sh, tests", "the engine's run folder (set by the script)"),
    "TROUPE_ENGINE_IMAGES": ("scripts/test-compose.sh", "the images built, one JSON line each (set by the "
                             "script)"),
    "TROUPE_COMPOSE_BIN": ("scripts/test-compose.sh, tests", "the Docker Compose program the engine test runs "
                           "(set by the script)"),
    "TROUPE_TORCH_WHEELS": ("scripts/test-compose.sh", "the folder with torch's CPU wheel (/opt/wheels)"),
    "TROUPE_DEBIAN_MIRROR": ("scripts/test-compose.sh", "debootstrap's and apt's Debian mirror"),
    "TROUPE_VLLM_ENV": ("scripts/test-vllm.sh", "the virtual environment of the vLLM tests"),
    "TROUPE_REQUIRE_VLLM": ("scripts/test-vllm.sh, tests", "1: the vLLM tests fail, not skip, without vLLM"),
    "TROUPE_WHEEL_CACHE": ("scripts/llama-wheel.sh", "where llama-cpp-python's wheel is built and kept"),
    "TROUPE_LLAMA_CPP_VERSION": ("scripts/llama-wheel.sh", "the llama-cpp-python version to build (0.3.36)"),
}
_TYPES = {str: "string", int: "integer", float: "number", Path: "path", tuple: "comma-separated list"}


def names() -> frozenset[str]:
    """Every ``TROUPE_*`` name the docs may mention: the settings' variables and their ``_FILE``
    forms, the other variables (``TROUPE_NATS_PASS_<USER>`` for each user) and the stream names."""
    known = {variable(n) for n in SETTINGS} | {f"{variable(n)}_FILE" for n in SETTINGS}
    known |= {n for n in OTHER_VARIABLES if "<" not in n} | {u.password_variable for u in users()}
    return frozenset(known | {stream_name(f) for f in FAMILIES})


def prefixes() -> tuple[str, ...]:
    """The start of the names written with a placeholder (``TROUPE_NATS_PASS_``)."""
    return tuple(n.split("<", 1)[0] for n in OTHER_VARIABLES if "<" in n)


def type_name(name: str) -> str:
    """A setting's type in words (``integer``, ``string (optional)``)."""
    hint = typing.get_type_hints(Settings)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = tuple if typing.get_origin(hint) is tuple else (args[0] if args else hint)
    return _TYPES.get(base, str(base))


def page() -> str:
    """``docs/reference/settings.md``."""
    lines = header("Settings", "the `Settings` dataclass in `infra/settings.py`",
                   "Every setting of a Troupe process is an environment variable, `TROUPE_<NAME>`, read once "
                   "when the process starts; command-line options override some of them. Each can also be "
                   "read from a file, as container secrets are mounted: `TROUPE_<NAME>_FILE=/run/secrets/x` "
                   "is used when `TROUPE_<NAME>` itself is not set (its trailing newline dropped). A value "
                   "that is not valid stops the process with one line naming the variable.")
    lines += ["## Every setting", "",
              "*Run-scoped* settings (all but the process's own: where things are, delivery, credentials, a "
              "worker's hardware and models, where its output goes) are recorded in `run.started`: every "
              "process that handles the run, and re-execution (`troupe replay --verify`), follows the "
              "recorded value, not its own.", ""]
    rows = []
    for name in SETTINGS:
        default = Settings.__dataclass_fields__[name].default
        rows.append([code(variable(name)), type_name(name), code(value(default)) if default is not None else "(unset)",
                     cell(doc(name)), "run-scoped" if name in RUN_SCOPED else "process"])
    lines += table(["variable", "type", "default", "what it is", "scope"], rows)
    lines += ["## Run-scoped settings", "", ", ".join(code(variable(n)) for n in RUN_SCOPED) + ".", ""]
    lines += ["## Other variables", "",
              "These are not settings of a Troupe process: the compose file, the scripts and the tests read "
              "them.", ""]
    lines += table(["variable", "read by", "what it is"],
                   ([code(n), cell(who), cell(what)] for n, (who, what) in OTHER_VARIABLES.items()))
    lines += ["The JetStream streams are named like variables but are not: "
              + ", ".join(code(stream_name(f)) for f in FAMILIES) + " (see [Events](events.md#streams)).", ""]
    return "\n".join(lines)


_NAME = re.compile(r"TROUPE_[A-Z0-9_]+")


def unknown_names(text: str) -> list[str]:
    """The ``TROUPE_*`` names in ``text`` that are neither settings nor other known names."""
    known, starts = names(), prefixes()
    return [m for m in _NAME.findall(text) if m not in known and not (m.endswith("_") and m.startswith(starts))]
