"""The paged KV cache: per layer, K and V in fixed-size blocks that sequences hold
through their block tables (the core's `BlockPool` hands the block ids out)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

import torch

log = logging.getLogger("twinstep.runner")


@dataclass(frozen=True)
class KVLayout:
    """What one token costs in the cache, per layer."""

    num_layers: int
    kv_heads: int
    head_dim: int

    def block_bytes(self, block_size: int, dtype: torch.dtype) -> int:
        """Bytes of one block across all layers, K and V."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * self.num_layers * block_size * self.kv_heads * self.head_dim * itemsize


def blocks_for_budget(budget_bytes: int, layout: KVLayout, block_size: int,
                      dtype: torch.dtype) -> int:
    """The number of blocks a memory budget holds."""
    blocks = budget_bytes // layout.block_bytes(block_size, dtype)
    if blocks < 1:
        raise ValueError(f"{budget_bytes} bytes hold no KV block of "
                         f"{layout.block_bytes(block_size, dtype)} bytes")
    return blocks


def slot_mapping(block_table: list[int], start: int, end: int, block_size: int) -> list[int]:
    """Cache slots of token positions [start, end): the slot of a position is its
    block's id times the block size plus its offset in the block."""
    if end > len(block_table) * block_size:
        raise IndexError(f"positions up to {end} need {-(-end // block_size)} blocks; "
                         f"the block table holds {len(block_table)}")
    return [block_table[pos // block_size] * block_size + pos % block_size
            for pos in range(start, end)]


@dataclass(frozen=True)
class BlockTables:
    """The decoding sequences' block tables as one `[sequences, width]` int32 grid
    (rows padded with block 0, never read past a context's end) and their context
    lengths in tokens: how the decode kernels read the cache. A sequence may
    own several rows (a prompt's tokens, each reading the prompt up to itself)."""

    tables: torch.Tensor
    lens: torch.Tensor

    @classmethod
    def build(cls, block_tables: list[list[int]], context_lens: list[int],
              device: torch.device | str, rows: list[int] | None = None) -> BlockTables:
        """`rows[i]`: how many rows sequence i's table serves (1 each by default);
        `context_lens` has one length per row."""
        width = max(len(t) for t in block_tables)
        tables = torch.tensor([list(t) + [0] * (width - len(t)) for t in block_tables],
                              dtype=torch.int32, device=device)
        if rows is not None:
            tables = tables.repeat_interleave(torch.tensor(rows, device=device), dim=0)
        return cls(tables, torch.tensor(context_lens, dtype=torch.int32, device=device))


class KVWrite(Protocol):
    def __call__(self, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                 k: torch.Tensor, v: torch.Tensor) -> None:
        """Rows of `k` and `v` into the caches' rows `slots` (caches `[slots, kv_heads,
        head_dim]`, rows `[tokens, kv_heads, head_dim]`)."""


def index_write(k_cache, v_cache, slots, k, v) -> None:
    k_cache.index_copy_(0, slots, k)
    v_cache.index_copy_(0, slots, v)


def kv_write_for(device: torch.device) -> KVWrite:
    """The compiled copy on the CPU when it builds; else torch's `index_copy_`."""
    if device.type == "cpu":
        from .cpu.build import NativeBuildError
        from .cpu.kv_write import CpuKVWrite
        try:
            return CpuKVWrite()
        except NativeBuildError as exc:
            log.warning("the CPU cache-write kernel is not available, K and V are stored "
                        "with torch's index_copy_: %s", exc)
    return index_write


class PagedKVCache:
    def __init__(self, layout: KVLayout, num_blocks: int, block_size: int,
                 device: torch.device | str, dtype: torch.dtype):
        self.layout = layout
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (2, layout.num_layers, num_blocks, block_size, layout.kv_heads, layout.head_dim)
        storage = torch.zeros(shape, device=device, dtype=dtype)  # one allocation for all
        self.keys: list[torch.Tensor] = list(storage[0].unbind(0))
        self.values: list[torch.Tensor] = list(storage[1].unbind(0))
        self._write = kv_write_for(torch.device(device))

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store K and V (`[tokens, kv_heads, head_dim]`) of one layer at `slots`."""
        heads, dim = self.layout.kv_heads, self.layout.head_dim
        self._write(self.keys[layer].view(-1, heads, dim), self.values[layer].view(-1, heads, dim),
                    slots, k, v)
