"""The serve settings: one dataclass from which `python -m live serve`, `python -m
sim replay|sweep` and `python -m analysis` generate their flags (`scheduler.flags`),
which a live server reports at `/v1/engine`, and whose scheduling fields are the
core's own `SchedulerConfig`, with its defaults."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields

from .admission import ADMISSION_POLICIES
from .backlog import BACKLOG_POLICIES, BacklogPolicy, make_policy
from .config import SchedulerConfig

SHARED = "shared"
"""A setting the simulator takes too: it decides admission, batching or streams."""
SERVER = "server"
"""A setting only a live server has: its model, its hardware, its HTTP side."""
ADDRESS = "address"
"""Where a server listens: whoever starts one on a free port chooses it."""

DISCONNECT_NOTICES = ("listen", "write")
"""How a stream may learn that its client left (`disconnect_notice`)."""

GPU_MEMORY_FRACTION = 0.9
"""The share of a GPU's memory the weights and the KV cache take unless told."""

_CORE_DEFAULTS = {f.name: f.default for f in fields(SchedulerConfig)}


def _setting(default, help: str, scope: str = SERVER, choices: list[str] | None = None,
             secret: bool = False):
    """A field of serve settings: its default, its help, the commands that take it
    (`scope`), the values it may take, and whether it is a `secret` (never shown)."""
    metadata = {"help": help, "scope": scope, "secret": secret}
    if choices is not None:
        metadata["choices"] = choices
    return field(default=default, metadata=metadata)


def _scheduling(name: str, help: str, choices: list[str] | None = None):
    """A setting of the core, with the core's default."""
    return _setting(_CORE_DEFAULTS[name], help, SHARED, choices)


@dataclass(frozen=True)
class ServeSettings:
    model: str | None = _setting(
        None, "a Hugging Face directory or a .gguf file; none: the embedded SmolLM2")
    device: str = _setting("cpu", "where the model runs", choices=["cpu", "cuda"])
    dtype: str = _setting("float32", "of the weights and the KV cache",
                         choices=["float32", "bfloat16", "float16"])
    host: str = _setting("127.0.0.1", "the address to listen on", ADDRESS)
    port: int = _setting(8000, "the port to listen on", ADDRESS)
    http2: bool = _setting(False, "also serve cleartext HTTP/2 (h2c, prior knowledge) on the "
                                 "port; HTTP/1.1 clients are still served there")

    # the engine
    threads: int | None = _setting(
        None, "torch threads for the steps; none: every core but one (at least one), "
              "leaving a core to HTTP and the clients, which keeps step times steady")
    engine_process: bool = _setting(
        False, "step the engine (model, core, detokenizer) in a process of its own, so that "
               "HTTP and streaming never wait on a step for the interpreter; if that "
               "process ends, its streams end with an error and another engine starts "
               "behind the same socket")
    max_batch: int = _scheduling("max_batch", "sequences decoded together")
    num_blocks: int | None = _setting(
        None, "KV blocks in the pool; none: a server sizes it from --kv-cache-mb on the "
              "CPU or --gpu-memory-fraction on CUDA, the simulator (no memory to size it "
              "from) takes the pool of the server its profile was measured on", SHARED)
    kv_cache_mb: int = _setting(512, "the KV cache's size on the CPU without --num-blocks")
    block_size: int = _scheduling("block_size", "tokens per KV block")
    max_waiting: int = _scheduling("max_waiting", "waiting requests before new ones are refused")
    max_prefill_tokens: int | None = _scheduling(
        "max_prefill_tokens", "prompt tokens prefilled in one step (without chunked prefill "
                              "a step admits at least one prompt whatever its length); none: "
                              "as many as slots and blocks allow")
    chunked_prefill: bool = _scheduling(
        "chunked_prefill", "cut prompts into chunks of --max-prefill-tokens, prefilled a step "
                           "at a time beside the decodes")
    prefill_pass_tokens: int | None = _scheduling(
        "prefill_pass_tokens", "run a step's prefills as passes of whole prompts of at most "
                               "this many prompt tokens (a longer prompt alone), the decodes "
                               "in the last pass, each pass's first tokens sent as it ends: "
                               "earlier first tokens for the first prompts of a burst, at "
                               "the cost of reading the weights once more per pass; none or "
                               "0: one pass")
    admission: str = _scheduling(
        "admission", "reserve each request's whole length at admission, or (optimistic) hold "
                     "blocks as tokens are written and preempt the newest sequence when none "
                     "is free", choices=sorted(ADMISSION_POLICIES))
    max_overtakes: int = _scheduling(
        "max_overtakes", "how many later requests that fit may be admitted ahead of a waiting "
                         "request whose blocks do not fit yet, before nothing overtakes it; "
                         "0: strict arrival order")
    max_streams_per_key: int | None = _scheduling(
        "max_streams_per_key", "streams one API key may hold at once, waiting or running "
                               "(more are answered 429); none: no limit")
    max_waiting_per_key: int | None = _scheduling(
        "max_waiting_per_key", "requests of one API key waiting for admission at once (more "
                               "are answered 429); none: no limit")
    step_log: str | None = _setting(None, "also write every step to this file, as JSON lines")
    step_ring: int = _setting(200_000, "the last steps kept in memory for GET /v1/steps "
                                      "(about 80 MB at this default)")
    gpu_memory_fraction: float | None = _setting(
        None, "on CUDA without --num-blocks: the share of the GPU's memory the weights and "
              f"the KV cache may take; none: {GPU_MEMORY_FRACTION}")
    eager: bool = _setting(False, "on CUDA: decode eagerly rather than replaying captured "
                                 "CUDA graphs")

    # streams
    policy: str = _setting("pause_then_drop", "what to do with a stream whose reader falls "
                                             "behind", SHARED, sorted(BACKLOG_POLICIES))
    max_queued: int = _setting(64, "events a reader may fall behind before pause leaves its "
                                  "stream out of the batch", SHARED)
    stall_timeout_s: float = _setting(30.0, "how long a reader may take nothing while events "
                                           "wait before drop ends its stream, and before "
                                           "a reader of an ended stream is cut", SHARED)
    resume_grace_s: float = _setting(0.0, "how long a stream whose last reader left stays "
                                         "paused for a resuming GET; 0 cancels it at the next "
                                         "step", SHARED)
    disconnect_notice: str = _setting(
        "listen", "how a stream learns that its client left: listen (at once, from the "
                  "connection) or write (only when a write to the client finds its "
                  "connection gone, as a response that never reads its request's channel "
                  "does: kept to measure what listening saves)", SHARED, list(DISCONNECT_NOTICES))
    keepalive_s: float = _setting(15.0, "a comment on a stream idle this long")
    sse_retry_ms: int = _setting(1000, "the retry: field an own-format stream opens with: how "
                                      "long a browser's EventSource waits before it reconnects "
                                      "with Last-Event-ID (--resume-grace-s longer than this "
                                      "keeps its stream for it); 0: none sent")
    replay_events: int = _setting(256, "events each stream keeps for Last-Event-ID resumption "
                                      "beyond those its readers have not yet taken")
    ended_streams: int = _setting(1024, "finished streams kept (with their replay buffer) for "
                                       "late GETs")
    max_readers_per_stream: int = _setting(
        4, "GETs that may follow one stream at once besides its owner (the POST that opened "
           "it, or the GET that resumed it after the owner left); more are answered 429")
    event_padding: int = _setting(0, "benchmarks and tests only: a comment of this many bytes "
                                    "after every event, so that a slow reader's socket "
                                    "buffers fill after a few events", SHARED)

    # what a request is judged by
    slo_ttft_s: float | None = _setting(
        None, "SLO: a request's first token read within this many seconds of its arrival; "
              "summaries and /metrics give the share of requests that meet the SLO and the "
              "goodput (tokens/s of those that do); none: no TTFT target", SHARED)
    slo_tpot_s: float | None = _setting(
        None, "SLO: a request's tokens after the first read at this many seconds each on "
              "average (time per output token); none: no TPOT target", SHARED)

    # requests
    max_body_bytes: int = _setting(1 << 20, "the largest request body")
    default_max_tokens: int = _setting(256, "max_tokens of an OpenAI request that gives none "
                                           "(capped by the context)")
    max_stop_strings: int = _setting(16, "stop strings one request may give (each is matched "
                                        "against every token's text)")
    max_stop_chars: int = _setting(256, "the longest stop string, in characters")
    body_timeout_s: float = _setting(30.0, "how long a request's body may take to arrive "
                                          "before a 408")
    header_timeout_s: float = _setting(10.0, "how long a request's headers may take to arrive "
                                            "before the connection is closed")
    api_key: tuple[str, ...] = _setting(
        (), "a key clients must send (Authorization: Bearer, or x-api-key), as KEY or "
            "NAME:KEY; repeat for more keys; the name labels the key's streams, limits and "
            "metrics (unnamed keys are key-1, key-2, ... in order)", secret=True)
    api_keys_file: str | None = _setting(
        None, "a file of keys, one KEY or NAME:KEY a line ('#' starts a comment)")
    admin_key: str | None = _setting(
        None, "the key /stats, /metrics, /v1/engine, /v1/steps and /v1/requests need; with "
              "client keys and no admin key those are closed", secret=True)
    max_connections: int = _setting(1024, "open connections before more are answered 503")
    retry_after_s: int = _setting(1, "the Retry-After of a refusal for a full waiting queue")
    shutdown_timeout_s: float = _setting(10.0, "how long shutdown waits for open streams to be "
                                              "written and the engine to let go")

    def __post_init__(self):
        # a list (from flags, from JSON) is kept as the tuple a frozen field holds
        object.__setattr__(self, "api_key", tuple(self.api_key))
        at_least_one = ["max_batch", "block_size", "max_waiting", "replay_events",
                        "ended_streams", "max_body_bytes", "default_max_tokens", "kv_cache_mb",
                        "max_stop_strings", "max_stop_chars", "max_connections",
                        "step_ring"]
        at_least_one += [name for name in ("num_blocks", "threads")
                         if getattr(self, name) is not None]
        for name in at_least_one:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.keepalive_s <= 0 or self.stall_timeout_s <= 0:
            raise ValueError("keepalive_s and stall_timeout_s must be positive")
        if self.body_timeout_s <= 0 or self.header_timeout_s <= 0:
            raise ValueError("body_timeout_s and header_timeout_s must be positive")
        if self.resume_grace_s < 0 or self.event_padding < 0:
            raise ValueError("resume_grace_s and event_padding must not be negative")
        check_disconnect_notice(self.disconnect_notice)
        if self.max_readers_per_stream < 0 or self.sse_retry_ms < 0:
            raise ValueError("max_readers_per_stream and sse_retry_ms must not be negative")
        for name in ("slo_ttft_s", "slo_tpot_s"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if self.gpu_memory_fraction is not None:
            self._check_gpu_memory_fraction()
        self.backlog_policy()  # an unknown policy or a bad threshold fails here, not per stream
        self.scheduler_config(num_blocks=1)  # the core's own checks, before a model loads

    def _check_gpu_memory_fraction(self) -> None:
        if not 0 < self.gpu_memory_fraction <= 1:
            raise ValueError("gpu_memory_fraction must be in (0, 1]")
        if not self.device.startswith("cuda"):
            raise ValueError("gpu_memory_fraction sizes the KV pool of a CUDA device; "
                             f"the device is {self.device}")
        if self.num_blocks is not None:
            raise ValueError("give the KV pool as num_blocks or gpu_memory_fraction, not both")

    def scheduler_config(self, num_blocks: int, max_model_len: int | None = None) -> SchedulerConfig:
        """The core's settings, for a pool of `num_blocks` and a model of that context."""
        return SchedulerConfig(num_blocks=num_blocks, block_size=self.block_size,
                               max_batch=self.max_batch, max_waiting=self.max_waiting,
                               max_model_len=max_model_len,
                               max_prefill_tokens=self.max_prefill_tokens,
                               chunked_prefill=self.chunked_prefill,
                               prefill_pass_tokens=self.prefill_pass_tokens,
                               admission=self.admission,
                               max_overtakes=self.max_overtakes,
                               max_streams_per_key=self.max_streams_per_key,
                               max_waiting_per_key=self.max_waiting_per_key)

    def backlog_policy(self) -> BacklogPolicy:
        return make_policy(self.policy, max_queued=self.max_queued,
                           stall_timeout_s=self.stall_timeout_s)

    def torch_threads(self) -> int:
        """`threads`, or every core but one (at least one): the HTTP side and the
        clients need a core, else they steal time from steps at random and the step
        costs a calibration measures do not hold."""
        return self.threads or max(1, (os.cpu_count() or 2) - 1)

    def gpu_pool_fraction(self) -> float:
        """The share of the GPU's memory that sizes the pool on CUDA without `num_blocks`."""
        return self.gpu_memory_fraction or GPU_MEMORY_FRACTION

    def as_dict(self) -> dict:
        """Every setting, a secret one as how many values it has, never its value."""
        shown = asdict(self)
        for f in fields(self):
            if f.metadata["secret"] and shown[f.name]:
                value = shown[f.name]
                shown[f.name] = f"<{len(value)} hidden>" if isinstance(value, tuple) else "<hidden>"
        return shown


def check_disconnect_notice(notice: str) -> None:
    if notice not in DISCONNECT_NOTICES:
        raise ValueError(f"disconnect_notice must be one of {', '.join(DISCONNECT_NOTICES)}")


def scoped(*scopes: str) -> list[str]:
    """The names of the settings of those scopes (`SHARED`, `SERVER`, `ADDRESS`)."""
    return [f.name for f in fields(ServeSettings) if f.metadata["scope"] in scopes]
