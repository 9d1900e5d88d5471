#!/usr/bin/env bash
# One command for the demo: create .venv, install Troupe, run the 20-second demo show.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[render]'
exec .venv/bin/troupe up --duration "${DURATION:-20}" --out "${OUT:-out}" "$@"
