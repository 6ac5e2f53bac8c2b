"""``large_shapes``: size-dependent code paths, each case large in one dimension only (README.md here).

``prefill_M<m>``: scale-order ties at M >= 128. ``wide_N<n>``: N > 256, N % 64 != 0,
bias in four of six. ``splitk_<dir>``: K = 8195 at M <= 16, a run and its permuted
negation plus three odd products: middle partial sums in [2^25, 2^26), exact
|acc| <= 75 odd, so a float32 reduction of partials (all even) cannot reach it.
"""

from __future__ import annotations

import torch

from conformance.cases.common import GRID, channel_scales, family_case, generator, nonzero_int8, sign, token_scales
from conformance.cases.planting import odd_ints
from conformance.cases.synthetic import real_channel_scales
from conformance.cases.tie_search import pick_ties, realize_acc
from reference.operands import GemmOperands

FAMILY = "large_shapes"
#: (M, output dtype) of the prefill tie cases.
PREFILL = (
    (128, torch.bfloat16),
    (129, torch.bfloat16),
    (257, torch.bfloat16),
    (129, torch.float16),
    (257, torch.float16),
)
PREFILL_N = 24
#: (N, M, bias) of the wide-N cases, one per (mode, out_dtype) of GRID.
WIDE = ((257, 1, True), (300, 2, True), (520, 3, False), (321, 5, False), (383, 16, True), (328, 17, True))
WIDE_K = 40
#: K of the split-K cases: two runs of SPLITK_RUN plus SPLITK_TAIL odd products.
SPLITK_RUN, SPLITK_TAIL = 4096, 3
SPLITK_K = 2 * SPLITK_RUN + SPLITK_TAIL
#: (M, direction) of the split-K cases, one per (mode, out_dtype) of GRID.
SPLITK = ((1, "run_first"), (2, "run_last"), (16, "run_first"), (1, "run_last"), (2, "run_first"), (16, "run_last"))
SPLITK_N = 8
#: Distinct rows of a prefill case (see prefill_case).
BASE_ROWS = 32


def prefill_case(m: int, out_dtype: torch.dtype, seed: int = 0, n: int = PREFILL_N) -> GemmOperands:
    """One ``prefill_M<m>`` case, real scales, K = 32 n: the ties of :data:`BASE_ROWS`
    seeded rows (the tie search is the cost), repeated in a seeded order to M rows."""
    tag = {torch.bfloat16: "bf16", torch.float16: "fp16"}[out_dtype]
    g = generator(FAMILY, f"prefill_M{m}-{tag}", seed)
    base = min(m, BASE_ROWS)
    sa0, sb = token_scales(g, base), real_channel_scales(g, n)
    acc0 = pick_ties(g, sa0, sb, out_dtype)
    rows = torch.cat([torch.randperm(base, generator=g), torch.randint(0, base, (m - base,), generator=g)])
    a, b = realize_acc(acc0[rows])
    sa, trigger = sa0[rows].clone(), "scale-order ties at M >= 128"
    return family_case(FAMILY, f"prefill_M{m}", "real", out_dtype, a, b, sa, sb, seed=seed, trigger=trigger)


def wide_n_case(i: int, seed: int = 0) -> GemmOperands:
    """The i-th ``wide_N<n>`` case (``WIDE[i]``, mode and dtype ``GRID[i]``)."""
    n, m, with_bias = WIDE[i]
    mode, out_dtype = GRID[i]
    g = generator(FAMILY, f"wide_N{n}", seed)
    a, b = nonzero_int8(g, (m, WIDE_K)), nonzero_int8(g, (n, WIDE_K))
    bias = (0.5 * torch.randn(n, generator=g)).to(out_dtype) if with_bias else None
    sa, sw, trigger = token_scales(g, m), channel_scales(g, n, mode), f"N > 256, N % 64 = {n % 64}"
    return family_case(FAMILY, f"wide_N{n}", mode, out_dtype, a, b, sa, sw, bias=bias, seed=seed, trigger=trigger)


def splitk_operands(
    g: torch.Generator, m: int, n: int, direction: str, run: int = SPLITK_RUN, tail: int = SPLITK_TAIL
) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 ``(a [m, K], b [n, K])``, K = 2 run + tail: a same-sign run, its permuted
    negation, ``tail`` (odd) odd products, at the end (``run_first``) or start."""
    a1 = torch.randint(96, 128, (m, run), generator=g) * sign(g, m)[:, None]
    b1 = torch.randint(96, 128, (n, run), generator=g) * sign(g, n)[:, None]
    perm = torch.randperm(run, generator=g)
    at, bt = odd_ints(g, (m, tail)), odd_ints(g, (n, tail))
    parts_a, parts_b = [a1, -a1[:, perm]], [b1, b1[:, perm]]
    if direction == "run_first":
        a, b = torch.cat(parts_a + [at], 1), torch.cat(parts_b + [bt], 1)
    elif direction == "run_last":
        a, b = torch.cat([at] + parts_a, 1), torch.cat([bt] + parts_b, 1)
    else:
        raise ValueError(f"unknown split-K direction {direction!r} (run_first, run_last)")
    return a.to(torch.int8), b.to(torch.int8)


def splitk_case(i: int, seed: int = 0) -> GemmOperands:
    """The i-th ``splitk_<dir>`` case (``SPLITK[i]``, mode and dtype ``GRID[i]``)."""
    m, direction = SPLITK[i]
    mode, out_dtype = GRID[i]
    g = generator(FAMILY, f"splitk_{direction}-M{m}-{mode}", seed)
    a, b = splitk_operands(g, m, SPLITK_N, direction)
    sa = token_scales(g, m) * 256  # a power of two: mantissas kept, outputs normal
    sw, trigger = channel_scales(g, SPLITK_N, mode), "K >= 8192 at M <= 16: partial sums >= 2^25, odd small acc"
    return family_case(FAMILY, f"splitk_{direction}-M{m}", mode, out_dtype, a, b, sa, sw, seed=seed, trigger=trigger)


def large_shapes_family(seed: int = 0) -> list[GemmOperands]:
    return (
        [prefill_case(m, dt, seed) for m, dt in PREFILL]
        + [wide_n_case(i, seed) for i in range(len(WIDE))]
        + [splitk_case(i, seed) for i in range(len(SPLITK))]
    )
