"""fbgemm-gpu-genai adapters: the package needs CUDA, so stand-ins implementing the kernels' source math op for op
(i8i8bf16's LinearCombination, f8f8bf16_rowwise's EVT, matmul_fp8_row's Triton epilogue) run through the adapters on
the CPU, held to the declared steps by C8; a stand-in with another order fails; the constraints and kernel choice
are pinned; one test runs the real package natively when it and CUDA are present."""

import dataclasses
import functools
import importlib.util
from types import SimpleNamespace

import pytest
import torch

from conformance.cases import make_case
from conformance.cases.fp8 import fp8_family_cases, scale_order_ties_case
from conformance.kernels import adapters
from conformance.kernels.adapters import fbgemm as fb
from conformance.suite.evaluate import evaluate_case

E4M3 = torch.float8_e4m3fn


def _fma32(x, c, b):
    """IEEE fmaf on float32 tensors: the float64 product is exact; TwoSum + round-to-odd, then one RNE to float32."""
    p = x.double() * c.double()
    bd = b.double().expand_as(p)
    s = p + bd
    bb = s - p
    e = (p - (s - bb)) + (bd - bb)
    even = (s.view(torch.int64) & 1) == 0
    toward = torch.where(e > 0, torch.full_like(s, float("inf")), torch.full_like(s, float("-inf")))
    return torch.where((e != 0) & even, torch.nextafter(s, toward), s).float()


def _acc_fp8(a, b):  # exact for the accumulator-safe FP8 families
    return (a.double() @ b.double().T).float()


def i8i8bf16(xq, wq, scale, split_k=1):
    """LinearCombination<bf16, 8, int32, float>, beta 0: bf16_rn(float(scale) * float(acc))."""
    assert xq.is_contiguous() and wq.is_contiguous() and isinstance(scale, float) and split_k == 1
    acc = (xq.long() @ wq.long().T).float()
    return (acc * torch.tensor(scale, dtype=torch.float64).float()).to(torch.bfloat16)


def i8i8bf16_bf16_acc(xq, wq, scale, split_k=1):
    """wrong: the accumulator rounded to bf16 before the scale"""
    acc = (xq.long() @ wq.long().T).float().to(torch.bfloat16).float()
    return (acc * torch.tensor(scale, dtype=torch.float64).float()).to(torch.bfloat16)


def _rowwise(first, second):
    def f8f8bf16_rowwise(xq, wq, x_scale, w_scale, bias=None, use_fast_accum=True):
        """Compute0 = first * acc; Compute1 (+ the null-or-float32 bias, contracted) = fma(second, t, bias); bf16."""
        assert xq.dtype == wq.dtype == E4M3 and xq.is_contiguous() and wq.is_contiguous() and use_fast_accum
        m, n = xq.shape[0], wq.shape[0]
        assert x_scale.shape == (m,) and w_scale.shape == (n,) and x_scale.dtype == w_scale.dtype == torch.float32
        assert bias is None or (bias.dtype == torch.float32 and bias.shape == (n,))
        s = {"x": x_scale.reshape(m, 1), "w": w_scale.reshape(1, n)}
        t = _acc_fp8(xq, wq) * s[first]
        b = torch.zeros(()) if bias is None else bias.reshape(1, n)
        return _fma32(t, s[second].expand_as(t), b).to(torch.bfloat16)

    return f8f8bf16_rowwise


def _triton(tuner, config, fused_scales=True):
    def matmul_fp8_row(a, b, a_scale, b_scale, bias=None, tma_persistent=True, **kw):
        """scale = a_scale * b_scale; acc *= scale; acc += bias (fused: one fma; no bias: a plain multiply); bf16."""
        assert tuner.configs == [config] and tma_persistent is False
        x = _acc_fp8(a, b)
        sa, sb = a_scale.reshape(-1, 1), b_scale.reshape(1, -1)
        if fused_scales:
            y = _fma32(x, (sa * sb).expand_as(x), bias.float()) if bias is not None else x * (sa * sb)
        else:  # wrong: (acc * a_scale) * b_scale
            y = (x * sa) * sb + (0 if bias is None else bias.float())
        return y.to(torch.bfloat16)

    return matmul_fp8_row


def _cpu(spec):
    acc = {"accumulator": {"cpu": "fp32"}} if spec.is_fp8 else {}
    return dataclasses.replace(spec, devices=("cpu",), **acc)


def _triton_spec(fused_scales=True):
    tuner, config = SimpleNamespace(configs=["a", "b", "c"]), SimpleNamespace(kwargs={})
    return _cpu(fb.build_spec("fbgemm-triton-fp8", (_triton(tuner, config, fused_scales), tuner, config)))


@functools.lru_cache(maxsize=1)
def _fp8_cases():
    """two scale-order tie cases and three bf16 bias cases inside the CUTLASS constraints (K % 16, N % 8)"""
    ties = [scale_order_ties_case(torch.bfloat16), scale_order_ties_case(torch.bfloat16, m=129, variant="ties_prefill")]
    with_bias = [
        c
        for c in fp8_family_cases(["small_int"])
        if c.bias is not None and c.out_dtype == torch.bfloat16 and c.a.shape[1] % 16 == 0 and c.b.shape[0] % 8 == 0
    ]
    return tuple(ties + with_bias[:3])


@pytest.mark.parametrize("kind", ["scalar_scales", "ordinary", "m1"])
def test_int8_standin_holds_its_declared_steps(kind):
    spec = _cpu(fb.build_spec("fbgemm-int8", i8i8bf16))
    r = evaluate_case(spec, make_case(kind, 0), device="cpu")
    if kind == "scalar_scales":
        assert r.checks["C8"].verdict == "pass", r.checks["C8"].summary
        assert r.run_manifest["path"].startswith("fbgemm/i8i8bf16/sm80-")
    else:  # per-row scales: outside scales="tensor", recorded as skipped with the reason
        assert r.not_run_reason and "scale" in r.not_run_reason


def test_int8_accumulator_rounded_to_bf16_fails_c8():
    spec = _cpu(fb.build_spec("fbgemm-int8", i8i8bf16_bf16_acc))
    assert evaluate_case(spec, make_case("scalar_scales", 0), device="cpu").checks["C8"].verdict == "fail"


def test_int8_scale_is_the_float32_product_of_the_two_scales():
    seen = {}

    def op(xq, wq, scale, split_k):
        seen["scale"] = scale
        return torch.zeros(xq.shape[0], wq.shape[0], dtype=torch.bfloat16)

    sa, sw = torch.tensor(1 / 3, dtype=torch.float32), torch.tensor([0.1], dtype=torch.float32)
    a, b = torch.ones(2, 16, dtype=torch.int8), torch.ones(8, 16, dtype=torch.int8)
    fb.build_spec("fbgemm-int8", op).scaled_mm(a, b, sa, sw)
    # exact in float64, so the op's float(scale) is the float32 product (one RNE)
    assert torch.tensor(seen["scale"]).float() == sa * sw
    assert seen["scale"] == float(sa) * float(sw)


@pytest.mark.parametrize("i", range(5))
def test_rowwise_standin_holds_its_declared_steps(i):
    case = _fp8_cases()[i]
    r = evaluate_case(_cpu(fb.build_spec("fbgemm-fp8-rowwise", _rowwise("x", "w"))), case, device="cpu")
    assert r.checks["C8"].verdict == "pass", (case.name, r.checks["C8"].summary)
    assert r.run_manifest["path"].startswith("fbgemm/f8f8bf16_rowwise_")


def test_rowwise_w_scale_first_fails_c8_on_the_ties():
    spec = _cpu(fb.build_spec("fbgemm-fp8-rowwise", _rowwise("w", "x")))
    assert evaluate_case(spec, scale_order_ties_case(torch.bfloat16), device="cpu").checks["C8"].verdict == "fail"


@pytest.mark.parametrize("i", range(5))
def test_triton_standin_holds_its_declared_steps(i):
    case = _fp8_cases()[i]
    r = evaluate_case(_triton_spec(), case, device="cpu")
    assert r.checks["C8"].verdict == "pass", (case.name, r.checks["C8"].summary)
    assert r.run_manifest["path"] == "fbgemm/triton-matmul_fp8_row/persistent-fast-accum"


def test_triton_scales_applied_one_by_one_fail_c8_on_the_ties():
    r = evaluate_case(_triton_spec(fused_scales=False), scale_order_ties_case(torch.bfloat16), device="cpu")
    assert r.checks["C8"].verdict == "fail"


def test_declarations_and_constraints():
    int8 = fb.build_spec("fbgemm-int8", i8i8bf16)
    assert int8.steps.to_list() == ["cast fp32", "mul s_a*s_w", "add bias", "cast out"] and not int8.is_fp8
    c = int8.constraints
    assert (c.k_multiple, c.n_multiple, c.out_dtypes, c.scales, c.bias) == (16, 8, ("bfloat16",), "tensor", False)
    assert c.violations(3, 40, 12) == ["K=40 is not a multiple of 16", "N=12 is not a multiple of 8"]
    row = fb.build_spec("fbgemm-fp8-rowwise", _rowwise("x", "w"))
    assert row.steps.to_list() == ["cast fp32", "mul s_a", "fma s_w bias", "cast out"]
    assert (row.constraints.k_multiple, row.constraints.n_multiple, row.constraints.bias) == (16, 8, True)
    acc = row.accumulator["cuda"]
    assert (acc.kind, acc.bits, acc.rounding, acc.promote_every) == ("fp32", 14, "truncate", None) and row.is_fp8
    tri = _triton_spec()
    assert tri.steps.to_list() == ["cast fp32", "fma s_a*s_w bias?", "cast out"]
    assert tri.constraints.violations(1, 5, 3) == [] and tri.constraints.out_dtypes == ("bfloat16",)
    unfused = fb.build_spec("fbgemm-triton-fp8", (None, None, None), fused=False)
    assert unfused.steps.name == "fused/fp32_before_round"
    for name in ("fbgemm-int8", "fbgemm-fp8-rowwise", "fbgemm-triton-fp8"):
        assert adapters.ADAPTERS[name].devices == ("cuda",) and "fbgemm_gpu" in adapters.ADAPTERS[name].requires


@pytest.mark.parametrize(
    "mnk, path",
    [
        ((8, 4096, 1024), "fbgemm/i8i8bf16/sm80-64x128x64-w32x64x64"),
        ((128, 1024, 4096), "fbgemm/i8i8bf16/sm80-64x64x128-w32x32x128"),
        ((129, 4096, 4096), "fbgemm/i8i8bf16/sm80-256x128x64-w64x64x64"),
    ],
)
def test_int8_kernel_choice(mnk, path):
    assert fb.int8_path(*mnk) == path


@pytest.mark.parametrize(
    "m, n, k, fast, kernel",
    [
        (1, 8192, 4096, True, "64_16_128_1_1_1_9_f_f"),
        (32, 8192, 4096, True, "64_32_128_2_1_1_9_f_f"),
        (100, 5000, 64, True, "64_128_128_1_1_1_9_f_f"),
        (300, 8192, 64, True, "128_256_128_2_1_1_9_f_t"),
        (300, 8192, 64, False, "64_256_128_1_1_1_9_f_f"),
        (4096, 4096, 4096, True, "128_128_128_2_1_1_9_t_f"),
        (9000, 9000, 8192, True, "128_256_128_4_4_1_9_f_t"),
        (4096, 4096, 8192, True, "128_256_128_2_1_1_9_f_t"),
    ],
)
def test_rowwise_kernel_choice_follows_the_heuristic(m, n, k, fast, kernel):
    assert fb.rowwise_kernel(m, n, k, fast) == "f8f8bf16_rowwise_" + kernel


def test_rowwise_rejects_other_out_dtypes_in_one_line():
    from reference.errors import OperandError

    spec = fb.build_spec("fbgemm-fp8-rowwise", _rowwise("x", "w"))
    a, b, s = torch.zeros(2, 16).to(E4M3), torch.zeros(8, 16).to(E4M3), torch.ones(())
    with pytest.raises(OperandError, match="bfloat16 only"):
        spec.scaled_mm(a, b, s, s, out_dtype=torch.float16)


def _native_ready() -> str:
    if importlib.util.find_spec("fbgemm_gpu") is None:
        return "fbgemm_gpu (fbgemm-gpu-genai) is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    return ""


@pytest.mark.skipif(bool(_native_ready()), reason=_native_ready() or "ready")
@pytest.mark.parametrize("name", ["fbgemm-int8", "fbgemm-fp8-rowwise", "fbgemm-triton-fp8"])
def test_real_package_natively(name):
    spec = adapters.make_spec(name)
    cases = [make_case("scalar_scales", 0)] if name == "fbgemm-int8" else _fp8_cases()
    for case in cases:
        r = evaluate_case(spec, case.to("cuda") if hasattr(case, "to") else case, device="cuda")
        assert r.checks["C8"].verdict == "pass", (name, case.name, r.checks["C8"].summary)
        assert r.run_manifest["path"].startswith("fbgemm/")
