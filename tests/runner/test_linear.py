"""Projections with their weights laid out once: where oneDNN's bf16 kernels run,
bf16 weights are packed for them and give `F.linear`'s results to the bit; float32
keeps `F.linear` on the weight as it is."""
import pytest
import torch
import torch.nn.functional as F

from live.runner.linear import DenseProjection, PackedProjection, packs, projection
from live.runner.model_runner import ModelRunner
from tiny_models import tiny_gpt2, tiny_llama

needs_onednn_bf16 = pytest.mark.skipif(not packs(torch.device("cpu"), torch.bfloat16),
                                       reason="no oneDNN bf16 kernels on this CPU")


@needs_onednn_bf16
@pytest.mark.parametrize("rows", [1, 2, 3, 17, 64, 300])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
def test_packed_bfloat16_gives_f_linear_to_the_bit(rows, with_bias):
    g = torch.Generator().manual_seed(rows)
    weight = torch.randn(96, 40, generator=g).bfloat16()
    bias = torch.randn(96, generator=g).bfloat16() if with_bias else None
    x = torch.randn(rows, 40, generator=g).bfloat16()
    project = projection(weight, bias)
    assert isinstance(project, PackedProjection) and project.weight.is_mkldnn
    assert torch.equal(project(x), F.linear(x, weight, bias))


@pytest.mark.parametrize("rows", [1, 2, 3, 5])
def test_float32_is_f_linear_on_the_plain_weight(rows):
    g = torch.Generator().manual_seed(rows)
    weight, bias = torch.randn(24, 16, generator=g), torch.randn(24, generator=g)
    x = torch.randn(rows, 16, generator=g)
    project = projection(weight, bias)
    assert isinstance(project, DenseProjection) and project.weight is weight
    torch.testing.assert_close(project(x), F.linear(x, weight, bias), atol=1e-6, rtol=1e-6)


@needs_onednn_bf16
@pytest.mark.parametrize("build", [tiny_gpt2, tiny_llama], ids=["gpt2", "llama"])
def test_a_bfloat16_runner_packs_every_projection_and_float32_none(build):
    model = build()
    bf16 = ModelRunner(model, num_blocks=4, block_size=4, dtype=torch.bfloat16).arch
    fp32 = ModelRunner(model, num_blocks=4, block_size=4).arch
    layers = (bf16.blocks, fp32.blocks) if hasattr(bf16, "blocks") else (bf16.layers, fp32.layers)
    packed = [p for layer in layers[0] for p in layer.values() if callable(p)] + [bf16.lm_head]
    dense = [p for layer in layers[1] for p in layer.values() if callable(p)] + [fp32.lm_head]
    assert len(packed) == 4 * model.config.num_hidden_layers + 1 == len(dense)
    assert all(isinstance(p, PackedProjection) for p in packed)
    assert all(isinstance(p, DenseProjection) for p in dense)


@pytest.mark.parametrize("bf16_instructions", [False, True], ids=["without", "with"])
def test_bfloat16_on_a_cpu_without_its_instructions_says_so_when_built(bf16_instructions,
                                                                        monkeypatch, caplog):
    import live.runner.model_runner as model_runner
    monkeypatch.setattr(model_runner, "packs", lambda device, dtype: bf16_instructions)
    with caplog.at_level("WARNING", logger="twinstep.runner"):
        ModelRunner(tiny_llama(), num_blocks=4, block_size=4, dtype=torch.bfloat16)
        ModelRunner(tiny_llama(), num_blocks=4, block_size=4)
    said = [r.getMessage() for r in caplog.records if "bfloat16 on a CPU" in r.getMessage()]
    assert said == ([] if bf16_instructions else [model_runner.BF16_WITHOUT_INSTRUCTIONS])
