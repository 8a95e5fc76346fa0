"""The paged KV cache (its writes, torch's and the CPU kernel's) and the decode
attention that reads it through block tables, against a dense reference; sizing
the cache from a memory budget; refusals."""
import pytest
import torch
from transformers import GPT2Config

from live.runner.architectures import kv_layout, rope_frequencies
from live.runner.attention import PagedContext, paged_decode_attention
from live.runner.kv_cache import KVLayout, PagedKVCache, blocks_for_budget, index_write, slot_mapping
from live.runner.model_runner import ModelRunner
from tiny_models import tiny_gpt2, tiny_llama


def test_slot_mapping_follows_the_block_table():
    assert slot_mapping([7, 2, 5], 2, 10, 4) == [30, 31, 8, 9, 10, 11, 20, 21]
    with pytest.raises(IndexError, match="block table holds 3"):
        slot_mapping([7, 2, 5], 0, 13, 4)


def test_write_lands_in_the_slots_block_and_offset():
    cache = PagedKVCache(KVLayout(2, 2, 3), num_blocks=4, block_size=4, device="cpu",
                         dtype=torch.float32)
    k, v = torch.randn(2, 2, 3), torch.randn(2, 2, 3)
    cache.write(1, torch.tensor([9, 2]), k, v)
    assert torch.equal(cache.keys[1][2, 1], k[0]) and torch.equal(cache.values[1][0, 2], v[1])
    assert cache.keys[0].abs().sum() == 0  # other layers untouched


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_cpu_write_stores_the_rows_torch_stores(dtype):
    """From strided views of a fused projection, as the model hands K and V over."""
    from live.runner.cpu.kv_write import CpuKVWrite
    g = torch.Generator().manual_seed(0)
    fused = torch.randn(7, 3 * 2 * 8, generator=g).to(dtype)
    k, v = fused[:, 16:32].view(7, 2, 8), fused[:, 32:].view(7, 2, 8)
    assert not k.is_contiguous()
    slots = torch.tensor([5, 0, 19, 6, 7, 12, 3])
    compiled, reference = (torch.zeros(2, 20, 2, 8, dtype=dtype) for _ in range(2))
    CpuKVWrite()(compiled[0], compiled[1], slots, k, v)
    index_write(reference[0], reference[1], slots, k, v)
    assert torch.equal(compiled, reference) and compiled.abs().sum() > 0


def test_a_slot_outside_the_cache_is_refused_and_nothing_is_written():
    from live.runner.cpu.kv_write import CpuKVWrite
    cache = torch.zeros(2, 8, 2, 3)
    k = v = torch.ones(3, 2, 3)
    with pytest.raises(IndexError, match="1 of 3 slots are outside the cache's 8"):
        CpuKVWrite()(cache[0], cache[1], torch.tensor([1, 8, 2]), k, v)
    with pytest.raises(IndexError):
        CpuKVWrite()(cache[0], cache[1], torch.tensor([-1, 3, 2]), k, v)
    assert cache.abs().sum() == 0
    with pytest.raises(ValueError, match="rows"):
        CpuKVWrite()(cache[0], cache[1], torch.tensor([0, 1, 2]), k.double(), v.double())


def test_blocks_for_budget():
    layout = KVLayout(num_layers=30, kv_heads=3, head_dim=64)
    per_block = 2 * 30 * 16 * 3 * 64 * 4
    assert layout.block_bytes(16, torch.float32) == per_block
    assert blocks_for_budget(10 * per_block + 5, layout, 16, torch.float32) == 10
    assert blocks_for_budget(10 * per_block, layout, 16, torch.bfloat16) == 20
    with pytest.raises(ValueError):
        blocks_for_budget(per_block - 1, layout, 16, torch.float32)
    assert ModelRunner.blocks_for_budget(tiny_llama(), 2 * 2 * 4 * 2 * 16 * 4 * 7, 4) == 7


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (6, 2)])
def test_paged_decode_attention_equals_dense_attention(heads, kv_heads):
    g = torch.Generator().manual_seed(0)
    dim, block_size, num_blocks = 8, 4, 32
    k_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=g)
    v_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=g)
    lengths = [1, 4, 5, 13]
    shuffled = torch.randperm(num_blocks, generator=g).tolist()
    tables = []
    for n in lengths:  # non-contiguous blocks, one table with a spare block at the end
        need = -(-n // block_size) + (n == 5)
        tables.append([shuffled.pop() for _ in range(need)])
    q = torch.randn(len(lengths), heads, dim, generator=g)

    out = paged_decode_attention(q, k_cache, v_cache,
                                 PagedContext.build(tables, lengths, block_size, "cpu"), 0.3)

    for i, (n, table) in enumerate(zip(lengths, tables)):
        k = k_cache[table].reshape(-1, kv_heads, dim)[:n].repeat_interleave(heads // kv_heads, 1)
        v = v_cache[table].reshape(-1, kv_heads, dim)[:n].repeat_interleave(heads // kv_heads, 1)
        weights = (torch.einsum("hd,thd->ht", q[i], k) * 0.3).softmax(-1)
        torch.testing.assert_close(out[i], torch.einsum("ht,thd->hd", weights, v))


def test_rope_scaling_that_changes_with_length_is_refused():
    model = tiny_llama(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4})
    with pytest.raises(NotImplementedError, match="'dynamic' is not supported"):
        ModelRunner(model, num_blocks=4, block_size=4)


def test_rope_theta_is_respected():
    inv_freq, scaling = rope_frequencies(tiny_llama(
        rope_parameters={"rope_type": "default", "rope_theta": 500.0}).config)
    assert scaling == 1.0 and inv_freq[1].item() == pytest.approx(500.0 ** (-2 / 16))


def test_unknown_family_is_refused():
    config = GPT2Config()
    config.model_type = "bert"
    with pytest.raises(NotImplementedError, match="'bert' is not supported"):
        kv_layout(config)


def test_runner_exposes_the_models_eos_ids():
    model = tiny_gpt2()
    model.generation_config.eos_token_id = [3, 5]
    assert ModelRunner(model, num_blocks=4, block_size=4).eos_token_ids == frozenset({3, 5})
