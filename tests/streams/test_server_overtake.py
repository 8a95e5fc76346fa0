"""No lockout at the head of the queue, behind a real uvicorn: two long requests
hold most of the pool and a third waits for room; a small request that fits is
admitted at once and read to its end while the long ones run, which still finish
in their turn. With `max_overtakes` 0 it waits behind the third. The pool is whole
after either way."""
import json

import pytest

from scheduler import SeqState

from live_server import RawStream, held_app, running_server, wait_for, wait_idle

NUM_BLOCKS = 48
LONG = 55
"""Tokens each long request asks for: its 13-token prompt and these take 17 of the
48 blocks of 4, so two leave 14 free and a third does not fit beside them."""


def open_stream(url: str, prompt: str, new: int) -> tuple[RawStream, str]:
    stream = RawStream(url, "/v1/stream", {"prompt": prompt, "max_new_tokens": new,
                                           "ignore_eos": True})
    stream.read_events(1)  # start: accepted, before any step admits it
    return stream, stream.headers["x-request-id"]


def tokens_and_end(stream: RawStream) -> tuple[int, str]:
    events = stream.read_to_end()
    stream.close()
    return (sum(e.event == "token" for e in events),
            json.loads(events[-1].data)["finish_reason"])


@pytest.mark.parametrize("bound", [None, 0])
def test_a_small_request_is_not_locked_out_behind_one_that_does_not_fit(bound):
    scheduling = {} if bound is None else {"max_overtakes": bound}  # None: the default
    app, engine, runner = held_app(max_batch=8, num_blocks=NUM_BLOCKS, **scheduling)
    core = engine.core
    with running_server(app) as url:
        runner.hold()
        try:
            longs = [open_stream(url, f"long request {i}", LONG) for i in range(3)]
            runner.hold_and_wait()
            while not (core.num_admitted == 2 and core.num_waiting == 1):
                runner.allow(1)
            small, small_id = open_stream(url, "hi", 3)
            wait_for(lambda: len(core.inbox) == 1, what="the small request in the core's inbox")
            runner.allow(4)  # the held step, then the small one's prefill and two decodes
            assert all(core.sequence(rid).state is SeqState.RUNNING for _, rid in longs[:2])
            if bound == 0:
                # it waits behind the third long one, which waits for the first two to end
                assert [s.id for s in core.waiting] == [longs[2][1], small_id]
                assert core.sequence(small_id).overtaken == 0
            else:
                # it has made its three tokens while the first two long ones still run
                assert core.sequence(small_id) is None
                assert [s.id for s in core.waiting] == [longs[2][1]]
                assert tokens_and_end(small) == (3, "length")
        finally:
            runner.release()
        if bound == 0:
            assert tokens_and_end(small) == (3, "length")
        for stream, _ in longs:
            assert tokens_and_end(stream) == (LONG, "length")
        after = wait_idle(url)

    ids = [rid for _, rid in longs]
    expected = ids + [small_id] if bound == 0 else ids[:2] + [small_id, ids[2]]
    assert runner.prefilled == expected
    assert after["overtakes"] == (0 if bound == 0 else 1)
    assert after["admissions"] == after["releases"] == 4
    assert (after["blocks_reserved"], after["running"], after["waiting"]) == (0, 0, 0)
    assert after["blocks_free"] == NUM_BLOCKS
    assert core.is_drained()
