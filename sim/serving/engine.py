"""The engine loop on the virtual clock: plan a step, wait what the cost model
says it takes, commit it with dummy token ids and hand its events to the hub. With
nothing to step it sleeps until a wish (submit, cancel, pause, resume) wakes it,
and starts `wake_s` later.

With prefill passes (`SchedulerConfig.prefill_pass_tokens`) a step's prompts make
their first tokens pass by pass, as the live engine hands them on: each pass takes
its share of the step's cost, the cost model's price of that pass alone scaled so
that the passes add up to the step's cost (which the model was fitted on)."""
from __future__ import annotations

import simpy

from scheduler import (FinishReason, PlanFeatures, Scheduler, Sequence, StepPlan, TokenEvent,
                       prefill_passes)

from ..cost_model import CostModel
from ..scatter import Scatter
from ..timeseries import TimeSeries
from .hub import Hub


class SimEngine:
    def __init__(self, env: simpy.Environment, core: Scheduler, cost: CostModel,
                 series: TimeSeries, stops_early: bool = False, scatter: Scatter | None = None):
        """`stops_early`: requests may ask for more tokens than the model makes
        before its EOS; each says where in its payload (see `Hub.open`). `scatter`:
        each step takes `cost`'s price times a factor drawn from it."""
        self.env = env
        self.stops_early = stops_early
        self.core = core
        self.cost = cost
        self.scatter = scatter
        self.series = series
        self._wakeup: simpy.Event | None = None

    def wake(self) -> None:
        if self._wakeup is not None:
            wakeup, self._wakeup = self._wakeup, None
            wakeup.succeed()

    def run(self, hub: Hub):
        env, core, cost = self.env, self.core, self.cost
        # A naive server awaits each write: the next step starts only once this
        # step's events are delivered and every stream's queue is empty.
        engine_waits = hub.engine_waits
        wait_delivery = hub.overheads.delivery_s if engine_waits else 0.0
        # steady runs need each step delivered as it ends, and no token to look at
        runs = not engine_waits and not hub.overheads.delivery_s and not self.stops_early
        pass_tokens = core.config.prefill_pass_tokens
        wake_s = hub.overheads.wake_s
        while True:
            while engine_waits and hub.backlogged:
                yield hub.until_drained()
            if not core.has_work():
                yield from self._idle(wake_s)
                continue
            plan = core.plan()
            if plan.preempted:
                hub.preempted(plan.preempted)
            start = env.now
            n = len(plan.prefills) + len(plan.decodes)
            if not n and not plan.partials:
                self._record(0)
                if plan.finished:  # cancels applied with nothing to compute
                    hub.committed(plan.finished, env.now, from_step=False)
                else:  # everything is paused
                    yield from self._idle(wake_s)
                continue
            left = cost.cost(plan.features)
            if self.scatter is not None:
                left *= self.scatter.draw()
            handed = None
            if pass_tokens and len(plan.prefills) > 1:
                passes = prefill_passes(plan.prefills, pass_tokens)
                if len(passes) > 1:
                    handed = yield from self._early_passes(plan, passes, left, hub)
                    left += start - env.now  # the last pass
            end = self._end_of(left)
            if end is not None:
                yield end
            events = core.commit(plan, [0] * n, self._eos(plan) if self.stops_early else None)
            now = env.now
            self._record(n)
            if plan.admitted:
                hub.admitted(plan.admitted, start)
            if handed is not None:
                hub.prefilled(passes[-1], now)
                events = [e for e in events if type(e) is not TokenEvent or e.seq_id not in handed]
            elif plan.prefills:
                hub.prefilled(plan.prefills, now)
            hub.committed(events, now)
            if runs and not hub.backlogged:
                self._steady_run(hub)
            if wait_delivery:
                end = self._end_of(wait_delivery)
                if end is not None:
                    yield end

    def _early_passes(self, plan: StepPlan, passes: list[list[Sequence]], step_cost: float,
                      hub: Hub):
        """Wait out each prefill pass but the last, handing on its first tokens as
        it ends; the sequences whose token was handed on. The last pass carries the
        step's decodes and its chunks that end no prompt."""
        cost, f = self.cost, plan.features
        shares = [cost.cost(PlanFeatures.of(prompts, 0, 0)) for prompts in passes[:-1]]
        shares.append(cost.cost(PlanFeatures.of(passes[-1] + plan.partials, f.decode_batch,
                                                f.context_tokens)))
        scale = step_cost / sum(shares)
        handed: set[str] = set()
        for share, prompts in zip(shares, passes[:-1]):
            end = self._end_of(share * scale)
            if end is not None:
                yield end
            handed |= hub.first_tokens(prompts, self.env.now)
        return handed

    def _steady_run(self, hub: Hub) -> None:
        """The steps that would each decode the same batch (`Scheduler.steady`) and
        end before anything else happens, taken at once: each step's cost, end,
        time-series row and delivery time as the loop would record them, with no
        plan, no commit and no event a step (none of them would make one). They stop
        before a sequence would finish or need a block, before an instant reader's
        leaving token, and before the next event due (an arrival, a read, a timer)."""
        steady = self.core.steady()
        if steady is None:
            return
        batch, context, room = steady
        env, core, cost = self.env, self.core, self.cost
        draw = None if self.scatter is None else self.scatter.draw
        step_times, record = hub.step_times.times, self.series.record
        room = min(room, hub.steps_before_a_leave())
        due = env.peek()
        paused = core.num_paused
        running, waiting, reserved = core.num_admitted - paused, core.num_waiting, core.pool.reserved_blocks
        now, steps = env.now, 0
        while steps < room:
            seconds = cost.cost(PlanFeatures(0, 0, 0, batch, context))
            end = now + (seconds if draw is None else seconds * draw())
            if not due > end:
                break
            now = end
            steps += 1
            context += batch
            record(now, running, waiting, paused, reserved, batch)
            step_times.append(now)
        if steps:
            env._now = now
            core.commit_steady(steps)

    def _end_of(self, delay: float) -> simpy.Timeout | None:
        """What to wait for until `delay` from now: a timeout, or nothing when no
        other event comes before then, the clock having been moved there at once.
        Most steps end before anything else happens (the next arrival, a slow
        reader's next read); moving the clock is what SimPy would do on taking the
        timeout first (to the same float), without the event and the process switch,
        a third of a small step's cost. An event due at the same time was scheduled
        before the step's timeout would have been, and runs first: so the timeout."""
        env = self.env
        end = env.now + delay
        if env.peek() > end:
            env._now = end
            return None
        return env.timeout(delay)

    @staticmethod
    def _eos(plan: StepPlan) -> dict[str, FinishReason]:
        """The sequences whose model stops at the token this step makes."""
        ends = {}
        for seq in plan.sequences:
            stop = seq.request.payload
            if stop is not None and stop < seq.request.max_new_tokens and len(seq.output) + 1 == stop:
                ends[seq.id] = FinishReason.EOS
        return ends

    def _idle(self, wake_s: float):
        """Sleep until a wish wakes the engine, which then takes `wake_s` to start,
        as the live step loop does: what reaches the inbox meanwhile joins its step."""
        self._wakeup = self.env.event()
        yield self._wakeup
        if wake_s:
            yield self.env.timeout(wake_s)

    def _record(self, tokens: int) -> None:
        core = self.core
        paused = core.num_paused
        self.series.record(self.env.now, core.num_admitted - paused, core.num_waiting, paused,
                           core.pool.reserved_blocks, tokens)
