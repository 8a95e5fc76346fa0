"""Attention alone, one layer's worth, the ways the engine can compute it side by
side in one run, for SmolLM2-135M's heads (9 on 3 KV heads of 64) and GPT-2's
(12 of 64), bf16 and fp32.

Decode: the Triton kernel's tilings against the reference gather path, at batches
of 1, 32 and 256 contexts of 456 tokens (the end of the engine benchmark's
requests: 200-token prompts and 256 new tokens) in blocks of 16, scattered
through the cache as a pool hands them out. The bandwidth counts the K and V bytes
the contexts hold, read once.

Prefill: one SDPA call per prompt against prompts padded into grids (layout
included, as each step builds it), for 256 prompts of 200 tokens (the engine
benchmark's first step) and 64 prompts of 16 to 512.

    python benchmarks/bench_attention.py --out DIR                  # on a GPU
    .venv/bin/python benchmarks/bench_attention.py --device cpu --tiny --out DIR

Each way is checked against the reference before it is timed. Times are medians of
`triton.testing.do_bench` on CUDA, wall times of one call elsewhere (a dry run: the
decode kernel in the interpreter). A way that fails its check or raises is recorded
as an error in its row and the rest go on. Results go to DIR/attention.json after
every row, so a run cut short keeps what it measured; markdown tables are printed
last."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from live.runner.attention import PagedContext, paged_decode_attention  # noqa: E402
from live.runner.prefill_attention import PaddedPrefill, PerPromptPrefill, PromptSpans  # noqa: E402
from live.runner.triton_attention import BlockTables, triton_decode_attention  # noqa: E402

SHAPES = {"smollm2-135m": (9, 3, 64), "gpt2-124m": (12, 12, 64)}
TILINGS = [(32, 4), (64, 4), (64, 8), (128, 8)]
"""(tokens a loop step reads, warps a program runs)."""
BLOCK_SIZE = 16
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2}
"""Largest difference from the float32 reference on the same values: float32
arithmetic, or the output's rounding to bf16."""


def case(heads: int, kv_heads: int, dim: int, seqs: int, context: int, dtype, device):
    """Queries, caches and the contexts' scattered block tables."""
    g = torch.Generator().manual_seed(seqs)
    per_seq = -(-context // BLOCK_SIZE)
    num_blocks = seqs * per_seq + 1
    order = torch.randperm(num_blocks, generator=g)[:seqs * per_seq].view(seqs, per_seq).tolist()
    k = torch.randn(num_blocks, BLOCK_SIZE, kv_heads, dim, generator=g).to(device, dtype)
    v = torch.randn(num_blocks, BLOCK_SIZE, kv_heads, dim, generator=g).to(device, dtype)
    q = torch.randn(seqs, heads, dim, generator=g).to(device, dtype)
    return q, k, v, order, [context] * seqs


def timed_ms(fn, device) -> float:
    if device.type == "cuda":
        import triton.testing
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    start = time.perf_counter()
    fn()
    return 1000 * (time.perf_counter() - start)


class Results:
    """The rows so far, rewritten to disk after each one."""

    def __init__(self, path: Path):
        self.path, self.rows = path, {"decode": [], "prefill": []}

    def add(self, kind: str, row: dict) -> None:
        self.rows[kind].append(row)
        print(json.dumps(row), flush=True)
        self.path.write_text(json.dumps(self.rows, indent=1))


def attempt(row: dict, key: str, fn) -> None:
    """`row[key] = fn()`, or the failure under `key + "_error"`: one way's failure
    must not cost the other ways or rows."""
    try:
        row[key] = fn()
    except Exception as exc:
        row[key + "_error"] = _error(exc)


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def checked_ms(run, expected: torch.Tensor, dtype, what: str, device) -> float:
    check(run(), expected, dtype, what)
    return timed_ms(run, device)


def decode_rows(results: Results, device, batches: list[int], context: int) -> None:
    for shape, (heads, kv_heads, dim) in SHAPES.items():
        for dtype in (torch.bfloat16, torch.float32):
            for seqs in batches:
                row = {"shape": shape, "dtype": str(dtype).removeprefix("torch."), "batch": seqs,
                       "context": context, "kv_mb": 2 * BLOCK_SIZE * kv_heads * dim * dtype.itemsize
                       * seqs * -(-context // BLOCK_SIZE) / 2**20}
                try:
                    decode_ways(row, shape, heads, kv_heads, dim, seqs, context, dtype, device)
                except Exception as exc:  # in the inputs or the reference: no way of the row ran
                    row["error"] = _error(exc)
                results.add("decode", row)


def decode_ways(row: dict, shape: str, heads: int, kv_heads: int, dim: int, seqs: int,
                context: int, dtype, device) -> None:
    """Times each way into `row`."""
    q, k, v, tables, lens = case(heads, kv_heads, dim, seqs, context, dtype, device)
    scale = dim ** -0.5
    paged = PagedContext.build(tables, lens, BLOCK_SIZE, device)
    expected = paged_decode_attention(q.float(), k.float(), v.float(), paged, scale)
    attempt(row, "reference_ms", lambda: timed_ms(lambda: paged_decode_attention(q, k, v, paged, scale),
                                                  device))
    blocks = BlockTables.build(tables, lens, device)
    for tile, warps in TILINGS:
        def run(tile=tile, warps=warps):
            return triton_decode_attention(q, k, v, blocks, scale, tile=tile, num_warps=warps)
        attempt(row, f"tile{tile}w{warps}_ms", lambda: checked_ms(
            run, expected, dtype, f"{shape} {dtype} batch {seqs}: tile {tile}, {warps} warps", device))


def prefill_rows(results: Results, device, batches: dict[str, list[int]]) -> None:
    for shape, (heads, kv_heads, dim) in SHAPES.items():
        for dtype in (torch.bfloat16, torch.float32):
            for name, lengths in batches.items():
                row = {"shape": shape, "dtype": str(dtype).removeprefix("torch."), "prompts": name,
                       "tokens": sum(lengths)}
                try:
                    prefill_ways(row, shape, heads, kv_heads, dim, name, lengths, dtype, device)
                except Exception as exc:  # in the inputs or the reference: no way of the row ran
                    row["error"] = _error(exc)
                results.add("prefill", row)


def prefill_ways(row: dict, shape: str, heads: int, kv_heads: int, dim: int, name: str,
                 lengths: list[int], dtype, device) -> None:
    """Times each way into `row`."""
    g = torch.Generator().manual_seed(len(lengths))
    q, k, v = (torch.randn(sum(lengths), h, dim, generator=g).to(device, dtype)
               for h in (heads, kv_heads, kv_heads))
    spans = PromptSpans([sum(lengths[:i]) for i in range(len(lengths))], lengths)
    scale = dim ** -0.5
    per_prompt, padded = PerPromptPrefill(), PaddedPrefill(device)
    expected = per_prompt(q.float(), k.float(), v.float(), spans, scale)
    attempt(row, "per_prompt_ms", lambda: timed_ms(lambda: per_prompt(q, k, v, spans, scale), device))
    attempt(row, "padded_ms", lambda: checked_ms(lambda: padded(q, k, v, padded.layout(spans), scale),
                                                 expected, dtype, f"{shape} {name} padded", device))


def check(got: torch.Tensor, expected: torch.Tensor, dtype, what: str) -> None:
    error = (got.float() - expected).abs().max().item()
    if not error <= TOLERANCE[dtype]:
        raise AssertionError(f"{what} is {error:.3g} from the reference")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", required=True, help="folder for attention.json")
    parser.add_argument("--tiny", action="store_true", help="small batches and contexts: a dry run")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.tiny:
        batches, context, prompts = [1, 4], 40, {"4x20": [20] * 4, "3 mixed": [5, 30, 12]}
    else:
        spread = torch.linspace(16, 512, 64).round().int().tolist()
        batches, context, prompts = [1, 32, 256], 456, {"256x200": [200] * 256, "64 of 16-512": spread}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = Results(out / "attention.json")
    decode_rows(results, device, batches, context)
    prefill_rows(results, device, prompts)
    print()
    print(table(results.rows["decode"]))
    print()
    print(prefill_table(results.rows["prefill"]))
    failed = any(key.endswith("error") for rows in results.rows.values() for row in rows for key in row)
    return 1 if failed else 0


def table(rows: list[dict]) -> str:
    names = [f"tile{t}w{w}" for t, w in TILINGS]
    lines = ["| shape | dtype | batch | reference µs | " + " | ".join(f"{n} µs (GB/s)" for n in names)
             + " |", "|---|---|---:|---:|" + "---:|" * len(names)]
    for r in rows:
        cells = [f"{_us(r[n + '_ms'])} ({r['kv_mb'] * 2**20 / (r[n + '_ms'] / 1000) / 1e9:.0f})"
                 if n + "_ms" in r else "failed" for n in names]
        lines.append(f"| {r['shape']} | {r['dtype']} | {r['batch']} | {_us(r.get('reference_ms'))} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def prefill_table(rows: list[dict]) -> str:
    lines = ["| shape | dtype | prompts | tokens | per prompt µs | padded µs | per prompt / padded |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        ratio = (f"{r['per_prompt_ms'] / r['padded_ms']:.2f}" if "per_prompt_ms" in r and "padded_ms" in r
                 else "–")
        lines.append(f"| {r['shape']} | {r['dtype']} | {r['prompts']} | {r['tokens']} | "
                     f"{_us(r.get('per_prompt_ms'))} | {_us(r.get('padded_ms'))} | {ratio} |")
    return "\n".join(lines)


def _us(ms: float | None) -> str:
    return "failed" if ms is None else f"{1000 * ms:.1f}"


if __name__ == "__main__":
    sys.exit(main())
