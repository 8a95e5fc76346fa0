"""A Hugging Face model directory of a named shape with random weights and a given
tokenizer: a stand-in for a real model where only its speed matters and its
weights are too large to carry. Random weights rarely pick the end-of-sequence
token, and replays ask for `ignore_eos`, so every generation runs to its length.

    python benchmarks/random_model.py --shape smollm2-135m --tokenizer out/gpu-tokenizer \
        --out /tmp/models/smollm2-135m-random

The served model is named after the directory (and so is a profile fitted on it).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from transformers import (AutoModelForCausalLM, AutoTokenizer, GPT2Config, LlamaConfig,
                          PretrainedConfig)

SHAPES: dict[str, tuple[type[PretrainedConfig], dict]] = {
    # SmolLM2-135M's config
    "smollm2-135m": (LlamaConfig, dict(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, head_dim=64, max_position_embeddings=8192, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, tie_word_embeddings=True)),
    # GPT-2 small, its vocabulary swapped for the tokenizer's
    "gpt2-124m": (GPT2Config, dict(n_positions=1024, n_embd=768, n_layer=12, n_head=12)),
    # for a dry run on a CPU
    "tiny": (LlamaConfig, dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=2048, tie_word_embeddings=True)),
}


def build(shape: str, tokenizer_dir: Path, out: Path, dtype: torch.dtype, seed: int) -> Path:
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config_class, sizes = SHAPES[shape]
    config = config_class(**sizes, vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                          eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    params = sum(p.numel() for p in model.parameters())
    print(f"{out}: {shape}, {params / 1e6:.1f} M parameters, random ({dtype}), "
          f"vocabulary {config.vocab_size}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("--tokenizer", type=Path, required=True,
                   help="a directory AutoTokenizer reads (its vocabulary sizes the model)")
    p.add_argument("--out", type=Path, required=True, help="the model directory to write")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16",
                   help="as saved; the server casts to its own --dtype")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not args.tokenizer.is_dir():
        print(f"random_model.py: no tokenizer directory {args.tokenizer}", file=sys.stderr)
        return 2
    build(args.shape, args.tokenizer, args.out, getattr(torch, args.dtype), args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
