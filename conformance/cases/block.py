"""Block-scaled case families (issue 46, DESIGN.md section 8: discriminators x regimes), per declared block size.

For each ``(block_n, block_k)`` a kernel declares (``KernelSpec.block.sizes``), :data:`VARIANTS`: K a multiple of
block_k and K with a short last K-block (a tail of 1 and of block_k - 1), N with a partial last weight block
(``N % block_n != 0``; block_n = 1 has none), decode M (1, 3, 4) and prefill M (128, 129), every out dtype, bias
none / present, scale magnitude classes, layouts (column-major ``scale_a`` as DeepGEMM takes it, the transposed
view of ``b``, padded ``a``, each alone or together, and with all of them a strided bias: :func:`layout_parts`); ``WIDE`` adds N = 4096 + block_n / 2 at
M = 2 for the first size (``conformance.cases.block_covering.block_plan_cases`` builds the plan). Three
``*-aligned`` variants have whole blocks only (K and N multiples of the block, as DeepGEMM and CUTLASS's block-wise
GEMM require: 16-element alignment), at decode M 1 and 16 and prefill M 128, so such kernels run some cases.

Discrimination. Scales are distinct per K-block and per weight-block row with full float32 mantissas, so a scale
read from a wrong K-block or weight block, a tail K-block scaled with another block's scale, an FMA for a multiply
and add, a fused ``s_a*s_w`` and a split-K order each change float32 bits. A 16-bit output hides one float32 ulp, so
odd rows (the row at M = 1) cancel: full K-blocks come in pairs (2j, 2j + 1) with ``b`` repeated and ``a`` negated, and the pair's
scales differ by a relative ``2**-15 .. 2**-13``; the row's value is the pair residuals, about ``2**-14`` of each
term, so the terms' float32 roundings move it by up to ``2**-10`` relative: bf16 / fp16 bits change (unpaired blocks
are zero on those rows; even rows are random and carry the tail); a bias is Gaussian with the magnitude of those
rows' values, so the bias point shows there. Split-K orders need >= 4 K-blocks (K-blocks split 2 or 3 ways differ
from the sequential sum only past 3 / 4 blocks): ``decode3-tail1`` has 6, ``layouts`` 5, ``decode2-longk`` 10 (a
split-K switched on past 8 K-blocks). Magnitudes (:data:`MAGNITUDES`): ``typical``
(s_a ~ absmax / 127, s_w ~ 1e-4 .. 3e-3), ``pow2`` (powers of two, small operands: every legal block accumulation
gives the same bits, ``reference.block.evaluate.order_free_elements`` holds on every element: asserted), ``tiny``
(s_a * s_w ~ 2**-130: a fused scale product is float32-subnormal), ``huge`` (s_a ~ 2**90, s_w ~ 2**-100),
``subnormal_a`` / ``subnormal_w`` (one scale float32-subnormal, ~2**-133, the other ~2**100: the products are
normal, so a scale flushed to zero shows), ``underflow`` (s_a * s_w ~ 2**-200: every scaled partial underflows
to a signed zero, so the sign of the output zero is the block accumulation's start: a running sum seeded with a
partial instead of ``+0.0`` shows, whatever the partials' own arithmetic); for the covering rows (``conformance.cases.block_covering``) also
``pow2_tiny`` (ue8m0: powers of two, s_a float32-subnormal 2**-133 .. 2**-130, s_w 2**98 .. 2**101; premise
asserted as for ``pow2``) and ``k_uniform`` (typical draws constant along K, a per-channel checkpoint expanded to
blocks: a pair's equal scales cancel it exactly, so each pair carries a small residual instead, :func:`_values`).

e4m3 (``operands="e4m3"``): the same integers, ``|a| <= 8`` and ``|b| <= W`` with ``block_k * 8 * W < 2**14``, so
each K-block's partial is exact in any accumulator keeping >= 14 bits (the lemma of ``conformance.cases.fp8``,
applied per K-block: the block partial starts from 0) and C8 is exact; two e4m3-only variants (:func:`_fp8_values`)
reach the format's ends under the same lemma: magnitudes up to 448 (a clamp to another format's 240 shows) and
subnormal operands (a flush to zero shows); ``fp8-wide-sum`` needs more than 24 bits per K-block and is judged
only where the declared accumulator is ``exact`` (``checks.block_output``); ``fp8negzero`` (covering rows) the
integer draws with every product of row 0 and the first and last columns ``-0`` in every K-block (a bias there is
``-0`` too), so a running sum seeded with a partial instead of ``+0.0`` shows in the sign of zero. ``decode2-deepk`` (K = 56 K-blocks + 5, the field's 7168) and
``prefill130-deepk`` (16 K-blocks) reach deep-K paths. Names ``block/<bn>x<bk>/<variant>-<dtype>``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from conformance.cases.common import DTYPE_TAG, generator
from conformance.cases.fp8 import SAFE_BITS
from reference.block.evaluate import block_accumulate, order_free_elements
from reference.fp8 import E4M3
from reference.operands import GemmOperands

PREFIX = "block"
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
#: scale magnitude classes: (s_a low, s_a high, s_w low, s_w high) of the uniform draws (powers of two for pow2)
MAGNITUDES = {
    "typical": (0.004, 0.06, 1e-4, 3e-3),
    "pow2": (2.0**-9, 2.0**-5, 2.0**-12, 2.0**-8),
    "tiny": (2.0**-62, 2.0**-61, 2.0**-69, 2.0**-68),
    "huge": (2.0**90, 2.0**91, 2.0**-100, 2.0**-99),
    "subnormal_a": (2.0**-133, 2.0**-132, 2.0**100, 2.0**101),
    "subnormal_w": (2.0**100, 2.0**101, 2.0**-134, 2.0**-133),
    "pow2_tiny": (2.0**-133, 2.0**-130, 2.0**98, 2.0**101),
    "k_uniform": (0.004, 0.06, 1e-4, 3e-3),
    "underflow": (2.0**-100, 2.0**-99, 2.0**-101, 2.0**-100),
}
#: the magnitude classes whose scales are powers of two (ue8m0): ``order_free_elements`` holds (asserted), C5 judges
POW2_MAGNITUDES = ("pow2", "pow2_tiny")
#: operand magnitude of the pow2 cases (|p| <= block_k * 49: the sums stay exact in float32)
POW2_LIMIT = 7
#: the value classes built from the integer draws (:func:`_values`); the others are e4m3-only (:func:`_fp8_values`)
INT_VALUES = ("int", "fp8negzero")
#: relative difference of a cancelling pair's scales: uniform in [2**-15, 2**-13], random sign
PAIR_DELTA = (2.0**-15, 2.0**-13)


@dataclass(frozen=True)
class Variant:
    """One block case per size: ``m``; ``k`` as ``(full K-blocks, tail)`` (tail -1: block_k - 1); ``n`` ``partial``
    (``2 * block_n + block_n // 2 + 1``; 40 at block_n = 1), ``full`` (``2 * block_n``; 48 at block_n = 1), ``wide``,
    ``wideish`` (past 512 with a partial last block); out dtype, bias, magnitude, layout (:func:`layout_parts`),
    values."""

    name: str
    m: int
    k: tuple
    out_dtype: torch.dtype
    bias: bool
    magnitude: str = "typical"
    layout: str = "dense"
    n: str = "partial"
    values: str = "int"


VARIANTS = (
    Variant("decode1-kmul", 1, (4, 0), BF16, True),
    Variant("decode3-tail1", 3, (5, 1), FP32, False),
    Variant("decode4-tailbk1", 4, (2, -1), FP16, True),
    Variant("prefill128-kmul", 128, (2, 0), FP32, False),
    Variant("prefill129-tail1", 129, (2, 1), BF16, True, layout="all"),
    Variant("pow2-tail", 6, (3, 5), BF16, True, "pow2"),
    Variant("pow2-kmul", 2, (4, 0), FP32, False, "pow2", "scale_a_column_major"),
    Variant("tiny", 4, (2, 7), FP32, False, "tiny"),
    Variant("huge", 4, (2, 3), FP16, True, "huge"),
    Variant("subnormal-a", 4, (2, 5), FP32, False, "subnormal_a"),
    Variant("subnormal-w", 3, (3, 0), BF16, True, "subnormal_w"),
    Variant("underflow", 3, (3, 5), BF16, False, "underflow"),
    Variant("layouts", 8, (4, 3), FP32, True, layout="all"),
    Variant("decode2-longk", 2, (9, 3), FP32, False),
    Variant("decode2-deepk", 2, (56, 5), BF16, True),
    Variant("prefill130-deepk", 130, (16, 0), FP32, False),
    Variant("fp8-max", 4, (3, 17), BF16, True, values="fp8max"),
    Variant("fp8-subnormal", 3, (2, 9), FP32, False, values="fp8sub"),
    Variant("fp8-wide-sum", 3, (2, 0), FP32, False, values="fp8wide"),
    Variant("decode1-aligned", 1, (4, 0), BF16, False, n="full"),
    Variant("decode16-aligned-bias", 16, (2, 0), FP16, True, n="full"),
    Variant("prefill128-aligned", 128, (3, 0), BF16, False, n="full"),
)
#: e4m3 magnitudes of the ``fp8max`` values: multiples of 16 in [128, 448] (e4m3 steps 16 below 256, 32 above)
FP8_LARGE = tuple(range(128, 256, 16)) + tuple(range(256, 449, 32))
#: nonzero products per row and K-block of ``fp8max``: 16 * 448**2 < 2**22, multiples of 2**8: 14 bits exact
FP8_LARGE_TERMS = 16
WIDE = Variant("wide-decode2", 2, (1, 3), BF16, True, n="wide")
LAYOUTS = ("dense", "scale_a_column_major", "all")


def block_tag(block: tuple) -> str:
    return f"{block[0]}x{block[1]}"


def _k(block_k: int, k: tuple) -> tuple[int, int]:
    """``(K, tail)`` of a variant's ``(full blocks, tail)``."""
    full, tail = k
    tail = block_k - 1 if tail == -1 else tail
    return full * block_k + tail, tail


def _n(block_n: int, kind: str) -> int:
    if kind == "wide":
        return 4096 + max(1, block_n // 2)
    if kind == "wideish":  # past the N >= 512 a wide-N epilogue switches on, a partial last weight block
        return max(512, 4 * block_n) + max(1, block_n // 2) + 1
    if kind == "full":
        return 48 if block_n == 1 else 2 * block_n
    return 40 if block_n == 1 else 2 * block_n + block_n // 2 + 1


def _scales(
    g: torch.Generator, rows: int, kb: int, lo: float, hi: float, pow2: bool, pairs: int, k_uniform: bool = False
) -> torch.Tensor:
    """float32 [rows, kb]: uniform in [lo, hi) with full mantissas (``pow2``: 2**e, e uniform over the exponents of
    [lo, hi]); K-block 2j + 1 (j < pairs) is block 2j's times (1 + delta), delta of :data:`PAIR_DELTA`;
    ``k_uniform``: one draw per row repeated along K (a per-channel checkpoint expanded to blocks)."""
    if k_uniform:
        s = lo + (hi - lo) * torch.rand((rows, 1), generator=g, dtype=torch.float64)
        return s.expand(rows, kb).to(torch.float32).contiguous()
    if pow2:
        e_lo, e_hi = int(torch.tensor(lo).log2()), int(torch.tensor(hi).log2())
        e = torch.randint(e_lo, e_hi + 1, (rows, kb), generator=g).to(torch.float64)
        return torch.pow(2.0, e).to(torch.float32)
    s = lo + (hi - lo) * torch.rand((rows, kb), generator=g, dtype=torch.float64)
    for j in range(pairs):
        d = PAIR_DELTA[0] + (PAIR_DELTA[1] - PAIR_DELTA[0]) * torch.rand(rows, generator=g, dtype=torch.float64)
        sign = torch.where(torch.rand(rows, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
        s[:, 2 * j + 1] = s[:, 2 * j] * (1 + sign * d)
    return s.to(torch.float32)


def cancelling_rows(m: int) -> slice:
    """The rows that cancel pairwise (module docstring): the odd ones, every row at M = 1."""
    return slice(0, 1) if m == 1 else slice(1, None, 2)


def _values(
    g: torch.Generator,
    m: int,
    k: int,
    n: int,
    block_k: int,
    lim_a: int,
    lim_b: int,
    cancel: bool,
    residual: bool = False,
):
    """int16 ``(a [M, K], b [N, K], pairs)``: uniform in [-lim, lim]; with ``cancel``, odd rows cancel pairwise
    (module docstring) over ``pairs`` pairs of full K-blocks, zero elsewhere. ``residual`` (K-uniform scales, which
    cancel a pair exactly): each pair's first column of the cancelling rows holds ``a`` 3 and -2 (not -3), and ``b``
    there is a nonzero integer in [-min(lim_b, 8), min(lim_b, 8)], so the pair sums to ``b`` (a small residual of
    two terms ~2**17 apart; a single rounding of the whole-K sum and the per-K-block roundings differ by ~2**-10
    relative)."""
    a = torch.randint(-lim_a, lim_a + 1, (m, k), generator=g, dtype=torch.int16)
    b = torch.randint(-lim_b, lim_b + 1, (n, k), generator=g, dtype=torch.int16)
    pairs = (k // block_k) // 2 if cancel else 0
    rows = cancelling_rows(m)
    for j in range(pairs):
        lo, mid, hi = 2 * j * block_k, (2 * j + 1) * block_k, (2 * j + 2) * block_k
        b[:, mid:hi] = b[:, lo:mid]
        a[rows, mid:hi] = -a[rows, lo:mid]
        if residual:
            small = min(lim_b, 8)
            v = torch.randint(1, small + 1, (n,), generator=g, dtype=torch.int16)
            b[:, lo] = b[:, mid] = torch.where(torch.rand(n, generator=g) < 0.5, -v, v)
            a[rows, lo], a[rows, mid] = 3, -2
    if pairs:
        a[rows, 2 * pairs * block_k :] = 0
    return a, b, pairs


def _fp8_values(g: torch.Generator, m: int, k: int, n: int, block_k: int, kind: str):
    """float32 ``(a [M, K], b [N, K])`` of e4m3-only values, every K-block's partial exact at 14 bits (products of a
    common power of two, bounded): ``fp8max`` :data:`FP8_LARGE_TERMS` products per row and K-block of magnitudes
    in :data:`FP8_LARGE` (up to 448, the e4m3 maximum); ``fp8sub`` ``a`` e4m3-subnormal (``j * 2**-9``, j in
    1..7) everywhere, ``b`` integers in [-8, 8] on even K-blocks and subnormal on odd ones. ``fp8wide`` (NOT
    14-bit exact: judged only against an exact declared accumulator) per K-block ``+448**2`` and ``-448**2`` with
    ``j * 2**-7`` products around them: an accumulator that adds a small product to a big partial loses it (the
    float32 spacing at 448**2 is 2**-6), so a kernel declaring ``exact`` but summing in float32 (or 14 bits) shows."""
    sign = lambda shape: torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)  # noqa: E731
    if kind == "fp8max":
        big = torch.tensor(FP8_LARGE, dtype=torch.float32)
        pick = lambda shape: big[torch.randint(0, len(FP8_LARGE), shape, generator=g)] * sign(shape)  # noqa: E731
        b = pick((n, k))
        a = torch.zeros((m, k))
        for k0 in range(0, k, block_k):
            width = min(block_k, k - k0)
            for i in range(m):
                cols = k0 + torch.randperm(width, generator=g)[: min(FP8_LARGE_TERMS, width)]
                a[i, cols] = pick((len(cols),))
        return a, b
    sub = lambda shape: torch.randint(1, 8, shape, generator=g).float() * 2.0**-9 * sign(shape)  # noqa: E731
    if kind == "fp8wide":  # per K-block +448**2 at its start, -448**2 at its middle, k * 2**-7 products elsewhere
        a, b = sub((m, k)), torch.full((n, k), 4.0)
        for k0 in range(0, k, block_k):
            mid = k0 + min(block_k, k - k0) // 2
            a[:, k0], a[:, mid], b[:, k0], b[:, mid] = 448.0, -448.0, 448.0, 448.0
        return a, b
    a = sub((m, k))
    b = torch.randint(-8, 9, (n, k), generator=g).float()
    for k0 in range(block_k, k, 2 * block_k):
        b[:, k0 : k0 + block_k] = sub((n, min(block_k, k - k0)))
    return a, b


#: a variant's ``layout`` -> the operands it lays out: ``scale_a`` column-major, ``b`` transposed, ``a`` padded
LAYOUT_PARTS = {"dense": (), "scale_a_column_major": ("scale_a",), "all": ("scale_a", "b", "a", "bias")}


def layout_parts(layout: str) -> tuple:
    """The operands ``layout`` lays out: a :data:`LAYOUT_PARTS` key, or ``+``-joined operand names (``"b+a"``)."""
    if layout in LAYOUT_PARTS:
        return LAYOUT_PARTS[layout]
    parts = tuple(layout.split("+"))
    assert set(parts) <= {"scale_a", "b", "a", "bias"}, f"block layout {layout!r}"
    return parts


def _lay_out(ops: GemmOperands, layout: str, g: torch.Generator) -> GemmOperands:
    """``ops`` with the operands of :func:`layout_parts` laid out: ``scale_a`` column-major (``[KB, M]`` storage,
    DeepGEMM's), ``b`` the transposed view of a [K, N] buffer, ``a`` padded (leading stride K + 5, random
    padding), ``bias`` (where there is one) a stride-2 view."""
    parts = layout_parts(layout)
    if not parts:
        return ops
    sa = ops.scale_a.t().contiguous().t() if "scale_a" in parts else ops.scale_a
    a, b = ops.a, ops.b
    if "b" in parts:
        b = b.t().contiguous().t()
    if "a" in parts:
        buf = torch.randint(-128, 128, (ops.m, ops.k + 5), generator=g, dtype=torch.int16).to(torch.int8)
        buf = buf if a.dtype == torch.int8 else (buf % 9).to(a.dtype)
        buf[:, : ops.k] = a
        a = buf[:, : ops.k]
    bias = ops.bias
    if "bias" in parts and bias is not None:
        bias = torch.stack([bias, -bias], 1)[:, 0]
    return GemmOperands(a, b, sa, ops.scale_b, bias, ops.out_dtype, ops.name, ops.scale_mode, ops.meta, ops.block_size)


def negzero_columns(n: int) -> list[int]:
    """The columns of an ``fp8negzero`` case whose products with row 0 are all ``-0``: the first and the last."""
    return sorted({0, n - 1})


def _negzero(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``b`` (float32 [N, K]) with :func:`negzero_columns` set to signed zeros against row 0 of ``a``: ``-0.0``
    where ``a[0, k]`` has a clear sign bit, ``+0.0`` where it is set, so every product of row 0 and such a column
    is ``-0`` in every K-block (a running sum from ``+0.0`` gives ``+0``, one seeded with a partial ``-0``)."""
    b = b.clone()
    z = torch.where(torch.signbit(a[0]), torch.tensor(0.0), torch.tensor(-0.0))
    for j in negzero_columns(b.shape[0]):
        b[j] = z
    return b


def block_case(block: tuple, v: Variant, operands: str = "int8", seed: int = 0) -> GemmOperands:
    """One case of variant ``v`` at ``block`` = (block_n, block_k) (module docstring); AssertionError when a pow2
    case leaves ``order_free_elements``' premise."""
    bn, bk = (int(x) for x in block)
    g = generator(f"{PREFIX}/{block_tag(block)}/{operands}", v.name, seed)
    k, tail = _k(bk, v.k)
    n, m = _n(bn, v.n), v.m
    kb, nb = -(-k // bk), -(-n // bn)
    fp8 = operands == "e4m3"
    pow2, uniform = v.magnitude in POW2_MAGNITUDES, v.magnitude == "k_uniform"
    lim_a = POW2_LIMIT if pow2 else 8 if fp8 else 127
    lim_b = POW2_LIMIT if pow2 else min(15, (2**SAFE_BITS - 1) // (bk * 8)) if fp8 else 127
    if v.values in INT_VALUES:
        a, b, pairs = _values(g, m, k, n, bk, lim_a, lim_b, cancel=not pow2, residual=uniform)
    else:  # e4m3-only values (the block plan builds them for e4m3 operands only)
        (a, b), pairs = _fp8_values(g, m, k, n, bk, v.values), 0
    if v.values == "fp8negzero":
        b = _negzero(a.float(), b.float())
    dt = E4M3 if fp8 else torch.int8
    a, b = a.to(dt), b.to(dt)
    lo_a, hi_a, lo_w, hi_w = MAGNITUDES[v.magnitude]
    sa = _scales(g, m, kb, lo_a, hi_a, pow2, pairs, uniform)
    sw = _scales(g, nb, kb, lo_w, hi_w, pow2, pairs, uniform)
    bias = None
    if v.bias:  # of the cancelling rows' magnitude, so the bias point shows there
        acc = block_accumulate(a, b, sa, sw, (bn, bk), "mul s_a; mul s_w; add").abs()
        typical = float((acc[cancelling_rows(m)] if pairs else acc).median())
        bias = (torch.randn(n, generator=g, dtype=torch.float64) * typical).to(v.out_dtype)
        if v.values == "fp8negzero":  # -0 + -0 keeps the sign a seeded running sum shows
            bias[negzero_columns(n)] = -0.0
    meta = {
        "source": "family",
        "family": PREFIX,
        "variant": v.name,
        "seed": seed,
        "scale_kind": "pow2" if pow2 else "real",
        "block": {
            "size": block_tag((bn, bk)),
            "m": "decode" if m <= 16 else "mid" if m < 128 else "prefill",
            "k": "multiple" if tail == 0 else "tail 1" if tail == 1 else f"tail {tail}",
            "n": "wide" if v.n == "wide" else "partial" if n % bn else "multiple",
            "magnitude": v.magnitude,
            "layout": v.layout,
            "cancelling_pairs": pairs,
            "values": v.values,
        },
    }
    name = f"{PREFIX}/{block_tag((bn, bk))}/{v.name}-{DTYPE_TAG[v.out_dtype]}"
    ops = GemmOperands(a, b, sa, sw, bias, v.out_dtype, name, "pow2" if pow2 else "synthetic", meta, (bn, bk))
    if pow2:
        assert bool(order_free_elements(a, b, sa, sw, (bn, bk)).all()), f"{name}: pow2 premise does not hold"
    return _lay_out(ops, v.layout, g)
