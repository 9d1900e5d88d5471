# syntax=docker/dockerfile:1
#
# Troupe's images.  Targets:
#   (default)   troupe:dev     every actor, `troupe up` and the preview page: extras render + preview,
#                              torch 2.13.0 CPU build
#   models      troupe:models  the same plus the `models` extra (transformers LLM, onnx TTS);
#                              build arg ONNXRUNTIME="onnxruntime-gpu[cuda,cudnn]" for a GPU tts worker
#   vllm        troupe:vllm    an llm worker on vLLM (GPU): the `vllm` extra in a venv of its own,
#                              since vLLM pins its own torch; no render extra; gcc for Triton
# Builder stages hold the compilers; the final stages get only a venv copied in and run as the
# non-root user `troupe` (uid 10001).

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

# ---- builder: compilers + the venv with Troupe and its render and preview extras ----------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# Only here: for any dependency that has no wheel for this platform.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# The project's sources only (no .venv, out/ or state from the build context).
COPY pyproject.toml README.md ./
COPY app ./app
COPY actors ./actors
COPY events ./events
COPY store ./store
COPY schedulers ./schedulers
COPY infra ./infra
COPY bench ./bench
# torch stays pinned by pyproject (torch==2.13.0); the extra index serves its CPU build
# (2.13.0+cpu, which satisfies the pin and is preferred over PyPI's CUDA build).
RUN pip install --upgrade pip \
    && pip install --extra-index-url https://download.pytorch.org/whl/cpu '.[render,preview]' \
    && python -c "import torch; assert torch.version.cuda is None, torch.__version__"

# ---- models-builder: the builder's venv plus the `models` extra ---------------------------------
FROM builder AS models-builder
# "onnxruntime" (CPU) by default; "onnxruntime-gpu[cuda,cudnn]" for the CUDA execution provider.
# Never both in one environment: the GPU package replaces the CPU one.
ARG ONNXRUNTIME=onnxruntime
RUN pip install --extra-index-url https://download.pytorch.org/whl/cpu '.[render,preview,models]' \
    && if [ "$ONNXRUNTIME" != "onnxruntime" ]; then \
        pip uninstall -y onnxruntime && pip install "$ONNXRUNTIME"; \
    fi

# ---- models: final stage with the models venv -----------------------------------------------------
FROM base AS models
COPY --from=models-builder /opt/venv /opt/venv
USER troupe
ENTRYPOINT ["troupe"]
CMD ["--help"]

# ---- vllm-builder: a fresh venv with the `vllm` extra instead (vLLM pins its own CUDA torch) -----
FROM builder AS vllm-builder
RUN rm -rf /opt/venv \
    && /usr/local/bin/python -m venv /opt/venv \
    && /opt/venv/bin/pip install --upgrade pip \
    && /opt/venv/bin/pip install '.[vllm]'

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

# ---- runtime: the default target (last stage): only the builder's venv ----------------------------
FROM base AS runtime
COPY --from=builder /opt/venv /opt/venv
USER troupe
ENTRYPOINT ["troupe"]
CMD ["--help"]
