"""Prefill attention over padded grids (the CUDA path) against one SDPA call per
prompt (the path without a compiled kernel): prompts of many lengths packed end to
end, grouped-query and multi-head, grids cut by the mask budget, and a runner's
logits either way; and the CPU kernel's path, every row of a pass read through the
block tables, against those spans."""
import pytest
import torch

from live.runner import prefill_attention as pa
from live.runner.prefill_attention import PaddedPrefill, PerPromptPrefill, PromptSpans
from test_runner_bf16 import TOLERANCE, relative

LENGTHS = [5, 1, 64, 17, 200, 18, 3]


def packed(lengths, heads, kv_heads, dim, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = sum(lengths)
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    q = torch.randn(n, heads, dim, generator=g).to(dtype)
    k = torch.randn(n, kv_heads, dim, generator=g).to(dtype)
    v = torch.randn(n, kv_heads, dim, generator=g).to(dtype)
    return q, k, v, PromptSpans(starts, list(lengths))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (9, 3)])
def test_padded_grids_give_each_prompt_its_own_causal_attention(heads, kv_heads, dtype):
    q, k, v, spans = packed(LENGTHS, heads, kv_heads, 32, dtype)
    padded = PaddedPrefill(torch.device("cpu"))
    got = padded(q, k, v, padded.layout(spans), 0.2)
    expected = PerPromptPrefill()(q.float(), k.float(), v.float(), spans, 0.2)
    assert got.shape == q.shape and got.dtype == dtype
    tolerance = dict(atol=2e-5, rtol=2e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(got.float(), expected, **tolerance)


def test_grids_keep_to_the_budget_and_a_lone_prompt_is_plainly_causal(monkeypatch):
    monkeypatch.setattr(pa, "GRID_BUDGET", 1000)
    padded = PaddedPrefill(torch.device("cpu"))
    grids = padded.layout(PromptSpans([sum(LENGTHS[:i]) for i in range(len(LENGTHS))], LENGTHS))
    # sorted by length: (1, 3, 5) (17, 18) (64) (200)
    assert [tuple(g.valid.sum(1).tolist()) for g in grids] == [(1, 3, 5), (17, 18), (64,), (200,)]
    assert [g.mask is None for g in grids] == [False, False, True, True]
    for g in grids:
        assert g.valid.shape[0] * g.valid.shape[1] ** 2 <= 1000 or g.mask is None
    # every packed row is in exactly one cell
    rows = torch.cat([g.rows[g.valid] for g in grids])
    assert sorted(rows.tolist()) == list(range(sum(LENGTHS)))
    q, k, v, spans = packed(LENGTHS, 9, 3, 16, torch.float32, seed=1)
    torch.testing.assert_close(padded(q, k, v, grids, 0.3), PerPromptPrefill()(q, k, v, spans, 0.3),
                               atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("family", ["gpt2", "llama-group-3"])
def test_a_runner_prefilling_on_grids_gives_the_reference_logits(family):
    from live.runner.model_runner import ModelRunner
    from scheduler import Scheduler, SchedulerConfig
    from tiny_models import drive, prompt, request, tiny_gpt2, tiny_llama

    model = tiny_gpt2() if family == "gpt2" else tiny_llama(
        hidden_size=96, num_attention_heads=6, num_key_value_heads=2)
    reference, on_grids = (spans_runner(model) for _ in range(2))
    grids = PaddedPrefill(torch.device("cpu"))
    on_grids.prefill_attention = Counted(grids)
    core = Scheduler(SchedulerConfig(num_blocks=64, block_size=4))
    prefills = []

    def execute(plan):
        expected = reference.forward_logits(plan)
        torch.testing.assert_close(on_grids.forward_logits(plan), expected, atol=5e-4, rtol=5e-4)
        prefills.append(len(plan.prefills))
        return reference.sampler.sample(expected, plan.sequences)

    drive(core, reference, {0: [request("a", prompt(6, 1), 5), request("b", prompt(40, 2), 4),
                                request("c", prompt(1, 3), 3)],
                            2: [request("d", prompt(23, 4), 4), request("e", prompt(9, 5), 2)]},
          execute)
    assert core.is_drained() and prefills[0] == 3 and 2 in prefills
    layers = model.config.num_hidden_layers
    assert on_grids.prefill_attention.calls == layers * sum(1 for n in prefills if n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("family", ["gpt2", "llama-group-3"])
def test_the_cpu_kernel_reads_short_chunks_as_the_spans_do(family, dtype, monkeypatch):
    """Passes that mix every kind of row: chunks within `TABLED_CONTEXT` (whole
    prompts and continuations) read through their block tables beside the decodes,
    one kernel call a layer; longer ones by SDPA, fresh and over the cache. Their
    logits against a runner whose every chunk takes SDPA."""
    from live.runner import model_runner
    from live.runner.cpu.attention import CpuDecodeAttention
    from live.runner.model_runner import ModelRunner
    from scheduler import Scheduler, SchedulerConfig
    from tiny_models import drive, prompt, request, tiny_gpt2, tiny_llama

    monkeypatch.setattr(model_runner, "TABLED_CONTEXT", 12)
    model = tiny_gpt2() if family == "gpt2" else tiny_llama(
        hidden_size=144, num_attention_heads=9, num_key_value_heads=3)
    model = model.to(dtype)
    mixed = ModelRunner(model, num_blocks=64, block_size=4, dtype=dtype)
    assert isinstance(mixed.decode_attention, CpuDecodeAttention)
    mixed.decode_attention = Counted(mixed.decode_attention)
    mixed.prefill_attention = Counted(mixed.prefill_attention)
    reference = spans_runner(model, dtype)
    core = Scheduler(SchedulerConfig(num_blocks=64, block_size=4, max_prefill_tokens=16,
                                     chunked_prefill=True))
    seen = {"steps": 0, "tabled fresh": 0, "tabled continued": 0, "fresh": 0, "continued": 0,
            "mixed": 0, "steps with a fresh prompt": 0}

    def execute(plan):
        expected = reference.forward_logits(plan)
        got = mixed.forward_logits(plan)
        if dtype == torch.float32:
            torch.testing.assert_close(got, expected, atol=5e-4, rtol=5e-4)
        else:  # each path rounds to bf16 in its own places
            assert relative(got.float(), expected.float(), expected.float()) < TOLERANCE
        seen["steps"] += 1
        for seq in plan.chunks:
            tabled = "tabled " if seq.prefill_start + seq.chunk <= 12 else ""
            seen[tabled + ("continued" if seq.prefill_start else "fresh")] += 1
        seen["mixed"] += bool(plan.chunks and plan.decodes)
        seen["steps with a fresh prompt"] += any(
            not seq.prefill_start and seq.chunk > 12 for seq in plan.chunks)
        return reference.sampler.sample(expected, plan.sequences)

    drive(core, reference, {0: [request("a", prompt(6, 1), 5), request("b", prompt(30, 2), 4),
                                request("c", prompt(1, 3), 3)],
                            3: [request("d", prompt(6, 4), 4), request("x", prompt(11, 6), 3)],
                            4: [request("e", prompt(2, 5), 2)], 6: [request("f", prompt(14, 7), 2)]},
          execute)
    assert core.is_drained() and seen["mixed"] >= 2
    assert all(seen[kind] for kind in ("tabled fresh", "tabled continued", "fresh", "continued")), seen
    layers = model.config.num_hidden_layers
    assert mixed.decode_attention.calls == layers * seen["steps"]
    assert mixed.prefill_attention.calls == layers * seen["steps with a fresh prompt"]
class Counted:
    """An attention that counts its calls."""

    def __init__(self, attention):
        self.attention, self.calls = attention, 0

    def __getattr__(self, name):
        return getattr(self.attention, name)

    def __call__(self, *args):
        self.calls += 1
        return self.attention(*args)


def spans_runner(model, dtype=torch.float32):
    """A CPU runner on the reference decode attention, which takes the three-part
    prefill: SDPA per prompt, cached chunks, decodes."""
    from live.runner.attention import ReferenceDecodeAttention
    from live.runner.model_runner import ModelRunner

    runner = ModelRunner(model, num_blocks=64, block_size=4, dtype=dtype)
    runner.decode_attention = ReferenceDecodeAttention(4, torch.device("cpu"))
    return runner
