"""The core's settings: the block pool, the batch and waiting limits, the
context, the prefill budget of a step, the admission policy and how far a request
may be overtaken."""
from __future__ import annotations

from dataclasses import dataclass

from .admission import ADMISSION_POLICIES


@dataclass(frozen=True)
class SchedulerConfig:
    num_blocks: int
    block_size: int = 16
    max_batch: int = 16
    max_waiting: int = 256
    max_model_len: int | None = None
    max_prefill_tokens: int | None = None
    """Prompt tokens prefilled in one step. Without `chunked_prefill` the first
    admission of a step ignores it, so that a long prompt still runs whole."""
    chunked_prefill: bool = False
    """Cut prompts into chunks that fill `max_prefill_tokens`, so that a long prompt
    is prefilled over several steps beside the decodes instead of stalling them."""
    prefill_pass_tokens: int | None = None
    """Run a step's prefills as passes of whole prompts of at most this many prompt
    tokens each (a longer prompt alone), the decodes and the chunks that do not end
    their prompt in the last pass, so that the first tokens of each pass reach their
    streams as soon as it ends rather than with the whole step. None or 0: one pass."""
    admission: str = "reserve"
    """The admission policy, by name (`ADMISSION_POLICIES`)."""
    max_overtakes: int = 4
    """How many later requests that fit may be admitted ahead of a waiting request
    that does not; once it has been overtaken that often, nothing overtakes it and
    admission stops behind it until it fits. 0: strict arrival order, in which one
    request asking for a long output holds back every request behind it, however
    small, while it waits for room."""
    max_streams_per_key: int | None = None
    """Requests of one key submitted and not finished, at once; None: no limit."""
    max_waiting_per_key: int | None = None
    """Requests of one key not yet admitted, at once; None: no limit."""

    def __post_init__(self):
        if self.max_overtakes < 0:
            raise ValueError("max_overtakes must not be negative")
        for name in ("max_streams_per_key", "max_waiting_per_key"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_prefill_tokens is not None and self.max_prefill_tokens < 1:
            raise ValueError("max_prefill_tokens must be at least 1")
        if self.prefill_pass_tokens is not None and self.prefill_pass_tokens < 0:
            raise ValueError("prefill_pass_tokens must not be negative")
        if self.chunked_prefill and self.max_prefill_tokens is None:
            raise ValueError("chunked prefill needs max_prefill_tokens, the chunk budget of a step")
        if self.admission not in ADMISSION_POLICIES:
            raise ValueError(f"unknown admission policy {self.admission!r}; known: "
                             f"{', '.join(sorted(ADMISSION_POLICIES))}")
