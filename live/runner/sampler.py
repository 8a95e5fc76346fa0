"""Picking each sequence's next token from its logits: greedy, or sampled with
temperature, top-k and top-p.

A seeded request draws from its own generator, created from its seed at its first
sampled token and kept until `forget`: its tokens depend on nothing but its own
logits and seed, so they are the same alone and in any batch. Unseeded requests
share one generator seeded once.

Greedy picks the first of the largest logits, as argmax: on the CPU with the
compiled kernel of `cpu.sampling` where it builds, else with torch's max over the
row (argmax itself costs four times as much on bf16 logits)."""
from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from scheduler import Sequence

from .params import SamplingParams

log = logging.getLogger("twinstep.runner")


class Sampler:
    def __init__(self, seed: int = 0, device: torch.device | str = "cpu"):
        self._shared = torch.Generator().manual_seed(seed)
        self._seeded: dict[str, torch.Generator] = {}
        self._greedy = greedy_for(torch.device(device))

    def sample(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        """One token per row of `logits` (`[len(seqs), vocab]`)."""
        tokens = self._greedy(logits)
        rows = [i for i, seq in enumerate(seqs) if not _params(seq).greedy]
        if rows:
            params = [_params(seqs[i]) for i in rows]
            # One uniform per row, drawn on the CPU from the row's own generator, so
            # the draw does not depend on the device or on the other rows.
            uniforms = torch.cat([torch.rand(1, generator=self._generator(seqs[i])) for i in rows])
            tokens[rows] = _draw(logits[rows], params, uniforms.to(logits.device))
        return tokens.tolist()

    def forget(self, seq_id: str) -> None:
        self._seeded.pop(seq_id, None)

    @property
    def generators_held(self) -> int:
        """Seeded sequences whose generator is kept (none once all are forgotten)."""
        return len(self._seeded)

    def _generator(self, seq: Sequence) -> torch.Generator:
        seed = _params(seq).seed
        if seed is None:
            return self._shared
        generator = self._seeded.get(seq.id)
        if generator is None:
            generator = self._seeded[seq.id] = torch.Generator().manual_seed(seed)
        return generator


def greedy_for(device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    """Each row's first largest logit, the way `device` does it fastest."""
    if device.type == "cpu":
        from .cpu.sampling import CpuGreedy
        from .cpu.build import NativeBuildError
        try:
            return CpuGreedy()
        except NativeBuildError as exc:
            log.warning("the CPU greedy kernel is not available, greedy takes torch's max: %s",
                        exc)
    return lambda logits: logits.max(-1).indices


def _params(seq: Sequence) -> SamplingParams:
    return seq.request.payload.sampling


def _draw(logits: torch.Tensor, params: list[SamplingParams],
          uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: each row's token is where its uniform falls in the
    cumulative distribution left after temperature, top-k and top-p, over the
    tokens sorted by probability. Every row is sorted, whether or not it cuts, so
    that a uniform picks the same token whatever the other rows of the batch ask."""
    device, vocab = logits.device, logits.shape[-1]
    temperature = torch.tensor([p.temperature for p in params], device=device)
    probs = torch.softmax(logits.float() / temperature[:, None], -1)
    probs, order = probs.sort(dim=-1, descending=True, stable=True)
    top_k = torch.tensor([p.top_k or vocab for p in params], device=device)
    probs = probs * (torch.arange(vocab, device=device)[None, :] < top_k[:, None])
    probs = probs / probs.sum(-1, keepdim=True)
    # Keep the smallest prefix whose mass reaches top_p.
    top_p = torch.tensor([p.top_p if p.top_p < 1 else float("inf") for p in params],
                         device=device)
    probs = probs * ((probs.cumsum(-1) - probs) < top_p[:, None])
    cdf = probs.cumsum(-1)
    picks = torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None], right=True)
    picks = picks.clamp_(max=vocab - 1)
    return order.gather(1, picks).squeeze(1)
