"""Running a step as passes (`SchedulerConfig.prefill_pass_tokens`): each group of
prompts that end their prefill in a forward of its own, the last group with the
step's decodes and its chunks that end no prompt, so that the first tokens of a
pass can go to their streams before the rest of the step has run.

The runner cuts each pass further as it cuts any prefill (on the CPU, into
forwards of at most `PREFILL_PASS_ROWS` rows). Each pass is isolated on its own
(`run_isolated`): a pass that raises is run again one sequence at a time, its own
sequences only, so a token handed on after an earlier pass is never computed, nor
handed on, twice."""
from __future__ import annotations

from collections.abc import Callable

from scheduler import Sequence, StepPlan

from .isolation import StepRun, run_isolated


def run_in_passes(runner, plan: StepPlan, passes: list[list[Sequence]], skip: frozenset[str],
                  ran_pass: Callable[[StepRun], None]) -> tuple[StepRun, float | None]:
    """Run `plan` without the sequences in `skip`, pass by pass (`passes`: the
    step's prefills cut by `prefill_passes`), calling `ran_pass` after each pass
    but the last. The run of the whole step, and the device time of its passes
    (None where the runner measures none)."""
    if len(passes) == 1:
        run = run_isolated(runner, plan, skip)
        return run, getattr(runner, "last_device_s", None)
    rest = {seq.id for seq in plan.computed} - skip
    runs: list[StepRun] = []
    device_s = None
    for prompts in passes[:-1]:
        ids = {seq.id for seq in prompts} - skip
        rest -= ids
        if ids:
            runs.append(run_isolated(runner, plan.part(ids)))
            device_s = _added(device_s, runner)
            ran_pass(runs[-1])
    if rest:
        runs.append(run_isolated(runner, plan.part(rest)))
        device_s = _added(device_s, runner)
    failed = frozenset().union(*(run.failed for run in runs))
    made = {seq.id: token for run in runs for seq, token in zip(run.plan.sequences, run.tokens)}
    ran = plan if not skip and not failed else plan.part(
        {seq.id for seq in plan.computed} - skip - failed)
    return (StepRun(ran, [made[seq.id] for seq in ran.sequences], failed,
                    any(run.retried for run in runs)), device_s)


def _added(total: float | None, runner) -> float | None:
    seconds = getattr(runner, "last_device_s", None)
    if seconds is None:
        return total
    return seconds if total is None else total + seconds
