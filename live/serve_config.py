"""What `python -m live serve` can be told: one dataclass, the command line's
defaults, read by the server, the hub and the engine builder."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from scheduler import SchedulerConfig, make_policy
from scheduler.backlog import BacklogPolicy

from .engine.step_log import DEFAULT_RING


@dataclass(frozen=True)
class ServeSettings:
    model: str | None = None
    """A Hugging Face directory or a .gguf file; None serves the embedded SmolLM2."""
    device: str = "cpu"
    dtype: str = "float32"
    host: str = "127.0.0.1"
    port: int = 8000
    http2: bool = False
    """Also speak cleartext HTTP/2 (h2c with prior knowledge) on the same port;
    HTTP/1.1 clients are still served there."""

    # the engine
    threads: int | None = None
    """Threads torch may use for one step; None is torch's default (every core).
    Fewer leave a core to the HTTP side, which makes step times steadier."""
    max_batch: int = 32
    num_blocks: int | None = None
    """KV blocks in the pool; None sizes the pool from `kv_cache_mb`."""
    kv_cache_mb: int = 512
    block_size: int = 16
    max_waiting: int = 256
    max_prefill_tokens: int | None = None
    """Prompt tokens prefilled in one step (without chunked prefill a step admits
    at least one prompt whatever its length); None: as many as slots and blocks allow."""
    chunked_prefill: bool = False
    """Cut prompts into chunks that fill `max_prefill_tokens`, prefilled a step at a
    time beside the decodes."""
    admission: str = "reserve"
    """`reserve` each request's whole length at admission, or `optimistic`: hold
    blocks as tokens are written and preempt the newest sequence when none is free."""
    step_log: str | None = None
    """Also write every step to this file, as JSON lines."""
    step_ring: int = DEFAULT_RING
    """The last steps kept in memory for `GET /v1/steps`."""
    gpu_memory_fraction: float = 0.9
    """On CUDA without `num_blocks`: the share of the GPU's memory that the weights
    and the KV cache may take (`kv_cache_mb` sizes the cache on the CPU)."""
    eager: bool = False
    """On CUDA: decode eagerly rather than replaying captured CUDA graphs."""

    # streams
    policy: str = "pause_then_drop"
    max_queued: int = 64
    """Events a reader may fall behind before `pause` leaves its stream out of the batch."""
    stall_timeout_s: float = 30.0
    """How long a reader may take nothing while events wait before `drop` ends its stream."""
    resume_grace_s: float = 0.0
    """How long a stream whose last reader left stays paused for a resuming GET;
    0 cancels it at the next step."""
    keepalive_s: float = 15.0
    replay_events: int = 256
    """Events each stream keeps for `Last-Event-ID` resumption beyond those its
    readers have not yet taken."""
    ended_streams: int = 1024
    """Finished streams kept (with their replay buffer) for late GETs."""
    event_padding: int = 0
    """Test and benchmark only: a comment of this many bytes after every event, so
    that a slow reader's socket buffers fill after a few events."""

    # requests
    max_body_bytes: int = 1 << 20
    default_max_tokens: int = 256
    """max_tokens of an OpenAI request that gives none (capped by the context)."""
    retry_after_s: int = 1
    shutdown_timeout_s: float = 10.0
    """How long shutdown waits for open streams to be written and the engine to let go."""

    def __post_init__(self):
        self.backlog_policy()  # an unknown policy or a bad threshold fails here, not per stream
        for name in ("max_batch", "block_size", "max_waiting", "replay_events", "ended_streams",
                     "max_body_bytes", "default_max_tokens", "kv_cache_mb", "step_ring"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.num_blocks is not None and self.num_blocks < 1:
            raise ValueError("num_blocks must be at least 1")
        if not 0 < self.gpu_memory_fraction <= 1:
            raise ValueError("gpu_memory_fraction must be in (0, 1]")
        if self.keepalive_s <= 0 or self.stall_timeout_s <= 0:
            raise ValueError("keepalive_s and stall_timeout_s must be positive")
        if self.resume_grace_s < 0 or self.event_padding < 0:
            raise ValueError("resume_grace_s and event_padding must not be negative")
        self.scheduler_config(num_blocks=1)  # the core's own checks, before a model loads

    def scheduler_config(self, num_blocks: int, max_model_len: int | None = None) -> SchedulerConfig:
        """The core's settings, for a pool of `num_blocks` and a model of that context."""
        return SchedulerConfig(num_blocks=num_blocks, block_size=self.block_size,
                               max_batch=self.max_batch, max_waiting=self.max_waiting,
                               max_model_len=max_model_len,
                               max_prefill_tokens=self.max_prefill_tokens,
                               chunked_prefill=self.chunked_prefill, admission=self.admission)

    def backlog_policy(self) -> BacklogPolicy:
        return make_policy(self.policy, max_queued=self.max_queued,
                           stall_timeout_s=self.stall_timeout_s)

    def as_dict(self) -> dict:
        return asdict(self)
