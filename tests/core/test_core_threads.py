import threading

from scheduler import FinishEvent, FinishReason, QueueFull, Request, TokenEvent

from core_helpers import make_core, step


def test_submit_and_cancel_from_many_threads_while_steps_run():
    core = make_core(num_blocks=200, block_size=4, max_batch=16, max_waiting=10_000)
    released = []
    original = core.pool.release
    core.pool.release = lambda seq_id: (released.append(seq_id), original(seq_id))[1]
    per_thread, threads_n = 150, 8
    submitted, cancelled = set(), set()
    lock = threading.Lock()
    start = threading.Barrier(threads_n + 1)

    def client(t):
        start.wait()
        for i in range(per_thread):
            rid = f"t{t}-{i}"
            core.submit(Request(rid, 1 + i % 7, 1 + i % 5))
            with lock:
                submitted.add(rid)
            if i % 3 == 0:
                core.cancel(rid)
                with lock:
                    cancelled.add(rid)
            if i % 7 == 0:
                core.cancel(f"t{t}-{i - 4}")  # an earlier one, maybe already finished

    threads = [threading.Thread(target=client, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    start.wait()
    events = []
    while any(th.is_alive() for th in threads) or core.has_work():
        events += step(core)[1]
    for th in threads:
        th.join()

    finished = [e for e in events if isinstance(e, FinishEvent)]
    assert len(finished) == len({e.seq_id for e in finished}) == len(submitted) == per_thread * threads_n
    assert {e.seq_id for e in finished} == submitted
    # a cancel recorded right after its submit either lands before the request
    # finished or finds it gone
    assert {e.reason for e in finished if e.seq_id in cancelled} <= {FinishReason.CANCELLED,
                                                                    FinishReason.LENGTH}
    assert all(not isinstance(x, TokenEvent) or x.seq_id in submitted for x in events)
    assert len(released) == len(set(released))  # never twice
    assert set(released) <= submitted
    assert core.is_drained()


def test_waiting_limit_holds_under_concurrent_submits():
    core = make_core(max_waiting=50)
    refused = []

    def client(t):
        for i in range(40):
            try:
                core.submit(Request(f"t{t}-{i}", 2, 2))
            except QueueFull:
                refused.append(1)

    threads = [threading.Thread(target=client, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(core.inbox) == 50 and len(refused) == 110
