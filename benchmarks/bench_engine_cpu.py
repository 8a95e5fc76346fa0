"""The live engine against transformers on the same work, side by side in one run:
N simultaneous requests of 48-token prompts and 64 new tokens (greedy), for each
dtype asked for, beside transformers in that dtype and in float32.

    .venv/bin/python benchmarks/bench_engine_cpu.py [--sizes 1 32 128]
        [--dtype float32 bfloat16] [--repeat 3] [--device cpu] [--threads N]

Columns (tokens/s unless said; the engine and the static batch the median of
--repeat runs, taken in turn): the engine (all N submitted at once, continuous
batching over the paged cache); transformers `generate` one request after another
(up to --skip-sequential-above), one static batch, and `generate_batch`
(transformers' continuous batching), each in the row's dtype, and the last two again
in float32; the engine's ratios to them; its median decode step at batch N (ms,
and its tokens/s against the limit) and its prefill step of all N prompts (ms),
both from its own step log.

Before the table, the machine's limit: the model's matmul FLOPs per token against
the bf16 (and float32) matmul rate measured here with the engine's own projections
over the model's weights at 256 rows, on the same threads. After it, how often the
engine's greedy tokens in each dtype agree with its float32 ones (`agreement`).
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
from live.engine.step_log import StepLog
from live.runner.linear import projection
from live.runner.model_runner import ModelRunner
from live.runner.models import load_model
from live.runner.params import SamplingParams
from scheduler import SchedulerConfig, TokenEvent

PROMPT_LEN, NEW = 48, 64
SEED_TEXT = ("In a quiet town by the sea, the lighthouse keeper kept a log of every ship that "
             "passed, every storm that rolled in, and every letter that arrived for him. ")


def prompts(tokenizer, n: int) -> list[list[int]]:
    base = tokenizer.encode(SEED_TEXT * 8)
    return [base[i * 3 % 96:i * 3 % 96 + PROMPT_LEN] for i in range(n)]


def engine_run(loaded, batch: list[list[int]], device, dtype, log_path: str | None = None,
               new: int = NEW, max_batch: int | None = None) -> tuple[float, list[list[int]]]:
    """Aggregate tokens/s and each request's tokens, all submitted at once (and all
    running at once unless `max_batch` says fewer); every step goes to `log_path`
    when given."""
    block_size = 16
    num_blocks = sum(-(-(len(ids) + new) // block_size) for ids in batch) + 8
    runner = ModelRunner(loaded, num_blocks=num_blocks, block_size=block_size, device=device,
                         dtype=dtype)
    log = StepLog(log_path, device=str(device)) if log_path else None
    engine = Engine(runner, loaded.tokenizer,
                    SchedulerConfig(num_blocks=num_blocks, block_size=block_size,
                                    max_batch=max_batch or len(batch), max_waiting=len(batch)),
                    step_log=log)
    greedy = SamplingParams(ignore_eos=True)
    tokens: dict[str, list[int]] = {f"r{i}": [] for i in range(len(batch))}
    t0 = time.perf_counter()
    for i, ids in enumerate(batch):
        engine.submit(f"r{i}", ids, new, greedy)
    while engine.has_work():
        for event in engine.step().events:
            if isinstance(event, TokenEvent):
                tokens[event.seq_id].append(event.token_id)
    elapsed = time.perf_counter() - t0
    if log:
        log.close()
    assert engine.core.is_drained()
    return len(batch) * new / elapsed, list(tokens.values())


def step_times_ms(log_path: str) -> tuple[float, float]:
    """The median decode-only step and the first step (the prefill of every prompt)."""
    steps = [json.loads(line) for line in open(log_path)]
    decode = statistics.median(s["duration_s"] for s in steps if s["num_prefills"] == 0)
    return 1000 * decode, 1000 * steps[0]["duration_s"]


def hf_config() -> GenerationConfig:
    return GenerationConfig(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                            eos_token_id=None, pad_token_id=0)


def hf_sequential(loaded, batch, device) -> float:
    t0 = time.perf_counter()
    for ids in batch:
        with torch.inference_mode():
            loaded.model.generate(torch.tensor([ids], device=device), generation_config=hf_config(),
                                  attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=device))
    return len(batch) * NEW / (time.perf_counter() - t0)


def hf_static(loaded, batch, device) -> float:
    t0 = time.perf_counter()
    with torch.inference_mode():
        loaded.model.generate(torch.tensor(batch, device=device), generation_config=hf_config(),
                              attention_mask=torch.ones(len(batch), PROMPT_LEN, dtype=torch.long, device=device))
    return len(batch) * NEW / (time.perf_counter() - t0)


def hf_generate_batch(loaded, batch, device) -> float:
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = loaded.model.generate_batch(batch, generation_config=hf_config(), progress_bar=False)
    tokens = sum(len(o.generated_tokens) for o in out.values())
    return tokens / (time.perf_counter() - t0)


def projection_shapes(model) -> list[tuple[int, int]]:
    """`(out, in)` of every projection of the model, the vocabulary's included."""
    return [tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear)]


def matmul_rate(model, dtype, device, rows: int = 256) -> float:
    """FLOP/s of the engine's own projections over every weight of the model at
    `rows` rows (each shape timed once, best of 5 runs of 10 calls, weights hot)."""
    seconds = {}
    for out, width in set(projection_shapes(model)):
        project = projection(torch.randn(out, width, dtype=dtype, device=device), None)
        x = torch.randn(rows, width, dtype=dtype, device=device)
        project(x)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(10):
                project(x)
            best = min(best, (time.perf_counter() - t0) / 10)
        seconds[out, width] = best
    shapes = projection_shapes(model)
    return sum(2 * rows * out * width for out, width in shapes) / sum(seconds[s] for s in shapes)


REFERENCE = [
    "The capital of France is", "Write a haiku about autumn leaves.", "def fibonacci(n):",
    "List three primary colors:", "Explain what a KV cache is in one sentence.", "1, 2, 3, 4,",
    "Translate 'good morning' into Spanish:", "Once upon a time, in a small village,",
    "What is the boiling point of water at sea level?", "Give me a recipe for pancakes.",
    "Summarise the plot of Romeo and Juliet.", "Why is the sky blue?",
    "Write a SQL query that counts users by country.", "What are the benefits of exercise?",
    "Name the planets of the solar system.", "How do I reverse a list in Python?",
    "Describe a sunset over the ocean.", "What is 17 times 23?",
    "Suggest a name for a black cat.", "Explain photosynthesis to a child.",
    "Write a limerick about a programmer.", "What causes earthquakes?",
    "Compose a short thank-you note to a teacher.", "What is the difference between a list and a tuple?",
]
"""The greedy agreement set: chat prompts of several kinds."""


def agreement(models, dtype, device) -> str:
    """How often the engine in `dtype` makes the float32 engine's greedy tokens on
    `REFERENCE` (64 tokens each): teacher-forced (every prefix of the float32
    continuation a prompt of its own), the next tokens that agree, beside the same
    for transformers' own forward in `dtype` against its float32; and run freely,
    the tokens before the first that differs."""
    tokenizer = models[torch.float32].tokenizer
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": p}],
                                           add_generation_prompt=True, return_dict=False)
             for p in REFERENCE]
    _, exact = engine_run(models[torch.float32], chats, device, torch.float32)
    _, free = engine_run(models[dtype], chats, device, dtype)
    leading = [next((k for k, (a, b) in enumerate(zip(x, y)) if a != b), NEW)
               for x, y in zip(exact, free)]
    prefixes = [ids + made[:k] for ids, made in zip(chats, exact) for k in range(NEW)]
    _, forced = engine_run(models[dtype], prefixes, device, dtype, new=1, max_batch=len(REFERENCE))
    wanted = [made[k] for made in exact for k in range(NEW)]
    ours = sum(got == [want] for got, want in zip(forced, wanted))
    theirs = 0
    for ids, made in zip(chats, exact):
        sequence = torch.tensor([ids + made[:-1]], device=device)
        with torch.inference_mode():
            picks = [models[d].model(sequence).logits[0, len(ids) - 1:].argmax(-1)
                     for d in (torch.float32, dtype)]
        theirs += (picks[0] == picks[1]).sum().item()
    total = len(REFERENCE) * NEW
    return (f"{str(dtype).removeprefix('torch.')} against float32, greedy, {len(REFERENCE)} chat "
            f"prompts x {NEW} tokens: teacher-forced, the engine's next token agrees {ours}/{total} "
            f"({100 * ours / total:.1f}%), transformers' {theirs}/{total} "
            f"({100 * theirs / total:.1f}%); run freely, {sum(leading)}/{total} tokens "
            f"({100 * sum(leading) / total:.1f}%) come before the first difference, "
            f"{sum(n == NEW for n in leading)}/{len(REFERENCE)} sequences are identical")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 32, 128])
    parser.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"],
                        choices=["float32", "bfloat16"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's own, every core)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of the engine and of the static batch, taking the median "
                             "(one of the slower rest)")
    parser.add_argument("--skip-sequential-above", type=int, default=1,
                        help="one-after-another is N times one stream; measured up to this N")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtypes = [getattr(torch, name) for name in args.dtype]
    models = {dtype: load_model(None, device=device, dtype=dtype)
              for dtype in dict.fromkeys([torch.float32, *dtypes])}
    print(f"SmolLM2-135M on {device}; torch {torch.__version__}, {os.cpu_count()} cpus, "
          f"{torch.get_num_threads()} torch threads, {platform.machine()}, "
          f"oneDNN bf16: {torch.ops.mkldnn._is_mkldnn_bf16_supported()}")
    for dtype, loaded in models.items():  # warm-up: first-touch of weights, kernel builds
        engine_run(loaded, prompts(loaded.tokenizer, 2), device, dtype)

    model = models[torch.float32].model
    flops = 2 * sum(out * width for out, width in projection_shapes(model))
    print(f"\nthe limit: {flops / 1e6:.0f} MFLOP of matmuls a token (attention over a hundred "
          f"tokens adds about 2%)")
    limit = {}
    for dtype in dict.fromkeys([torch.bfloat16, *dtypes]):
        rate = matmul_rate(model, dtype, device)
        limit[dtype] = rate / flops
        print(f"  {str(dtype).removeprefix('torch.'):>8}: {rate / 1e9:.0f} GFLOP/s measured "
              f"-> {limit[dtype]:.0f} tokens/s at most")

    print(f"\n{'dtype':>8} {'N':>4} {'engine':>8} {'hf seq':>7} {'hf static':>9} {'hf gen_b':>8}"
          f" {'static32':>8} {'gen_b32':>7} {'eng/static':>10} {'eng/gen_b':>9} {'eng/static32':>12}"
          f" {'eng/gen_b32':>11} {'decode ms':>9} {'decode/limit':>12} {'prefill ms':>10}")
    fp32: dict[int, tuple[float, float]] = {}  # transformers' static batch and generate_batch
    for n in args.sizes:
        for dtype in dtypes:
            loaded = models[dtype]
            batch = prompts(loaded.tokenizer, n)
            runs, statics = [], []
            for _ in range(args.repeat):  # interleaved, so that both see the machine alike
                log_path = os.path.join(tempfile.mkdtemp(), "steps.jsonl")
                runs.append((engine_run(loaded, batch, device, dtype, log_path)[0],
                             *step_times_ms(log_path)))
                statics.append(hf_static(loaded, batch, device))
            eng, decode_ms, prefill_ms = sorted(runs)[len(runs) // 2]
            static = statistics.median(statics)
            seq = (hf_sequential(loaded, batch, device) if n <= args.skip_sequential_above
                   else float("nan"))
            gen_batch = hf_generate_batch(loaded, batch, device)
            if dtype == torch.float32:
                fp32[n] = static, gen_batch
            elif n not in fp32:
                fp32[n] = (statistics.median(hf_static(models[torch.float32], batch, device)
                                             for _ in range(args.repeat)),
                           hf_generate_batch(models[torch.float32], batch, device))
            static32, gen_batch32 = fp32[n]
            name = str(dtype).removeprefix("torch.")
            of_limit = 1000 * n / decode_ms / limit[dtype]
            print(f"{name:>8} {n:>4} {eng:>8.1f} {seq:>7.1f} {static:>9.1f} {gen_batch:>8.1f}"
                  f" {static32:>8.1f} {gen_batch32:>7.1f} {eng / static:>10.2f} {eng / gen_batch:>9.2f}"
                  f" {eng / static32:>12.2f} {eng / gen_batch32:>11.2f} {decode_ms:>9.1f}"
                  f" {of_limit:>11.0%} {prefill_ms:>10.1f}", flush=True)
    print()
    for dtype in dtypes:
        if dtype != torch.float32:
            print(agreement(models, dtype, device))
    print("\ntokens/s; static32, gen_b32: transformers in float32 (eng/...32: the engine in the "
          "row's dtype against them);\ndecode ms: the engine's median decode-only step at batch N, "
          "decode/limit its tokens/s against the limit above;\nprefill ms: its step that "
          "prefills all N prompts")


if __name__ == "__main__":
    main()
