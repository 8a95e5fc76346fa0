"""The engine stepping in a thread of the server's own process: the handle over an
`Engine` and its `StepLoop`. The steps share the server's interpreter lock; tests
reach into the engine here, between steps."""
from __future__ import annotations

from scheduler import FinishReason, KeyHolding

from ..runner.params import SamplingParams
from .core_view import CoreView
from .engine import Engine
from .handle import EngineFacts, StepSink
from .step_loop import StepLoop


class EngineThread:
    def __init__(self, engine: Engine, device: str):
        self.engine = engine
        self.facts = EngineFacts.of(engine, device)
        self.starts = 1
        self._loop: StepLoop | None = None

    @property
    def halted(self) -> str | None:
        halted = self._loop.halted if self._loop is not None else None
        return None if halted is None else repr(halted)

    @property
    def alive(self) -> bool:
        return self._loop is not None and self._loop.alive

    def holding(self) -> dict[str, KeyHolding]:
        return self.engine.core.keys.holding()

    def view(self) -> CoreView:
        return CoreView.of(self.engine)

    def start(self, sink: StepSink) -> None:
        engine = self.engine
        self._loop = StepLoop(engine, sink.deliver, sink.before_step,
                              lambda: sink.after_step(CoreView.of(engine)),
                              lambda exc: sink.halt(repr(exc)))
        self._loop.start()

    async def submit(self, seq_id: str, prompt_ids: list[int], max_new_tokens: int,
                     sampling: SamplingParams, key: str | None) -> None:
        self.engine.submit(seq_id, prompt_ids, max_new_tokens, sampling, key)

    def cancel(self, seq_id: str, reason: FinishReason = FinishReason.CANCELLED) -> None:
        self.engine.cancel(seq_id, reason)

    def pause(self, seq_id: str) -> None:
        self.engine.pause(seq_id)

    def resume(self, seq_id: str) -> None:
        self.engine.resume(seq_id)

    async def steps_after(self, step: int, limit: int) -> list[dict]:
        return self.engine.step_log.after(step, limit)

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()
        self.engine.step_log.close()
