"""The vllm backend's tests run in an environment of their own (``scripts/test-vllm.sh``: vLLM
pins its own torch); the main test run, without vLLM, leaves this folder out."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("TROUPE_REQUIRE_VLLM"):
        raise RuntimeError("TROUPE_REQUIRE_VLLM is set but vllm is not installed")
    collect_ignore_glob = ["test_*.py"]
else:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight tiny Llama with SmolLM2's tokenizer and two LoRA adapters."""
    from bench.tiny_llm import make_adapter, make_model

    folder = make_model(tmp_path_factory.mktemp("tiny-llama"))
    make_adapter(folder / "lora-0", seed=1)
    make_adapter(folder / "lora-1", seed=2)
    return folder


@pytest.fixture(scope="session")
def writer(tiny_model: Path) -> Iterator[object]:
    """One engine for the session's in-process tests (it takes about 20 s to start)."""
    from actors.backends.llm_vllm import VllmWriter

    w = VllmWriter(str(tiny_model))
    yield w
    w.close()
