"""cutlass-int8 (CUTLASS Python interface, sm90 int8 GEMM + traced epilogue visitor): not runnable here (no GPU,
no nvcc), so a stand-in doing the kernel's PTX op for op (cvt.rn.f32.s32; mul.f32 by s_a; fma.rn.f32 by s_w with the
bias, +0.0 without one; cvt.rn to out) runs through the harness on the CPU against the declared steps; a real test
runs the package natively where it and an sm90 GPU are present."""

import dataclasses
import importlib.util

import pytest
import torch

from conformance.cases import make_case
from conformance.cases.outputs import signed_zero_family
from conformance.kernels.adapters import ADAPTERS
from conformance.kernels.adapters.cutlass import CONSTRAINTS, STEPS, build_spec, evt
from conformance.kernels.spec import ShapeConstraints
from conformance.suite.evaluate import evaluate_case


def _fma32(x, y, z):
    """IEEE fmaf on float32 tensors: x*y exact in float64, the float64 sum rounded to odd, then to float32."""
    p, z = x.double() * y.double(), z.double()
    s = p + z
    bb = s - p
    err = (p - (s - bb)) + (z - bb)  # TwoSum: s + err == p + z exactly
    even = (s.view(torch.int64) & 1) == 0
    inf = torch.full_like(s, float("inf"))
    s = torch.where((err != 0) & even, torch.nextafter(s, torch.where(err > 0, inf, -inf)), s)
    return s.float()


def _vectors(a, b, scale_a, scale_b):
    m, n = a.shape[0], b.shape[0]
    sa, sb = scale_a.float().reshape(-1), scale_b.float().reshape(-1)
    return sa.expand(m).reshape(m, 1), sb.expand(n).reshape(1, n)


def evt_standin(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """The PTX of the traced EVT: cvt.rn.f32.s32, mul.f32 s_a, fma.rn.f32(., s_w, bias or +0.0), cvt.rn out."""
    sa, sb = _vectors(a, b, scale_a, scale_b)
    acc = (a.long() @ b.long().t()).float()
    z = torch.zeros(1, b.shape[0]) if bias is None else bias.float().reshape(1, -1)
    return _fma32(acc * sa, sb, z).to(out_dtype)


def unfused_standin(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """(acc*s_a)*s_w rounded, then + bias rounded: what the visitor would do compiled with -fmad=false."""
    sa, sb = _vectors(a, b, scale_a, scale_b)
    y = ((a.long() @ b.long().t()).float() * sa) * sb
    return (y + bias.float() if bias is not None else y).to(out_dtype)


def swapped_standin(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """The scales in the other order: fma(acc*s_w, s_a, bias)."""
    sa, sb = _vectors(a, b, scale_a, scale_b)
    z = torch.zeros(1, b.shape[0]) if bias is None else bias.float().reshape(1, -1)
    return _fma32((a.long() @ b.long().t()).float() * sb, sa, z).to(out_dtype)


def _cpu(fn):
    # the stand-in runs any shape: the kernel's own constraints are pinned below
    spec = build_spec("cutlass-int8", fn, "standin")
    return dataclasses.replace(spec, devices=("cpu",), constraints=ShapeConstraints())


def _fp32_bias_case():
    c = make_case("bias", 0)
    return dataclasses.replace(c, out_dtype=torch.float32, bias=c.bias.float(), name=c.name + "-fp32")


CASES = {k: lambda k=k: make_case(k, 0) for k in ("epilogue_ties", "bias", "column_scales", "scalar_scales")}
CASES["bias-fp32"] = _fp32_bias_case
CASES.update({c.name: lambda c=c: c for c in signed_zero_family(0)})


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_visitors_math_passes_c8_on_the_declared_steps(name):
    r = evaluate_case(_cpu(evt_standin), CASES[name](), device="cpu")
    assert r.checks["C8"].verdict == "pass", r.checks["C8"].summary
    assert r.verdict == "pass"


@pytest.mark.parametrize(
    ("fn", "name"),
    [
        (swapped_standin, "epilogue_ties"),  # the scales in the other order
        (unfused_standin, "bias-fp32"),  # mul then add: 5 of 384 elements 1 ulp off the fma
        (unfused_standin, "family/signed_zero/zeros-real-fp32"),  # no bias: a -0 product where fma(+0.0) gives +0
    ],
)
def test_another_order_an_unfused_bias_or_a_bias_free_kernel_fails_c8(fn, name):
    r = evaluate_case(_cpu(fn), CASES[name](), device="cpu")
    assert r.checks["C8"].verdict == "fail"


def test_declaration_and_constraints_are_pinned():
    assert STEPS.to_list() == ["cast fp32", "mul s_a", "fma s_w bias", "cast out"]
    spec = build_spec("cutlass-int8", evt_standin, "standin")
    assert spec.contract.label() == "a_then_w/bias:fp32_before_round/rne"
    assert spec.devices == ("cuda",) and spec.steps is STEPS
    assert CONSTRAINTS.violations(3, 40, 24) == ["K=40 is not a multiple of 16", "N=24 is not a multiple of 16"]
    assert CONSTRAINTS.violations(1, 16, 16) == []
    assert CONSTRAINTS.operand_violations(torch.ones(()), torch.ones(()), None, torch.int32) == [
        "out dtype int32 is not one of bfloat16, float16, float32"
    ]
    assert spec.warm_up(None, None, None, None, out_dtype=torch.float16, bias=torch.ones(2)) == "torch.float16"
    assert ADAPTERS["cutlass-int8"].devices == ("cuda",)


def test_the_epilogue_function_is_one_assignment_and_a_return():
    # cutlass_cppgen parses evt's source into the visitor tree; a docstring or a host read would become a node
    import ast
    import inspect
    import textwrap

    body = ast.parse(textwrap.dedent(inspect.getsource(evt))).body[0].body
    assert [type(s).__name__ for s in body] == ["Assign", "Return"]
    assert ast.unparse(body[0]) == "D = accum * scale_a * scale_b + bias"


def _native_reason() -> str:
    if importlib.util.find_spec("cutlass_cppgen") is None:
        return "nvidia-cutlass is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    if torch.cuda.get_device_capability() != (9, 0):
        return "the adapter builds sm90 kernels only"
    return ""


@pytest.mark.skipif(bool(_native_reason()), reason=_native_reason() or "runs")
@pytest.mark.parametrize("kind", ["epilogue_ties", "bias", "family/signed_zero/zeros-real-fp32"])
def test_the_real_kernel_natively(kind):
    from conformance.kernels.adapters import make_spec

    case = CASES[kind]() if kind in CASES else make_case(kind, 0)
    r = evaluate_case(make_spec("cutlass-int8"), case, device="cuda")
    assert r.checks["C8"].verdict == "pass", r.checks["C8"].summary
    assert r.verdict == "pass", r
