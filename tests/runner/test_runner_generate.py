"""Greedy tokens from the runner, driven by the real core with staggered arrivals,
equal transformers' `generate(do_sample=False)` for each prompt alone."""
import pytest
import torch

from tiny_models import BUILDERS, drive, make, prompt, request

PROMPTS = {"a": (9, 12), "b": (2, 10), "c": (21, 7), "d": (14, 11)}  # id -> (length, new)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_greedy_equals_generate(family):
    model = BUILDERS[family]()
    prompts = {i: prompt(n, seed=ord(i)) for i, (n, _) in PROMPTS.items()}
    reqs = {i: request(i, prompts[i], new) for i, (_, new) in PROMPTS.items()}
    core, runner = make(model, block_size=4, max_batch=3)  # "d" waits for a free slot

    outputs = drive(core, runner, {0: [reqs["a"], reqs["b"]], 2: [reqs["c"]], 3: [reqs["d"]]})

    for i, (n, new) in PROMPTS.items():
        ids = torch.tensor([prompts[i]])
        with torch.inference_mode():
            expected = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=new)[0, n:].tolist()
        assert outputs[i] == expected, i
    assert core.is_drained()
