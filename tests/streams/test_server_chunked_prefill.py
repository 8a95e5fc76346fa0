"""Chunked prefill behind a real uvicorn: long prompts are prefilled a chunk per
step beside the other streams' decodes, every stream carries the tokens an
unchunked engine makes for its request alone, each request is admitted at its
first chunk and makes its first token with its last, and the pool ends whole."""
import json
import subprocess
import sys

import httpx

from live_server import RawStream, ToyTokenizer, engine_alone, running_server, tiny_app, wait_idle

TOK = ToyTokenizer()
BUDGET = 8
NEW = 12


def test_long_prompts_stream_the_tokens_an_unchunked_engine_makes():
    app, engine = tiny_app(max_batch=8, max_prefill_tokens=BUDGET, chunked_prefill=True)
    prompts = [f"a long prompt number {i}, " * (i + 1) for i in range(4)]  # 24 to 96 tokens
    prompts += [f"short {i}" for i in range(3)]
    with running_server(app) as url:
        clients = [RawStream(url, "/v1/stream", {"prompt": p, "max_new_tokens": NEW,
                                                 "ignore_eos": True}) for p in prompts]
        answers = [client.read_to_end() for client in clients]
        after = wait_idle(url)
        records = {r["id"]: r for r in map(json.loads, httpx.get(url + "/v1/requests").text.splitlines())}
        steps = [json.loads(line) for line in httpx.get(url + "/v1/steps").text.splitlines()]

    for prompt, events in zip(prompts, answers):
        alone, text, _ = engine_alone(TOK.encode(prompt), NEW)
        tokens = [json.loads(e.data)["token_id"] for e in events if e.event == "token"]
        assert tokens == alone, prompt
        done = json.loads(events[-1].data)
        assert events[-1].event == "done" and done["finish_reason"] == "length"
        assert done["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": NEW}
        timing = done["timing"]
        assert timing["arrival"] <= timing["admitted"] <= timing["first_token"] <= timing["finished"]
        record = records[json.loads(events[0].data)["id"]]
        assert (record["admitted_unix"], record["first_token_unix"]) == (
            timing["admitted"], timing["first_token"])
        if len(prompt) > BUDGET:  # admitted at its first chunk, a step or more before its token
            assert timing["admitted"] < timing["first_token"]

    prefilled = [s["prefill_tokens"] for s in steps]
    assert max(prefilled) == BUDGET
    assert sum(prefilled) == sum(len(p) for p in prompts)
    # a chunk that does not end its prompt makes no token
    assert sum(s["tokens"] for s in steps) == len(prompts) * NEW
    assert any(s["num_prefills"] and not s["tokens"] for s in steps)
    # chunks ran beside decodes
    assert any(s["prefill_tokens"] and s["decode_batch"] for s in steps)
    assert (after["blocks_reserved"], after["running"], after["waiting"]) == (0, 0, 0)
    assert after["admissions"] == after["releases"] == len(prompts)
    assert engine.core.is_drained()


def test_serve_refuses_chunked_prefill_without_a_budget():
    out = subprocess.run([sys.executable, "-m", "live", "serve", "--chunked-prefill"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "chunked prefill needs max_prefill_tokens" in out.stderr
