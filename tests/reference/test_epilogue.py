"""reference.epilogue: bit-exact emulation of each declared contract.

Pinned bit patterns were derived by hand (see the comments) and are
cross-checked by ``_oracle``, an independent element-wise model: float32
operations are evaluated in Python float (binary64) and rounded once to
binary32 with numpy -- correct for *, + because 53 >= 2*24 + 2 makes double
rounding innocuous (Figueroa, "When is double rounding innocuous?", SIGNUM
1995) -- and bf16 rounding picks the nearer of the two neighbouring bf16
values by exact comparison, ties to the even pattern.
"""

import struct

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from reference.accumulate import int_mm_int64_naive
from reference.bits import bits_of
from reference.contract import CUTLASS_STYLE, TRITON_STYLE, EpilogueContract
from reference.epilogue import acc_to_fp32, apply_epilogue, reference_scaled_mm
from reference.errors import ContractError, OperandError
from reference.strategies import gemm_operands

AW = EpilogueContract("a_then_w", "fp32_before_round")
WA = EpilogueContract("w_then_a", "fp32_before_round")
FU = EpilogueContract("fused", "fp32_before_round")
AW_AFTER = EpilogueContract("a_then_w", "after_round")
WA_AFTER = EpilogueContract("w_then_a", "after_round")
ALL_CONTRACTS = [
    EpilogueContract(o, b) for o in ("a_then_w", "w_then_a", "fused") for b in ("fp32_before_round", "after_round")
]


# ---------------------------------------------------------------- independent oracle


def _f32(x: float) -> float:
    with np.errstate(over="ignore", under="ignore"):
        return float(np.float32(x))


def _f32_bits(x: float) -> int:
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def _bits_to_f(pattern32: int) -> float:
    return float(np.array([pattern32], dtype=np.uint32).view(np.float32)[0])


def _round16(x: float, dtype) -> int:
    """Nearest-even bf16/fp16 pattern of a float32 value, by exact comparison."""
    if dtype == torch.float16:
        with np.errstate(over="ignore"):
            return int(np.array([x], dtype=np.float32).astype(np.float16).view(np.uint16)[0])
    if x != x:
        return 0x7FC0
    sign = 0x8000 if (x < 0 or (x == 0 and str(x).startswith("-"))) else 0
    mag = abs(x)
    lo = _f32_bits(mag) >> 16
    vlo = _bits_to_f(lo << 16)
    vhi = 2.0**128 if lo + 1 == 0x7F80 else _bits_to_f((lo + 1) << 16)
    if mag == vlo or mag == float("inf"):
        return sign | lo
    dlo, dhi = mag - vlo, vhi - mag
    pick = lo if dlo < dhi else lo + 1 if dhi < dlo else (lo if lo % 2 == 0 else lo + 1)
    return sign | pick


def _from16(pattern: int, dtype) -> float:
    if dtype == torch.float16:
        return float(np.array([pattern], dtype=np.uint16).view(np.float16)[0])
    return _bits_to_f(pattern << 16)


def _oracle(acc: int, sa: float, sw: float, contract, bias=None, dtype=torch.bfloat16) -> int:
    x = _f32(float(acc))
    if contract.scale_order == "a_then_w":
        y = _f32(_f32(x * sa) * sw)
    elif contract.scale_order == "w_then_a":
        y = _f32(_f32(x * sw) * sa)
    else:
        y = _f32(x * _f32(sa * sw))
    rnd = (lambda v: _f32_bits(v)) if dtype == torch.float32 else (lambda v: _round16(v, dtype))
    back = (lambda p: _bits_to_f(p)) if dtype == torch.float32 else (lambda p: _from16(p, dtype))
    if bias is None:
        return rnd(y)
    if contract.bias_point == "fp32_before_round":
        return rnd(_f32(y + bias))
    return rnd(_f32(back(rnd(y)) + bias))


def f32s(*vals):
    return torch.tensor(vals, dtype=torch.float32)


def one(acc, sa, sw, contract, bias=None, out_dtype=torch.bfloat16, acc_dtype=torch.int64):
    b = None if bias is None else torch.tensor([bias], dtype=out_dtype)
    out = apply_epilogue(
        torch.tensor([[acc]], dtype=acc_dtype), f32s(sa), f32s(sw), contract, bias=b, out_dtype=out_dtype
    )
    assert out.dtype == out_dtype and out.shape == (1, 1)
    return int(bits_of(out).item())


# ---------------------------------------------------------------- pinned hand cases

# s_a = float32(0.3) = 0x3E99999A = 10066330 * 2**-25, s_w = float32(0.7) = 0x3F333333
# = 11744051 * 2**-24, acc = 325 (products below computed exactly, then rounded):
#  a_then_w: 325*s_a = 97.50000387... -> float32 0x42C30001 (97.50000763);
#            * s_w = 68.25000418... -> float32 0x42888001 (68.25 + 2**-17), which is
#            above the bf16 midpoint 68.25 -> bf16 0x4289 (68.5)
#  w_then_a: 325*s_w = 227.49999613... -> float32 0x43638000 (227.5);
#            * s_a = 68.25000271... -> float32 0x42888000 (68.25 exactly: the error is
#            below half a float32 spacing 2**-18); 68.25 is the midpoint of bf16 68.0
#            (0x4288, even) and 68.5 (0x4289, odd) -> tie to even -> 0x4288
#  fused:    s_a*s_w = 0.21000000477 -> float32 0x3E570A3E; 325 * that =
#            68.25000271... -> 0x42888000 -> bf16 0x4288
S_A, S_W = struct.unpack("<f", struct.pack("<f", 0.3))[0], struct.unpack("<f", struct.pack("<f", 0.7))[0]


def test_hand_case_orders_differ_in_bf16():
    assert one(325, S_A, S_W, AW) == 0x4289
    assert one(325, S_A, S_W, WA) == 0x4288
    assert one(325, S_A, S_W, FU) == 0x4288
    for c in (AW, WA, FU):
        assert one(325, S_A, S_W, c) == _oracle(325, S_A, S_W, c)


def test_hand_case_float32_and_fp16_outputs():
    assert one(325, S_A, S_W, AW, out_dtype=torch.float32) == 0x42888001
    assert one(325, S_A, S_W, WA, out_dtype=torch.float32) == 0x42888000
    assert one(325, S_A, S_W, FU, out_dtype=torch.float32) == 0x42888000
    # 68.25 = 0x5444 in fp16 (exponent 6, fraction 68/1024); 68.25 + 2**-17 rounds to it
    for c in (AW, WA, FU):
        assert one(325, S_A, S_W, c, out_dtype=torch.float16) == 0x5444


def test_hand_case_bias_points():
    # w_then_a gives y = 68.25 exactly (see above); bias = 0.25 (bf16 0x3E80)
    # before: rne(68.25 + 0.25 = 68.5) = 0x4289
    # after:  rne(68.25) = 68.0 (tie to even), 68.0 + 0.25 = 68.25 -> tie -> 0x4288
    assert one(325, S_A, S_W, WA, bias=0.25) == 0x4289
    assert one(325, S_A, S_W, WA_AFTER, bias=0.25) == 0x4288
    # a_then_w, after: rne(0x42888001) = 68.5; 68.5 + 0.25 = 68.75 = 0x42898000 is the
    # midpoint of 0x4289 (odd) and 0x428A (even) -> 0x428A; before: 68.5000076.. -> 0x4289
    assert one(325, S_A, S_W, AW_AFTER, bias=0.25) == 0x428A
    assert one(325, S_A, S_W, AW, bias=0.25) == 0x4289
    # the project's two declared styles therefore disagree on this element
    assert one(325, S_A, S_W, CUTLASS_STYLE, bias=0.25) == 0x4289
    assert one(325, S_A, S_W, TRITON_STYLE, bias=0.25) == 0x428A


def test_signed_zero():
    assert one(0, -1.0, 1.0, AW) == 0x8000  # 0 * -1 = -0
    assert one(0, 1.0, 1.0, AW) == 0x0000
    assert one(0, -1.0, 1.0, AW, bias=0.0) == 0x0000  # -0 + +0 = +0 (IEEE 6.3)
    assert one(0, -1.0, 1.0, AW_AFTER, bias=-0.0) == 0x8000  # -0 + -0 = -0


def test_underflow_and_subnormal_results():
    # -1 * 2**-70 * 2**-70 = -2**-140 < half the bf16 min subnormal 2**-133 -> -0
    assert one(-1, 2.0**-70, 2.0**-70, AW) == 0x8000
    # 3 * 2**-66 * 2**-66 = 6 * 2**-133: bf16 subnormal 0x0006, exact in all orders
    for c in (AW, WA, FU):
        assert one(3, 2.0**-66, 2.0**-66, c) == 0x0006


def test_pow2_guarantee_needs_no_underflow():
    # s_a = 0x000AB13D is a float32 subnormal; s_w = 2**-10. The fused product
    # s_a*s_w is deep in the subnormal range and loses bits, so fused differs.
    sa = struct.unpack("<f", struct.pack("<I", 0x000AB13D))[0]
    assert one(910, sa, 2.0**-10, AW) == 0x000A
    assert one(910, sa, 2.0**-10, WA) == 0x000A
    assert one(910, sa, 2.0**-10, FU) == 0x0009
    for c in (AW, WA, FU):
        assert one(910, sa, 2.0**-10, c) == _oracle(910, sa, 2.0**-10, c)


def test_overflow_to_inf():
    assert one(16384, 2.0**60, 2.0**60, AW) == 0x7F80
    assert one(16384, -(2.0**60), 2.0**60, WA) == 0xFF80
    fmax = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]
    # finite in float32, beyond bf16's rounding midpoint -> inf; float32 output keeps it
    assert one(1, fmax, 1.0, AW) == 0x7F80
    assert one(1, fmax, 1.0, AW, out_dtype=torch.float32) == 0x7F7FFFFF


@pytest.mark.parametrize(
    "acc,bits32",
    [
        (2**24 - 1, 0x4B7FFFFF),
        (2**24, 0x4B800000),
        (2**24 + 1, 0x4B800000),  # tie between 2**24 and 2**24+2 -> even (2**24)
        (2**24 + 2, 0x4B800001),
        (2**24 + 3, 0x4B800002),  # tie between 2**24+2 (odd) and 2**24+4 -> 2**24+4
        (2**31 - 1, 0x4F000000),  # rounds to 2**31
        (-(2**31), 0xCF000000),
        (2**31 + 2**7, 0x4F000000),  # tie -> even
        # beyond 2**53: int64 -> float64 would already round to 2**60 + 2**36 (a float32
        # tie -> 2**60, wrong); the single rounding of the true value goes up to 2**60 + 2**37
        (2**60 + 2**36 + 1, 0x5D800001),
    ],
)
def test_accumulator_conversion_is_rne(acc, bits32):
    assert one(acc, 1.0, 1.0, AW, out_dtype=torch.float32) == bits32
    if -(2**31) <= acc < 2**31:
        assert one(acc, 1.0, 1.0, AW, out_dtype=torch.float32, acc_dtype=torch.int32) == bits32


def test_int32_conversion_matches_torch_cast():
    g = torch.Generator().manual_seed(5)
    acc = torch.randint(-(2**31), 2**31 - 1, (4096,), generator=g, dtype=torch.int64)
    acc = torch.cat([acc, torch.tensor([2**24 + 1, 2**24 + 3, -(2**24) - 1])])
    assert torch.equal(acc_to_fp32(acc.to(torch.int32)), acc.to(torch.int32).to(torch.float32))


def test_scale_shapes_are_equivalent():
    acc = torch.tensor([[100, -7, 3], [5, 0, -1000]])
    sa, sw = f32s(0.5, 0.25), f32s(0.1, 0.2, 0.3)
    ref = apply_epilogue(acc, sa, sw, AW)
    assert torch.equal(apply_epilogue(acc, sa[:, None], sw[:, None], AW), ref)
    same = apply_epilogue(acc, torch.tensor(0.5), f32s(0.1, 0.2, 0.3), AW)
    assert torch.equal(same[0], ref[0])


def test_errors():
    acc = torch.zeros(2, 3, dtype=torch.int64)
    with pytest.raises(OperandError, match="acc must be an int32 or int64"):
        apply_epilogue(acc.double(), f32s(1, 1), f32s(1, 1, 1), AW)
    with pytest.raises(OperandError, match="scale_b has shape"):
        apply_epilogue(acc, f32s(1, 1), f32s(1, 1), AW)
    with pytest.raises(ContractError):
        apply_epilogue(acc, f32s(1, 1), f32s(1, 1, 1), "a_then_w")
    with pytest.raises(OperandError, match="scale_a has 1 NaN value"):
        reference_scaled_mm(
            torch.ones(2, 4, dtype=torch.int8),
            torch.ones(3, 4, dtype=torch.int8),
            f32s(1, float("nan")),
            f32s(1, 1, 1),
            AW,
        )


# ---------------------------------------------------------------- properties


@given(
    gemm_operands(max_m=6, max_k=40, max_n=6, scale_kinds=("ordinary", "negative"), with_bias=False),
    st.integers(-14, -2),
)
def test_pow2_weight_scales_make_all_orders_identical(ops, e):
    acc = int_mm_int64_naive(ops.a, ops.b)
    sw = torch.full((ops.n,), 2.0**e, dtype=torch.float32)
    outs = [bits_of(apply_epilogue(acc, ops.scale_a, sw, c)) for c in (AW, WA, FU)]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


@given(
    gemm_operands(max_m=4, max_k=24, max_n=4, out_dtypes=(torch.bfloat16, torch.float16, torch.float32)),
    st.sampled_from(ALL_CONTRACTS),
)
def test_matches_independent_oracle(ops, contract):
    out = reference_scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, contract, bias=ops.bias, out_dtype=ops.out_dtype)
    acc = int_mm_int64_naive(ops.a, ops.b).tolist()
    got = bits_of(out).tolist()
    for i in range(ops.m):
        for j in range(ops.n):
            bias = None if ops.bias is None else float(ops.bias[j].float())
            exp = _oracle(acc[i][j], float(ops.scale_a[i]), float(ops.scale_b[j]), contract, bias, ops.out_dtype)
            assert got[i][j] == exp, (i, j, acc[i][j], contract.label())


def test_flush_denormal_setting_does_not_change_results():
    # operands built first (under FTZ even creating a subnormal tensor flushes it)
    sa = torch.tensor([0x000AB13D], dtype=torch.int32).view(torch.float32)  # subnormal
    acc, sw = torch.tensor([[910]]), torch.tensor([2.0**-10])
    acc3, s66 = torch.tensor([[3]]), torch.tensor([2.0**-66])
    if not torch.set_flush_denormal(True):
        pytest.skip("CPU without FTZ/DAZ control")
    try:
        r1 = apply_epilogue(acc, sa, sw, AW)
        r2 = apply_epilogue(acc3, s66, s66, FU)
        still_on = float(torch.tensor([2.0**-130]) * 0.5) == 0.0
    finally:
        torch.set_flush_denormal(False)
    assert still_on  # the caller's FTZ setting is restored
    assert bits_of(r1).item() == 0x000A and bits_of(r2).item() == 0x0006


def test_contract_to_dict_is_every_field_and_round_trips():
    """``EpilogueContract.to_dict`` is built by hand (speed): it must still name
    every field (a new field would otherwise be dropped from reports)."""
    import dataclasses
    import itertools

    from reference.contract import BIAS_POINTS, ROUNDINGS, SCALE_ORDERS, EpilogueContract

    for so, bp, r in itertools.product(SCALE_ORDERS, BIAS_POINTS, ROUNDINGS):
        c = EpilogueContract(so, bp, r)
        assert c.to_dict() == dataclasses.asdict(c)
        assert EpilogueContract.from_dict(c.to_dict()) == c
