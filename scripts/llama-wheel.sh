#!/usr/bin/env bash
# Build llama-cpp-python's wheel once and keep it: PyPI ships only its source package, whose
# build takes about 10 minutes on 2 cores.  The wheel is cached outside the checkout, keyed by
# the version, the Python, the build flags and the CPU's instruction set (GGML_NATIVE), so a
# second run finds it at once.  Prints the cache folder, for `pip install --find-links`.
set -euo pipefail
PY=${PYTHON:-python3}
VERSION=${TROUPE_LLAMA_CPP_VERSION:-0.3.36}
FLAGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
# Without AMX: on a virtual machine that reports AMX (Sapphire Rapids under Firecracker), ggml's
# AMX matrix multiply faults at its first `ldtilecfg`.  An explicit -mno-* wins over -march=native.
ISA_OFF="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
KEY=$( ("$PY" --version; echo "$VERSION $FLAGS $ISA_OFF"; grep -m1 '^flags' /proc/cpuinfo || uname -m) | sha256sum | cut -c1-16)
DIR=${TROUPE_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/troupe/wheels-$KEY}
if ! ls "$DIR"/llama_cpp_python-"$VERSION"-*.whl >/dev/null 2>&1; then
    echo "llama-wheel: building llama-cpp-python $VERSION into $DIR (once; about 10 minutes on 2 cores)" >&2
    mkdir -p "$DIR"
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
    CMAKE_ARGS="$FLAGS" CFLAGS="$ISA_OFF" CXXFLAGS="$ISA_OFF" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$PY" -m pip wheel -q --no-deps --no-cache-dir "llama-cpp-python==$VERSION" -w "$TMP" >&2
    mv "$TMP"/llama_cpp_python-*.whl "$DIR"/
    # keep only the newest build
    find "$(dirname "$DIR")" -maxdepth 1 -name 'wheels-*' ! -path "$DIR" -exec rm -rf {} + || true
fi
echo "$DIR"
