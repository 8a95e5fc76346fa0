"""Tiny randomly initialised GPT-2 and Llama models, and a driver that runs the real
scheduler core with a model runner, step by step."""
from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from live.runner.model_runner import ModelRunner
from live.runner.params import GenerationInput, SamplingParams
from scheduler import FinishEvent, Request, Scheduler, SchedulerConfig, StepPlan

VOCAB = 128
# No end-of-sequence id: generate() must run to max_new_tokens like the runner does.
NO_SPECIAL = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)


def tiny_gpt2(seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=256,
                        **NO_SPECIAL)
    return widen(GPT2LMHeadModel(config)).eval()


def tiny_llama(seed: int = 0, **overrides) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    settings = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                    max_position_embeddings=256, tie_word_embeddings=True, **NO_SPECIAL)
    config = LlamaConfig(**{**settings, **overrides})
    return widen(LlamaForCausalLM(config)).eval()


def widen(model: torch.nn.Module) -> torch.nn.Module:
    """The default init makes logits so flat that a wrong position or context hides
    inside any tolerance: spread the weights, and move norms and biases off 1 and 0."""
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.normal_(0, 0.2)
            else:
                param.add_(torch.randn_like(param), alpha=0.1)
    return model


BUILDERS: dict[str, Callable[[], torch.nn.Module]] = {
    "gpt2": tiny_gpt2,
    "llama": tiny_llama,
    "llama-linear-rope": lambda: tiny_llama(
        rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 5000.0}),
}


def prompt(length: int, seed: int) -> tuple[int, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(0, VOCAB, (length,), generator=g).tolist())


def request(seq_id: str, prompt_ids, max_new_tokens: int, **sampling) -> Request:
    return Request(seq_id, len(prompt_ids), max_new_tokens,
                   GenerationInput(tuple(prompt_ids), SamplingParams(**sampling)))


def make(model, block_size: int = 4, num_blocks: int = 64, max_batch: int = 8,
         dtype: torch.dtype = torch.float32, **scheduling):
    """`scheduling`: other `SchedulerConfig` fields (chunked prefill, admission)."""
    core = Scheduler(SchedulerConfig(num_blocks=num_blocks, block_size=block_size,
                                     max_batch=max_batch, **scheduling))
    runner = ModelRunner(model, num_blocks=num_blocks, block_size=block_size, dtype=dtype)
    return core, runner


def assert_rows_match_transformers(model, logits: torch.Tensor, seqs, tolerance: float = 1e-4) -> None:
    """Each row of `logits` is transformers' last-position logits over its sequence's
    whole text (prompt and output so far)."""
    for row, seq in zip(logits, seqs):
        ids = list(seq.request.payload.prompt_ids) + seq.output
        with torch.inference_mode():
            expected = model(torch.tensor([ids])).logits[0, -1]
        torch.testing.assert_close(row, expected, atol=tolerance, rtol=tolerance,
                                   msg=lambda m: f"{seq.id} at {len(ids)} tokens: {m}")


def drive(core: Scheduler, runner: ModelRunner, arrivals: dict[int, list[Request]],
          execute: Callable[[StepPlan], list[int]] | None = None,
          max_steps: int = 1000) -> dict[str, list[int]]:
    """Submit `arrivals[n]` before step n and run every plan (with `execute`, the
    runner's own by default) until nothing is left; returns each request's tokens."""
    execute = execute or runner.execute
    outputs: dict[str, list[int]] = {}
    last = max(arrivals, default=0)
    for n in range(max_steps):
        for req in arrivals.get(n, []):
            core.submit(req)
        if n > last and not core.has_work():
            return outputs
        plan = core.plan()
        if plan.is_empty:
            continue
        tokens = execute(plan)
        for seq, token in zip(plan.prefills + plan.decodes, tokens):
            outputs.setdefault(seq.id, []).append(token)
        for event in core.commit(plan, tokens):
            if isinstance(event, FinishEvent):
                runner.forget(event.seq_id)
    raise AssertionError("the run did not finish")
