"""The live engine against transformers on the same work, side by side in one run:
N simultaneous requests of 48-token prompts and 64 new tokens (greedy, fp32).

    .venv/bin/python benchmarks/bench_engine_cpu.py [--sizes 1 8 32] [--device cpu]

Rows: the engine (all N submitted at once, continuous batching over the paged
cache), transformers `generate` one request after another, one static batch, and
`generate_batch` (transformers' continuous batching). The last column is the
engine's decode step time at batch N, from its own step log.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

import torch
from transformers import GenerationConfig

from live.engine.engine import Engine
from live.runner.model_runner import ModelRunner
from live.runner.models import load_model
from live.runner.params import SamplingParams
from live.engine.step_log import StepLog
from scheduler import SchedulerConfig

PROMPT_LEN, NEW = 48, 64
SEED_TEXT = ("In a quiet town by the sea, the lighthouse keeper kept a log of every ship that "
             "passed, every storm that rolled in, and every letter that arrived for him. ")


def prompts(tokenizer, n: int) -> list[list[int]]:
    base = tokenizer.encode(SEED_TEXT * 8)
    return [base[i * 3:i * 3 + PROMPT_LEN] for i in range(n)]


def engine_run(loaded, batch: list[list[int]], device, log_path: str | None = None) -> float:
    """Aggregate tokens/s; every step goes to `log_path` when given."""
    block_size = 16
    num_blocks = len(batch) * -(-(PROMPT_LEN + NEW) // block_size) + 8
    runner = ModelRunner(loaded, num_blocks=num_blocks, block_size=block_size, device=device)
    log = StepLog(log_path, device=str(device)) if log_path else None
    engine = Engine(runner, loaded.tokenizer,
                    SchedulerConfig(num_blocks=num_blocks, block_size=block_size,
                                    max_batch=max(len(batch), 1)), step_log=log)
    greedy = SamplingParams(ignore_eos=True)
    t0 = time.perf_counter()
    for i, ids in enumerate(batch):
        engine.submit(f"r{i}", ids, NEW, greedy)
    while engine.has_work():
        engine.step()
    elapsed = time.perf_counter() - t0
    if log:
        log.close()
    assert engine.core.is_drained()
    return len(batch) * NEW / elapsed


def hf_config(loaded) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                            eos_token_id=None, pad_token_id=0)


def hf_sequential(loaded, batch, device) -> float:
    t0 = time.perf_counter()
    for ids in batch:
        with torch.inference_mode():
            loaded.model.generate(torch.tensor([ids], device=device), generation_config=hf_config(loaded),
                                  attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=device))
    return len(batch) * NEW / (time.perf_counter() - t0)


def hf_static(loaded, batch, device) -> float:
    t0 = time.perf_counter()
    with torch.inference_mode():
        loaded.model.generate(torch.tensor(batch, device=device), generation_config=hf_config(loaded),
                              attention_mask=torch.ones(len(batch), PROMPT_LEN, dtype=torch.long, device=device))
    return len(batch) * NEW / (time.perf_counter() - t0)


def hf_generate_batch(loaded, batch, device) -> float:
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = loaded.model.generate_batch(batch, generation_config=hf_config(loaded), progress_bar=False)
    tokens = sum(len(o.generated_tokens) for o in out.values())
    return tokens / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--skip-sequential-above", type=int, default=8,
                        help="one-after-another is N times one stream; measured up to this N")
    args = parser.parse_args()
    device = torch.device(args.device)
    loaded = load_model(None, device=device)
    print(f"SmolLM2-135M fp32 on {device}; torch {torch.__version__}, {os.cpu_count()} cpus, "
          f"{platform.machine()}")
    engine_run(loaded, prompts(loaded.tokenizer, 2), device)  # warm-up
    print(f"\n{'N':>3} {'engine':>9} {'hf seq':>9} {'hf static':>10} {'hf gen_batch':>13}"
          f" {'eng/static':>11} {'eng/gen_batch':>14} {'decode ms':>10}   (tokens/s)")
    for n in args.sizes:
        batch = prompts(loaded.tokenizer, n)
        log_path = os.path.join(tempfile.mkdtemp(), "steps.jsonl")
        eng = engine_run(loaded, batch, device, log_path)
        decode_ms = 1000 * statistics.median(
            s["duration_s"] for s in map(json.loads, open(log_path)) if s["num_prefills"] == 0)
        seq = hf_sequential(loaded, batch, device) if n <= args.skip_sequential_above else float("nan")
        static = hf_static(loaded, batch, device)
        cb = hf_generate_batch(loaded, batch, device)
        print(f"{n:>3} {eng:>9.1f} {seq:>9.1f} {static:>10.1f} {cb:>13.1f} {eng / static:>11.2f}"
              f" {eng / cb:>14.2f} {decode_ms:>10.1f}")
    print("\ndecode ms: the engine's median decode-only step at batch N, from its step log")


if __name__ == "__main__":
    main()
