"""reference.bits: ordered encoding, spacing distance, histogram, rounding.

Expected values are bit patterns derived by hand from the IEEE layouts
(bf16 = top 16 bits of binary32: 1 sign, 8 exponent, 7 fraction bits; fp16:
1/5/10), not produced by the code under test.
"""

import struct

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from reference.bits import NAN_DISTANCE, ULP_BINS, bits_of, ordered_int, round_fp32, spacing_distance, ulp_histogram
from reference.errors import OperandError


def bf16(*patterns):
    """bf16 tensor from raw 16-bit patterns."""
    v = torch.tensor([p - 0x10000 if p >= 0x8000 else p for p in patterns], dtype=torch.int16)
    return v.view(torch.bfloat16)


def f16(*patterns):
    v = torch.tensor([p - 0x10000 if p >= 0x8000 else p for p in patterns], dtype=torch.int16)
    return v.view(torch.float16)


def f32(*patterns):
    v = torch.tensor([p - 2**32 if p >= 2**31 else p for p in patterns], dtype=torch.int64)
    return v.to(torch.int32).view(torch.float32)


def hexes(t):
    return [hex(v) for v in bits_of(t).tolist()]


# ---------------------------------------------------------------- bits_of / ordered_int


def test_bits_of_bf16_known_patterns():
    x = torch.tensor([1.0, -1.0, 0.0, -0.0, 2.0, float("inf")], dtype=torch.bfloat16)
    assert bits_of(x).tolist() == [0x3F80, 0xBF80, 0x0000, 0x8000, 0x4000, 0x7F80]
    assert bits_of(x).dtype == torch.int64


def test_bits_of_fp32_is_non_negative():
    x = torch.tensor([-0.0, -1.0], dtype=torch.float32)
    assert bits_of(x).tolist() == [0x80000000, 0xBF800000]


def test_ordered_int_bf16_landmarks():
    # +0, -0, min subnormal, -min subnormal, 1.0, -1.0, max finite, inf, -inf
    x = bf16(0x0000, 0x8000, 0x0001, 0x8001, 0x3F80, 0xBF80, 0x7F7F, 0x7F80, 0xFF80)
    assert ordered_int(x).tolist() == [0, 0, 1, -1, 0x3F80, -0x3F80, 0x7F7F, 0x7F80, -0x7F80]


def test_ordered_int_is_monotone_over_all_finite_bf16():
    pos = torch.arange(0, 0x7F81, dtype=torch.int32)  # +0 .. +inf
    vals = pos.to(torch.int16).view(torch.bfloat16)
    allv = torch.cat([(-vals.float()).flip(0), vals.float()])  # -inf .. -0, +0 .. +inf
    o = ordered_int(allv.to(torch.bfloat16))
    assert bool((o[1:] >= o[:-1]).all())
    # strictly increasing except the single (-0, +0) pair
    assert int((o[1:] == o[:-1]).sum()) == 1


def test_ordered_int_rejects_int_tensor():
    with pytest.raises(OperandError, match="dtype torch.int32"):
        ordered_int(torch.zeros(3, dtype=torch.int32))


# ---------------------------------------------------------------- spacing_distance


def test_spacing_one_ulp_each_side_of_one():
    one = bf16(0x3F80, 0x3F80)
    neighbours = bf16(0x3F7F, 0x3F81)  # 1 - 2**-8 and 1 + 2**-7
    assert spacing_distance(one, neighbours).tolist() == [1, 1]
    # the step below 2**0 is half the size of the step above it
    below = 1.0 - neighbours[0].float().item()
    above = neighbours[1].float().item() - 1.0
    assert (below, above) == (2**-8, 2**-7)


def test_spacing_across_power_of_two_counts_steps_not_value():
    # 1 - 2**-8 (0x3F7F) to 1 + 2**-7 (0x3F81): 2 spacings though the value gap is 3 * 2**-8
    assert spacing_distance(bf16(0x3F7F), bf16(0x3F81)).tolist() == [2]
    # a whole binade [1, 2) of bf16 has 2**7 values
    assert spacing_distance(bf16(0x3F80), bf16(0x4000)).tolist() == [128]
    # fp32: 2**24 - 1 (0x4B7FFFFF) to 2**24 + 2 (0x4B800001): spacing 1 below, 2 above
    assert spacing_distance(f32(0x4B7FFFFF), f32(0x4B800001)).tolist() == [2]


def test_spacing_signed_zero_subnormal_inf_nan():
    x = bf16(0x0000, 0x0001, 0x0001, 0x7F7F, 0xFF80, 0x7FC0, 0x7FC1, 0x7FC0, 0x0080)
    y = bf16(0x8000, 0x8001, 0x0000, 0x7F80, 0x7F80, 0xFFC0, 0x7FC0, 0x3F80, 0x007F)
    assert spacing_distance(x, y).tolist() == [
        0,  # +0 vs -0
        2,  # +min subnormal vs -min subnormal (through zero)
        1,  # min subnormal vs +0
        1,  # max finite vs inf
        2 * 0x7F80,  # -inf vs +inf
        0,  # NaN vs NaN (different sign)
        0,  # NaN vs NaN (different payload)
        NAN_DISTANCE,  # NaN vs 1.0
        1,  # min normal 2**-126 vs max subnormal
    ]


def test_spacing_fp16_and_fp32():
    assert spacing_distance(f16(0x3C00, 0x0000), f16(0x3BFF, 0x8001)).tolist() == [1, 1]
    assert spacing_distance(f32(0x3F800000), f32(0x3F7FFFFF)).tolist() == [1]
    assert spacing_distance(f16(0x7C00), f16(0x7BFF)).tolist() == [1]


def test_spacing_mismatch_errors():
    with pytest.raises(OperandError, match="shape mismatch"):
        spacing_distance(torch.zeros(2, dtype=torch.bfloat16), torch.zeros(3, dtype=torch.bfloat16))
    with pytest.raises(OperandError, match="dtype mismatch"):
        spacing_distance(torch.zeros(2, dtype=torch.bfloat16), torch.zeros(2, dtype=torch.float16))


# ---------------------------------------------------------------- ulp_histogram


def test_ulp_histogram_bins_and_keys():
    d = torch.tensor([0, 0, 1, 2, 3, 4, 5, 8, 9, 16, 17, 256, 257, 10**9, NAN_DISTANCE])
    h = ulp_histogram(d)
    assert list(h) == list(ULP_BINS)
    assert h == {"0": 2, "1": 1, "2": 1, "3-4": 2, "5-8": 2, "9-16": 2, "17-256": 2, ">256": 2, "nan": 1}


def test_ulp_histogram_empty_has_all_keys():
    assert ulp_histogram(torch.zeros(0, dtype=torch.int64)) == {k: 0 for k in ULP_BINS}


# ---------------------------------------------------------------- round_fp32


def test_bf16_rne_tie_cases():
    x = f32(
        0x3F808000,  # 1 + 2**-8: tie between 0x3F80 (even) and 0x3F81 -> 0x3F80
        0x3F818000,  # tie between 0x3F81 (odd) and 0x3F82 (even) -> 0x3F82
        0x3F808001,  # just above the tie -> up
        0x3F807FFF,  # just below the tie -> down
        0xBF818000,  # negative tie -> 0xBF82
        0x3F7F8000,  # tie just below 1.0 rounds up across the power of two
        0x7F7FFFFF,  # max float32 -> past bf16 max's midpoint -> inf
        0x7F7F7FFF,  # below the midpoint -> bf16 max 0x7F7F
        0x00008000,  # subnormal tie 0 vs 0x0001 -> +0
        0x00018000,  # subnormal tie 0x0001 vs 0x0002 -> 0x0002
        0x80008000,  # negative subnormal tie -> -0
        0x7F800000,
        0xFF800000,
        0x00000000,
        0x80000000,
    )
    assert hexes(round_fp32(x, torch.bfloat16)) == [
        "0x3f80",
        "0x3f82",
        "0x3f81",
        "0x3f80",
        "0xbf82",
        "0x3f80",
        "0x7f80",
        "0x7f7f",
        "0x0",
        "0x2",
        "0x8000",
        "0x7f80",
        "0xff80",
        "0x0",
        "0x8000",
    ]


def test_bf16_nan_stays_nan_never_inf():
    # naive truncation of 0x7F800001 would give 0x7F80 = inf
    r = round_fp32(f32(0x7F800001, 0xFFFFFFFF, 0x7FC00000), torch.bfloat16)
    assert torch.isnan(r.float()).tolist() == [True, True, True]


def test_bf16_rtz_cases():
    x = f32(0x3F81FFFF, 0xBF81FFFF, 0x7F7FFFFF, 0x7F800000, 0x00017FFF, 0x3F808000)
    assert hexes(round_fp32(x, torch.bfloat16, "rtz")) == ["0x3f81", "0xbf81", "0x7f7f", "0x7f80", "0x1", "0x3f80"]


def test_fp16_rne_ties_overflow_subnormal():
    one_plus_half_ulp = struct.unpack("<I", struct.pack("<f", 1 + 2**-11))[0]
    one_plus_3half = struct.unpack("<I", struct.pack("<f", 1 + 3 * 2**-11))[0]
    x = f32(
        one_plus_half_ulp,
        one_plus_3half,
        0x477FF000,  # 65520 = midpoint between fp16 max 65504 and 65536 -> inf
        0x477FEFFF,  # just below -> 65504 = 0x7BFF
        0x33000000,  # 2**-25 = half the min subnormal: tie -> +0
        0x33C00000,
    )  # 3 * 2**-25: tie between 0x0001 and 0x0002 -> 0x0002
    assert hexes(round_fp32(x, torch.float16)) == ["0x3c00", "0x3c02", "0x7c00", "0x7bff", "0x0", "0x2"]
    assert hexes(round_fp32(f32(0x477FF000), torch.float16, "rtz")) == ["0x7bff"]


def test_fp32_target_is_identity_copy():
    x = f32(0x3F808001, 0x00000001)
    r = round_fp32(x, torch.float32)
    assert bits_of(r).tolist() == [0x3F808001, 0x00000001]


def test_round_fp32_errors():
    with pytest.raises(OperandError, match="float32 input"):
        round_fp32(torch.zeros(2, dtype=torch.bfloat16), torch.bfloat16)
    with pytest.raises(OperandError, match="mode"):
        round_fp32(torch.zeros(2), torch.bfloat16, "rtn")


_special = st.sampled_from(
    [
        0x00000000,
        0x80000000,
        0x00000001,
        0x007FFFFF,
        0x00800000,
        0x3F808000,
        0x3F818000,
        0x7F7FFFFF,
        0x7F800000,
        0xFF800000,
        0x477FF000,
        0x38800000,
        0x33000000,
        0x337FFFFF,
    ]
)


@given(st.lists(st.one_of(st.integers(0, 2**32 - 1), _special), min_size=1, max_size=64))
def test_rne_matches_torch_and_numpy_casts(patterns):
    x = f32(*patterns)
    finite_or_inf = ~torch.isnan(x)
    # bf16: integer bias-and-shift vs torch's own float32 -> bf16 cast
    rb = round_fp32(x, torch.bfloat16)
    assert torch.equal(bits_of(rb)[finite_or_inf], bits_of(x.to(torch.bfloat16))[finite_or_inf])
    # fp16 vs numpy's float32 -> float16 (IEEE RNE)
    rh = round_fp32(x, torch.float16)
    with np.errstate(over="ignore"):  # overflow to inf is the expected IEEE result
        h16 = x.numpy().astype(np.float16)
    ref = torch.from_numpy(h16.view(np.int16).astype(np.int64)) & 0xFFFF
    assert torch.equal(bits_of(rh)[finite_or_inf], ref[finite_or_inf])
    assert bool(torch.isnan(rb.float())[~finite_or_inf].all())


@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64), st.sampled_from([torch.bfloat16, torch.float16]))
def test_rtz_never_exceeds_magnitude_and_is_within_one_ulp(patterns, dtype):
    x = f32(*patterns)
    x = x[torch.isfinite(x)]
    if x.numel() == 0:
        return
    z = round_fp32(x, dtype, "rtz")
    r = round_fp32(x, dtype, "rne")
    assert bool((z.float().abs() <= x.abs()).all())
    assert int(spacing_distance(z, r).max()) <= 1
