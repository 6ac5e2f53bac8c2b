"""C12 fp8_error_bound: bit-exact for a declared ``exact`` accumulator, the declared accumulator's interval through
the declared epilogue otherwise (both scale signs, every summation order a model allows), and its evidence."""

from __future__ import annotations

import functools

import pytest
import torch
from buggy_fp8_kernels import HOPPER_LIKE, NARROWER
from fp8_kernels import emulated_accumulator

from conformance.cases.fp8 import fp8_capture_cases
from conformance.checks.fp8_error_bound import accumulator_interval, check_fp8_error_bound, fp8_error_bound
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import run_kernel
from reference.contract import CUTLASS_STYLE, TRITON_STYLE
from reference.epilogue import apply_epilogue
from reference.fp8 import E4M3, exact_sum_fp32
from reference.operands import GemmOperands
from reference.validate import normalize_scales


@functools.lru_cache(maxsize=None)
def _capture(i: int) -> GemmOperands:
    return fp8_capture_cases(max_layers=2).cases[i]  # q_proj, k_proj of block 0, per-token activations


def _out(ops, acc, contract=CUTLASS_STYLE):
    sa, sb = normalize_scales(ops.scale_a, ops.scale_b, ops.m, ops.n)
    return apply_epilogue(acc, sa, sb, contract, ops.bias, ops.out_dtype)


def test_exact_is_bit_exact_against_the_exact_sum():
    ops = _capture(0)
    out = _out(ops, exact_sum_fp32(ops.a, ops.b))
    r = fp8_error_bound(out, ops, "exact", CUTLASS_STYLE)
    assert r.verdict == "pass" and r.evidence["n_bound_over"] == 0 and r.evidence["max_bound"] == 0.0
    bad = out.clone()
    bad.view(torch.int16)[3, 5] ^= 1  # one bit of one element
    r = fp8_error_bound(bad, ops, "exact", CUTLASS_STYLE)
    assert r.verdict == "fail" and r.evidence["n_bound_over"] == 1 and r.evidence["over"][0]["index"] == [3, 5]
    assert r.evidence["ratio_at_max_err"] == float("inf") and r.evidence["bound_at_max_err"] == 0.0


@pytest.mark.parametrize("order", ["increasing", "decreasing"])
def test_a_kernel_obeying_the_model_is_within_its_interval_in_any_order(order):
    ops = _capture(1)
    ks = None if order == "increasing" else list(range(ops.k - 1, -1, -1))
    out = _out(ops, emulated_accumulator(ops.a, ops.b, HOPPER_LIKE, ks))
    r = fp8_error_bound(out, ops, HOPPER_LIKE, CUTLASS_STYLE)
    ev = r.evidence
    assert r.verdict == "pass" and ev["n_bound_over"] == 0 and 0 < ev["max_abs_err"] <= ev["bound_at_max_err"]
    assert ev["accumulator"] == HOPPER_LIKE and 0 < ev["ratio_at_max_err"] <= ev["max_ratio"] <= 1


def test_an_accumulator_narrower_than_declared_leaves_the_interval():
    ops = _capture(0)
    out = _out(ops, emulated_accumulator(ops.a, ops.b, NARROWER))
    r = fp8_error_bound(out, ops, HOPPER_LIKE, CUTLASS_STYLE)
    assert r.verdict == "fail" and r.evidence["n_bound_over"] > 0
    w = r.evidence["over"][0]
    assert not (w["interval"][0] <= w["out"] <= w["interval"][1]) and w["abs_err"] > 0
    # the same output within what it keeps: declared honestly, it passes
    assert fp8_error_bound(out, ops, NARROWER, CUTLASS_STYLE).verdict == "pass"


def test_negative_scales_and_the_declared_epilogue_order():
    g = torch.Generator().manual_seed(3)
    a = (torch.randint(-3, 4, (6, 300), generator=g).double() * 2.0**-4).to(E4M3)
    b = (torch.randint(-7, 8, (8, 300), generator=g).double() * 2.0**3).to(E4M3)
    sa = torch.tensor([1.5, -0.75, 3.0, -2.0, 0.5, -1.0])
    sb = torch.linspace(-2.0, 2.0, 8)
    bias = torch.linspace(-1.0, 1.0, 8).to(torch.bfloat16)
    ops = GemmOperands(a, b, sa, sb, bias, torch.bfloat16, "neg", "synthetic")
    model = "fp32 bits=6 truncate promote=16"  # few bits: the interval is wide, its ends matter
    acc = emulated_accumulator(a, b, model, list(range(299, -1, -1)))
    for contract in (CUTLASS_STYLE, TRITON_STYLE):
        r = fp8_error_bound(_out(ops, acc, contract), ops, model, contract)
        assert r.verdict == "pass" and r.evidence["max_abs_err"] > 0, r.summary


def test_interval_holds_the_exact_sum_and_is_a_point_for_exact():
    ops = _capture(1)
    exact32, lo, hi, beta = accumulator_interval(ops.a, ops.b, HOPPER_LIKE)
    assert bool((lo <= exact32).all() and (exact32 <= hi).all()) and bool((beta > 0).any())
    e32, lo, hi, beta = accumulator_interval(ops.a, ops.b, "exact")
    assert torch.equal(lo, e32) and torch.equal(hi, e32) and not bool(beta.any())


def test_per_case_form_uses_the_declaration_and_is_na_for_int8():
    ops = _capture(0)
    spec = get_kernel("fp8-cpu")
    r = check_fp8_error_bound(spec, ops, run_kernel(spec, ops))
    assert r.verdict == "pass" and r.evidence["accumulator"] == "exact"
    cpu = get_kernel("cpu")
    assert check_fp8_error_bound(cpu, ops, None).verdict == "n/a"
