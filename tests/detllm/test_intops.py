"""Integer primitives of detllm: exact rounding rules against Python's exact
integer / rational arithmetic (the frozen table in detllm/README.md)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from detllm.intops import (
    INT64_MAX,
    INT64_MIN,
    Dyadic,
    apply_dyadic,
    div_floor,
    div_round,
    fit_channel_multipliers,
    fit_dyadic,
    fit_dyadic_per_channel,
    floor_shift,
    ilog2,
    ilog2_or,
    isqrt,
    requantize,
    round_shift,
    saturate,
)
from reference.errors import OperandError

I64 = st.integers(min_value=INT64_MIN + 1, max_value=INT64_MAX)


def py_round_away(fr: Fraction) -> int:
    """Independent reference: round half away from zero on an exact rational."""
    fl = math.floor(fr)
    rem = fr - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fr > 0):
        return fl + 1
    return fl


def t(v):
    return torch.tensor(v, dtype=torch.int64)


# ---------------------------------------------------------------- shifts


@pytest.mark.parametrize(
    "x,k,expected",
    [
        (5, 1, 3),
        (-5, 1, -3),
        (4, 1, 2),
        (-4, 1, -2),
        (6, 2, 2),
        (-6, 2, -2),
        (7, 2, 2),
        (-7, 2, -2),
        (2, 2, 1),
        (-2, 2, -1),
        (1, 1, 1),
        (-1, 1, -1),
        (1, 2, 0),
        (-1, 2, 0),
        (0, 5, 0),
        (123, 0, 123),
        (-123, 0, -123),
        (3, -2, 12),
        (-3, -2, -12),
        (INT64_MAX, 1, 2**62),
        (INT64_MIN, 1, -(2**62)),
        (INT64_MAX, 62, 2),
        (INT64_MIN, 62, -2),
        (INT64_MIN, 63, -1),
        (2**62, 63, 1),
        (2**62 - 1, 63, 0),
        (-(2**62), 63, -1),
        (-(2**62) + 1, 63, 0),
        (INT64_MIN, 64, -1),
        (INT64_MIN + 1, 64, 0),
        (INT64_MAX, 70, 0),
        (2**61, 62, 1),
        (-(2**61), 62, -1),
    ],
)
def test_round_shift_known_values(x, k, expected):
    assert int(round_shift(t(x), k)) == expected  # Python-int shift path
    assert int(round_shift(t(x), t(k))) == expected  # tensor shift path


@settings(max_examples=300, deadline=None)
@given(x=st.integers(INT64_MIN, INT64_MAX), k=st.integers(0, 70))
def test_round_shift_matches_exact_rational(x, k):
    assert int(round_shift(t(x), k)) == py_round_away(Fraction(x, 2**k))
    assert int(round_shift(t(x), t(k))) == py_round_away(Fraction(x, 2**k))
    assert int(floor_shift(t(x), k)) == x >> k


def test_round_shift_per_element_shift_tensor():
    x = t([5, -5, 1000, -1000, 7])
    k = t([1, 1, 3, 3, -2])
    assert round_shift(x, k).tolist() == [3, -3, 125, -125, 28]
    assert floor_shift(x, k).tolist() == [2, -3, 125, -125, 28]


# ---------------------------------------------------------------- division


@pytest.mark.parametrize(
    "a,b,expected",
    [
        (5, 2, 3),
        (-5, 2, -3),
        (5, -2, -3),
        (-5, -2, 3),
        (7, 2, 4),
        (7, -2, -4),
        (1, 3, 0),
        (2, 3, 1),
        (-2, 3, -1),
        (0, 7, 0),
        (INT64_MAX, 2, 2**62),
        (INT64_MAX, INT64_MAX, 1),
        (INT64_MAX // 2, INT64_MAX, 0),
        (INT64_MAX // 2 + 1, INT64_MAX, 1),
    ],
)
def test_div_round_known_values(a, b, expected):
    assert int(div_round(t(a), t(b))) == expected


@settings(max_examples=300, deadline=None)
@given(a=I64, b=I64.filter(lambda v: v != 0))
def test_div_round_and_floor_match_exact_rational(a, b):
    assert int(div_round(t(a), t(b))) == py_round_away(Fraction(a, b))
    assert int(div_floor(t(a), t(b))) == a // b


def test_division_by_zero_raises_one_line():
    with pytest.raises(OperandError, match="divisor"):
        div_round(t([1, 2]), t([1, 0]))
    with pytest.raises(OperandError):
        div_floor(t(1), 0)


# ------------------------------------------------------------- isqrt / ilog2

_ISQRT_EDGE = [
    0,
    1,
    2,
    3,
    4,
    5,
    8,
    9,
    10,
    15,
    16,
    17,
    2**31,
    2**32 - 1,
    2**32,
    2**52 + 1,
    2**62 - 1,
    2**62,
    2**62 + 1,
    2**63 - 2,
    2**63 - 1,
]
_ROOTS = [2, 3, 1000, 2**16 - 1, 2**16, 2**26 + 3, 2**31 - 1, 2**31, 3037000499]


def test_isqrt_edge_cases_and_perfect_squares_match_math_isqrt():
    vals = list(_ISQRT_EDGE)
    for r in _ROOTS:
        vals += [r * r - 1, r * r, r * r + 1]
    vals = [v for v in vals if 0 <= v <= INT64_MAX]
    got = isqrt(t(vals)).tolist()
    assert got == [math.isqrt(v) for v in vals]
    assert int(isqrt(t(INT64_MAX))) == 3037000499


@settings(max_examples=200, deadline=None)
@given(x=st.integers(0, INT64_MAX))
def test_isqrt_random(x):
    assert int(isqrt(t(x))) == math.isqrt(x)


def test_ilog2_full_range():
    vals = [1, 2, 3]
    for k in range(2, 63):
        vals += [2**k - 1, 2**k, 2**k + 1]
    vals.append(INT64_MAX)
    assert ilog2(t(vals)).tolist() == [v.bit_length() - 1 for v in vals]
    assert ilog2_or(t([0, 1, 8]), zero_value=-1).tolist() == [-1, 0, 3]


def test_isqrt_ilog2_reject_bad_input():
    with pytest.raises(OperandError, match="negative"):
        isqrt(t([4, -1]))
    with pytest.raises(OperandError, match=">= 1"):
        ilog2(t([0]))
    with pytest.raises(OperandError, match="dtype"):
        isqrt(torch.tensor([4.0]))


# ------------------------------------------------------------------ dyadic


def test_fit_dyadic_known_values():
    assert fit_dyadic(0.5) == Dyadic(32768, 16)
    assert fit_dyadic(1.0) == Dyadic(32768, 15)
    assert fit_dyadic(0.75) == Dyadic(49152, 16)
    assert fit_dyadic(-0.75) == Dyadic(-49152, 16)
    assert fit_dyadic(0.0) == Dyadic(0, 0)
    assert fit_dyadic(3.0, mantissa_bits=2) == Dyadic(3, 0)
    assert fit_dyadic(2.0**20) == Dyadic(32768, -5)
    with pytest.raises(OperandError, match="finite"):
        fit_dyadic(float("nan"))
    with pytest.raises(OperandError, match="Python ints"):
        Dyadic(0.5, 1)
    assert Dyadic(3, 2).value() == Fraction(3, 4) and Dyadic(3, -2).value() == 12


@settings(max_examples=200, deadline=None)
@given(
    r=st.floats(min_value=1e-12, max_value=1e12, allow_nan=False), neg=st.booleans(), bits=st.sampled_from([8, 16, 24])
)
def test_fit_dyadic_full_mantissa_and_error_bound(r, neg, bits):
    r = -r if neg else r
    d = fit_dyadic(r, bits)
    assert abs(d.m) <= 2**bits - 1 and d.k <= 62
    if d.k < 62:  # k is capped at 62; below the cap the mantissa is full
        assert 2 ** (bits - 1) <= abs(d.m)
    # frozen bound: relative error <= 2^-bits (half a unit in the last place of a >= 2^(bits-1) mantissa)
    bound = Fraction(1, 2**bits) if d.k < 62 else Fraction(1, 2 * abs(d.m))
    assert abs(d.value() - Fraction(r)) <= abs(Fraction(r)) * bound


def test_fit_dyadic_per_channel_and_multipliers():
    m, k = fit_dyadic_per_channel([0.5, 0.75, -0.25])
    assert m.tolist() == [32768, 49152, -32768] and k.tolist() == [16, 16, 17]
    m, k = fit_dyadic_per_channel([0.5, 0.75, -0.25], shared_shift=True)
    assert m.tolist() == [32768, 49152, -16384] and k == 16
    g, gk = fit_channel_multipliers(torch.tensor([1.0, 0.5, 1.5, -2.0]))
    assert g.dtype == torch.int16 and gk == 13
    assert g.tolist() == [8192, 4096, 12288, -16384]


@settings(max_examples=200, deadline=None)
@given(
    x=st.integers(-(2**31), 2**31 - 1),
    m=st.integers(-(2**16) + 1, 2**16 - 1),
    k=st.integers(0, 40),
    shift=st.integers(-5, 10),
)
def test_apply_dyadic_one_rounding(x, m, k, shift):
    got = int(apply_dyadic(torch.tensor([x], dtype=torch.int32), Dyadic(m, k), shift=shift)[0])
    assert got == py_round_away(Fraction(x * m, 1) / Fraction(2) ** (k + shift))


def test_requantize_per_channel_saturates_after_one_rounding():
    x = torch.tensor([[1000, -1000, 3, 2**31 - 1], [-(2**31), 5, 6, 0]], dtype=torch.int32)
    m = torch.tensor([1, 3, 5, 7])
    k = torch.tensor([3, 2, 1, 0])
    # exact: 1000/8=125, -3000/4=-750 -> -128, 15/2=7.5 -> 8, huge -> 127; -2^31/8 -> -128, 15/4 -> 4 (3.75), 15, 0
    assert requantize(x, (m, k), out_bits=8).tolist() == [[125, -128, 8, 127], [-128, 4, 15, 0]]
    r16 = requantize(x, (m, k), out_bits=16)
    assert r16.dtype == torch.int16 and r16.tolist() == [[125, -750, 8, 32767], [-32768, 4, 15, 0]]
    assert requantize(torch.tensor([[-5, 5]], dtype=torch.int32), Dyadic(1, 1)).tolist() == [[-3, 3]]
    with pytest.raises(OperandError, match="out_bits"):
        requantize(x, Dyadic(1, 0), out_bits=4)


def test_saturate_ranges():
    x = t([-(2**40), -129, -128, 127, 128, 2**40])
    assert saturate(x, 8).tolist() == [-128, -128, -128, 127, 127, 127]
    assert saturate(x, 16).tolist() == [-32768, -129, -128, 127, 128, 32767]
    assert saturate(x, 32).dtype == torch.int32


def test_float_operands_rejected_with_one_line_error():
    with pytest.raises(OperandError, match="x: expected dtype"):
        round_shift(torch.tensor([1.5]), 1)
    with pytest.raises(OperandError, match="expected an integer torch.Tensor"):
        apply_dyadic([1, 2], Dyadic(1, 0))


@settings(max_examples=100, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(INT64_MIN, INT64_MAX), st.integers(0, 62)), min_size=1, max_size=20))
def test_round_shift_per_element_tensor_shifts_match_exact_rational(pairs):
    x = t([p[0] for p in pairs])
    k = t([p[1] for p in pairs])
    assert round_shift(x, k).tolist() == [py_round_away(Fraction(a, 2**b)) for a, b in pairs]


@settings(max_examples=100, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(0, 2**61), st.integers(0, 62), st.integers(1, 2**40)), min_size=1, max_size=20)
)
def test_private_nonnegative_fast_paths_follow_the_same_rules(pairs):
    from detllm.ops import _div_round_nonneg, _round_half_up_nonneg

    x = t([p[0] for p in pairs])
    k = t([p[1] for p in pairs])
    b = t([p[2] for p in pairs])
    assert torch.equal(_round_half_up_nonneg(x, k), round_shift(x, k))
    a = x >> 20  # keeps 2a + b < 2^63
    assert torch.equal(_div_round_nonneg(a, b), div_round(a, b))
