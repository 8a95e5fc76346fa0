"""Sizing the KV cache from a GPU's memory and the fraction the user allows, with
made-up device figures."""
import pytest
import torch

from live.runner.gpu_memory import gpu_kv_blocks, kv_blocks_for_memory
from live.runner.kv_cache import KVLayout

GIB = 1 << 30


def test_the_fraction_of_total_less_what_is_in_use_and_the_headroom():
    # 90% of 80 GiB is 72; 6 GiB in use and 2 of headroom leave 64 GiB.
    assert kv_blocks_for_memory(74 * GIB, 80 * GIB, 0.9, GIB // 4, 2 * GIB) == 256
    # another process holding 30 GiB more leaves 72 - 36 - 2 = 34 GiB
    assert kv_blocks_for_memory(44 * GIB, 80 * GIB, 0.9, GIB // 4, 2 * GIB) == 136


def test_partial_blocks_do_not_count():
    assert kv_blocks_for_memory(10 * GIB, 10 * GIB, 1.0, 3 * GIB, 0) == 3


def test_a_real_layout_on_an_h200_sized_device():
    """SmolLM2-135M's cache in bf16: 30 layers, 3 KV heads of 64, blocks of 16 tokens."""
    block = KVLayout(30, 3, 64).block_bytes(16, torch.bfloat16)
    assert block == 2 * 30 * 16 * 3 * 64 * 2
    free, total = 139 * GIB, 140 * GIB
    assert kv_blocks_for_memory(free, total, 0.9, block) == (round(0.9 * total) - GIB - 2 * GIB) // block


@pytest.mark.parametrize("fraction", [0, -0.1, 1.5])
def test_a_fraction_outside_zero_to_one_is_refused(fraction):
    with pytest.raises(ValueError, match="fraction must be in"):
        kv_blocks_for_memory(GIB, GIB, fraction, 1024)


def test_too_little_memory_says_why():
    with pytest.raises(ValueError, match=r"holds no KV block.*raise the fraction"):
        kv_blocks_for_memory(3 * GIB, 80 * GIB, 0.5, GIB // 4)


def test_figures_that_describe_no_device_are_refused():
    with pytest.raises(ValueError, match="do not describe a device"):
        kv_blocks_for_memory(2 * GIB, GIB, 0.9, 1024)
    with pytest.raises(ValueError, match="do not describe a device"):
        kv_blocks_for_memory(GIB, GIB, 0.9, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_device_as_it_is_now():
    layout = KVLayout(30, 3, 64)
    free, total = torch.cuda.mem_get_info()
    blocks = gpu_kv_blocks(0.9, layout, 16, torch.bfloat16, headroom_bytes=GIB)
    assert blocks == (round(0.9 * total) - (total - free) - GIB) // layout.block_bytes(16, torch.bfloat16)
