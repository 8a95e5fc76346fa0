"""The engine's CUDA fast path against transformers on the same work, side by side
in one run: SmolLM2-135M and GPT-2-124M shapes with random weights, bf16 and fp32.

    python benchmarks/bench_gpu.py --out DIR                           # on a GPU
    .venv/bin/python benchmarks/bench_gpu.py --device cpu --tiny --out DIR   # dry run

Per model and dtype: the engine's decode step time at batch 1, 32 and 256 (wall
time of plan, execute and commit, and device time from CUDA events), and tokens/s
for 32 and 256 concurrent requests of 200-token prompts and 256 new tokens (all
submitted at once, greedy, no EOS), beside transformers' `generate_batch`
(continuous batching; its own setup and warm-up inside the timed call, and again
from its first token to its last) and one static `generate` batch. Results go to
DIR/bench.json after every figure, so a run cut short keeps what it measured; a
markdown table is printed last."""
from __future__ import annotations

import argparse
import gc
import inspect
import json
import logging
import platform
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from live.runner.architectures import kv_layout  # noqa: E402
from live.runner.gpu_memory import gpu_kv_blocks  # noqa: E402
from live.runner.model_runner import ModelRunner  # noqa: E402
from live.runner.params import GenerationInput, SamplingParams  # noqa: E402
from scheduler import Request, Scheduler, SchedulerConfig  # noqa: E402

log = logging.getLogger("bench_gpu")
BLOCK_SIZE = 16
NO_SPECIAL = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)
SHAPES = {
    "smollm2-135m": lambda: LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
        rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, **NO_SPECIAL),
    "gpt2-124m": lambda: GPT2Config(**NO_SPECIAL),  # the defaults are GPT-2 small
}
TINY = {  # the same families, small enough for a CPU dry run
    "smollm2-135m": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256),
    "gpt2-124m": dict(vocab_size=512, n_embd=64, n_layer=2, n_head=4, n_positions=256),
}


@dataclass(frozen=True)
class Work:
    prompt_len: int
    new_tokens: int
    batches: list[int]
    concurrency: list[int]
    decode_steps: int


class Results:
    """Every figure as a JSON row, rewritten to disk after each one."""

    def __init__(self, path: Path, meta: dict):
        self.path, self.meta, self.rows = path, meta, []

    def add(self, **row) -> None:
        self.rows.append(row)
        log.info("%s", row)
        self.path.write_text(json.dumps({"meta": self.meta, "rows": self.rows}, indent=1))

    def row(self, **keys) -> dict:
        """The figure measured for `keys`, or {} when none was."""
        return next((r for r in self.rows if "value" in r
                     and all(r.get(k) == v for k, v in keys.items())), {})


def build_model(shape: str, tiny: bool, device, dtype):
    config = SHAPES[shape]()
    for name, value in (TINY[shape] if tiny else {}).items():
        setattr(config, name, value)
    torch.manual_seed(0)
    family = LlamaForCausalLM if config.model_type == "llama" else GPT2LMHeadModel
    with torch.device(device):  # initialised where it runs: seconds less for 135M parameters
        return family(config).to(dtype).eval()


def prompts(n: int, work: Work, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(n)
    return torch.randint(0, vocab, (n, work.prompt_len), generator=g).tolist()


def requests(batch: list[list[int]], new_tokens: int) -> list[Request]:
    return [Request(f"r{i}", len(ids), new_tokens, GenerationInput(tuple(ids), SamplingParams()))
            for i, ids in enumerate(batch)]


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def decode_step_times(runner: ModelRunner, num_blocks: int, batch: list[list[int]],
                      work: Work) -> tuple[float, float | None]:
    """Median wall and device milliseconds of decode-only steps at `len(batch)`
    sequences of `work.prompt_len` tokens and more."""
    core = Scheduler(SchedulerConfig(num_blocks=num_blocks, block_size=BLOCK_SIZE,
                                     max_batch=len(batch), max_waiting=len(batch)))
    for req in requests(batch, work.decode_steps + 4):
        core.submit(req)
    walls, devices = [], []
    for n in range(work.decode_steps + 3):
        t0 = time.perf_counter()
        plan = core.plan()
        tokens = runner.execute(plan)
        core.commit(plan, tokens)
        if n >= 3:  # after the prefill and two warm-up decodes
            assert not plan.prefills and len(plan.decodes) == len(batch)
            walls.append(time.perf_counter() - t0)
            devices.append(runner.last_device_s)
    while core.has_work():
        core.commit(plan := core.plan(), runner.execute(plan))
    assert core.is_drained()
    device_ms = 1000 * statistics.median(devices) if None not in devices else None
    return 1000 * statistics.median(walls), device_ms


def engine_tokens_per_s(runner: ModelRunner, num_blocks: int, batch: list[list[int]],
                        work: Work) -> float:
    core = Scheduler(SchedulerConfig(num_blocks=num_blocks, block_size=BLOCK_SIZE,
                                     max_batch=len(batch), max_waiting=len(batch)))
    made = 0
    sync(runner.device)
    t0 = time.perf_counter()
    for req in requests(batch, work.new_tokens):
        core.submit(req)
    while core.has_work():
        plan = core.plan()
        tokens = runner.execute(plan)
        core.commit(plan, tokens)
        made += len(tokens)
    elapsed = time.perf_counter() - t0
    assert core.is_drained() and made == len(batch) * work.new_tokens
    return made / elapsed


def hf_config(work: Work) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=work.new_tokens, min_new_tokens=work.new_tokens,
                            do_sample=False, eos_token_id=None, pad_token_id=0)


def hf_generate_batch(model, batch, work: Work) -> tuple[float, float | None]:
    """tokens/s over the whole call, and from the first token to the last."""
    stamped = "record_timestamps" in inspect.signature(model.generate_batch).parameters
    t0 = time.perf_counter()
    # no_grad, not inference_mode: its worker thread writes in place to tensors made
    # here, which inference mode forbids outside it (transformers 5.17 fails each request)
    with torch.no_grad():
        out = model.generate_batch(batch, generation_config=hf_config(work), progress_bar=False,
                                   **({"record_timestamps": True} if stamped else {}))
    elapsed = time.perf_counter() - t0
    made = sum(len(o.generated_tokens) for o in out.values())
    if made < len(batch) * work.new_tokens:
        raise RuntimeError(f"generate_batch made {made} of {len(batch) * work.new_tokens} "
                           f"tokens: its requests failed (see its log above)")
    stamps = [o.timestamps for o in out.values() if getattr(o, "timestamps", None)]
    span = (max(s[-1] for s in stamps) - min(s[0] for s in stamps)) if stamps else 0
    return made / elapsed, (made / span if span > 0 else None)


def hf_static(model, batch, work: Work) -> float:
    ids = torch.tensor(batch, device=model.device)
    with torch.inference_mode():
        sync(model.device)
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=hf_config(work))
        sync(model.device)
    made = out.numel() - ids.numel()
    return made / (time.perf_counter() - t0)


def measure(results: Results, label: dict, fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # one failed figure must not cost the others
        log.error("%s failed:\n%s", label, traceback.format_exc())
        results.add(**label, error=f"{type(exc).__name__}: {exc}"[:300])
        return None


def bench_engine(results: Results, model, shape: str, dtype_name: str, work: Work, args) -> None:
    device, dtype = model.device, getattr(torch, dtype_name)
    need = max(work.batches + work.concurrency) * -(-(work.prompt_len + work.new_tokens + 8) // BLOCK_SIZE)
    num_blocks = (gpu_kv_blocks(args.gpu_memory_fraction, kv_layout(model.config), BLOCK_SIZE, dtype)
                  if device.type == "cuda" else need)
    base = dict(model=shape, dtype=dtype_name)
    graph_batch = max(work.batches + work.concurrency) if device.type == "cuda" else 0
    for graphs in dict.fromkeys((graph_batch, 0)):  # eager, once more, if a capture fails
        t0 = time.perf_counter()
        runner = measure(results, dict(**base, metric="runner_setup_s", cuda_graph_max_batch=graphs),
                         lambda: ModelRunner(model, num_blocks, BLOCK_SIZE, device, dtype,
                                             cuda_graph_max_batch=graphs))
        if runner is not None:
            break
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    else:
        return
    results.add(**base, metric="runner_setup_s", value=round(time.perf_counter() - t0, 2),
                num_blocks=num_blocks, cuda_graph_max_batch=graphs,
                attention=type(runner.decode_attention).__name__)
    vocab = model.config.vocab_size
    for b in work.batches:
        label = dict(**base, metric="decode_step_ms", batch=b)
        got = measure(results, label, decode_step_times, runner, num_blocks, prompts(b, work, vocab), work)
        if got:
            results.add(**label, value=round(got[0], 3),
                        device_ms=None if got[1] is None else round(got[1], 3))
    for n in work.concurrency:
        label = dict(**base, metric="engine_tokens_per_s", batch=n)
        got = measure(results, label, engine_tokens_per_s, runner, num_blocks, prompts(n, work, vocab), work)
        if got:
            results.add(**label, value=round(got, 1))
    del runner
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def bench_transformers(results: Results, model, shape: str, dtype_name: str, work: Work,
                       deadline: float) -> None:
    base = dict(model=shape, dtype=dtype_name)
    vocab = model.config.vocab_size
    for n in work.concurrency:
        batch = prompts(n, work, vocab)
        for metric, fn in (("hf_generate_batch_tokens_per_s", hf_generate_batch),
                           ("hf_static_tokens_per_s", hf_static)):
            label = dict(**base, metric=metric, batch=n)
            if time.monotonic() > deadline:
                results.add(**label, error="skipped: the run's deadline passed")
                continue
            got = measure(results, label, fn, model, batch, work)
            if got is None:
                continue
            if metric == "hf_static_tokens_per_s":
                results.add(**label, value=round(got, 1))
            else:
                results.add(**label, value=round(got[0], 1),
                            from_first_token=None if got[1] is None else round(got[1], 1))


def _fmt(value, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "–"


def _ratio(a, b) -> str:
    return _fmt(a / b, 2) if isinstance(a, (int, float)) and isinstance(b, (int, float)) else "–"


def table(results: Results, shapes, dtypes, work: Work) -> str:
    """Decode step times, then throughput with the ratios. gen_batch's figure in the
    ratio is its stricter one, first token to last, when it has it."""
    lines = ["| model | dtype | " + " | ".join(f"decode ms @{b} (device)" for b in work.batches) + " |",
             "|---|---|" + "---:|" * len(work.batches)]
    for shape in shapes:
        for dt in dtypes:
            cells = []
            for b in work.batches:
                row = results.row(model=shape, dtype=dt, metric="decode_step_ms", batch=b)
                cells.append(f"{_fmt(row.get('value'), 2)} ({_fmt(row.get('device_ms'), 2)})")
            lines.append(f"| {shape} | {dt} | " + " | ".join(cells) + " |")
    lines += ["", "| model | dtype | N | engine tok/s | gen_batch tok/s (call; tokens) | static tok/s "
                  "| engine / gen_batch | engine / static |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for shape in shapes:
        for dt in dtypes:
            for n in work.concurrency:
                keys = dict(model=shape, dtype=dt, batch=n)
                eng = results.row(metric="engine_tokens_per_s", **keys).get("value")
                cb = results.row(metric="hf_generate_batch_tokens_per_s", **keys)
                static = results.row(metric="hf_static_tokens_per_s", **keys).get("value")
                cb_strict = cb.get("from_first_token") or cb.get("value")
                lines.append(f"| {shape} | {dt} | {n} | {_fmt(eng)} "
                             f"| {_fmt(cb.get('value'))}; {_fmt(cb.get('from_first_token'))} "
                             f"| {_fmt(static)} | {_ratio(eng, cb_strict)} | {_ratio(eng, static)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", required=True, help="folder for bench.json")
    parser.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"],
                        choices=["bfloat16", "float32"])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes and work: a dry run")
    parser.add_argument("--gpu-memory-fraction", type=float, default=0.9,
                        help="share of the GPU the engine's KV cache may bring the process to")
    parser.add_argument("--deadline-s", type=float, default=240,
                        help="transformers figures not started by then are skipped")
    parser.add_argument("--no-transformers", action="store_true")
    parser.add_argument("--table", action="store_true",
                        help="only print the table of the figures already in OUT/bench.json")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.table:
        saved = json.loads((out / "bench.json").read_text())
        results = Results(out / "bench.json", saved["meta"])
        results.rows = saved["rows"]
        print(table(results, args.models, args.dtypes, Work(**saved["meta"]["work"])))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    deadline = time.monotonic() + args.deadline_s
    device = torch.device(args.device)
    work = (Work(12, 8, [1, 4], [2, 4], 3) if args.tiny
            else Work(200, 256, [1, 32, 256], [32, 256], 20))
    meta = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "triton": _version("triton"), "work": work.__dict__, "tiny": args.tiny,
            "gpu_memory_fraction": args.gpu_memory_fraction}
    out.mkdir(parents=True, exist_ok=True)
    results = Results(out / "bench.json", meta)
    log.info("%s", meta)
    # The engine's figures first, all of them; then transformers' while the deadline allows.
    phases = {"engine": lambda model, shape, dt: bench_engine(results, model, shape, dt, work, args)}
    if not args.no_transformers:
        phases["transformers"] = lambda model, shape, dt: bench_transformers(results, model, shape, dt,
                                                                             work, deadline)
    for name, phase in phases.items():
        for shape in args.models:
            for dtype_name in args.dtypes:
                # a model or dtype that fails outside its figures costs only its own
                measure(results, dict(model=shape, dtype=dtype_name, metric=name), lambda: phase(
                    build_model(shape, args.tiny, device, getattr(torch, dtype_name)), shape, dtype_name))
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    print()
    print(table(results, args.models, args.dtypes, work))
    return 0


def _version(package: str) -> str | None:
    try:
        return __import__(package).__version__
    except ImportError:
        return None


if __name__ == "__main__":
    sys.exit(main())
