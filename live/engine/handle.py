"""What the hub and the routes hold of an engine, wherever it steps: in a thread of
the server's process (`EngineThread`) or in a process of its own (`EngineProcess`).
Both hand the engine's steps to a `StepSink`, the hub, in the same order: each
step's output, then the core's view after it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from scheduler import FinishReason, KeyHolding, SchedulerConfig

from ..runner.hardware import hardware_name
from ..runner.params import SamplingParams
from .core_view import CoreView
from .engine import Engine
from .step_output import StepOutput


class EngineStopped(RuntimeError):
    """The engine stopped before it could answer."""


class StepSink(Protocol):
    def before_step(self) -> None:
        """Before each step, in the stepping thread; may block (the `naive` policy)."""

    def deliver(self, output: StepOutput) -> None:
        """A step's output (or a prefill pass's first tokens), from any thread."""

    def after_step(self, view: CoreView) -> None:
        """The core's state after a step, behind its output, from any thread."""

    def halt(self, reason: str) -> None:
        """The engine has stopped for good, from any thread: it will never report on
        the streams it held."""

    def restarted(self, view: CoreView) -> None:
        """A new engine steps in place of one that stopped, from any thread; it holds
        nothing yet."""


@dataclass(frozen=True, slots=True)
class EngineFacts:
    """What does not change while an engine runs."""
    config: SchedulerConfig
    step_ring: int
    torch_threads: int
    hardware: str

    @classmethod
    def of(cls, engine: Engine, device: str) -> EngineFacts:
        return cls(engine.core.config, engine.step_log.ring_size, torch.get_num_threads(),
                   hardware_name(device))


class EngineHandle(Protocol):
    facts: EngineFacts
    starts: int
    """Engines started behind this handle: more than one after a restart."""

    @property
    def halted(self) -> str | None:
        """Why the engine stopped for good, while it is stopped."""

    @property
    def alive(self) -> bool:
        """Stepping, or able to."""

    def holding(self) -> dict[str, KeyHolding]:
        """What each key holds now: it grows at a submit, between steps."""

    def view(self) -> CoreView:
        """The core's state before the first step."""

    def start(self, sink: StepSink) -> None:
        """Step, handing every step to `sink`; from the running event loop."""

    async def submit(self, seq_id: str, prompt_ids: list[int], max_new_tokens: int,
                     sampling: SamplingParams, key: str | None) -> None:
        """Queue a request, or raise the core's `SubmitRefused` before anything is held."""

    def cancel(self, seq_id: str, reason: FinishReason = FinishReason.CANCELLED) -> None: ...

    def pause(self, seq_id: str) -> None: ...

    def resume(self, seq_id: str) -> None: ...

    async def steps_after(self, step: int, limit: int) -> list[dict]:
        """The step log's records after `step` (`StepLog.after`)."""

    def stop(self) -> None:
        """Stop stepping and close the step log."""
