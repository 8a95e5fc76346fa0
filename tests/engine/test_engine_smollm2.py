"""The engine on the real embedded SmolLM2 (float32, greedy, CPU): its tokens are
transformers' own greedy tokens, alone and under any concurrency."""
import pytest
import torch

from live.engine.engine import Engine
from live.runner.model_runner import ModelRunner
from live.runner.params import SamplingParams
from scheduler import FinishReason, SchedulerConfig

from engine_helpers import run_engine

PROMPTS = [
    "The capital of France is",
    "Write a haiku about autumn leaves.",
    "def fibonacci(n):",
    "List three primary colors:",
    "Explain what a KV cache is in one sentence.",
    "1, 2, 3, 4,",
    "Translate 'good morning' into Spanish:",
    "Once upon a time, in a small village,",
]
NEW = 24


@pytest.fixture(scope="module")
def prompts(smollm2):
    tok = smollm2.tokenizer
    chat = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
            for p in PROMPTS[:4]]
    plain = [tok.encode(p) for p in PROMPTS[4:]]
    return [list(ids) if not hasattr(ids, "input_ids") else list(ids.input_ids) for ids in chat] + plain


@pytest.fixture(scope="module")
def reference(smollm2, prompts):
    """transformers' greedy generate, one prompt at a time."""
    out = []
    for ids in prompts:
        with torch.inference_mode():
            gen = smollm2.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                         max_new_tokens=NEW, do_sample=False, pad_token_id=0)
        new = gen[0, len(ids):].tolist()
        out.append(new)
    return out


def make_engine(smollm2, num_blocks=256, block_size=16, max_batch=16):
    runner = ModelRunner(smollm2.model, num_blocks=num_blocks, block_size=block_size,
                         device="cpu", dtype=torch.float32)
    return Engine(runner, smollm2.tokenizer,
                  SchedulerConfig(num_blocks=num_blocks, block_size=block_size, max_batch=max_batch,
                                  max_model_len=smollm2.max_model_len))


def expected(ref, eos):
    """generate stops after EOS; so does the engine (EOS token included)."""
    for i, t in enumerate(ref):
        if t in eos:
            return ref[:i + 1]
    return ref


def test_greedy_tokens_equal_transformers_generate_alone(smollm2, prompts, reference):
    engine = make_engine(smollm2)
    for i, ids in enumerate(prompts):
        tokens, _, finished = run_engine(engine, {0: [(f"p{i}", ids, NEW)]})
        assert tokens[f"p{i}"] == expected(reference[i], engine.eos_token_ids)
        assert finished[f"p{i}"].reason in (FinishReason.LENGTH, FinishReason.EOS)
    assert engine.core.is_drained()


@pytest.mark.parametrize("concurrency", [2, 4, 8, 16])
def test_concurrent_batches_with_late_joiners_give_identical_tokens(smollm2, prompts, reference,
                                                                    concurrency):
    # small blocks so that sequences span several blocks; arrivals staggered by step
    engine = make_engine(smollm2, num_blocks=512, block_size=8)
    arrivals: dict[int, list] = {}
    for k in range(concurrency):
        i = k % len(prompts)
        arrivals.setdefault(3 * (k // 2), []).append((f"c{k}", prompts[i], NEW))
    tokens, _, finished = run_engine(engine, arrivals)
    for k in range(concurrency):
        i = k % len(prompts)
        assert tokens[f"c{k}"] == expected(reference[i], engine.eos_token_ids), f"request c{k}"
    assert engine.core.is_drained()


def test_seeded_sampling_is_reproducible_alone_and_under_concurrency(smollm2, prompts):
    engine = make_engine(smollm2)
    sampling = SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=1234)
    alone, _, _ = run_engine(engine, {0: [("s", prompts[1], 16, sampling)]})
    others = [(f"o{k}", prompts[k], 16, SamplingParams(temperature=1.0, seed=k)) for k in range(5)]
    crowd, _, _ = run_engine(engine, {0: others[:2], 2: [("s", prompts[1], 16, sampling)], 3: others[2:]})
    assert crowd["s"] == alone["s"]
    different, _, _ = run_engine(engine, {0: [("s", prompts[1], 16, SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=99))]})
    assert different["s"] != alone["s"]
    assert engine.core.is_drained()


def test_stop_string_ends_the_sequence_with_reason_stop(smollm2, prompts, reference):
    engine = make_engine(smollm2)
    full = smollm2.tokenizer.decode(reference[0])
    stop = full.strip()[4:7]  # a piece of the answer, wherever tokens fall
    tokens, texts, finished = run_engine(
        engine, {0: [("x", prompts[0], NEW, SamplingParams(stop=(stop,)))]})
    assert finished["x"].reason is FinishReason.STOP
    assert stop not in texts["x"]
    assert full.startswith(texts["x"]) and full[len(texts["x"]):].startswith(stop)
    assert engine.core.is_drained()
