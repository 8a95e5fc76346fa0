"""Running a step so that a request fails alone. A plan whose run raises is run
again one sequence at a time, each sequence's share of the plan alone
(`StepPlan.part`): the sequences that fail alone are the culprits, and every other
one gets the token it would have had.

A failed run may have written some layers' K/V for the step's positions; each
sequence's run again writes the same slots (its block table and positions are
the plan's) in every layer before its attention reads them, so nothing half
written is ever read."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from scheduler import StepPlan

log = logging.getLogger("twinstep.engine")


@dataclass(frozen=True, slots=True)
class StepRun:
    plan: StepPlan
    """The part of the step's plan that ran: commit this."""
    tokens: list[int]
    """One per sequence of `plan`, in `plan.sequences` order."""
    failed: frozenset[str]
    """Sequences that failed alone."""
    retried: bool
    """Whether the step ran again sequence by sequence (its time is then no sample
    of what its plan costs)."""


def run_isolated(runner, plan: StepPlan, skip: frozenset[str] = frozenset()) -> StepRun:
    """Run `plan` without the sequences in `skip` (already failed), isolating any
    sequence whose computation raises."""
    part = plan.part({seq.id for seq in plan.computed} - skip) if skip else plan
    try:
        return StepRun(part, runner.execute(part), frozenset(), False)
    except Exception:
        log.exception("step %d failed; running its %d sequences one at a time", plan.index,
                      len(part.computed))
    made: dict[str, int] = {}
    failed = set()
    for seq in part.computed:
        try:
            tokens = runner.execute(part.part((seq.id,)))
        except Exception:
            log.exception("step %d: sequence %r fails alone; it ends with an error",
                          plan.index, seq.id)
            failed.add(seq.id)
            continue
        if tokens:  # a chunk that does not end its prompt makes none
            made[seq.id] = tokens[0]
    ran = part.part({seq.id for seq in part.computed} - failed)
    return StepRun(ran, [made[seq.id] for seq in ran.sequences], frozenset(failed), True)
