"""Accumulator-safe FP8 (e4m3) case families (DESIGN.md section 3b): the accumulator of every kernel that keeps its
declared model with at least ``bits`` retained bits (default 14, the fewest supported) is the exact sum, so C5 / C6 /
C8 judge the epilogue bit-exactly, as for INT8.

Lemma. Let every product ``a[m, k] * b[n, k]`` be an integer multiple of a power of two ``u`` and, for every output
element, ``sum_k |a[m, k] * b[n, k]| < 2**bits * u``. A partial sum of any order, summation tree, split-K part,
promotion chunk or fp32 total is the sum of the products over a subset of k, hence an integer multiple ``c * u`` of
``u`` with ``|c| <= sum_k |a b| / u < 2**bits``: ``c`` has at most ``bits`` significant bits, so the value is
representable in a partial sum of ``bits`` significant bits and in float32 (``bits <= 24``; ``u >= 2**-18`` is far
from float32's subnormals). No addition rounds (truncating or RNE alike), and the accumulator equals the exact sum.

``small_int`` (:func:`small_int_family`): integer values with ``|a| <= A``, ``|b| <= W`` (e4m3 holds every integer up
to 16), ``u = 1``; an ``a`` row has at most ``s`` nonzero entries, so ``sum_k |a b| <= s * A * W``; each case takes
``s * A * W < 2**bits``. ``narrow_span`` (:func:`narrow_span_family`): ``|a|`` in ``{m * 2**ea : m in M}`` for the two
exponents ``ea in {ea0, ea0 + 1}`` and mantissas ``M`` (``{1, 1.5}`` or all eight e4m3 mantissas ``1 + i/8``), ``b``
likewise with ``eb0``: every product is a multiple of ``u = 2**(ea0 + eb0 - f)`` (``f`` = 2 mantissa fraction bits
of the two operands: 2 for ``{1, 1.5}``, 6 for eighths) of magnitude at most ``P = (2 max M)**2 * 2**(ea0 + eb0)
/ u`` units (36 or 900); with at most ``s`` nonzero entries per ``a`` row, ``s * P < 2**bits``. Every builder checks the
bound on the operands it made (``meta["abs_sum_max_units"] < 2**bits``) and raises AssertionError otherwise.
``narrow_span``'s ``sparse_deep`` ``a`` and ``all_layouts`` ``b`` (exponents -8, -7) are e4m3 *subnormals*
(exponent field 0, values m * 2**-9): a kernel flushing them to zero differs there.

``overflow_inf`` (:func:`overflow_inf_family`): outputs on the rounding boundary to +-inf and past it, in every
output dtype (the accumulators of the int8 ``overflow_inf`` family, with scales up to 2**120). Each accumulator is an
integer ``|acc| < 2**13`` written as a sum of e4m3 integers (:func:`e4m3_integer_terms`) in its own block of k with
``b = 1`` there (``u = 1``, ``sum_k |a b| = |acc|``): the lemma holds.

Cases ``fp8/<family>/<variant>-<mode>-<dtype>`` for every (scale mode, output dtype) of ``common.GRID``, ``a`` and
``b`` seeded per (family, variant, seed): regimes of M (decode 1, small, prefill > 128), K (a tail below 16, not a
multiple of 16 / 32 / 128, several promotion intervals of 128), N, layouts (padded ``a``, transposed ``b``, all),
scale forms ([M,1] / [N,1] columns, a 0-d ``scale_a`` also at M = 1, a one-element ``scale_b``), negative and zero
scales, N over several 128-wide tiles with a partial last one and past 32,768, column-major ``b`` with N > K and
with a padded leading dimension; ``special_values`` (:func:`special_values_family`): -0, every subnormal and
+-448 under every scale form. ``signed_zero`` / ``subnormal`` (:func:`signed_zero_family`, :func:`subnormal_family`): the INT8 output
families' cases (``outputs.py``) on e4m3 integers (:func:`from_int8_case`: the same accumulators, ``u = 1``), at a
decode M and a prefill M; ``overflow_inf`` also under every scale form (:func:`overflow_inf_form_case`); ``small_int``
also layouts at prefill M, N = 4096 and K = 1040, and bias value classes (``planting.bias_class_value``: bits that change
through bf16 or fp16) in every output dtype up to N = 32,784. ``paper_layers`` (:func:`paper_layer_family`): real operands, judged by C12. Most cases
have K and N multiples of 16 (what FP8 GEMMs such as ``torch._scaled_mm`` accept), the tails do not.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from conformance.cases.captures import NO_CAPTURES, CaptureReplay
from conformance.cases.common import (
    DTYPE_TAG,
    GRID,
    OUT_DTYPES,
    channel_scales,
    family_case,
    generator,
    mantissa,
    sign,
    token_scales,
)
from conformance.cases.layouts import with_layout
from conformance.cases.outputs import (
    negative_scales_case,
    signed_zero_case,
    subnormal_case,
    subnormal_scales_case,
    zero_scales_case,
)
from conformance.cases.planting import BIAS_VALUES, bias_class_value
from conformance.cases.tie_search import pick_fp32_ties, pick_ties
from reference.fp8 import E4M3, exact_at_bits
from reference.operands import GemmOperands

#: Retained significant bits the families are built for (the fewest a declaration may keep and stay safe).
SAFE_BITS = 14
PREFIX = "fp8"


@dataclass(frozen=True)
class Regime:
    """One variant: shape (m, k, n), ``layout`` (``layouts.with_layout``), ``bias``, ``support`` (nonzero entries
    per ``a`` row; None: all of K, some zeros drawn unless ``positive``), ``positive`` (every product > 0 where
    nonzero, values from the pools' ``top`` largest magnitudes: partial sums grow towards the bound), ``signed_scales``
    (every other channel scale negative, one channel and one token scale zero), ``grid``: the (scale mode, output
    dtype) pairs of its cases (None: the builder's), ``bias_values``: the bias of column j of value class
    ``planting.BIAS_VALUES[j % 3]`` (``planting.bias_class_value``: bits that change through bf16 or fp16), not Gaussian."""

    variant: str
    m: int
    k: int
    n: int
    layout: str = "dense"
    bias: bool = False
    support: Optional[int] = None
    positive: bool = False
    top: Optional[int] = None
    signed_scales: bool = False
    grid: Optional[tuple] = None
    bias_values: bool = False


def _magnitudes(mantissas: Sequence[float], exponents: Sequence[int]) -> torch.Tensor:
    return torch.tensor(sorted({m * 2.0**e for m in mantissas for e in exponents}), dtype=torch.float64)


def _draw(g: torch.Generator, shape, pool: torch.Tensor, positive: bool, zeros: bool) -> torch.Tensor:
    """float64 [shape] drawn from ``pool`` (magnitudes), random signs unless ``positive``, some zeros if ``zeros``."""
    v = pool[torch.randint(len(pool), tuple(shape), generator=g)]
    if not positive:
        v = torch.where(torch.rand(tuple(shape), generator=g) < 0.5, -v, v)
    if zeros:
        v = torch.where(torch.rand(tuple(shape), generator=g) < 0.2, torch.zeros_like(v), v)
    return v


def _restrict_support(g: torch.Generator, a: torch.Tensor, support: Optional[int]) -> torch.Tensor:
    """``a`` with all but ``support`` random positions of every row zeroed (None: unchanged)."""
    if support is None or support >= a.shape[1]:
        return a
    keep = torch.zeros_like(a, dtype=torch.bool)
    for r in range(a.shape[0]):
        keep[r, torch.randperm(a.shape[1], generator=g)[:support]] = True
    return torch.where(keep, a, torch.zeros_like(a))


def safe_case(
    family: str,
    reg: Regime,
    pool_a: torch.Tensor,
    pool_b: torch.Tensor,
    unit_log2: int,
    bits: int = SAFE_BITS,
    seed: int = 0,
    grid: Sequence = GRID,
) -> list[GemmOperands]:
    """The cases of one regime over ``grid``: ``a`` [m, k], ``b`` [n, k] e4m3 drawn from the magnitude pools (every
    product a multiple of ``2**unit_log2``), scales per (mode, dtype). AssertionError if the lemma's bound fails."""
    g = generator(f"{PREFIX}/{family}", reg.variant, seed)
    if reg.top:
        pool_a, pool_b = pool_a[-reg.top :], pool_b[-reg.top :]
    zeros = reg.support is None and not reg.positive
    a = _restrict_support(g, _draw(g, (reg.m, reg.k), pool_a, reg.positive, zeros), reg.support)
    b = _draw(g, (reg.n, reg.k), pool_b, reg.positive, zeros)
    a8, b8 = a.to(E4M3), b.to(E4M3)
    assert torch.equal(a8.to(torch.float64), a) and torch.equal(b8.to(torch.float64), b), "pool not e4m3"
    units = (a.abs() @ b.abs().T) / 2.0**unit_log2  # exact: dyadic, far below 2**53
    worst = int(units.max())
    assert bool((units == units.round()).all()) and worst < 2**bits, f"{family}/{reg.variant}: bound broken"
    out = []
    for mode, dt in reg.grid or grid:
        gs = generator(f"{PREFIX}/{family}", f"{reg.variant}-{mode}-{DTYPE_TAG[dt]}", seed)
        sa, sw = token_scales(gs, reg.m), channel_scales(gs, reg.n, mode)
        if reg.signed_scales:
            sw[1::2] = -sw[1::2]
            sw[0], sa[-1] = 0.0, 0.0
        bias = (torch.randn(reg.n, generator=gs) / 8).to(dt) if reg.bias else None
        if reg.bias_values:
            vals = [bias_class_value(BIAS_VALUES[j % len(BIAS_VALUES)], dt, gs, j) for j in range(reg.n)]
            bias = torch.tensor(vals, dtype=torch.float64).to(dt)
        meta = {"operands": "e4m3", "safe_bits": bits, "unit_log2": unit_log2, "abs_sum_max_units": worst}
        meta.update(layout=reg.layout, trigger=f"exact accumulator at >= {bits} retained bits, any order")
        ops = family_case(family, reg.variant, mode, dt, a8, b8, sa, sw, bias, seed, prefix=PREFIX, **meta)
        out.append(ops if reg.layout == "dense" else with_layout(ops, reg.layout, gs))
    return out


#: ``small_int`` regimes with their value bounds (A, W): support * A * W < 2**14 in every one.
SMALL_INT = (
    (Regime("decode", 1, 1008, 64), 4, 4),
    (Regime("k_tail", 3, 13, 5), 4, 4),
    (Regime("k_515", 7, 515, 17, bias=True), 4, 4),
    (Regime("prefill", 129, 160, 32, bias=True), 4, 4),
    (Regime("monotone", 5, 1008, 32, positive=True, top=2), 4, 4),
    (Regime("deep", 4, 4080, 16), 2, 2),
    (Regime("sparse_deep", 3, 4099, 8, support=1023), 4, 4),
    (Regime("a_padded", 9, 304, 48, layout="a_padded"), 4, 4),
    (Regime("b_transposed", 16, 144, 48, layout="b_transposed", bias=True), 4, 4),
    # the scale forms the contract allows besides [M] / [N]: [M,1] and [N,1], a 0-d scale_a, a one-element scale_b
    (Regime("scales_column", 24, 160, 32, layout="scales_column", bias=True), 4, 4),
    (Regime("scale_a_0d", 7, 96, 48, layout="scale_a_0d"), 4, 4),
    (Regime("scale_b_1", 33, 128, 16, layout="scale_b_1", bias=True), 4, 4),
    (Regime("decode_scale_a_0d", 1, 256, 64, layout="scale_a_0d"), 4, 4),
    # N over several 128-wide tiles with a partial last one, with bias; column-major b with N > K
    (Regime("wide_n_tail", 8, 96, 320, bias=True), 4, 4),
    (Regime("b_transposed_wide", 8, 64, 160, layout="b_transposed", bias=True), 4, 4),
    # negative and zero scales (a zero-weight channel, an all-zero token)
    (Regime("signed_zero_scales", 16, 128, 48, bias=True, signed_scales=True), 4, 4),
    # the INT8 regimes: N past 32,768 (one grid pair: 32k outputs), column-major b with a leading
    # dimension past N (N < K and N > K), a split-K depth at decode M
    (Regime("wide_n_32k", 2, 32, 32784, bias=True, grid=(GRID[0],)), 4, 4),
    (Regime("b_transposed_padded", 8, 80, 48, layout="b_transposed_padded", bias=True, grid=GRID[:2]), 4, 4),
    (Regime("b_transposed_padded_wide", 4, 48, 160, layout="b_transposed_padded", grid=GRID[3:5]), 4, 4),
    (Regime("decode_splitk", 4, 8208, 16, support=1023, grid=(GRID[5],)), 4, 4),
    # operand layouts at prefill M (>= 128) and at large N / K, not only at small shapes: padded a, column-major b
    # (padded too), strided scales and bias ("all": every one at once)
    (Regime("prefill_all", 129, 160, 48, layout="all", bias=True), 4, 4),
    (Regime("prefill_a_padded", 256, 144, 32, layout="a_padded", grid=GRID[1:4]), 4, 4),
    (Regime("prefill_b_transposed_padded", 128, 96, 64, layout="b_transposed_padded", bias=True, grid=GRID[2:5]), 4, 4),
    (Regime("prefill_scales_strided", 130, 64, 32, layout="scales_strided", bias=True, grid=GRID[3:6]), 4, 4),
    (Regime("prefill_scale_a_0d", 128, 64, 32, layout="scale_a_0d", grid=(GRID[0], GRID[4])), 4, 4),
    (Regime("wide_all", 2, 48, 4096, layout="all", bias=True, grid=GRID[::2]), 4, 4),
    (Regime("deep_all", 129, 1040, 16, layout="all", bias=True, support=1023, grid=GRID[1::2]), 4, 4),
    # bias value classes (bits that change through bf16 or fp16: full significand, outside the other format's range,
    # tiny) in every output dtype, narrow, at N >= 4096 and past 32,768 (small M and K)
    (Regime("bias_values", 17, 48, 48, bias=True, bias_values=True), 4, 4),
    (Regime("bias_values_wide", 2, 32, 4096, bias=True, bias_values=True, grid=GRID[:3]), 4, 4),
    (Regime("bias_values_32k", 1, 16, 32784, bias=True, bias_values=True, grid=GRID[:3]), 4, 4),
    (
        Regime(
            "bias_values_wide_strided", 3, 32, 4112, layout="bias_strided", bias=True, bias_values=True, grid=GRID[3:]
        ),
        4,
        4,
    ),
)

#: ``narrow_span`` regimes: (regime, mantissas, ea0, eb0, unit log2); mantissas {1, 1.5}: <= 36 units per product.
HALVES, EIGHTHS = (1.0, 1.5), tuple(1 + i / 8 for i in range(8))
NARROW_SPAN = (
    (Regime("decode", 1, 448, 32), HALVES, -6, 3),
    (Regime("prefill", 130, 96, 32, bias=True), HALVES, -3, -4),
    (Regime("monotone", 3, 448, 16, positive=True, top=3), HALVES, 2, 2),
    (Regime("sparse_deep", 4, 2064, 16, support=455), HALVES, -8, 5),
    (Regime("full_mantissa", 6, 1040, 16, support=18), EIGHTHS, -2, 1),
    (Regime("all_layouts", 5, 208, 32, layout="all", bias=True, support=455), HALVES, 4, -8),
)


def small_int_family(seed: int = 0, bits: int = SAFE_BITS) -> list[GemmOperands]:
    """``small_int`` (module docstring): every regime of :data:`SMALL_INT` x ``GRID``."""
    out = []
    for reg, amax, wmax in SMALL_INT:
        pa, pb = torch.arange(1, amax + 1, dtype=torch.float64), torch.arange(1, wmax + 1, dtype=torch.float64)
        out += safe_case("small_int", reg, pa, pb, 0, bits, seed)
    return out


def narrow_span_family(seed: int = 0, bits: int = SAFE_BITS) -> list[GemmOperands]:
    """``narrow_span`` (module docstring): every regime of :data:`NARROW_SPAN` x ``GRID``."""
    out = []
    for reg, mant, ea0, eb0 in NARROW_SPAN:
        f = 2 if mant == HALVES else 6
        pa, pb = _magnitudes(mant, (ea0, ea0 + 1)), _magnitudes(mant, (eb0, eb0 + 1))
        out += safe_case("narrow_span", reg, pa, pb, ea0 + eb0 - f, bits, seed)
    return out


def e4m3_integer_terms(v: int) -> list[int]:
    """Nonnegative integer ``v`` as a sum of e4m3-representable integers, largest first (greedy: each term is the
    largest e4m3 integer <= the rest, so the rest drops below an eighth of the term)."""
    out = []
    while v > 0:
        t = max(x for x in E4M3_INTEGERS if x <= v)
        out.append(t)
        v -= t
    return out


#: Positive integers e4m3 holds exactly (1..16, then 4 significant bits up to 448), ascending.
E4M3_INTEGERS = tuple(
    sorted(
        {int(x) for x in torch.arange(256, dtype=torch.uint8).view(E4M3).double().tolist() if x >= 1 and x == int(x)}
    )
)


def _blocks(acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a e4m3 [M, K], b e4m3 [N, K])`` with ``a @ b.T == acc`` (int64 [M, N]): column n owns k block n, where
    ``b`` is 1 and each ``a`` row holds the signed :func:`e4m3_integer_terms` of its accumulator; K a multiple of 16."""
    m, n = acc.shape
    terms = [[e4m3_integer_terms(abs(int(acc[i, j]))) for j in range(n)] for i in range(m)]
    block = max(len(t) for row in terms for t in row)
    k = -(-n * block // 16) * 16
    a = torch.zeros(m, k, dtype=torch.float64)
    b = torch.zeros(n, k, dtype=torch.float64)
    for j in range(n):
        b[j, j * block : (j + 1) * block] = 1.0
        for i in range(m):
            s = 1.0 if int(acc[i, j]) >= 0 else -1.0
            for t, v in enumerate(terms[i][j]):
                a[i, j * block + t] = s * v
    a8, b8 = a.to(E4M3), b.to(E4M3)
    assert torch.equal(a8.double(), a) and torch.equal((a8.double() @ b8.double().T).long(), acc), "not realized"
    return a8, b8


def overflow_inf_case(mode: str, out_dtype: torch.dtype, seed: int = 0, n: int = 16) -> GemmOperands:
    """One ``overflow_inf`` case, M = 4, N = 16 (module docstring; N and K multiples of 16, the shapes cuBLASLt's FP8
    GEMM takes): rows 0 / 1 on the boundary to +-inf (``s_a`` =
    +-1), rows 2 / 3 coarse (``|s_a|`` in [1, 2): no scale order overflows before its last step)."""
    g = generator(f"{PREFIX}/overflow_inf", "boundary", seed)
    fp16 = out_dtype == torch.float16
    # targets t * 2**e around the largest finite value: bf16 / fp32 e = 119 around 511, fp16 e = 4 around 4095
    t0, e = (4090, 4) if fp16 else (505, 119)
    u = mantissa(g, n, mode)
    u[0::2] = 1.0
    sw = torch.pow(2.0, torch.full((n,), float(e), dtype=torch.float64)) * u
    boundary = torch.round(torch.arange(t0, t0 + n, dtype=torch.float64) / u).to(torch.int64)
    x = 10 if fp16 else 7
    coarse = torch.randint(2 ** (x - 2), 2 ** (x + 1), (2, n), generator=g) * sign(g, n)[None, :]
    acc = torch.cat([boundary[None, :], boundary[None, :], coarse], 0)
    a, b = _blocks(acc)
    sa = torch.cat([torch.tensor([1.0, -1.0], dtype=torch.float64), mantissa(g, 2, "real")])
    worst = int(acc.abs().max())
    assert worst < 2**SAFE_BITS, "overflow_inf: bound broken"
    meta = {"operands": "e4m3", "safe_bits": SAFE_BITS, "unit_log2": 0, "abs_sum_max_units": worst}
    meta.update(layout="dense", trigger="+-inf outputs and the rounding boundary to inf")
    sa32, sw32 = sa.to(torch.float32), sw.to(torch.float32)
    return family_case("overflow_inf", "boundary", mode, out_dtype, a, b, sa32, sw32, None, seed, prefix=PREFIX, **meta)


def overflow_inf_form_case(form: str, out_dtype: torch.dtype, seed: int = 0, n: int = 16) -> GemmOperands:
    """One ``overflow_inf`` case under the scale form ``form`` (``layouts.with_layout``: ``scale_a_0d``, ``scale_b_1``,
    ``scales_column``, ``scales_strided``): :func:`overflow_inf_case`'s accumulators with every token scale 1 (row 1
    the negated boundary row instead of ``s_a = -1``: one ``s_a`` value, so a per-tensor form holds it) and, for
    ``scale_b_1`` / ``scale_b_0d``, every channel scale ``2**e`` (one value). Variant ``boundary_<form>``, real
    mode. ``form`` ``bias``: dense scales and a bias of signed zeros (it moves no output in any bias point: a kernel
    saturating only where a bias is added shows)."""
    g = generator(f"{PREFIX}/overflow_inf", f"boundary_{form}", seed)
    fp16 = out_dtype == torch.float16
    t0, e = (4090, 4) if fp16 else (505, 119)
    u = torch.ones(n, dtype=torch.float64) if form in ("scale_b_1", "scale_b_0d") else mantissa(g, n, "real")
    u[0::2] = 1.0
    sw = torch.pow(2.0, torch.full((n,), float(e), dtype=torch.float64)) * u
    boundary = torch.round(torch.arange(t0, t0 + n, dtype=torch.float64) / u).to(torch.int64)
    x = 11 if fp16 else 8  # s_a = 1: the coarse rows' |acc| one binade higher than with s_a in [1, 2)
    coarse = torch.randint(2 ** (x - 2), 2 ** (x + 1), (2, n), generator=g) * sign(g, n)[None, :]
    acc = torch.cat([boundary[None, :], -boundary[None, :], coarse], 0)
    a, b = _blocks(acc)
    worst = int(acc.abs().max())
    assert worst < 2**SAFE_BITS, "overflow_inf: bound broken"
    meta = {"operands": "e4m3", "safe_bits": SAFE_BITS, "unit_log2": 0, "abs_sum_max_units": worst}
    meta.update(layout=form, trigger=f"+-inf outputs and the rounding boundary to inf, scale form {form}")
    sa32, sw32 = torch.ones(4, dtype=torch.float32), sw.to(torch.float32)
    v = f"boundary_{form}"
    bias = None
    if form == "bias":  # +0 / -0 alternating: x + (+-0) = x for every nonzero x, in every bias point and rounding
        bias = torch.where(torch.arange(n) % 2 == 0, 0.0, -0.0).to(out_dtype)
    ops = family_case("overflow_inf", v, "real", out_dtype, a, b, sa32, sw32, bias, seed, prefix=PREFIX, **meta)
    if form == "bias":
        return ops
    return with_layout(ops, form, generator(f"{PREFIX}/overflow_inf", f"{v}-{DTYPE_TAG[out_dtype]}", seed))


#: The scale forms besides [M] / [N] that ``overflow_inf`` takes (every output dtype each), and a signed-zero bias.
OVERFLOW_FORMS = ("scale_a_0d", "scale_b_1", "scale_b_0d", "scales_column", "scales_strided", "bias")


def overflow_inf_family(seed: int = 0) -> list[GemmOperands]:
    """``overflow_inf`` (module docstring): one case per (scale mode, output dtype) of ``GRID``, and one per (scale
    form of :data:`OVERFLOW_FORMS`, output dtype) (:func:`overflow_inf_form_case`)."""
    out = [overflow_inf_case(mode, dt, seed) for mode, dt in GRID]
    return out + [overflow_inf_form_case(form, dt, seed) for form in OVERFLOW_FORMS for dt in OUT_DTYPES]


def from_int8_case(ops: GemmOperands, variant: str, m: Optional[int] = None, neg_zero: bool = False) -> GemmOperands:
    """An INT8 output-family case (``conformance.cases.outputs``) on e4m3 operands: its integer ``a`` / ``b`` (every
    value within +-16, which e4m3 holds exactly) cast to e4m3, its scales, bias and output dtype kept, so the epilogue
    sees the same accumulators; ``m``: rows (and token scales) repeated cyclically up to ``m`` (a prefill M with the
    same per-row analysis); ``neg_zero``: every other zero of ``a`` and ``b`` is -0 (byte 0x80). Accumulator-safe by
    the module's lemma (``u = 1``; AssertionError otherwise); K padded with zero columns to a multiple of 16. Named ``fp8/<family>/<variant>-<mode>-<dtype>``."""
    a, b, sa = ops.a.to(torch.float64), ops.b.to(torch.float64), ops.scale_a
    assert bool((a.abs() <= 16).all()) and bool((b.abs() <= 16).all()), f"{ops.name}: not e4m3 integers"
    if m is not None:
        reps = -(-m // a.shape[0])
        a, sa = a.repeat(reps, 1)[:m], sa.repeat(reps)[:m].clone()
    if neg_zero:
        a = torch.where((a == 0) & (torch.arange(a.numel()).reshape(a.shape) % 2 == 0), -0.0, a)
        b = torch.where((b == 0) & (torch.arange(b.numel()).reshape(b.shape) % 2 == 1), -0.0, b)
    pad = -a.shape[1] % 16  # K a multiple of 16 (zero columns: the sums unchanged)
    a, b = torch.nn.functional.pad(a, (0, pad)), torch.nn.functional.pad(b, (0, pad))
    worst = int((a.abs() @ b.abs().T).max())
    assert worst < 2**SAFE_BITS, f"{ops.name}: bound broken"
    meta = dict(ops.meta)
    family, mode, tag = meta["family"], meta["scale_kind"], DTYPE_TAG[ops.out_dtype]
    meta.update(variant=variant, operands="e4m3", safe_bits=SAFE_BITS, unit_log2=0, abs_sum_max_units=worst)
    meta.update(layout="dense", int8_case=ops.name)
    name = f"{PREFIX}/{family}/{variant}-{mode}-{tag}"
    return GemmOperands(a.to(E4M3), b.to(E4M3), sa, ops.scale_b, ops.bias, ops.out_dtype, name, ops.scale_mode, meta)


#: Prefill M of the ``signed_zero`` / ``subnormal`` cases (rows repeated: the same per-row analysis).
PREFILL_M = 129


def signed_zero_family(seed: int = 0) -> list[GemmOperands]:
    """``signed_zero``: ``outputs.signed_zero_case`` (zero ``a`` / ``b`` rows under scales of both signs, a row
    underflowing to +-0; pow2 mode a -0 bias) on small-integer e4m3 operands (the int8 values divided by 32, zeros
    kept, every other zero -0: a sum of -0 operands is +0 before the scales), every (mode, output dtype) of ``GRID``
    at M = 4 (``zeros``) and every output dtype at M = :data:`PREFILL_M` (``zeros_prefill``)."""
    out = []
    for variant, grid, m in (("zeros", GRID, None), ("zeros_prefill", GRID[:3], PREFILL_M)):
        for mode, dt in grid:
            out.append(from_int8_case(_reduced(signed_zero_case(mode, dt, seed, n=16), 32), variant, m, neg_zero=True))
    for form in SIGNED_ZERO_FORMS:  # -0 outputs under a one-value scale form (a kernel adding +0 only there)
        for dt in OUT_DTYPES:
            ops = from_int8_case(_reduced(signed_zero_case("real", dt, seed, n=16), 32), f"zeros_{form}", neg_zero=True)
            g = generator(f"{PREFIX}/signed_zero", f"zeros_{form}-{DTYPE_TAG[dt]}", seed)
            out.append(with_layout(dataclasses.replace(ops, meta=dict(ops.meta, layout=form)), form, g))
    return out


def _reduced(ops: GemmOperands, divisor: int) -> GemmOperands:
    """``ops`` with ``a`` / ``b`` floor-divided by ``divisor`` (zeros kept; e4m3 integers for :func:`from_int8_case`)."""
    a, b = (torch.div(t.to(torch.int16), divisor, rounding_mode="floor") for t in (ops.a, ops.b))
    return dataclasses.replace(ops, a=a, b=b)


#: The scale forms the ``signed_zero`` family also takes (one scale value per tensor: ``layouts.with_layout``).
SIGNED_ZERO_FORMS = ("scale_a_0d", "scale_b_0d", "scale_b_1")


def scale_values_family(seed: int = 0) -> list[GemmOperands]:
    """The INT8 scale-value families on e4m3 operands (:func:`from_int8_case`), every (mode, output dtype) of ``GRID``,
    named ``fp8/scale_values/<variant>-<mode>-<dtype>``: ``zero_scales`` and ``negative_scales`` (integers divided
    by 16: |a|, |b| <= 8), ``subnormal_weight`` and ``subnormal_token_m1`` (``outputs.subnormal_scales_case``:
    a float32-subnormal per-channel s_w, and per-token s_a at M = 1). A kernel flushing a subnormal scale, or writing
    +0 for a zero scale's -0, shows in every output dtype."""

    def ported(ops: GemmOperands, variant: str) -> GemmOperands:
        return from_int8_case(dataclasses.replace(ops, meta=dict(ops.meta, family="scale_values")), variant)

    one = {"m": 1, "role": "activation"}
    return (
        [ported(_reduced(zero_scales_case(mode, dt, seed), 16), "zero_scales") for mode, dt in GRID]
        + [ported(_reduced(negative_scales_case(mode, dt, seed), 16), "negative_scales") for mode, dt in GRID]
        + [ported(subnormal_scales_case(mode, dt, seed), "subnormal_weight") for mode, dt in GRID]
        + [ported(subnormal_scales_case(mode, dt, seed, **one), "subnormal_token_m1") for mode, dt in GRID]
    )


def subnormal_family(seed: int = 0) -> list[GemmOperands]:
    """``subnormal``: ``outputs.subnormal_case`` (outputs across the normal / subnormal boundary of the output dtype,
    every product exact in float32; integers within +-8) on e4m3 operands, every (mode, output dtype) of ``GRID`` at
    a decode M = 8 (``spread``) and every output dtype at M = :data:`PREFILL_M` (``spread_prefill``)."""
    out = [from_int8_case(subnormal_case(mode, dt, seed), "spread") for mode, dt in GRID]
    return out + [from_int8_case(subnormal_case(mode, dt, seed), "spread_prefill", PREFILL_M) for mode, dt in GRID[:3]]


def scale_order_ties_case(
    out_dtype: torch.dtype, seed: int = 0, m: int = 8, n: int = 32, variant: str = "ties", vmax: int = 2**SAFE_BITS - 1
) -> GemmOperands:
    """One ``scale_order_ties`` case: accumulators where the legal scale orders round apart
    (``tie_search.pick_ties`` / ``pick_fp32_ties``, |acc| <= ``vmax`` < 2**14), realized by :func:`_blocks` (integer
    e4m3 terms of one sign, ``b`` = 1), so ``sum_k |a b| = |acc| < 2**14``: accumulator-safe by the module's lemma; real-valued scales in [1e-3, 2.1e-2)."""
    g = generator(f"{PREFIX}/scale_order_ties", f"{variant}-{DTYPE_TAG[out_dtype]}", seed)
    sa = (torch.rand(m, generator=g, dtype=torch.float64) * 0.02 + 1e-3).float()
    sw = (torch.rand(n, generator=g, dtype=torch.float64) * 0.02 + 1e-3).float()
    if variant.endswith("uniform_a"):  # one value in every entry of the [M] vector (a per-tensor scale, spelled [M])
        sa = sa[:1].expand(m).clone()
    # float32 output: orders within one spacing of each other (C6's premise), still apart (C8 tells them apart)
    acc = pick_fp32_ties(g, sa, sw, vmax) if out_dtype == torch.float32 else pick_ties(g, sa, sw, out_dtype, vmax)
    a, b = _blocks(acc)
    meta = {"operands": "e4m3", "safe_bits": SAFE_BITS, "unit_log2": 0, "abs_sum_max_units": int(acc.abs().max())}
    meta.update(layout="dense", trigger="scale order (a_then_w / w_then_a / fused round apart)")
    return family_case(
        "scale_order_ties", variant, "real", out_dtype, a, b, sa, sw, None, seed, snap_fp32=False, prefix=PREFIX, **meta
    )


#: ``scale_order_ties`` variants: (name, output dtype, M). Every output dtype (float32 too: the orders differ by one
#: spacing, which C8 sees) at a decode-like M, a prefill M above 128, a wide N where a kernel may take another
#: tile path, and a uniform [M] scale vector (one value: a kernel may take a per-tensor path there).
TIE_VARIANTS = (
    ("ties", torch.bfloat16, 8),
    ("ties", torch.float16, 8),
    ("ties", torch.float32, 8),
    ("ties_prefill", torch.bfloat16, 129),
    ("ties_prefill", torch.float32, 129),
    ("ties_wide", torch.bfloat16, 8),
    ("ties_uniform_a", torch.bfloat16, 8),
    ("ties_uniform_a", torch.float16, 8),
)


def scale_order_ties_family(seed: int = 0) -> list[GemmOperands]:
    """``scale_order_ties``: every :data:`TIE_VARIANTS` entry, N = 32 (``ties_wide``: N = 288, three 128-wide tiles,
    the last partial, accumulators below 2**11 so that K stays near 1.7k)."""
    wide = dict(n=288, vmax=2**11 - 1)
    return [
        scale_order_ties_case(dt, seed, m=m, variant=v, **(wide if v == "ties_wide" else {}))
        for v, dt, m in TIE_VARIANTS
    ]


#: The e4m3 value classes of ``special_values`` rows and columns (magnitudes; signs drawn): the largest finite
#: value, every subnormal (m * 2**-9, m = 1..7) with the smallest normal 2**-6, small integers; class 3 is all zeros.
SPECIAL_CLASSES = ((448.0,), tuple(i * 2.0**-9 for i in range(1, 9)), (1.0, 2.0, 3.0, 4.0))
#: The scale forms ``special_values`` takes (``layouts.with_layout``): [M] / [N], [M,1] / [N,1], a 0-d scale_a, a
#: one-element scale_b, strided scales.
SPECIAL_FORMS = ("dense", "scales_column", "scale_a_0d", "scale_b_1", "scales_strided")
SPECIAL_SUPPORT = 8


def _special_operand(g: torch.Generator, rows: int, k: int) -> torch.Tensor:
    """e4m3 [rows, k]: row r of class ``r % 4`` (:data:`SPECIAL_CLASSES`, 3: zeros), ``SPECIAL_SUPPORT`` nonzero
    entries of drawn sign; every zero is -0 or +0 at random (-0 is byte 0x80)."""
    x = torch.zeros(rows, k, dtype=torch.float64)
    for r in range(rows):
        cls = r % 4
        if cls < 3:
            pool = torch.tensor(SPECIAL_CLASSES[cls], dtype=torch.float64)
            at = torch.randperm(k, generator=g)[:SPECIAL_SUPPORT]
            x[r, at] = pool[torch.randint(len(pool), (SPECIAL_SUPPORT,), generator=g)] * sign(g, SPECIAL_SUPPORT)
    neg0 = (x == 0) & (torch.rand(rows, k, generator=g) < 0.5)
    return torch.where(neg0, torch.full_like(x, -0.0), x).to(E4M3)


def special_values_family(seed: int = 0, m: int = 8, k: int = 64, n: int = 32) -> list[GemmOperands]:
    """``special_values``: every special e4m3 bit pattern (-0, every subnormal, +-448, the smallest normal) in rows
    and columns of one value class each (:func:`_special_operand`), so that every element is accumulator-safe
    (``exact_at_bits(a, b, 14)``: AssertionError otherwise), under every scale form of :data:`SPECIAL_FORMS`, two
    (scale mode, output dtype) pairs of ``GRID`` per form (all six over the forms), bias on half."""
    out = []
    for i, form in enumerate(SPECIAL_FORMS):
        g = generator(f"{PREFIX}/special_values", form, seed)
        a, b = _special_operand(g, m, k), _special_operand(g, n, k)
        assert bool(exact_at_bits(a, b, SAFE_BITS).all()), f"special_values/{form}: bound broken"
        assert bool((a.view(torch.uint8) == 0x80).any()) and bool((b.view(torch.uint8) == 0x80).any())
        for j in (2 * i, 2 * i + 1):
            mode, dt = GRID[j % len(GRID)]
            gs = generator(f"{PREFIX}/special_values", f"{form}-{mode}-{DTYPE_TAG[dt]}", seed)
            sa, sw = token_scales(gs, m), channel_scales(gs, n, mode)
            bias = (torch.randn(n, generator=gs) / 8).to(dt) if j % 2 else None
            meta = {"operands": "e4m3", "safe_bits": SAFE_BITS, "layout": form}
            meta["trigger"] = "special e4m3 bit patterns (-0, subnormals, +-448) under one scale form"
            ops = family_case("special_values", form, mode, dt, a, b, sa, sw, bias, seed, prefix=PREFIX, **meta)
            out.append(ops if form == "dense" else with_layout(ops, form, gs))
    return out


#: Paper-size layers (name, K, N): Llama-3-70B's down_proj (the deepest K of the field's dense models) and
#: Qwen2's lm_head (a vocabulary-wide N).
PAPER_LAYERS = (("llama3_70b.down_proj", 28672, 8192), ("qwen2_7b.lm_head", 3584, 151936))
#: M of a paper-size layer where the kernel runs natively (a GPU).
PAPER_M = 64
#: The widest N of a CPU paper layer (C11 plants its rows at N = 65,536; the epilogue cases reach N = 32,784).
WIDE_N_CPU = 8192
#: What the CPU plan's narrow paper layers do not reach (the report names it).
PAPER_NOT_AFFORDED = (
    f"paper-size layers large in M, K and N together (M = {PAPER_M}, K up to 28,672 with N = 8,192; N = 151,936 "
    f"with K = 3,584) and N past {WIDE_N_CPU:,}: run only where the kernel runs natively (a GPU); here each "
    f"layer's K at M = 2, N = 16 and N = min(N, {WIDE_N_CPU:,}) at M = 1, K = 128"
)


def paper_layer_case(name: str, m: int, k: int, n: int, variant: str, seed: int = 0) -> GemmOperands:
    """One synthetic layer [m, k] x [n, k]: Gaussian weights (std 0.02, bf16) quantized per channel and Gaussian
    activations quantized per token to e4m3 (``reference.fp8.quantize``, as compressed-tensors / vLLM), bf16
    output, no bias. Real operands: the accumulator rounds, so C12 bounds the output (C5/C6/C8 where exact)."""
    from reference.fp8.quantize import quantize_activation_fp8_per_token, quantize_weight_fp8_per_channel

    g = generator(f"{PREFIX}/paper_layers", f"{name}-{variant}", seed)
    w = (torch.randn(n, k, generator=g) * 0.02).to(torch.bfloat16)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    b, sw = quantize_weight_fp8_per_channel(w)
    a, sa = quantize_activation_fp8_per_token(x)
    meta = {"operands": "e4m3", "layout": "dense", "layer": name, "trigger": f"paper-size layer {name}"}
    v = f"{name}-{variant}"
    sw32 = sw.reshape(-1).to(torch.float32)
    return family_case("paper_layers", v, "real", torch.bfloat16, a, b, sa, sw32, None, seed, prefix=PREFIX, **meta)


def paper_layer_family(seed: int = 0, native: bool = False) -> list[GemmOperands]:
    """``paper_layers``: every :data:`PAPER_LAYERS` layer at M = :data:`PAPER_M` when ``native`` (variant
    ``full``); else the smallest shapes that reach its regimes: its K at M = 2, N = 16 (``deep_k``) and its N (at
    most :data:`WIDE_N_CPU`, for a layer wider than that) at M = 1, K = 128 (``wide_n``); :data:`PAPER_NOT_AFFORDED` names what that leaves
    out."""
    out = []
    for name, k, n in PAPER_LAYERS:
        if native:
            out.append(paper_layer_case(name, PAPER_M, k, n, "full", seed))
        else:
            out.append(paper_layer_case(name, 2, k, 16, "deep_k", seed))
            if n > WIDE_N_CPU:  # the widest layer once, at the CPU's cap
                out.append(paper_layer_case(name, 1, 128, WIDE_N_CPU, "wide_n", seed))
    return out


#: name -> (builder(seed) -> cases, what it reaches), as ``families.FAMILIES``.
FP8_FAMILIES: dict[str, tuple[Callable[[int], list], str]] = {
    "small_int": (small_int_family, "integer e4m3, exact accumulator at >= 14 bits in any order"),
    "narrow_span": (
        narrow_span_family,
        "two-exponent e4m3 spans (subnormal operands included), exact accumulator at >= 14 bits in any order",
    ),
    "overflow_inf": (overflow_inf_family, "+-inf outputs and the rounding boundary to inf, exact accumulator"),
    "signed_zero": (signed_zero_family, "-0 and +0 outputs (zero sums, -0 operands, underflow) under signed scales"),
    "subnormal": (subnormal_family, "subnormal outputs of every output dtype at decode and prefill M"),
    "scale_values": (scale_values_family, "zero, negative and float32-subnormal scales (weight; token at M = 1)"),
    "scale_order_ties": (scale_order_ties_family, "scale-order ties: the declared scale order decides the bits"),
    "special_values": (special_values_family, "every special e4m3 bit pattern (-0, subnormals, +-448) per scale form"),
}


def fp8_family_cases(names: Optional[Sequence[str]] = None, seed: int = 0) -> list[GemmOperands]:
    """Cases of the FP8 families ``names`` (default: all, in order); ValueError for an unknown name."""
    names = list(FP8_FAMILIES) if names is None else list(names)
    bad = [x for x in names if x not in FP8_FAMILIES]
    if bad:
        raise ValueError(f"unknown FP8 case families {bad}; known: {list(FP8_FAMILIES)}")
    return [ops for name in names for ops in FP8_FAMILIES[name][0](seed)]


#: Activation scale modes of the FP8 capture cases (weights: per-channel static in both).
CAPTURE_ACTIVATIONS = ("per_token", "per_tensor")


def fp8_capture_cases(
    activations: Sequence[str] = CAPTURE_ACTIVATIONS, capture_set=None, max_layers: Optional[int] = None
) -> CaptureReplay:
    """Captured layers (default: the shipped set) quantized to e4m3 in each activation mode of ``activations``
    (``reference.model.capture.iter_layer_operands_fp8``), the first ``max_layers`` per mode; case ids
    ``<layer>[fp8-token]`` / ``<layer>[fp8-tensor]``. ``available=False`` with a note when there are none;
    CaptureError when the set is inconsistent or its parent model is missing."""
    try:
        from reference.model.capture import default_capture_set, iter_layer_operands_fp8
    except ImportError as e:
        return CaptureReplay(note=f"{NO_CAPTURES} (reference.model.capture not importable: {e})")
    cs = capture_set if capture_set is not None else default_capture_set()
    if cs is None:
        return CaptureReplay(note=f"{NO_CAPTURES} (no capture set has been built)")
    modes = list(activations)
    cases = []
    for mode in modes:
        for i, ops in enumerate(iter_layer_operands_fp8(cs, mode)):
            if max_layers is not None and i >= max_layers:
                break
            cases.append(ops)
    src = str(getattr(cs, "dir", "") or "")
    layers = len({c.name for c in cases})
    note = f"{layers} captured layers quantized to e4m3 ({', '.join(modes)} activations, per-channel weights; "
    note += f"{len(cases)} cases) from {src or 'capture set'}"
    return CaptureReplay(cases=cases, available=True, source=src, note=note)
