"""Families reaching the output's trigger conditions (README.md here).

``subnormal`` (across the normal / subnormal boundary, every product exact in
float32), ``subnormal_scales`` (float32-subnormal per-channel weight scales, or per-token scales at M = 1, normal outputs), ``overflow_inf`` (on the rounding boundary to +-inf, no intermediate
overflow), ``signed_zero``, ``negative_scales``, ``zero_scales`` and
``bias_cancel`` (bias ~ -(acc * s_a * s_w): the bias point decides).
"""

from __future__ import annotations

import torch

from conformance.cases.common import (
    GRID,
    channel_scales,
    family_case,
    generator,
    mantissa,
    sign,
    small_int8,
    token_scales,
)
from conformance.cases.planting import short_mantissa
from conformance.cases.tie_search import realize_acc
from reference.operands import GemmOperands


def _f32(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32)


def subnormal_case(
    mode: str, out_dtype: torch.dtype, seed: int = 0, m: int = 8, n: int = 16, k: int = 24
) -> GemmOperands:
    """One ``subnormal`` case: |acc| < 2**11, s_a = +-2**-(e0 + m) * short, s_w =
    2**-(f0 + 0.75 n) * short: every product a multiple of 2**-149 with <= 24
    bits, exact in float32, so only the final rounding decides."""
    g = generator("subnormal", "spread", seed)
    a = small_int8(g, (m, k), -8, 8)
    b = small_int8(g, (n, k), -8, 8)
    # y ~ |acc| * 2**-(ea + ew): bf16/fp32 ea + ew in [120, 138] (<= 149 - 11 keeps
    # every product a multiple of 2**-149); fp16 in [18, 36] (fp16 subnormals < 2**-14)
    e0, f0 = (4, 14) if out_dtype == torch.float16 else (60, 60)
    ea = torch.arange(m, dtype=torch.float64) + e0
    ew = torch.floor(torch.arange(n, dtype=torch.float64) * 0.75) + f0
    sa = torch.pow(2.0, -ea) * short_mantissa(g, m, 3) * sign(g, m)
    sw = torch.pow(2.0, -ew) * (short_mantissa(g, n, 8) if mode == "real" else torch.ones(n, dtype=torch.float64))
    return family_case(
        "subnormal", "spread", mode, out_dtype, a, b, _f32(sa), _f32(sw), seed=seed, trigger="subnormal outputs"
    )


def subnormal_scales_case(
    mode: str, out_dtype: torch.dtype, seed: int = 0, m: int = 8, n: int = 16, k: int = 24, role: str = "weight"
) -> GemmOperands:
    """One ``subnormal_scales`` case: per-channel s_w float32-SUBNORMAL (2**-(127 + j mod 10), fp16 out
    2**-(127 + j mod 4); 8-bit mantissas in ``real`` mode, powers of two in ``pow2``), s_a huge (2**(100 + i mod 4),
    fp16 2**(112 + i mod 4), 3-bit mantissas), |acc| < 2**11: every product normal and exact in float32 in every
    scale order (acc * s_a <= 14 bits below 2**127; acc * s_w <= 19 bits above 2**-149; s_a * s_w <= 11 bits), so
    every legal contract gives the same bits and a kernel that flushes a subnormal weight scale to zero zeroes
    nonzero outputs. ``role="activation"``: the two scales' roles swapped (per-token s_a subnormal, s_w huge; the
    same bounds), the decode path's case at ``m`` = 1."""
    g = generator("subnormal_scales", role, seed)
    a = small_int8(g, (m, k), -8, 8)
    b = small_int8(g, (n, k), -8, 8)
    fp16 = out_dtype == torch.float16
    tiny_n, huge_n = (n, m) if role == "weight" else (m, n)
    e_huge = torch.arange(huge_n, dtype=torch.float64) % 4 + (112 if fp16 else 100)
    e_tiny = torch.arange(tiny_n, dtype=torch.float64) % (4 if fp16 else 10) + 127
    huge = torch.pow(2.0, e_huge) * short_mantissa(g, huge_n, 3) * sign(g, huge_n)
    tiny = torch.pow(2.0, -e_tiny) * (
        short_mantissa(g, tiny_n, 8) if mode == "real" else torch.ones(tiny_n, dtype=torch.float64)
    )
    sa, sw = (huge, tiny) if role == "weight" else (tiny, huge)
    which = "per-channel weight" if role == "weight" else "per-token activation"
    return family_case(
        "subnormal_scales",
        role,
        mode,
        out_dtype,
        a,
        b,
        _f32(sa),
        _f32(sw),
        seed=seed,
        snap_fp32=role == "weight",  # every order is exact here; snapping would round a subnormal s_a up to normal
        trigger=f"float32-subnormal {which} scales, normal outputs",
    )


def overflow_inf_case(mode: str, out_dtype: torch.dtype, seed: int = 0, n: int = 12) -> GemmOperands:
    """One ``overflow_inf`` case, M = 4, K = 32 N: rows 0 / 1 on the boundary to +-inf, rows 2 / 3 coarse."""
    g = generator("overflow_inf", "boundary", seed)
    fp16 = out_dtype == torch.float16
    # boundary targets t * 2**e: bf16/fp32 e = 119 around 511, fp16 e = 4 around 4095
    t0, e = (4090, 4) if fp16 else (505, 119)
    u = mantissa(g, n, mode)
    u[0::2] = 1.0  # even columns exact powers of two in both modes
    sw = torch.pow(2.0, torch.full((n,), float(e), dtype=torch.float64)) * u
    targets = torch.arange(t0, t0 + n, dtype=torch.float64)
    boundary = torch.round(targets / u).to(torch.int64)  # acc * u ~ target
    # coarse rows: |acc| in [2**(x-2), 2**(x+1)), s_a in [1, 2): y spans the top binades;
    # |s_a| >= 1 keeps acc * s_w below y, so no scale order overflows before the last step
    x = 10 if fp16 else 7
    coarse = torch.randint(2 ** (x - 2), 2 ** (x + 1), (2, n), generator=g) * sign(g, n)[None, :]
    acc = torch.cat([boundary[None, :], boundary[None, :], coarse], 0)
    a, b = realize_acc(acc)
    sa = torch.cat([torch.tensor([1.0, -1.0], dtype=torch.float64), mantissa(g, 2, "real")])
    trigger = "+-inf outputs and the rounding boundary to inf"
    return family_case(
        "overflow_inf", "boundary", mode, out_dtype, a, b, _f32(sa), _f32(sw), seed=seed, trigger=trigger
    )


def signed_zero_case(
    mode: str, out_dtype: torch.dtype, seed: int = 0, m: int = 4, n: int = 8, k: int = 48
) -> GemmOperands:
    """One ``signed_zero`` case: row 0 of ``a`` and row 3 of ``b`` zero, row 2
    underflowing to +-0, scales of both signs; pow2 mode with a -0.0 bias."""
    g = generator("signed_zero", "zeros", seed)
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int16).to(torch.int8)
    a[0].zero_()
    b[3].zero_()
    sa = token_scales(g, m).double() * torch.tensor([-1.0, -1.0, 1.0, 1.0])[:m]
    sw = channel_scales(g, n, mode).double() * sign(g, n)
    if out_dtype == torch.float16:
        # row 2: |acc * s_a * s_w| <= 2**20 * 2**-40 * 2**-7 < 2**-25: every order
        # gives a float32 value that rounds to a float16 zero of the product's sign
        sa[2] = -(2.0**-40)
    else:
        # row 2: s_a = -2**-149 (smallest subnormal) and s_w ~ 2**-37..-42, so
        # acc * s_a <= 2**-129, acc * s_w <= 2**-17 and s_a * s_w all end below
        # 2**-150 after the second factor: every order rounds to a signed zero
        sa[[0, 1, 3]] *= 2.0**30
        sw = sw * 2.0**-30
        sa[2] = -(2.0**-149)
    bias = torch.full((n,), -0.0, dtype=out_dtype) if mode == "pow2" else None
    sa, sw, trigger = _f32(sa), _f32(sw), "-0 and +0 outputs"
    return family_case("signed_zero", "zeros", mode, out_dtype, a, b, sa, sw, bias=bias, seed=seed, trigger=trigger)


def negative_scales_case(
    mode: str, out_dtype: torch.dtype, seed: int = 0, m: int = 6, n: int = 12, k: int = 64
) -> GemmOperands:
    """One ``negative_scales`` case: scales of random sign on both sides; a bias in float16 cases."""
    g = generator("negative_scales", "signs", seed)
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int16).to(torch.int8)
    sa = token_scales(g, m) * sign(g, m).to(torch.float32)
    sw = channel_scales(g, n, mode) * sign(g, n).to(torch.float32)
    bias = (0.5 * torch.randn(n, generator=g)).to(out_dtype) if out_dtype == torch.float16 else None
    return family_case(
        "negative_scales", "signs", mode, out_dtype, a, b, sa, sw, bias=bias, seed=seed, trigger="negative scales"
    )


def zero_scales_case(
    mode: str, out_dtype: torch.dtype, seed: int = 0, m: int = 6, n: int = 8, k: int = 40
) -> GemmOperands:
    """One ``zero_scales`` case: zero rows with scale 0 (padding tokens), scales 0
    and -0.0 on nonzero rows (real mode: weight scales too); a bias in bf16 cases."""
    g = generator("zero_scales", "zeros", seed)
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int16).to(torch.int8)
    a[0].zero_()
    a[3].zero_()
    sa = token_scales(g, m)
    sa[0] = sa[3] = sa[4] = 0.0
    sa[5] = -0.0
    sw = channel_scales(g, n, mode)
    if mode == "real":
        sw[2], sw[5] = 0.0, -0.0
    # bias only with bf16 output: with float32 output it would push legal order differences past C6
    bias = (0.5 * torch.randn(n, generator=g)).to(out_dtype) if out_dtype == torch.bfloat16 else None
    trigger = "zero scales and all-zero rows"
    return family_case("zero_scales", "zeros", mode, out_dtype, a, b, sa, sw, bias=bias, seed=seed, trigger=trigger)


def bias_cancel_case(
    mode: str, out_dtype: torch.dtype, seed: int = 0, m: int = 4, n: int = 16, k: int = 64
) -> GemmOperands:
    """One ``bias_cancel`` case: rows 1..3 of ``a`` are row 0 with 1..3 entries
    moved by +-1; bias = -rnd(row 0's y); short scales make y exact, so only the
    bias point decides."""
    g = generator("bias_cancel", "near", seed)
    a0 = torch.randint(-8, 9, (1, k), generator=g, dtype=torch.int16)
    a = a0.repeat(m, 1)
    for i in range(1, m):
        idx = torch.randperm(k, generator=g)[:i]
        a[i, idx] += sign(g, i).to(torch.int16)
    a = a.to(torch.int8)
    b = torch.randint(-8, 9, (n, k), generator=g, dtype=torch.int16).to(torch.int8)
    # |acc| < 2**10, 3 + 8 fractional scale bits: every product exact in float32
    sa = (2.0 ** -torch.randint(2, 6, (m,), generator=g).double() * short_mantissa(g, m, 3)).to(torch.float32)
    sw = (
        2.0 ** -torch.randint(4, 9, (n,), generator=g).double()
        * (short_mantissa(g, n, 8) if mode == "real" else torch.ones(n, dtype=torch.float64))
    ).to(torch.float32)
    acc0 = (a[0].long() @ b.long().T).to(torch.float32)  # |acc| < 2**24: exact
    y0 = (acc0 * sa[0]) * sw
    bias = (-y0).to(out_dtype)
    return family_case(
        "bias_cancel", "near", mode, out_dtype, a, b, sa, sw, bias=bias, seed=seed, trigger="bias near cancellation"
    )


def subnormal_family(seed: int = 0) -> list[GemmOperands]:
    return [subnormal_case(mode, dt, seed) for mode, dt in GRID]


def subnormal_scales_family(seed: int = 0) -> list[GemmOperands]:
    weight = [subnormal_scales_case(mode, dt, seed) for mode, dt in GRID]
    return weight + [subnormal_scales_case(mode, dt, seed, m=1, role="activation") for mode, dt in GRID]


def overflow_inf_family(seed: int = 0) -> list[GemmOperands]:
    return [overflow_inf_case(mode, dt, seed) for mode, dt in GRID]


def signed_zero_family(seed: int = 0) -> list[GemmOperands]:
    return [signed_zero_case(mode, dt, seed) for mode, dt in GRID]


def negative_scales_family(seed: int = 0) -> list[GemmOperands]:
    return [negative_scales_case(mode, dt, seed) for mode, dt in GRID]


def zero_scales_family(seed: int = 0) -> list[GemmOperands]:
    return [zero_scales_case(mode, dt, seed) for mode, dt in GRID]


def bias_cancel_family(seed: int = 0) -> list[GemmOperands]:
    return [bias_cancel_case(mode, dt, seed) for mode, dt in GRID]
