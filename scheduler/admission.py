"""Admission policies: how many blocks to reserve for a request before it runs."""
from __future__ import annotations

from typing import Protocol

from .block_pool import blocks_for
from .request import Request


class AdmissionPolicy(Protocol):
    name: str

    def reservation(self, request: Request, block_size: int) -> int:
        """Blocks to hold for `request` from admission to finish."""


class ReserveWhole:
    """Reserve every block the request can ever need, so that a running sequence
    never waits for memory and is never preempted."""

    name = "reserve"

    def reservation(self, request: Request, block_size: int) -> int:
        return blocks_for(request.prompt_len + request.max_new_tokens, block_size)


ADMISSION_POLICIES = {ReserveWhole.name: ReserveWhole}
