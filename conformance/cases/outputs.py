"""Families that reach the output's trigger conditions.

* ``subnormal``: outputs spread across the normal / subnormal boundary of
  the output dtype (bf16 and float32: 2**-126; float16: 2**-14), down to
  rounding to zero: a kernel that flushes subnormals to zero (FTZ, fast-math)
  or mishandles the gradual-underflow rounding is caught. Scales are chosen
  per row / column so ``acc * s_a * s_w`` spans about 2**-109 .. 2**-135
  (bf16, fp32) or 2**-1 .. 2**-19 (fp16), while ``acc * s_a`` stays normal.
* ``overflow_inf``: outputs at and beyond the largest finite value: rows 0/1
  put ``acc * s_a * s_w`` on the exact rounding boundary to +-inf
  (bf16: 505..516 * 2**119 around the midpoint 511 * 2**119 between the
  largest bf16 255 * 2**120 and 2**128; fp16: 4090..4101 * 16 around 65520);
  rows 2/3 span about 2**124 .. 2**129 (fp16: 2**12 .. 2**17), with
  |s_a| >= 1 so that no scale order overflows in an intermediate product
  (orders then differ by at most one spacing). A kernel that
  saturates to the largest finite value, or truncates, is caught.
* ``signed_zero``: exact -0 and +0 outputs: an all-zero row of ``a`` and an
  all-zero row of ``b`` under scales of both signs (acc = 0, sign from the
  scales), and a row whose products underflow to a signed zero. Real mode
  has no bias; pow2 mode adds a bias of -0.0 (which keeps -0). A kernel
  that adds a +0 bias when none is given, or drops the sign of zero, is
  caught (bit comparison, the sign of zero counts).
* ``negative_scales``: per-token and per-channel scales of both signs.
* ``zero_scales``: all-zero rows of ``a`` with scale 0 (what per-token
  quantization gives padding tokens), a nonzero row with scale 0 and -0.0,
  zero weight scales (real mode), with and without bias.
* ``bias_cancel``: bias ~ -(acc * s_a * s_w), so ``y + bias`` is tiny and
  the bias point (float32 before the rounding, or after it) and bias
  precision decide many bits.
"""

from __future__ import annotations

import torch

from conformance.cases._common import (
    GRID,
    channel_scales,
    family_case,
    generator,
    mantissa,
    sign,
    small_int8,
    token_scales,
)
from conformance.cases.tie_search import realize_acc
from reference.operands import GemmOperands


def _f32(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32)


def short_mantissa(g: torch.Generator, n: int, bits: int) -> torch.Tensor:
    """float64 [n] significands in [1, 2) with ``bits`` fractional bits
    (products of such scales and small accumulators are exact in float32,
    so every legal scale order gives the same bits: C6's premise holds)."""
    return 1.0 + torch.randint(0, 2**bits, (n,), generator=g).double() / 2**bits


def subnormal_case(
    mode: str, out_dtype: torch.dtype, seed: int = 0, m: int = 8, n: int = 16, k: int = 24
) -> GemmOperands:
    """One ``subnormal`` case (module docstring): a, b int8 in [-8, 8] (|acc|
    <= 1536 < 2**11), s_a[m] = +-2**-(e0 + m) * (1 + i/8), s_w[n] =
    2**-(f0 + floor(0.75 n)) * (1 + j/256) (j = 0 in pow2 mode). Every
    ``acc * s_a * s_w`` and ``s_a * s_w`` is then a multiple of 2**-149 with
    at most 24 significant bits, i.e. exact in float32 (subnormal or not), so
    the three scale orders agree bit for bit and only the final rounding to
    the output dtype (bf16 / fp16 subnormals) or its absence (fp32) decides."""
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


def overflow_inf_case(mode: str, out_dtype: torch.dtype, seed: int = 0, n: int = 12) -> GemmOperands:
    """One ``overflow_inf`` case (module docstring), M = 4, K = N * 32
    (accumulators built by ``realize_acc``)."""
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
    return family_case(
        "overflow_inf",
        "boundary",
        mode,
        out_dtype,
        a,
        b,
        _f32(sa),
        _f32(sw),
        seed=seed,
        trigger="+-inf outputs and the rounding boundary to inf",
    )


def signed_zero_case(
    mode: str, out_dtype: torch.dtype, seed: int = 0, m: int = 4, n: int = 8, k: int = 48
) -> GemmOperands:
    """One ``signed_zero`` case (module docstring): row 0 of ``a`` and row 3
    of ``b`` all zero; row 2 scaled so that products underflow to +-0; scales
    of both signs; pow2 mode with a bias of -0.0."""
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
    return family_case(
        "signed_zero",
        "zeros",
        mode,
        out_dtype,
        a,
        b,
        _f32(sa),
        _f32(sw),
        bias=bias,
        seed=seed,
        trigger="-0 and +0 outputs",
    )


def negative_scales_case(
    mode: str, out_dtype: torch.dtype, seed: int = 0, m: int = 6, n: int = 12, k: int = 64
) -> GemmOperands:
    """One ``negative_scales`` case: scales of random sign on both sides; a
    bias (out_dtype, N(0, 0.5)) in float16 cases."""
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
    """One ``zero_scales`` case: rows 0 and 3 of ``a`` all zero with scale 0
    (quantizer output for padding tokens), row 4 nonzero with scale 0, row 5
    with scale -0.0; real mode also zeroes weight scales 2 (0.0) and 5
    (-0.0); a bias in bf16 cases."""
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
    # bias only with bf16 output: float32 output plus a bias would amplify the
    # (legal) one-ulp differences between scale orders past C6's one spacing
    bias = (0.5 * torch.randn(n, generator=g)).to(out_dtype) if out_dtype == torch.bfloat16 else None
    return family_case(
        "zero_scales",
        "zeros",
        mode,
        out_dtype,
        a,
        b,
        sa,
        sw,
        bias=bias,
        seed=seed,
        trigger="zero scales and all-zero rows",
    )


def bias_cancel_case(
    mode: str, out_dtype: torch.dtype, seed: int = 0, m: int = 4, n: int = 16, k: int = 64
) -> GemmOperands:
    """One ``bias_cancel`` case: a, b int8 in [-8, 8]; rows 1..3 of ``a`` are
    row 0 with 1..3 entries moved by +-1; bias[n] = -(out_dtype rounding of
    row 0's ``(float32(acc) * s_a) * s_w``), so every output is a
    near-cancellation. Scales have short significands (products exact in
    float32): every scale order gives the same y, so C6's one-spacing premise
    holds and the bias point alone decides."""
    g = generator("bias_cancel", "near", seed)
    a0 = torch.randint(-8, 9, (1, k), generator=g, dtype=torch.int16)
    a = a0.repeat(m, 1)
    for i in range(1, m):
        idx = torch.randperm(k, generator=g)[:i]
        a[i, idx] += sign(g, i).to(torch.int16)
    a = a.to(torch.int8)
    b = torch.randint(-8, 9, (n, k), generator=g, dtype=torch.int16).to(torch.int8)
    # |acc| <= 9 * 8 * k < 2**10, s_a with 3 and s_w with 8 fractional bits: every
    # acc * s_a * s_w is exact in float32, so all scale orders agree and only the
    # bias point / bias precision decide the cancellation
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
    """``subnormal``: both modes x bf16/fp16/fp32 (6 cases)."""
    return [subnormal_case(mode, dt, seed) for mode, dt in GRID]


def overflow_inf_family(seed: int = 0) -> list[GemmOperands]:
    """``overflow_inf``: both modes x bf16/fp16/fp32 (6 cases)."""
    return [overflow_inf_case(mode, dt, seed) for mode, dt in GRID]


def signed_zero_family(seed: int = 0) -> list[GemmOperands]:
    """``signed_zero``: both modes x bf16/fp16/fp32 (6 cases)."""
    return [signed_zero_case(mode, dt, seed) for mode, dt in GRID]


def negative_scales_family(seed: int = 0) -> list[GemmOperands]:
    """``negative_scales``: both modes x bf16/fp16/fp32 (6 cases)."""
    return [negative_scales_case(mode, dt, seed) for mode, dt in GRID]


def zero_scales_family(seed: int = 0) -> list[GemmOperands]:
    """``zero_scales``: both modes x bf16/fp16/fp32 (6 cases)."""
    return [zero_scales_case(mode, dt, seed) for mode, dt in GRID]


def bias_cancel_family(seed: int = 0) -> list[GemmOperands]:
    """``bias_cancel``: both modes x bf16/fp16/fp32 (6 cases)."""
    return [bias_cancel_case(mode, dt, seed) for mode, dt in GRID]
