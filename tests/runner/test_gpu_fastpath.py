"""The fast path (Triton decode attention, decode steps replayed from CUDA graphs)
against the CPU reference runner: logits of mixed steps whose contexts span several
blocks, greedy tokens alone and concurrent, the pool after cancels and pauses.

On CUDA the fast path runs as it is served. Elsewhere, where triton installs, the
same tests run it emulated: the kernel in Triton's interpreter, prefill on padded
grids, and each captured graph replayed by running its step again over the same
fixed buffers. That checks
the ladder, the padding rows, the spare slot and the buffers' reuse; only a GPU
checks what capture alone can break (a host sync inside a step) and the device
time. Nothing here needs simpy, starlette or uvicorn."""
import re

import pytest
import torch

from live.runner import cuda_graphs, model_runner
from live.runner.cpu.attention import CpuDecodeAttention
from live.engine.engine import Engine
from live.runner.prefill_attention import PaddedPrefill
from live.runner.model_runner import ModelRunner
from scheduler import FinishEvent, FinishReason, Scheduler, SchedulerConfig, TokenEvent
from tiny_models import BUILDERS, drive, prompt, request, tiny_gpt2, tiny_llama

CUDA = torch.cuda.is_available()


class EagerCapture:
    """Off CUDA, what a graph's replay does: run the captured step again over the
    same fixed buffers, into the tensor the capture returned."""

    def __call__(self, step):
        output = step()
        return (lambda: output.copy_(step())), output


@pytest.fixture
def fast_device(monkeypatch) -> str:
    """The device the fast path runs on: CUDA, or the CPU with the path emulated."""
    if CUDA:
        return "cuda"
    pytest.importorskip("triton")
    from live.runner.triton_attention import TritonDecodeAttention
    monkeypatch.setattr(model_runner, "decode_attention_for",
                        lambda device, *shape: TritonDecodeAttention(device))
    monkeypatch.setattr(model_runner, "prefill_attention_for", PaddedPrefill)
    monkeypatch.setattr(cuda_graphs, "CudaGraphCapture", EagerCapture)
    return "cpu"


FAMILIES = {
    **BUILDERS,
    # SmolLM2's grouping: three query heads per KV head
    "llama-group-3": lambda: tiny_llama(hidden_size=96, num_attention_heads=6, num_key_value_heads=2),
}
ARRIVALS = {  # step -> (id, prompt length, new tokens): up to 6 decoding at once
    0: [("a", 5, 14), ("b", 19, 10)],
    1: [("c", 1, 12)],
    3: [("d", 70, 9), ("e", 7, 6)],  # d spans two of the kernel's tiles
    6: [("f", 12, 8)],
}
GRAPH_BATCH = 8  # captured sizes 1, 2, 4, 8: batches of 3, 5 and 6 replay padded
NUM_BLOCKS = 96


def arrivals():
    return {step: [request(i, prompt(n, seed=len(i) + n), new) for i, n, new in reqs]
            for step, reqs in ARRIVALS.items()}


def count_replays(runner: ModelRunner) -> list[tuple[int, int]]:
    """Wraps the runner's graph replay; the list grows by (batch size, longest
    context) of each replayed step."""
    replays, run = [], runner.graphs.run

    def counted(ids, positions, slots, block_tables, context_lens):
        replays.append((len(ids), max(context_lens)))
        return run(ids, positions, slots, block_tables, context_lens)

    runner.graphs.run = counted
    return replays


def test_the_cpu_takes_its_compiled_kernel():
    runner = ModelRunner(tiny_llama(), num_blocks=16, block_size=4)
    core = Scheduler(SchedulerConfig(num_blocks=16, block_size=4))
    outputs = drive(core, runner, {0: [request("a", prompt(6, 1), 3)]})
    assert isinstance(runner.decode_attention, CpuDecodeAttention)
    assert runner.graphs is None and runner.last_device_s is None
    assert len(outputs["a"]) == 3 and runner.cache.keys[0].shape[0] == 16


def test_cuda_graphs_are_refused_off_cuda():
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device with triton"):
        ModelRunner(tiny_gpt2(), num_blocks=16, block_size=4, cuda_graph_max_batch=4)


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_device_time_spans_the_forward_alone(graphs, fast_device, monkeypatch):
    """A step's CUDA events bracket its forward or graph replay: the host building
    the inputs comes before them, sampling (which waits for the GPU) after, and
    the elapsed time is read only once sampling has waited."""
    runner = ModelRunner(tiny_llama(), NUM_BLOCKS, 4, fast_device, torch.float32,
                         cuda_graph_max_batch=GRAPH_BATCH if graphs else 0)
    log = []

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing

        def record(self):
            log.append("event")

        def elapsed_time(self, end):
            assert log[-1] == "sample"
            return 1.5

    def noting(name, call):
        def noted(*args):
            log.append(name)
            return call(*args)
        return noted

    monkeypatch.setattr(torch.cuda, "Event", Event)
    runner.times_device = True
    runner._tensor = noting("input", runner._tensor)
    runner.arch.forward = noting("forward", runner.arch.forward)
    runner.sampler.sample = noting("sample", runner.sampler.sample)
    replays = count_replays(runner) if graphs else []
    core = Scheduler(SchedulerConfig(num_blocks=NUM_BLOCKS, block_size=4))
    drive(core, runner, {0: [request("a", prompt(6, 1), 4)], 1: [request("b", prompt(9, 2), 3)]})
    steps = "".join(log).split("sample")[:-1]
    # a replay off CUDA runs the step's forward again; on CUDA it is the graph alone
    inside = "" if CUDA and graphs else "forward"
    assert steps and all(re.fullmatch(f"(input)*event{inside}event", step) for step in steps)
    assert not graphs or replays
    assert runner.last_device_s == 0.0015


def test_batch_ladder():
    pytest.importorskip("triton")
    from live.runner.cuda_graphs import batch_ladder
    assert batch_ladder(1) == [1]
    assert batch_ladder(8) == [1, 2, 4, 8]
    assert batch_ladder(20) == [1, 2, 4, 8, 16, 20]
    assert batch_ladder(32) == [1, 2, 4, 8, 16, 24, 32]
    with pytest.raises(ValueError, match="at least 1"):
        batch_ladder(0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_fast_path_logits_equal_the_cpu_reference(family, block_size, dtype, fast_device):
    model = FAMILIES[family]()
    core = Scheduler(SchedulerConfig(num_blocks=NUM_BLOCKS, block_size=block_size, max_batch=8))
    fast = ModelRunner(model, NUM_BLOCKS, block_size, fast_device, dtype,
                       cuda_graph_max_batch=GRAPH_BATCH)
    reference = ModelRunner(model, NUM_BLOCKS, block_size)
    from live.runner.triton_attention import TritonDecodeAttention
    assert isinstance(fast.decode_attention, TritonDecodeAttention)
    assert isinstance(fast.prefill_attention, PaddedPrefill)
    replays = count_replays(fast)
    bf16_errors = []

    def execute(plan):
        expected = reference.forward_logits(plan)
        got = fast.forward_logits(plan)
        assert got.device.type == fast_device and got.dtype == dtype
        got = got.float().cpu()
        if dtype == torch.float32:
            torch.testing.assert_close(got, expected, atol=5e-4, rtol=5e-4,
                                       msg=lambda m: f"step {plan.index}: {m}")
        else:
            bf16_errors.append(((got - expected).abs().amax(-1) / expected.abs().amax(-1)).max().item())
        return reference.sampler.sample(expected, plan.sequences)

    outputs = drive(core, reference, arrivals(), execute)

    assert {i: len(t) for i, t in outputs.items()} == {
        i: new for reqs in ARRIVALS.values() for i, _, new in reqs}
    assert core.is_drained()
    sizes = {size for size, _ in replays}
    assert {3, 5, 6} & sizes and max(sizes) <= GRAPH_BATCH  # padded batches replayed
    assert max(longest for _, longest in replays) > 2 * block_size
    if dtype == torch.bfloat16:  # as close as the CPU's own bf16 path is
        assert max(bf16_errors) < 0.1, bf16_errors


def greedy_alone_and_together(runner: ModelRunner, block_size: int):
    """Each request on its own, then all of them arriving at different steps, on one runner."""
    def run(reqs_by_step):
        core = Scheduler(SchedulerConfig(num_blocks=NUM_BLOCKS, block_size=block_size, max_batch=8))
        out = drive(core, runner, reqs_by_step)
        assert core.is_drained()
        return out

    alone = {}
    for reqs in arrivals().values():
        for req in reqs:
            alone.update(run({0: [req]}))
    return alone, run(arrivals())


@pytest.mark.parametrize("family", ["gpt2", "llama-group-3"])
def test_greedy_tokens_concurrent_equal_alone(family, fast_device):
    runner = ModelRunner(FAMILIES[family](), NUM_BLOCKS, 4, fast_device, torch.float32,
                         cuda_graph_max_batch=GRAPH_BATCH)
    replays = count_replays(runner)
    alone, together = greedy_alone_and_together(runner, 4)
    assert together == alone
    assert {len(t) for t in alone.values()} == {new for reqs in ARRIVALS.values() for _, _, new in reqs}
    assert {1, 3} <= {size for size, _ in replays}


def test_preempted_sequences_recompute_to_the_same_greedy_tokens(fast_device):
    # 20 blocks of 4, which d alone fills at its end: the others grow into what it
    # needs, and the newest is preempted and recomputed (a padded prefill of its
    # prompt and output); in strict arrival order, so that d is admitted when the
    # others can still grow into its blocks
    runner = ModelRunner(tiny_llama(), NUM_BLOCKS, 4, fast_device, torch.float32,
                         cuda_graph_max_batch=GRAPH_BATCH)
    alone, _ = greedy_alone_and_together(runner, 4)
    core = Scheduler(SchedulerConfig(num_blocks=20, block_size=4, max_batch=8,
                                     admission="optimistic", max_overtakes=0))
    assert drive(core, runner, arrivals()) == alone
    assert core.preemptions >= 1 and core.recomputed_tokens > 0 and core.is_drained()


def test_chunked_prefill_makes_the_greedy_tokens_of_whole_prompts(fast_device):
    # chunks of 16: d's 70-token prompt continues from the cache four times, beside
    # the others' decodes and first chunks
    runner = ModelRunner(FAMILIES["llama-group-3"](), NUM_BLOCKS, 4, fast_device, torch.float32,
                         cuda_graph_max_batch=GRAPH_BATCH)
    alone, _ = greedy_alone_and_together(runner, 4)
    core = Scheduler(SchedulerConfig(num_blocks=NUM_BLOCKS, block_size=4, max_batch=8,
                                     max_prefill_tokens=16, chunked_prefill=True))
    assert drive(core, runner, arrivals()) == alone
    assert core.is_drained()


class ByteTokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(65 + i % 26) for i in ids)


def test_pool_whole_after_a_fast_path_run_with_cancels_and_pauses(fast_device):
    runner = ModelRunner(tiny_llama(), NUM_BLOCKS, 4, fast_device, torch.float32,
                         cuda_graph_max_batch=GRAPH_BATCH)
    alone, _ = greedy_alone_and_together(runner, 4)
    engine = Engine(runner, ByteTokenizer(),
                    SchedulerConfig(num_blocks=NUM_BLOCKS, block_size=4, max_batch=4))
    for reqs in arrivals().values():  # six requests, four slots: two wait
        for req in reqs:
            engine.submit(req.id, list(req.payload.prompt_ids), req.max_new_tokens)
    wishes = {2: [("pause", "a"), ("cancel", "f")],   # f is still waiting
              4: [("cancel", "b"), ("pause", "c")],
              6: [("resume", "a"), ("cancel", "c")],  # c is cancelled while paused
              7: [("cancel", "b")]}                   # a second cancel is harmless
    tokens, finished, device_s = {}, {}, []
    for n in range(200):
        for wish, seq_id in wishes.get(n, []):
            getattr(engine, wish)(seq_id)
        if n > max(wishes) and not engine.has_work():
            break
        for e in engine.step().events:
            if isinstance(e, TokenEvent):
                tokens.setdefault(e.seq_id, []).append(e.token_id)
            elif isinstance(e, FinishEvent):
                finished[e.seq_id] = e
        device_s.append(runner.last_device_s)
    assert engine.core.is_drained()
    pool = engine.core.pool
    assert pool.free_blocks == NUM_BLOCKS and pool.releases == pool.reservations == 5
    assert {i: e.reason for i, e in finished.items()} == {
        "a": FinishReason.LENGTH, "b": FinishReason.CANCELLED, "c": FinishReason.CANCELLED,
        "d": FinishReason.LENGTH, "e": FinishReason.LENGTH, "f": FinishReason.CANCELLED}
    assert "f" not in tokens
    for seq_id in ("a", "d", "e"):  # a pause changes when tokens come, not which
        assert tokens[seq_id] == alone[seq_id]
    if CUDA:
        assert device_s and all(isinstance(s, float) and s > 0 for s in device_s)
    else:
        assert set(device_s) == {None}
