"""Small drivers for the scheduler core in tests: step until done, with tokens
that say which sequence and step made them."""
from __future__ import annotations

from hypothesis import strategies as st

from scheduler import (FinishEvent, KeyLimitReached, QueueFull, Request, RequestTooLarge, Scheduler,
                       SchedulerConfig, TokenEvent)


def make_core(num_blocks=64, block_size=4, max_batch=8, max_waiting=100, admission=None,
              **kw) -> Scheduler:
    if admission is not None:
        kw["admission"] = admission.name
    return Scheduler(SchedulerConfig(num_blocks=num_blocks, block_size=block_size,
                                     max_batch=max_batch, max_waiting=max_waiting, **kw), admission)


def req(i, prompt=5, new=3) -> Request:
    return Request(f"r{i}", prompt, new)


def step(core: Scheduler, ends=None):
    """One step whose token for each sequence is its output length so far."""
    plan = core.plan()
    tokens = [len(s.output) for s in plan.sequences]
    return plan, core.commit(plan, tokens, ends)


def drain(core: Scheduler, limit=10_000):
    events = []
    for _ in range(limit):
        if not core.has_work():
            return events
        events += step(core)[1]
    raise AssertionError("core did not drain")


def finishes(events):
    return {e.seq_id: e.reason for e in events if isinstance(e, FinishEvent)}


def tokens_of(events, seq_id):
    return [e.token_id for e in events if isinstance(e, TokenEvent) and e.seq_id == seq_id]


def workloads(max_prompt: int, max_new: int, max_stops: int):
    """Random workloads for `play`: submits of up to `max_prompt` prompt and `max_new`
    new tokens, wishes on any of 31 request ids, and steps that stop up to
    `max_stops` of them."""
    return st.lists(
        st.one_of(
            st.tuples(st.just("submit"), st.integers(1, max_prompt), st.integers(1, max_new)),
            st.tuples(st.sampled_from(["cancel", "pause", "resume"]), st.integers(0, 30)),
            st.tuples(st.just("step"), st.sets(st.integers(0, 30), max_size=max_stops)),
        ),
        max_size=80,
    )


def play(core: Scheduler, ops, do_step) -> list[str]:
    """Apply a random workload: `("submit", prompt, new)` submits `r<n>` with key
    `k<n % 3>` (a refusal is no request), `("step", stop_at)` calls `do_step(stop_at)`, and `(wish, n)`
    cancels, pauses or resumes `r<n>`; then resumes every request (nothing may stay
    paused forever) and steps until the core has no work. The ids accepted."""
    accepted = []
    n = 0
    for op in ops:
        if op[0] == "submit":
            try:
                core.submit(Request(f"r{n}", op[1], op[2], key=f"k{n % 3}"))
                accepted.append(f"r{n}")
            except (QueueFull, RequestTooLarge, KeyLimitReached):
                pass
            n += 1
        elif op[0] == "step":
            do_step(op[1])
        else:
            getattr(core, op[0])(f"r{op[1]}")
    for rid in accepted:
        core.resume(rid)
    for _ in range(10_000):
        if not core.has_work():
            break
        do_step(set())
    return accepted
