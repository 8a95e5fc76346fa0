"""What the server tells a simulator about itself: `GET /v1/engine` (the model,
the hardware, the core as it runs, every serve setting) and
`GET /v1/steps` (the step records, from a bounded ring, with or without a file)."""
import json
import os

import httpx
import pytest
import torch

from analysis.server_info import ServerInfo
from scheduler.settings import ServeSettings
from sim import ConstantCost, build_setup

from analysis_helpers import save_tiny_llama
from live_server import RawStream, running_server, tiny_app, wait_idle


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, smollm2):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), smollm2.tokenizer)


ADMIN = {"Authorization": "Bearer secret-admin"}
"""The admin key of the server with keys (an open server ignores it)."""


def steps(url: str, **params) -> list[dict]:
    r = httpx.get(url + "/v1/steps", params=params, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-ndjson"
    return [json.loads(line) for line in r.text.splitlines()]


def test_engine_describes_the_model_its_settings_and_its_steps(model_dir):
    settings = ServeSettings(model=str(model_dir), max_batch=3, num_blocks=40, block_size=8,
                             max_waiting=9, policy="pause", max_queued=7, resume_grace_s=2.0,
                             keepalive_s=5.0, step_ring=50, max_prefill_tokens=20,
                             chunked_prefill=True, prefill_pass_tokens=16, admission="optimistic",
                             max_overtakes=2, max_waiting_per_key=4, api_key=("a:secret-a",),
                             admin_key="secret-admin")
    with running_server(settings) as url:
        info = httpx.get(url + "/v1/engine", headers=ADMIN).json()
        assert info["model"] == model_dir.name
        assert info["hardware"].endswith(f" x{os.cpu_count()}")
        assert info["torch_threads"] == torch.get_num_threads()
        assert info["scheduler"] == {"num_blocks": 40, "block_size": 8, "max_batch": 3,
                                     "max_waiting": 9, "max_model_len": 256,
                                     "max_prefill_tokens": 20, "chunked_prefill": True,
                                     "prefill_pass_tokens": 16, "admission": "optimistic",
                                     "max_overtakes": 2,
                                     "max_streams_per_key": None, "max_waiting_per_key": 4}
        # every setting, a secret as how many there are
        hidden = {"api_key": "<1 hidden>", "admin_key": "<hidden>"}
        assert {name: info["settings"][name] for name in hidden} == hidden
        assert ServeSettings(**{**info["settings"], "api_key": ("a:secret-a",),
                                "admin_key": "secret-admin"}) == settings
        assert (info["settings"]["device"], info["settings"]["dtype"]) == ("cpu", "float32")
        assert (info["settings"]["stall_timeout_s"], info["settings"]["gpu_memory_fraction"],
                info["settings"]["eager"], info["settings"]["replay_events"]) == (
                    30.0, None, False, 256)
        assert info["steps"] == {"ring": 50, "last": 0}
        # the simulator built from it runs the same settings
        setup = build_setup(ConstantCost(1.0), **ServerInfo.from_json(info).sim_settings())
        assert (setup.config.num_blocks, setup.config.max_batch, setup.config.admission,
                setup.config.max_prefill_tokens, setup.config.chunked_prefill,
                setup.config.prefill_pass_tokens, setup.config.max_overtakes,
                setup.config.max_waiting_per_key) == (40, 3, "optimistic", 20, True, 16, 2, 4)
        assert (setup.policy.name, setup.policy.max_queued, setup.resume_grace_s) == ("pause", 7, 2.0)

        httpx.post(url + "/v1/stream", json={"prompt": "hello", "max_new_tokens": 6},
                   headers={"x-api-key": "secret-a"})
        wait_idle(url, ADMIN)
        records = steps(url)
        assert len(records) == 6  # a prefill, then five decodes of the one sequence
        assert httpx.get(url + "/v1/engine", headers=ADMIN).json()["steps"]["last"] == records[-1]["step"]


def test_steps_account_for_every_token_and_page_after_a_step():
    app, engine = tiny_app()
    prompts = {"a": ("first prompt", 9), "b": ("second, longer prompt", 5), "c": ("x", 7)}
    with running_server(app) as url:
        clients = [RawStream(url, "/v1/stream", {"prompt": p, "max_new_tokens": n})
                   for p, n in prompts.values()]
        for client in clients:
            client.read_to_end()
            client.close()
        wait_idle(url)
        records = steps(url)
        numbers = [r["step"] for r in records]
        assert numbers == sorted(set(numbers)) and numbers[0] >= 1
        assert sum(r["num_prefills"] for r in records) == 3
        assert sum(r["prefill_tokens"] for r in records) == sum(len(p) for p, _ in prompts.values())
        assert sum(r["num_prefills"] + r["decode_batch"] for r in records) == 9 + 5 + 7
        assert all(r["duration_s"] > 0 and r["device"] == "cpu" for r in records)
        assert records[-1]["admitted"] == records[-1]["waiting"] == 0

        middle = numbers[len(numbers) // 2]
        assert steps(url, after=middle) == [r for r in records if r["step"] > middle]
        assert steps(url, after=numbers[0], limit=2) == records[1:3]
        assert steps(url, after=numbers[-1]) == []


def test_steps_refuse_a_query_that_makes_no_sense():
    app, _ = tiny_app()
    with running_server(app) as url:
        for params, param in (({"after": "-1"}, "after"), ({"after": "two"}, "after"),
                              ({"limit": "0"}, "limit"), ({"limit": "10001"}, "limit")):
            r = httpx.get(url + "/v1/steps", params=params)
            assert r.status_code == 400, params
            assert r.json()["error"]["param"] == param


def test_steps_that_fell_out_of_the_ring_are_gone_while_the_file_keeps_them(model_dir, tmp_path):
    path = tmp_path / "steps.jsonl"
    settings = ServeSettings(model=str(model_dir), num_blocks=64, step_ring=4, step_log=str(path))
    with running_server(settings) as url:
        httpx.post(url + "/v1/stream", json={"prompt": "hello", "max_new_tokens": 10})
        wait_idle(url)
        assert httpx.get(url + "/v1/engine").json()["steps"] == {"ring": 4, "last": 10}

        gone = httpx.get(url + "/v1/steps", params={"after": 0})
        assert gone.status_code == 410
        assert gone.headers["x-records-lost-through"] == "6"
        assert "steps 1 to 6 fell out of the ring of the last 4 steps" in gone.json()["error"]["message"]
        assert httpx.get(url + "/v1/steps", params={"after": 5}).status_code == 410

        kept = steps(url, after=6)
        assert [r["step"] for r in kept] == [7, 8, 9, 10]
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in written] == list(range(1, 11))
    assert written[-4:] == kept
