"""Causal attention of each prompt of a packed prefill batch over itself, with
`prefill_attention_for` choosing how: one SDPA call per prompt (a CPU without the
compiled kernel, which otherwise reads prompts through the block tables as it reads
decodes: a call costs little there and padding would cost compute), or on CUDA a
few calls over prompts padded into `[prompts, longest]` grids (hundreds of
per-prompt calls a layer would cost more in launches and Python than the attention
itself).

Shapes: q `[tokens, heads, head_dim]`, k and v `[tokens, kv_heads, head_dim]`,
the prompts laid end to end; grouped-query attention when kv_heads < heads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class PromptSpans:
    """Where each prompt sits in a packed prefill batch."""

    starts: list[int]
    lengths: list[int]


class PrefillAttention(Protocol):
    """`layout` turns the step's prompt spans into the form the attention reads."""

    def layout(self, spans: PromptSpans): ...

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout,
                 scale: float) -> torch.Tensor: ...


class PerPromptPrefill:
    def layout(self, spans: PromptSpans) -> PromptSpans:
        return spans

    def __call__(self, q, k, v, spans: PromptSpans, scale: float) -> torch.Tensor:
        return prefill_attention(q, k, v, spans, scale)


GRID_BUDGET = 1 << 25
"""Mask elements (prompts x longest^2) one padded grid may hold: 32 MiB of mask,
and bounded scores should SDPA fall back to its reference kernel."""


@dataclass(frozen=True)
class PaddedGrid:
    """Prompts of similar length padded into one `[prompts, longest]` grid: the
    packed row of each cell (0 for padding), which cells hold a token, and the
    mask of keys each query sees (causal, within its prompt); no mask for a grid of
    one prompt, which is plainly causal."""

    rows: torch.Tensor
    valid: torch.Tensor
    mask: torch.Tensor | None


@dataclass(frozen=True)
class PaddedPrefill:
    device: torch.device

    def layout(self, spans: PromptSpans) -> list[PaddedGrid]:
        """Prompts sorted by length and cut into grids that keep within `GRID_BUDGET`,
        so that prompts of like length share a grid and little is padding."""
        order = sorted(range(len(spans.lengths)), key=spans.lengths.__getitem__)
        grids, group = [], []
        for i in order:
            longest = spans.lengths[i]  # the longest so far: `order` is ascending
            if group and (len(group) + 1) * longest ** 2 > GRID_BUDGET:
                grids.append(self._grid(spans, group))
                group = []
            group.append(i)
        if group:
            grids.append(self._grid(spans, group))
        return grids

    def _grid(self, spans: PromptSpans, prompts: list[int]) -> PaddedGrid:
        longest = max(spans.lengths[i] for i in prompts)
        offsets = torch.arange(longest, device=self.device)
        starts = torch.tensor([spans.starts[i] for i in prompts], device=self.device)
        lengths = torch.tensor([spans.lengths[i] for i in prompts], device=self.device)
        valid = offsets[None, :] < lengths[:, None]
        rows = torch.where(valid, starts[:, None] + offsets[None, :], 0)
        mask = None
        if len(prompts) > 1:
            causal = offsets[None, :] <= offsets[:, None]
            mask = (causal[None, :, :] & valid[:, None, :])[:, None]  # [prompts, 1, query, key]
        return PaddedGrid(rows, valid, mask)

    def __call__(self, q, k, v, grids: list[PaddedGrid], scale: float) -> torch.Tensor:
        out = torch.empty_like(q)
        group = q.shape[1] // k.shape[1]
        for grid in grids:
            # [prompts, heads, longest, head_dim]; K and V heads repeated for GQA, which
            # keeps SDPA's fused kernels open to a masked call
            qg = q[grid.rows].transpose(1, 2)
            kg = k[grid.rows].repeat_interleave(group, dim=2).transpose(1, 2)
            vg = v[grid.rows].repeat_interleave(group, dim=2).transpose(1, 2)
            attended = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=grid.mask,
                                                      is_causal=grid.mask is None, scale=scale)
            out[grid.rows[grid.valid]] = attended.transpose(1, 2)[grid.valid]
        return out


def prefill_attention_for(device: torch.device) -> PrefillAttention:
    return PaddedPrefill(device) if device.type == "cuda" else PerPromptPrefill()


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      spans: PromptSpans, scale: float) -> torch.Tensor:
    """Causal attention of each prompt over itself, one SDPA call each."""
    out = torch.empty_like(q)
    for start, length in zip(spans.starts, spans.lengths):
        rows = slice(start, start + length)
        out[rows] = _sdpa(q[rows], k[rows], v[rows], scale)
    return out


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
          mask: torch.Tensor | None = None) -> torch.Tensor:
    """`[tokens, heads, dim]` in and out (SDPA wants heads before tokens): causal,
    or the keys `mask` (`[queries, keys]`) lets each query see."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
        v.transpose(0, 1).unsqueeze(0), attn_mask=mask, is_causal=mask is None, scale=scale,
        enable_gqa=k.shape[1] != q.shape[1])
    return out[0].transpose(0, 1)


@dataclass(frozen=True)
class CachedChunk:
    """A chunk of a prompt whose earlier tokens are already in the paged cache:
    its rows in the packed batch, the cache slots of every token up to its end
    (its own included, written before attention reads them), and which of those
    each of its queries sees."""

    rows: slice
    slots: torch.Tensor
    mask: torch.Tensor

    @classmethod
    def build(cls, row: int, start: int, length: int, slots: list[int],
              device: torch.device) -> CachedChunk:
        end = start + length
        positions = torch.arange(end, device=device)
        mask = positions[None, :] <= positions[start:, None]  # [queries, keys], causal
        return cls(slice(row, row + length), torch.tensor(slots, dtype=torch.long, device=device),
                   mask)


def cached_chunk_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           chunk: CachedChunk, scale: float) -> torch.Tensor:
    """The chunk's queries (`[length, heads, head_dim]`) over the prompt so far, read
    from the cache (`[num_blocks, block_size, kv_heads, head_dim]`) slot by slot."""
    return _sdpa(q, k_cache.flatten(0, 1).index_select(0, chunk.slots),
                 v_cache.flatten(0, 1).index_select(0, chunk.slots), scale, chunk.mask)
