"""Families reaching the accumulator's trigger conditions (README.md here).

``partial_sums``: a same-sign run of 2048 products in [96², 127²] (peak ~2^24.6)
cancelled by a permuted mirror run, a small tail, at the start or end of K; a
float32 accumulator ends tens of units off. ``large_acc``: final |acc| >= 2^24
(C4 precondition). ``int32_overflow``: |acc| beyond 2^31 (K = 131,073, all -128).
"""

from __future__ import annotations

import torch

from conformance.cases.common import GRID, channel_scales, family_case, generator, sign, small_int8, token_scales
from reference.operands import GemmOperands

RUN = 2048  # same-sign products per run
TAIL = 37  # small products after / before the runs (K not a multiple of 8)
OVERFLOW_K = 131073  # (2**31 + 16384) / 16384: all -128 overflows int32


def _run(g: torch.Generator, m: int, n: int, r: int) -> tuple[torch.Tensor, torch.Tensor]:
    """a [M, r] = s_m * [96, 127], b [N, r] = t_n * [96, 127]: one product sign per element."""
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
    """One ``partial_sums`` case, ``variant`` ``run_first`` | ``run_last``; K = 2 r + tail."""
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
    a, b, sa, sw = a.to(torch.int8), b.to(torch.int8), token_scales(g, m), channel_scales(g, n, mode)
    trigger = "partial sums >= 2^24, final |acc| small"
    return family_case("partial_sums", variant, mode, out_dtype, a, b, sa, sw, seed=seed, trigger=trigger)


def large_acc_case(
    mode: str, out_dtype: torch.dtype, seed: int = 0, m: int = 4, n: int = 8, r: int = RUN, tail: int = TAIL
) -> GemmOperands:
    """One ``large_acc`` case: a same-sign run (|acc| ~ 2.5e7) then a small tail; K = r + tail."""
    g = generator("large_acc", "run", seed)
    a1, b1 = _run(g, m, n, r)
    at, bt = small_int8(g, (m, tail), -4, 4), small_int8(g, (n, tail), -4, 4)
    a = torch.cat([a1, at.long()], 1).to(torch.int8)
    b = torch.cat([b1, bt.long()], 1).to(torch.int8)
    # scale so that outputs stay finite in float16 too (|acc| * s_a * s_w < 65504)
    sa = token_scales(g, m) / 64
    sw = channel_scales(g, n, mode)
    return family_case(
        "large_acc", "run", mode, out_dtype, a, b, sa, sw, seed=seed, trigger="final |acc| >= 2^24", violates=["C4"]
    )


def overflow_case(mode: str, out_dtype: torch.dtype, seed: int = 0, k: int = OVERFLOW_K) -> GemmOperands:
    """One ``int32_overflow`` case, M = N = 2: acc[0,0] = k * 16384 > 2**31 - 1, the rest random in int32."""
    g = generator("int32_overflow", "saturated", seed)
    a = torch.randint(-128, 128, (2, k), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-128, 128, (2, k), generator=g, dtype=torch.int16).to(torch.int8)
    a[0].fill_(-128)
    b[0].fill_(-128)
    sa = token_scales(g, 2) / 2**20  # |acc| ~ 2**31: keep float16 outputs finite
    sw, viol = channel_scales(g, 2, mode), ["C3", "C4"]
    return family_case(
        "int32_overflow", "saturated", mode, out_dtype, a, b, sa, sw, seed=seed, trigger="|acc| > 2^31", violates=viol
    )


#: K of the two-direction case: 16256 * K > 2**31 (127 * -128 products overflow below -2**31)
BOTH_K = 132_110


def both_directions_case(seed: int = 0, k: int = BOTH_K) -> GemmOperands:
    """``int32_overflow`` in both directions, M = N = 3: rows 0 / 1 of ``a`` all -128
    / 127, columns 0 / 1 of ``b`` all -128 (above 2**31 - 1 and below -2**31);
    row and column 2 random. pow2 weight scales, float32 output."""
    g = generator("int32_overflow", "both_directions", seed)
    a = torch.randint(-127, 128, (3, k), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-127, 128, (3, k), generator=g, dtype=torch.int16).to(torch.int8)
    a[0].fill_(-128)
    a[1].fill_(127)
    b[:2].fill_(-128)
    sa = token_scales(g, 3) / 2**20
    sw, trigger = channel_scales(g, 3, "pow2"), "|acc| > 2^31 in both directions"
    variant = "both_directions"
    return family_case(
        "int32_overflow",
        variant,
        "pow2",
        torch.float32,
        a,
        b,
        sa,
        sw,
        seed=seed,
        trigger=trigger,
        violates=["C3", "C4"],
    )


def partial_sums_family(seed: int = 0) -> list[GemmOperands]:
    """``partial_sums``: both variants x both modes x bf16/fp16/fp32 (12 cases)."""
    return [partial_sum_case(v, mode, dt, seed) for v in ("run_first", "run_last") for mode, dt in GRID]


def large_acc_family(seed: int = 0) -> list[GemmOperands]:
    """``large_acc``: both modes x bf16/fp16/fp32 (6 cases)."""
    return [large_acc_case(mode, dt, seed) for mode, dt in GRID]


def int32_overflow_family(seed: int = 0) -> list[GemmOperands]:
    """``int32_overflow``: pow2 / float32 only (each case is slow under the Triton
    interpreter; :func:`overflow_case` builds the others), plus :func:`both_directions_case`."""
    return [overflow_case("pow2", torch.float32, seed), both_directions_case(seed)]
