"""The Triton decode attention against the reference `paged_decode_attention` on
random paged caches (`paged_cases`): contexts ending inside, on and past block
boundaries, grouped-query and multi-head attention, head sizes and block sizes
that are not powers of two. On CUDA the kernel is compiled; elsewhere Triton's interpreter runs
it on CPU tensors, which needs TRITON_INTERPRET=1 before triton is first imported
(torch imports it along with transformers), so the test session sets it."""
import os

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

import paged_cases
from live.runner.kv_cache import BlockTables
from live.runner.triton_attention import TritonDecodeAttention, triton_decode_attention
from paged_cases import LENGTHS, reference, strided_case


@pytest.fixture(autouse=True)
def interpreted_on_the_cpu():
    from triton.runtime.interpreter import InterpretedFunction
    if DEVICE == "cpu" and not isinstance(triton.language.zeros, InterpretedFunction):
        pytest.fail("triton was imported before TRITON_INTERPRET=1 was set, so its kernels "
                    "cannot run on the CPU; set it at the start of the session (tests/conftest.py)")


def random_case(heads, kv_heads, dim, block_size, dtype, **kwargs):
    return paged_cases.random_case(heads, kv_heads, dim, block_size, dtype, DEVICE, **kwargs)


@pytest.mark.parametrize("block_size", [1, 4, 6, 16])
@pytest.mark.parametrize("heads,kv_heads,dim", [(4, 4, 16), (6, 2, 16), (8, 2, 24), (9, 3, 64)])
def test_float32_equals_the_reference(heads, kv_heads, dim, block_size):
    q, k_cache, v_cache, tables = random_case(heads, kv_heads, dim, block_size, torch.float32)
    out = triton_decode_attention(q, k_cache, v_cache,
                                  BlockTables.build(tables, LENGTHS, DEVICE), 0.3)
    assert out.shape == q.shape and out.dtype == torch.float32 and out.device == q.device
    torch.testing.assert_close(out.cpu(), reference(q, k_cache, v_cache, tables, LENGTHS,
                                                    block_size, 0.3), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("tile,num_warps", [(16, 1), (32, 4), (128, 8)])
def test_every_tiling_gives_the_same_attention(tile, num_warps):
    q, k_cache, v_cache, tables = random_case(9, 3, 64, 16, torch.float32, seed=2)
    out = triton_decode_attention(q, k_cache, v_cache, BlockTables.build(tables, LENGTHS, DEVICE),
                                  0.3, tile=tile, num_warps=num_warps)
    torch.testing.assert_close(out.cpu(), reference(q, k_cache, v_cache, tables, LENGTHS, 16, 0.3),
                               atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (9, 3)])
def test_bfloat16_stays_within_bfloat16_rounding(heads, kv_heads):
    """Scores and sums in float32 inside the kernel: the only error left is the
    output's rounding to bf16 (the interpreter truncates, hence a 2^-7 bound)."""
    q, k_cache, v_cache, tables = random_case(heads, kv_heads, 32, 4, torch.bfloat16, seed=1)
    out = triton_decode_attention(q, k_cache, v_cache,
                                  BlockTables.build(tables, LENGTHS, DEVICE), 0.2)
    assert out.dtype == torch.bfloat16
    expected = reference(q, k_cache, v_cache, tables, LENGTHS, 4, 0.2)
    torch.testing.assert_close(out.float().cpu(), expected, atol=1e-2, rtol=2 ** -7)


def test_reads_strided_queries_as_the_model_hands_them():
    strided, k_cache, v_cache, tables, expected = strided_case(DEVICE)
    attention = TritonDecodeAttention(torch.device(DEVICE))
    out = attention(strided, k_cache, v_cache, attention.context(tables, LENGTHS), 0.25)
    torch.testing.assert_close(out.cpu(), expected, atol=2e-5, rtol=2e-5)


def test_block_tables_pad_rows_and_keep_lengths():
    context = BlockTables.build([[7, 2], [5], [1, 3, 4]], [6, 2, 9], "cpu")
    assert context.tables.dtype == torch.int32 and context.tables.tolist() == [
        [7, 2, 0], [5, 0, 0], [1, 3, 4]]
    assert context.lens.tolist() == [6, 2, 9]


def test_shapes_that_do_not_fit_are_refused():
    q, k_cache, v_cache, tables = random_case(6, 2, 16, 4, torch.float32)
    context = BlockTables.build(tables, LENGTHS, DEVICE)
    with pytest.raises(ValueError, match="does not fit"):
        triton_decode_attention(q[:, :5], k_cache, v_cache, context, 1.0)
    with pytest.raises(ValueError, match="does not fit"):
        triton_decode_attention(q[..., :8], k_cache, v_cache, context, 1.0)
    with pytest.raises(ValueError, match=f"{len(LENGTHS)} queries"):
        triton_decode_attention(q, k_cache, v_cache, BlockTables.build(tables[:5], LENGTHS[:5], DEVICE), 1.0)


@pytest.mark.parametrize("family", ["gpt2", "llama-group-3"])
def test_a_runner_on_the_kernel_gives_the_reference_logits(family):
    """Decode-only and mixed steps (decodes riding along a prefill) through the
    runner, the kernel in place of the reference."""
    from live.runner.model_runner import ModelRunner
    from scheduler import Scheduler, SchedulerConfig
    from tiny_models import drive, prompt, request, tiny_gpt2, tiny_llama

    model = tiny_gpt2() if family == "gpt2" else tiny_llama(
        hidden_size=96, num_attention_heads=6, num_key_value_heads=2)
    reference = ModelRunner(model, num_blocks=32, block_size=4)
    on_kernel = ModelRunner(model, num_blocks=32, block_size=4, device=DEVICE)
    on_kernel.decode_attention = TritonDecodeAttention(torch.device(DEVICE))
    core = Scheduler(SchedulerConfig(num_blocks=32, block_size=4))
    steps = {"mixed": 0, "decode": 0}

    def execute(plan):
        expected = reference.forward_logits(plan)
        torch.testing.assert_close(on_kernel.forward_logits(plan).cpu(), expected,
                                   atol=5e-4, rtol=5e-4)
        steps["mixed" if plan.prefills else "decode"] += bool(plan.decodes)
        return reference.sampler.sample(expected, plan.sequences)

    drive(core, reference, {0: [request("a", prompt(6, 1), 7), request("b", prompt(9, 2), 4)],
                            2: [request("c", prompt(3, 3), 4)]}, execute)
    assert core.is_drained() and steps["mixed"] >= 1 and steps["decode"] >= 5
