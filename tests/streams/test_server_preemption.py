"""Optimistic admission behind a real uvicorn: on a pool too small for every
stream's whole length, sequences are preempted and recomputed, and every stream
still carries exactly the tokens the engine makes for its request alone; streams
whose clients leave, preempted or not, end; afterwards the pool is whole."""
import asyncio
import json

import httpx

from live.client.sse_parser import SSEParser
from live_server import ToyTokenizer, engine_alone, running_server, tiny_app, wait_idle

TOK = ToyTokenizer()
NUM_BLOCKS = 48
NEW = 40
LEAVE_AFTER = 6


async def _streams(base_url: str, bodies: list[dict], leavers: set[int]):
    """Each body's token events; a leaver closes its connection after LEAVE_AFTER."""
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        async def one(i, body):
            tokens, done = [], None
            async with client.stream("POST", "/v1/stream", json=body) as r:
                parser = SSEParser()
                async for chunk in r.aiter_bytes():
                    for e in parser.feed(chunk):
                        if e.event == "token":
                            tokens.append(json.loads(e.data)["token_id"])
                        elif e.event == "done":
                            done = json.loads(e.data)
                    if i in leavers and len(tokens) >= LEAVE_AFTER:
                        return tokens, None  # leaves: the connection closes here
            return tokens, done
        return await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies)))


def test_preempted_streams_carry_their_own_tokens_and_the_pool_ends_whole():
    app, engine = tiny_app(max_batch=8, num_blocks=NUM_BLOCKS, admission="optimistic")
    bodies = [{"prompt": f"stream {i:02d} asks", "max_new_tokens": NEW, "ignore_eos": True}
              for i in range(16)]
    leavers = {3, 9, 14}
    with running_server(app) as url:
        answers = asyncio.run(_streams(url, bodies, leavers))
        after = wait_idle(url)
        records = [json.loads(line) for line in httpx.get(url + "/v1/requests").text.splitlines()]
        metrics = httpx.get(url + "/metrics").text

    # 8 prompts of 15 tokens fit in 32 blocks; 8 whole lengths of 55 tokens need 112
    assert after["preemptions"] > 0 and after["recomputed_tokens"] > 0
    assert f"twinstep_preemptions_total {after['preemptions']:.1f}" in metrics
    assert f"twinstep_recomputed_tokens_total {after['recomputed_tokens']:.1f}" in metrics
    for i, (body, (tokens, done)) in enumerate(zip(bodies, answers)):
        alone, _, _ = engine_alone(TOK.encode(body["prompt"]), NEW)
        if i in leavers:
            assert tokens == alone[:len(tokens)] and len(tokens) >= LEAVE_AFTER, i
        else:
            assert tokens == alone, i
            assert done["finish_reason"] == "length"
            assert done["usage"]["completion_tokens"] == NEW

    # a release for each admission; each preemption readmits, unless its client
    # left while it waited
    assert after["admissions"] == after["releases"]
    assert len(bodies) < after["admissions"] <= len(bodies) + after["preemptions"]
    assert after["blocks_free"] == after["num_blocks"] == NUM_BLOCKS
    assert (after["blocks_reserved"], after["running"], after["waiting"]) == (0, 0, 0)
    assert after["finished"]["length"] == len(bodies) - len(leavers)
    assert engine.core.is_drained()
    # the engine's records say which requests were preempted, and keep each
    # request's first admission and first token
    assert sum(r["preemptions"] for r in records) == after["preemptions"]
    assert sum(r["recomputed_tokens"] for r in records) == after["recomputed_tokens"]
    for r in records:
        if r["admitted_unix"] is not None:
            assert r["arrival_unix"] <= r["admitted_unix"] <= r["first_token_unix"] <= r["finish_unix"]
