"""How many KV blocks to give a GPU: the share of its memory the user allows
(`--gpu-memory-fraction`), less what is already in use and a headroom for what the
engine allocates after the cache."""
from __future__ import annotations

import torch

from .kv_cache import KVLayout

DEFAULT_HEADROOM_BYTES = 2 << 30
"""Activations of a large prefill, the runner's copies of the weights, captured
graphs, the sampler: a couple of GiB covers models of the size served here."""


def kv_blocks_for_memory(free_bytes: int, total_bytes: int, fraction: float, block_bytes: int,
                         headroom_bytes: int = DEFAULT_HEADROOM_BYTES) -> int:
    """Blocks of `block_bytes` that fit in `fraction` of `total_bytes`, counting
    what is in use already (`total_bytes - free_bytes`: the weights, other
    processes) and `headroom_bytes` against it."""
    if not 0 < fraction <= 1:
        raise ValueError(f"the GPU memory fraction must be in (0, 1], not {fraction}")
    if not 0 <= free_bytes <= total_bytes or block_bytes < 1 or headroom_bytes < 0:
        raise ValueError(f"free {free_bytes}, total {total_bytes}, block {block_bytes} and "
                         f"headroom {headroom_bytes} bytes do not describe a device")
    in_use = total_bytes - free_bytes
    budget = round(fraction * total_bytes) - in_use - headroom_bytes
    blocks = budget // block_bytes
    if blocks < 1:
        raise ValueError(
            f"{fraction:.0%} of {total_bytes / 2**30:.1f} GiB, with {in_use / 2**30:.1f} GiB in use "
            f"and {headroom_bytes / 2**30:.1f} GiB of headroom, holds no KV block of {block_bytes} "
            f"bytes; raise the fraction or free memory")
    return blocks


def gpu_kv_blocks(fraction: float, layout: KVLayout, block_size: int, dtype: torch.dtype,
                  device: torch.device | str = "cuda",
                  headroom_bytes: int = DEFAULT_HEADROOM_BYTES) -> int:
    """`kv_blocks_for_memory` for a CUDA device as it is now: call it with the model
    loaded, before the runner allocates its cache."""
    free, total = torch.cuda.mem_get_info(device)
    return kv_blocks_for_memory(free, total, fraction, layout.block_bytes(block_size, dtype),
                                headroom_bytes)
