"""``large_shapes``: the size-dependent code paths of real kernels.

Serving kernels dispatch on shape: a prefill bucket for large M, a wide-N
tile configuration, split-K for long reductions at small M. A bug on such a
path is invisible to every case that stays below its threshold, so this
family puts a few rows / columns / K elements beyond the usual thresholds and
keeps the other dimensions small (the Triton interpreter runs the 17 cases in
about 10 s on 2 cores). Three variants, 17 cases:

* ``prefill_M<m>``: epilogue-discriminating (scale-order tie) accumulators
  (``conformance.cases.synthetic.pick_ties`` / ``realize_acc``, N = 24,
  K = 768) at M = 128, 129, 257 (bfloat16) and M = 129, 257 (float16):
  both sides of the usual 128-row bucket edge and beyond the 256 edge (the
  largest M bucket of common dispatch tables; M = 513 was left out for the
  Triton interpreter's time budget).
  About 3/4 of the elements give different bits under the scale orders
  a_then_w and w_then_a, so a large-M path that applies the scales in
  another order than declared is caught by C8 (and C6 where the difference
  exceeds a spacing). Real scales only: under power-of-two weight scales
  every order agrees, and without a final rounding (float32 output) two
  legal orders may differ by two float32 spacings (see
  ``conformance.cases.ties``). The rows are 32 seeded tie rows in a seeded
  order (:func:`prefill_case`: the tie search is the family's main build
  cost). M * K * N is
  above check C9's work limit, so C9's case selection is unchanged.
* ``wide_N<n>``: N > 256 with N % 64 != 0 (257, 300, 520, 321, 383, 328:
  N % 64 = 1, 44, 8, 1, 63, 8; N % 256 = 1, 44, 8, 65, 127, 72; 520 wraps
  256 twice), small M and K = 40, nonzero int8 operands (every output element
  depends on every product), a bias in four of the six cases, both scale
  modes and every output dtype. A kernel that drops (or mis-stores) the last
  partial N tile of a wide-N configuration, or indexes the bias modulo a
  tile / cache width, is caught by C8 on the columns beyond it.
* ``splitk_<dir>``: K = 8195 at M = 1, 2 or 16 (decode shapes, where kernels
  choose split-K), N = 8. Per element, a same-sign run of 4096 products in
  [96*96, 127*127] and its exact negation (a permuted mirror run), plus three
  products of odd values, so the exact accumulator is odd and small
  (|acc| <= 75) while every partial sum over a middle stretch of K is in
  [2**25, 2**26). Direction ``run_first`` puts the three odd products at the
  end of K, ``run_last`` at the start. Why odd: every float32 value of
  magnitude >= 2**24 is even, so any reduction that adds int32 partial sums
  of magnitude >= 2**24 in float32 (the two halves of a split-K, or four
  quarters) produces an even number and cannot reach the odd exact sum,
  wherever the split falls within the middle 2 * 4096 - 2 * 3641 products
  (a prefix of >= 3641 run products is >= 3641 * 9216 > 2**25). Every
  output dtype shows the difference: the per-token scales are multiplied by
  256 so outputs stay normal, and |acc| <= 75 keeps distinct integers in
  distinct bf16 values. The final |acc| is small, so C4 (float32-exact
  accumulator) holds: this is a kernel fault, not a precondition.

Each case is deterministic given (variant, seed) (``conformance.cases._common``).
"""

from __future__ import annotations

import torch

from conformance.cases._common import GRID, channel_scales, family_case, generator, nonzero_int8, sign, token_scales
from conformance.cases.synthetic import _channel_scales
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
    """One ``prefill_M<m>`` case, real scales, K = 32 n (``realize_acc``).

    ``pick_ties`` costs ~M * N * 2**p candidate evaluations (p = 8 for
    bf16, 11 for fp16), so it runs on BASE_ROWS seeded rows (token scale and
    tie accumulators); the m rows are those base rows in a seeded order (the
    first BASE_ROWS a permutation, the rest drawn with replacement). Every row
    is then a tie row: which rows repeat does not matter to a large-M path.
    """
    tag = {torch.bfloat16: "bf16", torch.float16: "fp16"}[out_dtype]
    g = generator(FAMILY, f"prefill_M{m}-{tag}", seed)
    base = min(m, BASE_ROWS)
    sa0, sb = token_scales(g, base), _channel_scales(g, n)
    acc0 = pick_ties(g, sa0, sb, out_dtype)
    rows = torch.cat([torch.randperm(base, generator=g), torch.randint(0, base, (m - base,), generator=g)])
    a, b = realize_acc(acc0[rows])
    return family_case(
        FAMILY,
        f"prefill_M{m}",
        "real",
        out_dtype,
        a,
        b,
        sa0[rows].clone(),
        sb,
        seed=seed,
        trigger="scale-order ties at M >= 128",
    )


def wide_n_case(i: int, seed: int = 0) -> GemmOperands:
    """The i-th ``wide_N<n>`` case (``WIDE[i]`` with mode and dtype ``GRID[i]``)."""
    n, m, with_bias = WIDE[i]
    mode, out_dtype = GRID[i]
    g = generator(FAMILY, f"wide_N{n}", seed)
    a, b = nonzero_int8(g, (m, WIDE_K)), nonzero_int8(g, (n, WIDE_K))
    bias = (0.5 * torch.randn(n, generator=g)).to(out_dtype) if with_bias else None
    return family_case(
        FAMILY,
        f"wide_N{n}",
        mode,
        out_dtype,
        a,
        b,
        token_scales(g, m),
        channel_scales(g, n, mode),
        bias=bias,
        seed=seed,
        trigger=f"N > 256, N % 64 = {n % 64}",
    )


def _odd(g: torch.Generator, shape) -> torch.Tensor:
    """int64 odd values in {-5, -3, -1, 1, 3, 5}."""
    return (2 * torch.randint(0, 3, tuple(shape), generator=g) + 1) * torch.where(
        torch.rand(tuple(shape), generator=g) < 0.5, -1, 1
    )


def splitk_operands(
    g: torch.Generator, m: int, n: int, direction: str, run: int = SPLITK_RUN, tail: int = SPLITK_TAIL
) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 ``(a [m, K], b [n, K])``, K = 2 run + tail, of a split-K case
    (module docstring): run products s_m t_n [9216, 16129], the mirror run
    ``-a[:, perm]``, ``b[:, perm]`` cancelling it exactly, ``tail`` odd
    products (``tail`` odd: the exact accumulator is odd)."""
    a1 = torch.randint(96, 128, (m, run), generator=g) * sign(g, m)[:, None]
    b1 = torch.randint(96, 128, (n, run), generator=g) * sign(g, n)[:, None]
    perm = torch.randperm(run, generator=g)
    at, bt = _odd(g, (m, tail)), _odd(g, (n, tail))
    parts_a, parts_b = [a1, -a1[:, perm]], [b1, b1[:, perm]]
    if direction == "run_first":
        a, b = torch.cat(parts_a + [at], 1), torch.cat(parts_b + [bt], 1)
    elif direction == "run_last":
        a, b = torch.cat([at] + parts_a, 1), torch.cat([bt] + parts_b, 1)
    else:
        raise ValueError(f"unknown split-K direction {direction!r} (run_first, run_last)")
    return a.to(torch.int8), b.to(torch.int8)


def splitk_case(i: int, seed: int = 0) -> GemmOperands:
    """The i-th ``splitk_<dir>`` case (``SPLITK[i]`` with mode and dtype ``GRID[i]``)."""
    m, direction = SPLITK[i]
    mode, out_dtype = GRID[i]
    g = generator(FAMILY, f"splitk_{direction}-M{m}-{mode}", seed)
    a, b = splitk_operands(g, m, SPLITK_N, direction)
    sa = token_scales(g, m) * 256  # a power of two: mantissas kept, outputs normal
    return family_case(
        FAMILY,
        f"splitk_{direction}-M{m}",
        mode,
        out_dtype,
        a,
        b,
        sa,
        channel_scales(g, SPLITK_N, mode),
        seed=seed,
        trigger="K >= 8192 at M <= 16: partial sums >= 2^25, odd small acc",
    )


def large_shapes_family(seed: int = 0) -> list[GemmOperands]:
    """``large_shapes``: 5 prefill, 6 wide-N and 6 split-K cases (17)."""
    return (
        [prefill_case(m, dt, seed) for m, dt in PREFILL]
        + [wide_n_case(i, seed) for i in range(len(WIDE))]
        + [splitk_case(i, seed) for i in range(len(SPLITK))]
    )
