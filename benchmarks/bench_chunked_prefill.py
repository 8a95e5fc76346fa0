"""Chunked prefill on the live engine, side by side in one run: while 8 streams
decode, a 512-token prompt arrives; it is prefilled whole, or in chunks of 256,
128, 64 or 32 tokens beside the decodes.

    .venv/bin/python benchmarks/bench_chunked_prefill.py [--rounds 3] [--threads 1]

Per chunk size (medians over rounds that alternate the sizes): the longest step
while the prompt is prefilled (what the 8 streams wait between two tokens), the
prompt's time from admission to its first token, and the time all its prefill
steps took against the whole prompt's step (the price of chunking: the weights
are read once per chunk, and later chunks read the cache).
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from live.engine.engine import Engine
from live.runner.model_runner import ModelRunner
from live.runner.models import load_model
from live.runner.params import SamplingParams
from scheduler import SchedulerConfig, TokenEvent

DECODERS, DECODER_PROMPT, DECODER_NEW = 8, 32, 400
LONG_PROMPT = 512
BLOCK_SIZE = 16
TEXT = ("In a quiet town by the sea, the lighthouse keeper kept a log of every ship that "
        "passed, every storm that rolled in, and every letter that arrived for him. ")


def one_run(loaded, ids: list[int], budget: int | None) -> dict[str, float]:
    num_blocks = 256
    runner = ModelRunner(loaded, num_blocks=num_blocks, block_size=BLOCK_SIZE)
    config = SchedulerConfig(num_blocks=num_blocks, block_size=BLOCK_SIZE, max_batch=DECODERS + 1,
                             max_prefill_tokens=budget, chunked_prefill=budget is not None)
    engine = Engine(runner, loaded.tokenizer, config)
    greedy = SamplingParams(ignore_eos=True)
    for i in range(DECODERS):
        engine.submit(f"d{i}", ids[i:i + DECODER_PROMPT], DECODER_NEW, greedy)
    for _ in range(4):  # the decoders prefilled and decoding
        engine.step()
    engine.submit("long", ids[:LONG_PROMPT], 1, greedy)
    steps, admitted, first = [], None, None
    while first is None:
        t0 = time.perf_counter()
        output = engine.step()
        steps.append(time.perf_counter() - t0)
        if "long" in output.admitted:
            admitted = len(steps) - 1
        if any(isinstance(e, TokenEvent) and e.seq_id == "long" for e in output.events):
            first = len(steps)
    prefill = steps[admitted:first]
    return {"longest_step_s": max(prefill), "to_first_token_s": sum(prefill), "steps": len(prefill)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads (make run uses 1)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(None, "cpu", torch.float32)
    ids = loaded.tokenizer.encode(TEXT * 40)
    assert len(ids) >= LONG_PROMPT, len(ids)
    budgets = [None, 256, 128, 64, 32]
    results: dict[int | None, list[dict]] = {b: [] for b in budgets}
    with torch.inference_mode():
        one_run(loaded, ids, None)  # warm-up
        for _ in range(args.rounds):
            for budget in budgets:
                results[budget].append(one_run(loaded, ids, budget))
    print(f"{platform.machine()}, {torch.get_num_threads()} torch thread(s), SmolLM2-135M fp32, "
          f"{DECODERS} decoding streams, a {LONG_PROMPT}-token prompt; medians of {args.rounds} rounds")
    whole = statistics.median(r["to_first_token_s"] for r in results[None])
    print(f"{'chunk':>6} {'steps':>6} {'longest step (s)':>17} {'to first token (s)':>19} {'x whole':>8}")
    for budget in budgets:
        rows = results[budget]
        longest = statistics.median(r["longest_step_s"] for r in rows)
        to_first = statistics.median(r["to_first_token_s"] for r in rows)
        print(f"{budget or 'whole':>6} {rows[0]['steps']:>6} {longest:>17.3f} {to_first:>19.3f} "
              f"{to_first / whole:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
