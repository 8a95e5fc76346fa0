"""Nothing leaks: 300 streams from up to 48 clients at once, replayed by the
project's own load generator against a real uvicorn server (batch limit 8), where
a third read to the end, half leave after 0 to 40 tokens by FIN or RST and the
rest read slowly and leave after 3 or 10. Afterwards every admitted sequence was
released once, the pool is whole, nothing runs, waits, pauses or is read, and the
records say what each client did."""
from collections import Counter
from dataclasses import replace

import numpy as np

from live.client.loadgen import replay
from live.client.request_body import PromptFiller
from leaky_clients import leaky_clients
from live_server import held_app, running_server, stats, wait_for
from tiny_models import VOCAB
from traces import Fixed, LeaveHow, Uniform, generate

REQUESTS = 300
MAX_NEW = 48
BATCH = 8
CLIENTS = 48


def _trace():
    requests = generate(rate=40.0, count=REQUESTS, prompt_lengths=Uniform(4, 12),
                        output_lengths=Fixed(MAX_NEW), seed=11)
    clients = leaky_clients(REQUESTS, np.random.default_rng(11))
    return [replace(r, client=c) for r, c in zip(requests, clients)]


def test_three_hundred_streams_with_leavers_and_slow_readers_leak_nothing():
    trace = _trace()
    app, engine, runner = held_app(max_batch=BATCH, max_waiting=CLIENTS)
    with running_server(app) as url:
        result = replay(url, trace, time_scale=0.5, max_connections=CLIENTS,
                        prompt_filler=PromptFiller(low=1, high=VOCAB), timeout_s=30.0)

        def settled():
            # every request ends in the engine once, however its client left; the
            # hub has counted the last step's tokens once it has the last end
            s = stats(url)
            busy = (s["running"] or s["waiting"] or s["paused"] or s["inbox"] or s["readers"]
                    or s["streams_open"] or s["blocks_reserved"]
                    or sum(s["finished"].values()) < REQUESTS)
            return None if busy else s
        after = wait_for(settled, timeout=30.0, what="every stream to end and every block back")

    assert result.problems == {}
    outcomes = {o.id: o for o in result.outcomes}
    kinds = Counter()
    for r in trace:
        o, client = outcomes[r.id], r.client
        assert o.refused is None and o.headers_s is not None, r.id
        if not client.leaves:
            kinds["to_end"] += 1
            assert o.finish_reason == "length" and o.left_s is None, r.id
            assert o.tokens_read == o.tokens_generated == MAX_NEW == len(o.token_times_s), r.id
        else:
            kinds["slow" if client.slow else "leaver"] += 1
            assert o.left_s is not None and o.finish_reason is None, r.id
            assert o.tokens_read == client.leave_after_tokens == len(o.token_times_s), r.id
            assert o.left_s >= max(o.token_times_s, default=o.headers_s), r.id
    assert kinds == {"to_end": 105, "leaver": 150, "slow": 45}
    hows = Counter((c.leave_after_tokens == 0, c.leave_how) for c in (r.client for r in trace)
                   if c.leaves)
    assert all(hows[(at_once, how)] > 0 for at_once in (True, False) for how in LeaveHow)

    # Every sequence the engine admitted was prefilled once and released once.
    prefilled = Counter(runner.prefilled)
    assert max(prefilled.values()) == 1
    assert after["admissions"] == after["releases"] == len(prefilled)
    read_a_token = sum(1 for o in result.outcomes if o.tokens_read > 0)
    assert read_a_token <= len(prefilled) <= REQUESTS
    # Every request ended in the engine once; those never admitted were cancelled waiting.
    assert sum(after["finished"].values()) == REQUESTS
    assert after["finished"].get("length", 0) >= kinds["to_end"]
    assert after["aborts"] == {"cancelled": REQUESTS - after["finished"].get("length", 0),
                               "slow_client": 0, "error": 0}

    # The pool is whole and nothing is left anywhere.
    assert after["blocks_free"] == after["num_blocks"] == engine.core.config.num_blocks
    assert (after["blocks_reserved"], after["blocks_used"]) == (0, 0)
    assert (after["running"], after["waiting"], after["paused"], after["inbox"]) == (0, 0, 0, 0)
    assert (after["streams_open"], after["streams_in_grace"], after["readers"]) == (0, 0, 0)
    assert after["queued_events"] == 0
    assert engine.core.is_drained()

    # Tokens made for nobody: only leavers' streams can have them, and no more than
    # each could still have made after the tokens its client read.
    wasted = after["tokens_after_leave"]
    assert result.wasted_tokens_total == wasted
    room = sum(MAX_NEW - o.tokens_read for o in result.outcomes if o.left_s is not None)
    assert 0 <= wasted <= room

    # Each request's record, as the engine saw it, comes to the same: one record a
    # request, and the wasted tokens only leavers' and adding up to the server's.
    records = app.state.service.hub.requests.after(0)
    assert len(records) == len({r["id"] for r in records}) == REQUESTS
    assert sum(r["tokens_after_leave"] for r in records) == wasted
    assert all(r["tokens_after_leave"] == 0 for r in records if r["left_unix"] is None)
    # A stream its client had not left when it ended ran to its length (a slow
    # leaver's may have, before its client left).
    stayed = [r for r in records if r["left_unix"] is None]
    assert len(stayed) >= kinds["to_end"]
    assert {(r["finish_reason"], r["completion_tokens"]) for r in stayed} == {("length", MAX_NEW)}
