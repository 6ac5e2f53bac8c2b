"""Families that reach the accumulator's trigger conditions.

* ``partial_sums``: partial sums far beyond 2**24 while the final |acc| is
  small (< 400): a same-sign run of 2048 products in [96*96, 127*127]
  (about 2.5e7 ~ 2**24.6 at its peak) cancelled exactly by a permuted mirror
  run, then a short tail of small products. Variant ``run_first`` puts the
  runs at the start of K, ``run_last`` at the end, so partial sums are large
  whichever direction (or split) a kernel sums K in. A kernel that
  accumulates in float32 rounds the partial sums (spacing 2 to 4 above
  2**24) and ends tens of units away from the small exact result, which
  every output dtype shows; an int32 accumulator is exact (DESIGN.md 1).
* ``large_acc``: final |acc| >= 2**24 (a same-sign run of 2048 such
  products plus a small tail): float32(acc) is inexact (precondition C4,
  fault F7); a float32-accumulating kernel ends on another float32 than the
  RNE conversion of the exact value, visible in float32 output.
* ``int32_overflow``: |acc| beyond 2**31: K = 131,073, row 0 of ``a`` and
  ``b`` all -128 (acc[0,0] = 131073 * 16384 = 2**31 + 16384), the other
  elements random (|acc| < 2**31, still checked). Kept to M = N = 2 and
  one case (the Triton interpreter needs ~5 s per call at this K).
"""

from __future__ import annotations

import torch

from conformance.cases._common import GRID, channel_scales, family_case, generator, sign, small_int8, token_scales
from reference.operands import GemmOperands

RUN = 2048  # same-sign products per run
TAIL = 37  # small products after / before the runs (K not a multiple of 8)
OVERFLOW_K = 131073  # (2**31 + 16384) / 16384: all -128 overflows int32


def _run(g: torch.Generator, m: int, n: int, r: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Same-sign run: a [M, r] = s_m * [96, 127], b [N, r] = t_n * [96, 127]
    (products s_m * t_n * [9216, 16129]: one sign per element along K)."""
    a = torch.randint(96, 128, (m, r), generator=g) * sign(g, m)[:, None]
    b = torch.randint(96, 128, (n, r), generator=g) * sign(g, n)[:, None]
    return a, b


def partial_sum_case(
    variant: str,
    mode: str,
    out_dtype: torch.dtype,
    seed: int = 0,
    m: int = 4,
    n: int = 8,
    r: int = RUN,
    tail: int = TAIL,
) -> GemmOperands:
    """One ``partial_sums`` case (module docstring); K = 2 * r + tail.

    Args:
        variant: ``run_first`` | ``run_last``.
        mode: ``real`` | ``pow2`` (weight scales).
    """
    g = generator("partial_sums", variant, seed)
    a1, b1 = _run(g, m, n, r)
    perm = torch.randperm(r, generator=g)
    a2, b2 = -a1[:, perm], b1[:, perm]  # cancels the run exactly, in another order
    at, bt = small_int8(g, (m, tail), -4, 4), small_int8(g, (n, tail), -4, 4)
    if variant == "run_first":
        a = torch.cat([a1, a2, at.long()], 1)
        b = torch.cat([b1, b2, bt.long()], 1)
    else:
        a = torch.cat([at.long(), a1, a2], 1)
        b = torch.cat([bt.long(), b1, b2], 1)
    return family_case(
        "partial_sums",
        variant,
        mode,
        out_dtype,
        a.to(torch.int8),
        b.to(torch.int8),
        token_scales(g, m),
        channel_scales(g, n, mode),
        seed=seed,
        trigger="partial sums >= 2^24, final |acc| small",
    )


def large_acc_case(
    mode: str, out_dtype: torch.dtype, seed: int = 0, m: int = 4, n: int = 8, r: int = RUN, tail: int = TAIL
) -> GemmOperands:
    """One ``large_acc`` case: a same-sign run (final |acc| ~ 2.5e7 >= 2**24)
    then a small tail; K = r + tail."""
    g = generator("large_acc", "run", seed)
    a1, b1 = _run(g, m, n, r)
    at, bt = small_int8(g, (m, tail), -4, 4), small_int8(g, (n, tail), -4, 4)
    a = torch.cat([a1, at.long()], 1).to(torch.int8)
    b = torch.cat([b1, bt.long()], 1).to(torch.int8)
    # scale so that outputs stay finite in float16 too (|acc| * s_a * s_w < 65504)
    sa = token_scales(g, m) / 64
    return family_case(
        "large_acc",
        "run",
        mode,
        out_dtype,
        a,
        b,
        sa,
        channel_scales(g, n, mode),
        seed=seed,
        trigger="final |acc| >= 2^24",
        violates=["C4"],
    )


def overflow_case(mode: str, out_dtype: torch.dtype, seed: int = 0, k: int = OVERFLOW_K) -> GemmOperands:
    """One ``int32_overflow`` case: M = N = 2; acc[0,0] = k * 16384 > 2**31 - 1
    (k = 131073: 2**31 + 16384, wraps to -2**31 + 16384); the other three
    accumulators are random and inside int32."""
    g = generator("int32_overflow", "saturated", seed)
    a = torch.randint(-128, 128, (2, k), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-128, 128, (2, k), generator=g, dtype=torch.int16).to(torch.int8)
    a[0].fill_(-128)
    b[0].fill_(-128)
    sa = token_scales(g, 2) / 2**20  # |acc| ~ 2**31: keep float16 outputs finite
    return family_case(
        "int32_overflow",
        "saturated",
        mode,
        out_dtype,
        a,
        b,
        sa,
        channel_scales(g, 2, mode),
        seed=seed,
        trigger="|acc| > 2^31",
        violates=["C3", "C4"],
    )


#: K of the two-direction case: 16256 * K > 2**31 (127 * -128 products overflow below -2**31)
BOTH_K = 132_110


def both_directions_case(seed: int = 0, k: int = BOTH_K) -> GemmOperands:
    """The ``int32_overflow`` case in both directions: M = N = 3; rows 0/1 of ``a``
    all -128 / 127, columns 0/1 of ``b`` all -128: acc[0,0] = k * 16384 and
    acc[0,1] above 2**31 - 1, acc[1,0] = acc[1,1] = -k * 16256 below -2**31 (a
    kernel that wraps one way and saturates the other breaks its declaration);
    row and column 2 random, inside int32. pow2 weight scales, float32 output."""
    g = generator("int32_overflow", "both_directions", seed)
    a = torch.randint(-127, 128, (3, k), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-127, 128, (3, k), generator=g, dtype=torch.int16).to(torch.int8)
    a[0].fill_(-128)
    a[1].fill_(127)
    b[:2].fill_(-128)
    sa = token_scales(g, 3) / 2**20
    return family_case(
        "int32_overflow",
        "both_directions",
        "pow2",
        torch.float32,
        a,
        b,
        sa,
        channel_scales(g, 3, "pow2"),
        seed=seed,
        trigger="|acc| > 2^31 in both directions",
        violates=["C3", "C4"],
    )


def partial_sums_family(seed: int = 0) -> list[GemmOperands]:
    """``partial_sums``: both variants x both modes x bf16/fp16/fp32 (12 cases)."""
    return [partial_sum_case(v, mode, dt, seed) for v in ("run_first", "run_last") for mode, dt in GRID]


def large_acc_family(seed: int = 0) -> list[GemmOperands]:
    """``large_acc``: both modes x bf16/fp16/fp32 (6 cases)."""
    return [large_acc_case(mode, dt, seed) for mode, dt in GRID]


def int32_overflow_family(seed: int = 0) -> list[GemmOperands]:
    """``int32_overflow``: one case, pow2 weight scales (C5 and C8 apply) and
    float32 output (every bit of the three in-range elements shows). Each such
    case costs ~10 s under the Triton interpreter (1025 K-blocks per call, two
    calls), so the full 6-case grid alone would take a third of the 3-minute
    budget of ``int8conf check --kernel=triton``; the scale mode and output
    dtype matter only for the in-range elements (the overflowing one is a
    precondition). :func:`overflow_case` builds the other variants. A second
    case overflows in both directions (:func:`both_directions_case`)."""
    return [overflow_case("pow2", torch.float32, seed), both_directions_case(seed)]
