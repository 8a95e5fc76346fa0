"""Decode steps replayed from CUDA graphs. A decode step launches a few hundred
small kernels; captured once per batch size, a step costs one launch.

One graph per size of a ladder of batch sizes, all reading fixed input buffers
(token ids, positions, cache slots, block tables padded to the widest table a
sequence may hold, context lengths). A batch runs on the smallest captured size
that holds it; the rows that pad it write their K/V to a spare cache slot no
sequence owns and attend to one token, and their logits are dropped."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from .kv_cache import BlockTables

DecodeForward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, BlockTables], torch.Tensor]
"""(token ids, positions, cache slots, block tables) -> logits `[rows, vocab]`."""

Capture = Callable[[Callable[[], torch.Tensor]], tuple[Callable[[], None], torch.Tensor]]
"""Records a step that reads fixed buffers; returns what replays it and the tensor
each replay writes its output to."""


class CudaGraphCapture:
    """Captures steps as CUDA graphs that share one memory pool: the graphs of a
    ladder never run at once, so they can take turns with the same memory."""

    def __init__(self):
        self.pool = None

    def __call__(self, step: Callable[[], torch.Tensor]) -> tuple[Callable[[], None], torch.Tensor]:
        _warm_up(step)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            output = step()
        self.pool = graph.pool()
        return graph.replay, output


def batch_ladder(max_batch: int) -> list[int]:
    """1, 2, 4, then every multiple of 8 below `max_batch`, and `max_batch`."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, not {max_batch}")
    return sorted({s for s in (1, 2, 4) if s < max_batch} | set(range(8, max_batch, 8)) | {max_batch})


class DecodeGraphs:
    def __init__(self, forward: DecodeForward, max_batch: int, max_blocks_per_seq: int,
                 pad_slot: int, device: torch.device):
        """Captures `forward` for every size of `batch_ladder(max_batch)`. Call it
        under `torch.inference_mode()`, before any decode has run."""
        self.sizes = batch_ladder(max_batch)
        self.max_blocks_per_seq = max_blocks_per_seq
        self.pad_slot = pad_slot
        self.ids = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.positions = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.slots = torch.full((max_batch,), pad_slot, dtype=torch.long, device=device)
        self.tables = torch.zeros(max_batch, max_blocks_per_seq, dtype=torch.int32, device=device)
        self.lens = torch.ones(max_batch, dtype=torch.int32, device=device)
        capture: Capture = CudaGraphCapture()
        self._replays: dict[int, Callable[[], None]] = {}
        self._logits: dict[int, torch.Tensor] = {}
        # Largest first: the smaller graphs then fit in the memory the largest took.
        for size in reversed(self.sizes):
            inputs = (self.ids[:size], self.positions[:size], self.slots[:size],
                      BlockTables(self.tables[:size], self.lens[:size]))
            self._replays[size], self._logits[size] = capture(partial(forward, *inputs))

    def fits(self, block_tables: list[list[int]]) -> bool:
        """Whether a decode batch with these block tables can replay a graph."""
        return (len(block_tables) <= self.sizes[-1]
                and max(map(len, block_tables)) <= self.max_blocks_per_seq)

    def run(self, ids: list[int], positions: list[int], slots: list[int],
            block_tables: list[list[int]], context_lens: list[int]) -> torch.Tensor:
        """Logits `[len(ids), vocab]` of one decode step, from the smallest graph
        that holds the batch."""
        n = len(ids)
        size = next(s for s in self.sizes if s >= n)
        rows = torch.tensor([ids, positions, slots, context_lens]).to(self.ids.device)
        self.ids[:n].copy_(rows[0])
        self.positions[:n].copy_(rows[1])
        self.slots[:n].copy_(rows[2])
        self.lens[:n].copy_(rows[3])
        # Columns past the widest table of this batch keep older ids: no context reaches them.
        width = max(map(len, block_tables))
        padded = [table + [0] * (width - len(table)) for table in block_tables]
        self.tables[:n, :width].copy_(torch.tensor(padded, dtype=torch.int32))
        # Padding rows: token 0 at position 0, written to the spare slot, attending to
        # the first slot of a block some table held (any id left there is one).
        self.ids[n:size].zero_()
        self.positions[n:size].zero_()
        self.slots[n:size].fill_(self.pad_slot)
        self.lens[n:size].fill_(1)
        self._replays[size]()
        # A copy: graphs share one memory pool, so the next replay may overwrite these.
        return self._logits[size][:n].clone()


def _warm_up(step: Callable[[], torch.Tensor]) -> None:
    """One eager pass on a side stream before capture, so that Triton compiles and
    cuBLAS sets up its workspace outside the graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream().wait_stream(stream)
