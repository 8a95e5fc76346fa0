"""`python -m scheduler demo [--admission reserve|optimistic] [--chunk N]
[--max-overtakes N]`: drive the core by hand for a few steps and show admission (by
whole reservation, or optimistic with preemption; a small request going ahead of
one that does not fit, or strict arrival order), prompts prefilled whole or N
tokens a step, a cancel, a pause and the pool after the run."""
from __future__ import annotations

import argparse
from dataclasses import fields

from .admission import ADMISSION_POLICIES
from .config import SchedulerConfig
from .core import Scheduler
from .events import FinishEvent
from .request import Request

CORE_DEFAULT_OVERTAKES = {f.name: f.default for f in fields(SchedulerConfig)}["max_overtakes"]


def demo(admission: str, chunk: int | None, max_overtakes: int) -> int:
    core = Scheduler(SchedulerConfig(num_blocks=7, block_size=4, max_batch=3, admission=admission,
                                     max_prefill_tokens=chunk, chunked_prefill=chunk is not None,
                                     max_overtakes=max_overtakes))
    for i, (prompt, new) in enumerate([(6, 6), (10, 8), (3, 12), (5, 4)]):
        core.submit(Request(f"r{i}", prompt, new))
    wishes = {2: ("pause", "r0"), 4: ("cancel", "r1"), 5: ("resume", "r0")}
    print(f"{'step':>4}  {'prefill':<10} {'decode':<14} {'run':>3} {'wait':>4} {'pause':>5} "
          f"{'free':>4} {'rsvd':>4}  finished, preempted")
    while core.has_work():
        plan = core.plan()
        # a chunk short of its whole prompt shows as id(tokens)
        prefills = ",".join(q.id if q.chunk == q.num_tokens else f"{q.id}({q.chunk})"
                            for q in plan.chunks)
        events = core.commit(plan, [0] * len(plan.sequences))
        s = core.snapshot()
        done = [f"{e.seq_id}:{e.reason.value}" for e in events if isinstance(e, FinishEvent)]
        done += [f"{q.id}:preempted" for q in plan.preempted]
        print(f"{plan.index:>4}  {prefills:<10} "
              f"{','.join(q.id for q in plan.decodes):<14} {s.running:>3} {s.waiting:>4} "
              f"{s.paused:>5} {s.blocks_free:>4} {s.blocks_reserved:>4}  {', '.join(done)}")
        if plan.index in wishes:
            wish, seq_id = wishes[plan.index]
            getattr(core, wish)(seq_id)
            print(f"      ({wish} {seq_id}: takes effect at the next step)")
    print(f"preemptions {core.preemptions}, tokens recomputed {core.recomputed_tokens}")
    print(f"pool whole after the run: {core.is_drained()}")
    return 0 if core.is_drained() else 1


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler")
    parser.add_argument("command", choices=["demo"])
    parser.add_argument("--admission", default="reserve", choices=sorted(ADMISSION_POLICIES))
    parser.add_argument("--chunk", type=int, help="prefill prompts at most this many tokens a step")
    parser.add_argument("--max-overtakes", type=int, default=CORE_DEFAULT_OVERTAKES,
                        help="later requests that may go ahead of one that does not fit; "
                             "0: strict arrival order")
    args = parser.parse_args()
    return demo(args.admission, args.chunk, args.max_overtakes)


if __name__ == "__main__":
    raise SystemExit(main())
