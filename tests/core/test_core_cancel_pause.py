from scheduler import FinishReason, SeqState, TokenEvent

from core_helpers import drain, finishes, make_core, req, step


def test_cancel_waiting_request_is_never_admitted():
    core = make_core(max_batch=1)
    core.submit(req(0, new=4))
    core.submit(req(1))
    step(core)  # r0 admitted, r1 waits for the slot
    assert core.sequence("r1").state is SeqState.WAITING
    core.cancel("r1")
    plan, events = step(core)
    assert [s.id for s in plan.sequences] == ["r0"]
    assert finishes(events) == {"r1": FinishReason.CANCELLED}
    rest = drain(core)
    assert not any(isinstance(e, TokenEvent) and e.seq_id == "r1" for e in events + rest)
    assert core.is_drained()


def test_cancel_before_first_step_never_admits():
    core = make_core()
    core.submit(req(0))
    core.cancel("r0")
    plan, events = step(core)
    assert plan.is_empty
    assert finishes(events) == {"r0": FinishReason.CANCELLED}
    assert core.is_drained()


def test_cancel_running_releases_at_next_boundary_only():
    core = make_core(num_blocks=16, block_size=4)
    core.submit(req(0, prompt=5, new=10))  # needs ceil(15/4) = 4 blocks
    step(core)
    assert core.pool.reserved_blocks == 4
    core.cancel("r0")
    # the wish is only recorded: the blocks are still held until the next plan
    assert core.pool.reserved_blocks == 4
    assert core.sequence("r0").state is SeqState.RUNNING
    plan, events = step(core)
    assert plan.is_empty
    assert finishes(events) == {"r0": FinishReason.CANCELLED}
    assert core.pool.reserved_blocks == 0 and core.pool.free_blocks == 16
    assert core.is_drained()


def test_cancel_twice_after_finish_and_unknown_is_harmless():
    core = make_core()
    core.submit(req(0, new=2))
    core.submit(req(1, new=8))
    step(core)
    core.cancel("r1")
    core.cancel("r1")
    core.cancel("nobody")
    _, events = step(core)
    assert finishes(events) == {"r1": FinishReason.CANCELLED, "r0": FinishReason.LENGTH}
    core.cancel("r0")  # finished already
    core.cancel("r1")  # cancelled already
    _, events = step(core)
    assert events == []
    assert core.finished_by_reason == {FinishReason.CANCELLED: 1, FinishReason.LENGTH: 1}
    assert core.is_drained()


def test_cancel_with_reason_slow_client():
    core = make_core()
    core.submit(req(0, new=8))
    step(core)
    core.cancel("r0", FinishReason.SLOW_CLIENT)
    _, events = step(core)
    assert finishes(events) == {"r0": FinishReason.SLOW_CLIENT}


def test_pause_keeps_slot_and_blocks_and_skips_decode():
    core = make_core(num_blocks=16, block_size=4, max_batch=2)
    core.submit(req(0, prompt=4, new=8))
    core.submit(req(1, prompt=4, new=8))
    core.submit(req(2, prompt=4, new=8))
    step(core)
    reserved = core.pool.reserved_blocks
    core.pause("r0")
    for _ in range(3):
        plan, _ = step(core)
        assert [s.id for s in plan.decodes] == ["r1"]
        assert [s.id for s in plan.prefills] == []  # r0 keeps its slot: r2 cannot come in
    s = core.snapshot()
    assert (s.running, s.paused, s.waiting) == (1, 1, 1)
    assert core.pool.reserved_blocks == reserved
    assert len(core.sequence("r0").output) == 1
    core.resume("r0")
    plan, _ = step(core)
    assert [s.id for s in plan.decodes] == ["r0", "r1"]
    events = drain(core)
    assert core.sequence("r0") is None
    assert finishes(events)["r0"] is FinishReason.LENGTH
    assert core.is_drained()


def test_paused_waiting_request_is_passed_over_and_keeps_its_place():
    core = make_core(max_batch=1)
    core.submit(req(0, new=2))
    core.submit(req(1, new=2))
    core.submit(req(2, new=2))
    step(core)
    core.pause("r1")
    step(core)  # r0 finishes
    plan, _ = step(core)
    assert [s.id for s in plan.prefills] == ["r2"]
    core.resume("r1")
    drain(core)
    assert core.is_drained()


def test_cancel_paused_sequence_releases_blocks():
    core = make_core(num_blocks=8)
    core.submit(req(0, new=8))
    step(core)
    core.pause("r0")
    step(core)
    core.cancel("r0")
    _, events = step(core)
    assert finishes(events) == {"r0": FinishReason.CANCELLED}
    assert core.is_drained()
