"""torchao and bitsandbytes adapters: each declared step list reproduces the
library's output bit for bit on a hand-made case whose expected bits are
derived here with numpy float32 arithmetic (not with reference/)."""

import numpy as np
import pytest
import torch

from conformance.kernels import adapters
from conformance.kernels.runner import run_kernel
from conformance.suite.evaluate import evaluate_case
from reference.accumulate import exact_int_mm
from reference.contract import NAMED, select_steps
from reference.epilogue import apply_steps
from reference.operands import GemmOperands


def _np_bf16(x):
    """float32 -> bf16 RNE -> float32 on the bits (numpy, independent of reference.bits)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return (r & 0xFFFFFFFF).astype(np.uint32).view(np.float32)


def _case(out_dtype=torch.bfloat16, seed=3):
    g = torch.Generator().manual_seed(seed)
    m, k, n = 4, 48, 8
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    sa = (torch.rand(m, generator=g) * 0.02 + 1e-3).float()
    sw = (torch.rand(n, generator=g) * 0.004 + 1e-4).float()
    bias = (torch.randn(n, generator=g) * 2).to(out_dtype)
    return GemmOperands(
        a=a,
        b=b,
        scale_a=sa,
        scale_b=sw,
        bias=bias,
        out_dtype=out_dtype,
        name="hand",
        scale_mode="synthetic",
        meta={"source": "test"},
    )


def _np_parts(ops):
    acc = ops.a.numpy().astype(np.int64) @ ops.b.numpy().astype(np.int64).T
    return (
        acc.astype(np.float32),
        ops.scale_a.numpy()[:, None],
        ops.scale_b.numpy()[None, :],
        ops.bias.float().numpy()[None, :],
    )


def _out_f32(ops, name):
    run = run_kernel(adapters.make_spec(name), ops, device="cpu")
    assert run.error is None, run.error
    return run.output.float().numpy()


def test_torchao_int_scaled_matmul_composition_bits():
    pytest.importorskip("torchao")
    ops = _case()
    acc, sa, sw, bias = _np_parts(ops)
    # _quant_int8_per_token_matmul: (acc*s_a)*s_w in float32 -> bf16; then + bias in bf16
    y = _np_bf16((acc * sa) * sw)
    want = _np_bf16(y + bias)
    assert np.array_equal(_out_f32(ops, "torchao").view(np.uint32), want.view(np.uint32))


def test_torchao_w8a8_rounds_to_bf16_between_the_scales():
    pytest.importorskip("torchao")
    ops = _case()
    acc, sa, sw, bias = _np_parts(ops)
    # Int8Tensor linear: int_scaled_matmul(...).to(bf16) * w_scales (fp32) + bias -> bf16
    want = _np_bf16(_np_bf16(acc * sa) * sw + bias)
    got = _out_f32(ops, "torchao-w8a8")
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    one_rounding = _np_bf16((acc * sa) * sw + bias)
    assert (one_rounding != want).any()  # the case exercises the intermediate rounding
    spec = adapters.make_spec("torchao-w8a8")
    assert evaluate_case(spec, ops, device="cpu").checks["C8"].verdict == "pass"


def test_torchao_w8a8_bf16_scales_cast_the_accumulator_to_bf16():
    pytest.importorskip("torchao")
    ops = _case()
    acc, sa, sw, bias = _np_parts(ops)
    want = _np_bf16(_np_bf16(_np_bf16(acc) * _np_bf16(sa)) * sw + bias)
    got = _out_f32(ops, "torchao-w8a8-bf16")
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    steps = adapters.make_spec("torchao-w8a8-bf16").steps
    ref = apply_steps(exact_int_mm(ops.a, ops.b), ops.scale_a, ops.scale_b, steps, bias=ops.bias)
    assert np.array_equal(ref.float().numpy().view(np.uint32), want.view(np.uint32))


def test_bnb_cpu_dequant_constant_and_float16_output():
    pytest.importorskip("bitsandbytes")
    ops = _case()
    acc, sa, sw, bias = _np_parts(ops)
    rs, cs = (sa * np.float32(127)).astype(np.float32), (sw * np.float32(127)).astype(np.float32)
    # backends/default/ops.py: A * (row_stats * col_stats) * 6.200124e-05; += bias; .to(fp16)
    y = (acc * (rs * cs)) * np.float32(6.200124e-05) + bias
    want = _np_bf16(y.astype(np.float16).astype(np.float32))
    got = _out_f32(ops, "bnb")
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # the constant is not the float32 nearest to 1/127**2 (that is the CUDA kernel's)
    assert np.float32(6.200124e-05) != np.float32(1 / 127**2) == np.float32(6.200012e-05)
    spec = adapters.make_spec("bnb")
    assert select_steps(spec.steps, "cpu", torch.bfloat16).to_list()[2] == "mul 6.200124e-05"
    assert "fma 6.200012e-05 bias" in select_steps(spec.steps, "cuda", torch.float16).to_list()
    r = evaluate_case(spec, ops, device="cpu")
    assert r.checks["C8"].verdict == "pass", r.checks["C8"].summary


def test_bnb_float16_output_overflows_where_bf16_would_not():
    pytest.importorskip("bitsandbytes")
    ops = _case()
    ops.scale_a = ops.scale_a * 1e6  # products far above float16's 65504
    ops.bias = None
    got = _out_f32(ops, "bnb")
    assert np.isinf(got).any()  # the fp16 intermediate overflows ...
    exact = NAMED["a_then_w/fp32_before_round"]
    ref = apply_steps(exact_int_mm(ops.a, ops.b), ops.scale_a, ops.scale_b, exact)
    assert torch.isfinite(ref).all()  # ... where a bf16 epilogue stays finite


def test_unavailable_adapter_names_its_reason(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real(n, *a))
    ok, why = adapters.availability("vllm-cutlass")
    assert not ok and why == "vllm is not installed (pip install vllm (CUDA))"


def test_torchao_triton_search_is_replaced_by_the_pinned_config_and_restored():
    pytest.importorskip("torchao")
    it = pytest.importorskip("torchao.kernel.intmm_triton")
    from conformance.kernels.adapters import torchao as ta

    cfg = ta.pinned_config()
    assert (cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"], cfg.kwargs["BLOCK_K"], cfg.num_stages, cfg.num_warps) == (
        64,
        64,
        32,
        3,
        4,
    )
    assert cfg in it.int8_mm_kernel_configs
    # every entry of torchao's list has a power-of-two BLOCK_K >= 32 (the docstring's
    # claim that an even K with K % 32 != 0 reads past K under any of them)
    assert {c.kwargs["BLOCK_K"] for c in it.int8_mm_kernel_configs} == {32, 64, 128, 256}
    assert len(it.int8_mm_kernel_configs) == 960
    original = it.get_best_config_fn
    with ta._with_autotuner(True):
        assert it.get_best_config_fn(None, [], it.int8_mm_kernel_configs) is cfg
    assert it.get_best_config_fn is original


def test_torchao_fp8_declares_torchaos_default_fast_accumulation_and_routes_the_scales():
    """torchao-fp8 follows torchao's default Float8MMConfig (0.18: use_fast_accum=True -> torch-fp8-fast's
    accumulator); on small integers with power-of-two scales every path is exact, so the output must be
    sum_k a b * s_a[m] * s_w[n] (a scale on the wrong axis or a dropped bias changes it). Runs the torchao call on
    the CPU only to check the plumbing: the adapter is declared for CUDA."""
    pytest.importorskip("torchao")
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow

    spec = adapters.make_spec("torchao-fp8")
    fast = Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()).mm_config.use_fast_accum
    want_acc = "fp32 bits=14 truncate" if fast else "fp32 bits=14 truncate promote=128"
    assert spec.devices == ("cuda",) and spec.accumulator_on("cuda").label() == want_acc
    g = torch.Generator().manual_seed(5)
    m, k, n = 4, 32, 16
    a = torch.randint(-4, 5, (m, k), generator=g).float()
    b = torch.randint(-4, 5, (n, k), generator=g).float()
    sa = 2.0 ** torch.randint(-3, 2, (m,), generator=g).float()
    sw = 2.0 ** torch.randint(-3, 2, (n,), generator=g).float()
    bias = torch.arange(n, dtype=torch.float32)
    f8 = torch.float8_e4m3fn
    out = spec.scaled_mm(a.to(f8), b.to(f8), sa, sw, torch.float32, bias)
    want = (a.numpy() @ b.numpy().T) * sa.numpy()[:, None] * sw.numpy()[None, :] + bias.numpy()[None, :]
    assert out.dtype == torch.float32 and np.array_equal(out.numpy(), want.astype(np.float32))
