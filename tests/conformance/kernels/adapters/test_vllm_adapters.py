"""vLLM-family adapters (vLLM cutlass_scaled_mm / triton_scaled_mm, sgl-kernel
int8_scaled_mm): not installable here, so they are tested against their
documented signatures with stand-in callables implementing the documented
math; the stand-ins also assert the layout the adapter hands over."""

import dataclasses

import pytest
import torch

from conformance.cases import make_case
from conformance.kernels.adapters.vllm import TARGETS, build_spec
from conformance.suite.evaluate import evaluate_case


def _acc(a, b_kn):
    # exact: int64 products of int8 values
    return (a.long() @ b_kn.long()).float()


def _check_layout(a, b, scale_a, scale_b):
    m, k = a.shape
    assert b.shape == (k, b.shape[1]) and b.stride() == (1, k), "b must be [K,N] column-major"
    assert scale_a.shape == (m, 1) and scale_b.shape == (b.shape[1], 1)
    assert scale_a.dtype == scale_b.dtype == torch.float32


def cutlass_standin(a, b, scale_a, scale_b, out_dtype, bias=None):
    """ScaledEpilogue(Bias): float(acc) * s_w, then * s_a, + bias in float, one rounding."""
    _check_layout(a, b, scale_a, scale_b)
    y = (_acc(a, b) * scale_b.t()) * scale_a
    return (y + bias.float() if bias is not None else y).to(out_dtype)


def triton_standin(input, weight, scale_a, scale_b, out_dtype, bias=None):
    """triton_scaled_mm: acc * s_a, * s_w, cast, then + bias in out_dtype."""
    _check_layout(input, weight, scale_a, scale_b)
    y = ((_acc(input, weight) * scale_a) * scale_b.t()).to(out_dtype)
    return y + bias if bias is not None else y


def sgl_standin(mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None):
    """EpilogueVisitorPerRowPerCol: accum * (scale_col * scale_row), + bias, one conversion."""
    _check_layout(mat_a, mat_b, scales_a, scales_b)
    y = _acc(mat_a, mat_b) * (scales_b.t() * scales_a)
    return (y + bias.float() if bias is not None else y).to(out_dtype)


STANDINS = {"vllm-cutlass": cutlass_standin, "vllm-triton": triton_standin, "sgl-int8": sgl_standin}


def _cpu(spec):
    return dataclasses.replace(spec, devices=("cpu",))


@pytest.mark.parametrize("name", sorted(TARGETS))
@pytest.mark.parametrize("kind", ["epilogue_ties", "bias", "column_scales", "scalar_scales"])
def test_vllm_family_adapter_holds_the_documented_math_to_its_declared_steps(name, kind):
    spec = _cpu(build_spec(name, STANDINS[name], "standin"))
    r = evaluate_case(spec, make_case(kind, 0), device="cpu")
    assert r.checks["C8"].verdict == "pass", r.checks["C8"].summary
    assert r.verdict == "pass"


def test_wrong_scale_order_fails_c8_on_the_tie_case():
    # a stand-in doing a_then_w while vllm-cutlass declares w_then_a
    spec = _cpu(build_spec("vllm-cutlass", triton_standin, "standin"))
    r = evaluate_case(spec, make_case("epilogue_ties", 0), device="cpu")
    assert r.checks["C8"].verdict == "fail"


def test_declared_steps_and_constraints():
    assert build_spec("vllm-cutlass", cutlass_standin).steps.name == "w_then_a/fp32_before_round"
    assert build_spec("vllm-triton", triton_standin).steps.name == "a_then_w/after_round"
    assert build_spec("sgl-int8", sgl_standin).steps.name == "fused/fp32_before_round"
    assert build_spec("sgl-int8", sgl_standin).constraints.violations(8, 40, 12) == [
        "K=40 is not a multiple of 16",
        "N=12 is not a multiple of 8",
    ]
