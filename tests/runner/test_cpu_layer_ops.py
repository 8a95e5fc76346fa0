"""The compiled CPU kernels for a Llama layer's elementwise steps against torch's
ops (`TorchLayerOps`, transformers' arithmetic): in bf16 they round where torch
rounds, so the norm, the residual and the rotation are its bits and the gated
activation is within one unit in the last place (its exp is another's); in
float32 they agree to float rounding. And which ops a runner takes."""
import pytest
import torch

from live.runner.cpu.layer_ops import CpuLayerOps
from live.runner.layer_ops import TorchLayerOps, layer_ops_for
from live.runner.model_runner import ModelRunner
from tiny_models import tiny_llama

EPS = 1e-5
FLOAT32 = dict(atol=1e-6, rtol=1e-6)


def tensors(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(37, 576, generator=g) * 3).to(dtype)
    delta = torch.randn(37, 576, generator=g).to(dtype)
    weight = (1 + 0.3 * torch.randn(576, generator=g)).to(dtype)
    gate_up = (torch.randn(37, 3072, generator=g) * 2).to(dtype)
    qkv = torch.randn(37, 960, generator=g).to(dtype)
    angles = torch.arange(37)[:, None] * 7.0 / 10000 ** (torch.arange(0, 64, 2) / 64)
    angles = torch.cat((angles, angles), -1)[:, None, :]
    return x, delta, weight, gate_up, qkv, angles.cos().to(dtype), angles.sin().to(dtype)


@pytest.fixture(scope="module")
def ops():
    return TorchLayerOps(EPS, "silu"), CpuLayerOps(EPS)


def test_bfloat16_norm_residual_and_rotation_are_torchs_bits(ops):
    torch_ops, cpu_ops = ops
    x, delta, weight, _, qkv, cos, sin = tensors(torch.bfloat16)
    assert torch.equal(cpu_ops.rms_norm(x, weight), torch_ops.rms_norm(x, weight))

    residual_torch, residual_cpu = x.clone(), x.clone()
    normed = cpu_ops.add_rms_norm(residual_cpu, delta, weight)
    assert torch.equal(normed, torch_ops.add_rms_norm(residual_torch, delta, weight))
    assert torch.equal(residual_cpu, residual_torch) and torch.equal(residual_cpu, x + delta)

    rotated = qkv.clone()
    qk = rotated[:, :768].view(37, 12, 64)  # q and k of a fused projection, rows 960 apart
    assert cpu_ops.rotate(qk, cos, sin) is qk
    assert torch.equal(qk, torch_ops.rotate(qkv[:, :768].view(37, 12, 64), cos, sin))
    assert torch.equal(rotated[:, 768:], qkv[:, 768:])  # v untouched


def test_bfloat16_gated_activation_is_within_one_unit_in_the_last_place(ops):
    torch_ops, cpu_ops = ops
    gate_up = tensors(torch.bfloat16)[3]
    ours, theirs = cpu_ops.gated(gate_up).float(), torch_ops.gated(gate_up).float()
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=2 ** -7)
    assert (ours == theirs).float().mean() > 0.999


def test_float32_agrees_to_float_rounding(ops):
    torch_ops, cpu_ops = ops
    x, delta, weight, gate_up, qkv, cos, sin = tensors(torch.float32, seed=1)
    torch.testing.assert_close(cpu_ops.rms_norm(x, weight), torch_ops.rms_norm(x, weight), **FLOAT32)
    residual_torch, residual_cpu = x.clone(), x.clone()
    torch.testing.assert_close(cpu_ops.add_rms_norm(residual_cpu, delta, weight),
                               torch_ops.add_rms_norm(residual_torch, delta, weight), **FLOAT32)
    assert torch.equal(residual_cpu, residual_torch)
    torch.testing.assert_close(cpu_ops.gated(gate_up), torch_ops.gated(gate_up), **FLOAT32)
    qk = qkv[:, :768].view(37, 12, 64)
    torch.testing.assert_close(cpu_ops.rotate(qk.clone(), cos, sin), torch_ops.rotate(qk, cos, sin),
                               **FLOAT32)


def test_what_cannot_be_written_in_place_is_refused(ops):
    _, cpu_ops = ops
    x, delta, weight, *_ = tensors(torch.float32)
    with pytest.raises(ValueError, match="must be contiguous"):
        cpu_ops.add_rms_norm(x.t().contiguous().t(), delta, weight)
    with pytest.raises(ValueError, match="beside"):
        cpu_ops.rms_norm(x, weight.bfloat16())


@pytest.mark.parametrize("dtype,act,native", [
    (torch.float32, "silu", True), (torch.bfloat16, "silu", True),
    (torch.float16, "silu", False), (torch.bfloat16, "gelu_pytorch_tanh", False)])
def test_a_runner_takes_the_kernels_for_float32_and_bfloat16_with_silu(dtype, act, native):
    runner = ModelRunner(tiny_llama(hidden_act=act), num_blocks=4, block_size=4, dtype=dtype)
    assert isinstance(runner.arch.ops, CpuLayerOps if native else TorchLayerOps)


def test_without_a_compiler_the_ops_are_torchs(tmp_path, monkeypatch):
    monkeypatch.setenv("TWINSTEP_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "no-such-compiler")
    assert isinstance(layer_ops_for(torch.device("cpu"), torch.bfloat16, EPS, "silu"), TorchLayerOps)
