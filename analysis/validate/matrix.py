"""The matrix a calibration is judged on: settings a what-if changes, each one
step away from the server's own, by traces of different shapes. Every trace is
clamped to the model's context and sized to run in about a minute against the
embedded model on two CPU cores."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from traces import SAMPLES_DIR, ClientMix, LeaveHow, TraceRequest, Uniform, generate, load_trace
from traces.synthetic.conversations import conversations

SHARED_TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
"""The public traces beside the project (not part of an installed package)."""

SETTINGS: dict[str, dict] = {
    "default": {},
    "batch-4": {"max_batch": 4},
    "batch-32": {"max_batch": 32},
    "chunked-64": {"max_prefill_tokens": 64, "chunked_prefill": True},
    "chunked-256": {"max_prefill_tokens": 256, "chunked_prefill": True},
    "reserve-small-pool": {"num_blocks": 96},
    "optimistic-small-pool": {"num_blocks": 96, "admission": "optimistic"},
    "drop": {"policy": "drop", "stall_timeout_s": 2.0},
}
"""Overrides of the server's settings, by name. The small pool (96 blocks of 16
tokens) holds a few long requests at once: reservation makes them wait,
optimistic admission preempts them."""


def _lengths_fit(trace: list[TraceRequest], max_model_len: int) -> list[TraceRequest]:
    """Each prompt cut so that it and its output fit the context."""
    return [r if r.prompt_tokens + r.max_new_tokens <= max_model_len else
            replace(r, prompt=None, prompt_tokens=max(1, max_model_len - r.max_new_tokens))
            for r in trace]


def mixed(max_model_len: int) -> list[TraceRequest]:
    """The shipped sample: bursty, below saturation, slow readers and leavers."""
    return load_trace(SAMPLES_DIR / "mixed.jsonl")


def azure_saturated(max_model_len: int) -> list[TraceRequest]:
    """The Azure 2023 conversation trace's first requests, faster than the server."""
    return load_trace(SAMPLES_DIR / "azure_conv_200.jsonl", limit=60,
                      max_prompt_tokens=min(384, max_model_len - 64), max_new_tokens=64)


def bursty_long(max_model_len: int) -> list[TraceRequest]:
    """On-off arrivals of prompts up to 500 tokens, with slow readers and leavers
    that go after tokens (FIN) or after seconds (RST)."""
    clients = [ClientMix(slow=0.13, slow_pause_s=0.15, leave=0.16, leave_after_tokens=10),
               ClientMix(leave=0.16, leave_after_s=2.0, leave_how=LeaveHow.RST)]
    halves = [generate(rate=2.0, count=24, cv=3.0, prompt_lengths=Uniform(8, 500),
                       output_lengths=Uniform(16, 64), clients=mix, seed=11 + i)
              for i, mix in enumerate(clients)]
    trace = sorted(halves[0] + [_later(r, 0.05, f"b{r.id}") for r in halves[1]],
                   key=lambda r: r.arrival_s)
    return _lengths_fit(trace, max_model_len)


def mooncake_long(max_model_len: int) -> list[TraceRequest]:
    """Mooncake's conversation trace: long prompts, clamped to the context."""
    return load_trace(SAMPLES_DIR / "mooncake_conversation_200.jsonl", limit=16,
                      time_scale=4.0, max_prompt_tokens=min(2048, max_model_len - 64),
                      max_new_tokens=64)


def azure_code(max_model_len: int) -> list[TraceRequest]:
    """The Azure 2023 code trace: long prompts, short answers."""
    path = SHARED_TRACES / "AzureLLMInferenceTrace_code.csv"
    if not path.exists():
        raise FileNotFoundError(f"{path} (the public traces beside the project)")
    return load_trace(path, limit=40, max_prompt_tokens=min(1024, max_model_len - 32),
                      max_new_tokens=32)


def closed_1(max_model_len: int) -> list[TraceRequest]:
    """One user in one conversation: each turn carries the turns before it, and goes
    a moment after the answer before it was read."""
    return _lengths_fit(conversations(users=1, turns=10, think_s=0.5, history=True,
                                      prompt_lengths=Uniform(16, 64),
                                      output_lengths=Uniform(24, 56), seed=21), max_model_len)


def closed_8(max_model_len: int) -> list[TraceRequest]:
    """Eight users holding conversations; a quarter of the turns are read slowly,
    which delays that user's next turn."""
    return _lengths_fit(conversations(users=8, turns=4, think_s=1.0, ramp_s=2.0, history=True,
                                      prompt_lengths=Uniform(16, 128),
                                      output_lengths=Uniform(16, 56),
                                      clients=ClientMix(slow=0.25, slow_pause_s=0.12), seed=22),
                        max_model_len)


def closed_16(max_model_len: int) -> list[TraceRequest]:
    """A load tool's "concurrency 16": each user sends its next request as soon as it
    is done with the last; a tenth of the requests are left after 8 tokens."""
    return _lengths_fit(conversations(users=16, turns=3, prompt_lengths=Uniform(32, 256),
                                      output_lengths=Uniform(16, 56),
                                      clients=ClientMix(leave=0.1, leave_after_tokens=8),
                                      seed=23), max_model_len)


def _later(r: TraceRequest, by_s: float, new_id: str) -> TraceRequest:
    return replace(r, id=new_id, arrival_s=r.arrival_s + by_s)


TRACES: dict[str, Callable[[int], list[TraceRequest]]] = {
    "mixed": mixed, "azure-saturated": azure_saturated, "bursty-long": bursty_long,
    "mooncake-long": mooncake_long, "azure-code": azure_code,
    "closed-1": closed_1, "closed-8": closed_8, "closed-16": closed_16,
}

QUICK = (("mixed", "default"), ("mixed", "chunked-64"))
"""The cells of `--quick`: the sample trace at the server's settings and one
what-if away from them."""


@dataclass(frozen=True)
class Cell:
    trace: str
    settings: str

    @property
    def name(self) -> str:
        return f"{self.trace} × {self.settings}"


def cells(quick: bool = False, traces: list[str] | None = None,
          settings: list[str] | None = None) -> list[Cell]:
    """The matrix in settings order (one server each), each setting by every trace;
    `quick`: the `QUICK` cells only."""
    if quick:
        return [Cell(t, s) for t, s in QUICK]
    for chosen, known, what in ((traces, TRACES, "trace"), (settings, SETTINGS, "setting")):
        unknown = set(chosen or ()) - set(known)
        if unknown:
            raise ValueError(f"unknown {what}s {sorted(unknown)}; known: {', '.join(known)}")
    return [Cell(t, s) for s in settings or SETTINGS for t in traces or TRACES]
