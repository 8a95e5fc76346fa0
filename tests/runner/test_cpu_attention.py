"""The compiled CPU decode attention against the reference `paged_decode_attention`
on random paged caches (`paged_cases`), its build (once per shape, cached, sharing
torch's OpenMP runtime) and the reference path a runner falls back to without a
compiler."""
from pathlib import Path

import pytest
import torch

from live.runner.cpu import build
from live.runner.attention import ReferenceDecodeAttention
from live.runner.cpu.attention import CpuDecodeAttention
from live.runner.cpu.kv_write import CpuKVWrite
from live.runner.kv_cache import index_write
from live.runner.model_runner import ModelRunner
from paged_cases import LENGTHS, random_case, reference, strided_case
from tiny_models import drive, make, prompt, request, tiny_llama


@pytest.mark.parametrize("block_size", [1, 4, 6, 16])
@pytest.mark.parametrize("heads,kv_heads,dim", [(4, 4, 16), (6, 2, 16), (8, 2, 24), (9, 3, 64)])
def test_float32_equals_the_reference(heads, kv_heads, dim, block_size):
    q, k_cache, v_cache, tables = random_case(heads, kv_heads, dim, block_size, torch.float32)
    attention = CpuDecodeAttention(heads, kv_heads, dim)
    out = attention(q, k_cache, v_cache, attention.context(tables, LENGTHS), 0.3)
    assert out.shape == q.shape and out.dtype == torch.float32
    torch.testing.assert_close(out, reference(q, k_cache, v_cache, tables, LENGTHS, block_size, 0.3),
                               atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("heads,kv_heads,dim", [(4, 4, 32), (9, 3, 64)])
def test_bfloat16_is_the_float32_answer_rounded_once(heads, kv_heads, dim):
    """Scores, softmax and sums in float32 from the bf16 cache: the only error left
    is the output's rounding to bf16: half a unit in the last place, at most 2^-8
    of the value."""
    q, k_cache, v_cache, tables = random_case(heads, kv_heads, dim, 4, torch.bfloat16, seed=1)
    attention = CpuDecodeAttention(heads, kv_heads, dim)
    out = attention(q, k_cache, v_cache, attention.context(tables, LENGTHS), 0.2)
    assert out.dtype == torch.bfloat16
    expected = reference(q, k_cache, v_cache, tables, LENGTHS, 4, 0.2)
    torch.testing.assert_close(out.float(), expected, atol=1e-5, rtol=2 ** -8)


def test_every_thread_count_gives_the_same_bits():
    """Each sequence is summed by one thread in one order, however many share the work."""
    q, k_cache, v_cache, tables = random_case(9, 3, 64, 16, torch.bfloat16, seed=3)
    attention = CpuDecodeAttention(9, 3, 64)
    context = attention.context(tables, LENGTHS)
    threads = torch.get_num_threads()
    try:
        outs = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            outs.append(attention(q, k_cache, v_cache, context, 0.125))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def test_reads_strided_queries_as_the_model_hands_them():
    strided, k_cache, v_cache, tables, expected = strided_case()
    attention = CpuDecodeAttention(4, 4, 16)
    out = attention(strided, k_cache, v_cache, attention.context(tables, LENGTHS), 0.25)
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=2e-5)


def test_shapes_that_do_not_fit_are_refused():
    q, k_cache, v_cache, tables = random_case(6, 2, 16, 4, torch.float32)
    attention = CpuDecodeAttention(6, 2, 16)
    context = attention.context(tables, LENGTHS)
    with pytest.raises(ValueError, match="built for 6 heads over 2 of 16"):
        attention(q[:, :5], k_cache, v_cache, context, 1.0)
    with pytest.raises(ValueError, match="built for 6 heads over 2 of 16"):
        attention(q[..., :8], k_cache[..., :8], v_cache[..., :8], context, 1.0)
    with pytest.raises(ValueError, match="built for 6 heads over 2 of 16"):
        attention(q, k_cache[:, :, :1], v_cache[:, :, :1], context, 1.0)
    with pytest.raises(ValueError, match=f"{len(LENGTHS)} queries"):
        attention(q, k_cache, v_cache, attention.context(tables[:5], LENGTHS[:5]), 1.0)
    with pytest.raises(ValueError, match="of q's dtype"):
        attention(q, k_cache.bfloat16(), v_cache.bfloat16(), context, 1.0)
    with pytest.raises(ValueError, match="do not group"):
        CpuDecodeAttention(6, 4, 16)


def test_one_build_per_shape_kept_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TWINSTEP_CACHE", str(tmp_path))
    CpuDecodeAttention(4, 2, 16)
    built = sorted((tmp_path / "kernels").glob("*.so"))
    assert len(built) == 1
    stamp = built[0].stat().st_mtime_ns
    CpuDecodeAttention(4, 2, 16)  # the same shape: the same build
    assert sorted((tmp_path / "kernels").glob("*.so")) == built
    assert built[0].stat().st_mtime_ns == stamp
    CpuDecodeAttention(8, 4, 16)
    CpuDecodeAttention(4, 2, 32)
    assert len(list((tmp_path / "kernels").glob("*.so"))) == 3
    assert not [p for p in (tmp_path / "kernels").iterdir() if p.suffix != ".so"]


def test_the_kernel_shares_torchs_openmp_runtime():
    CpuDecodeAttention(4, 2, 16)
    loaded = {Path(line.split()[-1]).resolve() for line in open("/proc/self/maps")
              if "libgomp" in line}
    assert len(loaded) == 1, loaded


def test_without_a_compiler_the_runner_takes_the_reference_path(tmp_path, monkeypatch):
    monkeypatch.setenv("TWINSTEP_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "no-such-compiler")
    model = tiny_llama()
    core, runner = make(model)
    assert isinstance(runner.decode_attention, ReferenceDecodeAttention)
    assert runner.cache._write is index_write
    with pytest.raises(build.NativeBuildError, match="no C\\+\\+ compiler"):
        CpuDecodeAttention(4, 2, 16)

    outputs = drive(core, runner, {0: [request("a", prompt(9, 1), 6), request("b", prompt(3, 2), 6)]})

    monkeypatch.delenv("CXX")
    compiled_core, compiled = make(model)
    assert isinstance(compiled.decode_attention, CpuDecodeAttention)
    assert isinstance(compiled.cache._write, CpuKVWrite)
    assert outputs == drive(compiled_core, compiled,
                            {0: [request("a", prompt(9, 1), 6), request("b", prompt(3, 2), 6)]})
    assert core.is_drained() and compiled_core.is_drained()


def test_a_source_that_does_not_compile_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("TWINSTEP_CACHE", str(tmp_path))
    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    with pytest.raises(build.NativeBuildError, match="failed"):
        build.load_kernel(broken, {})
    assert not list((tmp_path / "kernels").iterdir())


def test_float16_on_the_cpu_takes_the_reference_path():
    runner = ModelRunner(tiny_llama(), num_blocks=8, block_size=4, dtype=torch.float16)
    assert isinstance(runner.decode_attention, ReferenceDecodeAttention)
