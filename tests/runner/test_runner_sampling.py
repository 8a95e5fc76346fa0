"""Sampling: greedy is argmax (the first of equal largest logits) on every path; a
seeded request gives the same tokens alone and in a batch; top-k and top-p narrow
the draw; unseeded sampling follows the runner's global seed."""
import pytest
import torch

from live.runner.cpu.sampling import CpuGreedy
from live.runner.params import GenerationInput, SamplingParams
from live.runner.sampler import Sampler, greedy_for
from scheduler import Request, Sequence
from tiny_models import drive, make, prompt, request, tiny_llama

SEEDED = dict(temperature=0.9, top_k=40, top_p=0.95, seed=1234)


def run(arrivals):
    core, runner = make(tiny_llama(), block_size=4, max_batch=4)
    outputs = drive(core, runner, arrivals)
    assert core.is_drained()
    assert runner.sampler.generators_held == 0  # every finished sequence was forgotten
    return outputs


def test_seeded_request_same_alone_and_in_a_batch_of_4():
    target = request("t", prompt(7, 1), 12, **SEEDED)
    alone = run({0: [target]})["t"]
    crowded = run({
        0: [request("x", prompt(11, 2), 9, temperature=1.0),
            request("y", prompt(3, 3), 14, temperature=0.7, seed=99)],
        1: [target],
        2: [request("z", prompt(5, 4), 6)],
    })
    assert crowded["t"] == alone
    assert len(set(alone)) > 1


def test_a_different_seed_gives_different_tokens():
    a = run({0: [request("t", prompt(7, 1), 12, **SEEDED)]})["t"]
    b = run({0: [request("t", prompt(7, 1), 12, **{**SEEDED, "seed": 4321})]})["t"]
    assert a != b


def test_unseeded_sampling_follows_the_global_seed():
    arrivals = {0: [request("u", prompt(5, 1), 10, temperature=1.0)]}
    assert run(arrivals)["u"] == run(arrivals)["u"]


def seq(seq_id, **sampling):
    return Sequence(Request(seq_id, 1, 1, GenerationInput((0,), SamplingParams(**sampling))), 0)


def test_top_k_1_and_tiny_top_p_are_greedy():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    seqs = [seq("k", temperature=2.0, top_k=1, seed=1), seq("p", temperature=2.0, top_p=1e-6, seed=2),
            seq("g")]
    for _ in range(5):
        assert Sampler().sample(logits, seqs) == logits.argmax(-1).tolist()


def test_greedy_takes_the_first_of_equal_largest_logits_in_every_dtype():
    """bf16 logits tie often (8 bits of precision): the first wins, as with argmax."""
    logits = torch.zeros(4, 49_152)
    for row, tied in enumerate([(7, 8), (30_000, 5), (0, 49_151), (12, 12)]):
        logits[row, list(tied)] = 3.0
    for dtype in (torch.float32, torch.bfloat16):
        assert Sampler().sample(logits.to(dtype), [seq(f"s{i}") for i in range(4)]) == [7, 5, 0, 12]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("vocab", [1, 7, 16, 17, 100, 49_152])
def test_greedy_on_the_cpu_is_argmax_for_any_vocabulary(vocab, dtype):
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randint(-3, 4, (5, vocab), generator=g).to(dtype)  # many ties
    logits[2] = torch.randn(vocab, generator=g).to(dtype)
    assert isinstance(greedy_for(torch.device("cpu")), CpuGreedy)
    assert Sampler().sample(logits, [seq(f"s{i}") for i in range(5)]) == logits.argmax(-1).tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_over_a_decode_batch_shares_its_rows_out_and_picks_as_argmax(dtype):
    """128 rows of SmolLM2's vocabulary: enough logits for the rows to be shared
    over the threads; each thread count picks torch's argmax, ties included."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randint(-50, 50, (128, 49_152), generator=g).to(dtype)
    greedy = CpuGreedy()
    threads = torch.get_num_threads()
    try:
        picks = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            picks.append(greedy(logits).tolist())
    finally:
        torch.set_num_threads(threads)
    assert picks[0] == picks[1] == picks[2] == logits.argmax(-1).tolist()


def test_without_a_compiler_greedy_takes_torchs_max(tmp_path, monkeypatch):
    monkeypatch.setenv("TWINSTEP_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "no-such-compiler")
    assert not isinstance(greedy_for(torch.device("cpu")), CpuGreedy)
    logits = torch.tensor([[0.0, 2.0, 2.0], [5.0, 1.0, 5.0]], dtype=torch.bfloat16)
    assert Sampler().sample(logits, [seq("a"), seq("b")]) == [1, 0]


def test_top_k_draws_only_from_the_k_most_likely():
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(0))
    allowed = set(logits[0].topk(5).indices.tolist())
    sampler = Sampler()
    drawn = {sampler.sample(logits, [seq("s", temperature=5.0, top_k=5)])[0] for _ in range(200)}
    assert drawn <= allowed and len(drawn) > 1


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    sampler = Sampler()
    drawn = {sampler.sample(logits, [seq("s", temperature=1.0, top_p=0.8)])[0] for _ in range(300)}
    assert drawn == {0, 1}


def test_forget_restarts_a_seeded_generator():
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(0))
    sampler = Sampler()
    s = seq("s", temperature=1.0, seed=7)
    first = [sampler.sample(logits, [s])[0] for _ in range(8)]
    sampler.forget("s")
    assert [sampler.sample(logits, [s])[0] for _ in range(8)] == first


def test_a_seeded_row_draws_the_same_beside_rows_that_cut():
    # A row that neither cuts by top-k nor top-p, alone and beside one that does.
    logits = torch.randn(2, 50, generator=torch.Generator().manual_seed(0))
    plain = seq("plain", temperature=1.0, seed=3)
    alone, beside = Sampler(), Sampler()
    cut = seq("cut", temperature=1.0, top_k=5, seed=4)
    drawn_alone = [alone.sample(logits[:1], [plain])[0] for _ in range(20)]
    drawn_beside = [beside.sample(logits, [plain, cut])[0] for _ in range(20)]
    assert drawn_alone == drawn_beside and len(set(drawn_alone)) > 1
