#!/usr/bin/env bash
# One command for the demo: create .venv, install Troupe with what the quickstart uses (the
# render extra: the stage and its video; preview: the preview page, troupe up --preview), run
# the 20-second demo show.  Arguments go to troupe up (e.g. --preview, --show FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[render,preview]'
exec .venv/bin/troupe up --duration "${DURATION:-20}" --out "${OUT:-out}" "$@"
