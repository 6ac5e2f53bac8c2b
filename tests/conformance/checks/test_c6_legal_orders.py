"""C6 holds an output within one spacing of *some* legal scale order: a kernel implementing the standard contract
``fused/after_round`` exactly passes C6 on the regimes case where, with a cancelling bias added in fp16, its bits lie
more than one spacing from ``a_then_w`` (first seen natively: gemlite-int8 on the H200)."""

import functools

import torch

from conformance.cases.regimes import regime_case, regime_shapes
from conformance.kernels.spec import KernelSpec
from conformance.suite.evaluate import evaluate_case
from reference.bits import spacing_distance
from reference.contract import EpilogueContract
from reference.epilogue import reference_scaled_mm

FUSED = EpilogueContract("fused", "after_round")
CASE = "family/regimes/grid-M257xK64xN513-b_transposed-real-fp16"


@functools.lru_cache(maxsize=1)
def _case():
    """The one regimes case, built alone (its rotation index counted as the family counts it)."""
    seen: dict = {}
    for axis, m, k, n in regime_shapes():
        i = seen[axis] = seen.get(axis, -1) + 1
        if (axis, m, k, n) == ("grid", 257, 64, 513):
            ops = regime_case(axis, m, k, n, i)
            assert ops.name == CASE
            return ops
    raise AssertionError(f"{CASE} is no longer a regimes case")


def _fused(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    return reference_scaled_mm(a, b, scale_a, scale_b, FUSED, bias, out_dtype)


def test_a_standard_order_passes_c6_where_it_lies_several_spacings_from_a_then_w():
    ops = _case()
    spec = KernelSpec(name="fused-after-round", scaled_mm=_fused, contract=FUSED)
    a_then_w = reference_scaled_mm(
        ops.a, ops.b, ops.scale_a, ops.scale_b, EpilogueContract("a_then_w", "after_round"), ops.bias, ops.out_dtype
    )
    far = spacing_distance(_fused(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.out_dtype, ops.bias), a_then_w)
    assert int((far > 1).sum()) == 2 and int(far.max()) == 4  # the trigger is reached: 2 elements, 4 spacings
    r = evaluate_case(spec, ops, device="cpu")
    assert r.checks["C8"].verdict == "pass" and r.checks["C6"].verdict == "pass", r.checks["C6"].summary


def test_an_output_off_every_legal_order_still_fails_c6():
    ops = _case()

    def off(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        y = _fused(a, b, scale_a, scale_b, out_dtype, bias)
        return (y.float() * 1.01).to(out_dtype)  # 1 % off: many spacings from every order

    r = evaluate_case(KernelSpec(name="off", scaled_mm=off, contract=FUSED), ops, device="cpu")
    assert r.checks["C6"].verdict == "fail"
