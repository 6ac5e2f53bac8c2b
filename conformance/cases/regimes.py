"""``regimes``: the trigger map of shape regimes, every case planted (README.md here).

:data:`AXES` visits both sides of each boundary a kernel may branch on, one
narrow case per value: 2^k - 1, 2^k, 2^k + 1 (k = 6..17), 1.5 * 2^k and tile
multiples +- 1 on M, N, K; N = 151,936; K = 8192 + r; M*N*K past 2^28 / 2^30;
outputs M*N past 2^22 / 2^24 (past :data:`CPU_OUTPUTS` native only); multi-tile
grids. Layout, dtype, scale mode and bias rotate over an axis' cases.
"""

from __future__ import annotations

import torch

from conformance.cases.cache import CASE_CODE, cached_artifact
from conformance.cases.layouts import with_layout
from conformance.cases.planting import discrimination, planted_case
from reference.operands import GemmOperands

POW2 = tuple(sorted({2**k + d for k in range(1, 18) for d in (-1, 0, 1)} - {0}))
#: between the powers of two: 1.5 * 2^k (a bucket edge that is not a power of two)
OFF_GRID = tuple(3 * 2**k for k in range(4, 16))
TILE_MULTIPLES = (96, 97, 192, 193, 384, 385)
VOCAB = 151_936
K_RESIDUES = tuple(8192 + r for r in (2, 3, 6, 12, 24, 48, 136, 200))
#: largest M * K * N of an axis case (its companions shrink to fit)
AXIS_WORK = 1 << 24
#: axis -> (values, companion dimensions of the other two axes, rotating per case: the
#: first that fits AXIS_WORK from the case's position on), as (M, K, N) with None for
#: the axis itself (the smallest when none fits). Companions pair a boundary with a second
#: large dimension (a deep-K prefill, a wide decode) so that two-dimensional dispatch rules
#: are met too.
AXES = {
    "M": (
        POW2 + OFF_GRID + TILE_MULTIPLES,
        ((None, 32, 16), (None, 17, 24), (None, 1100, 16), (None, 4100, 9), (None, 300, 40), (None, 2500, 17)),
    ),
    "N": (
        tuple(v for v in POW2 if v >= 7) + OFF_GRID + TILE_MULTIPLES + (VOCAB,),
        ((3, 32, None), (24, 300, None), (130, 64, None), (9, 1100, None), (40, 17, None), (300, 48, None)),
    ),
    "K": (
        tuple(v for v in POW2 if v >= 7) + OFF_GRID + K_RESIDUES,
        ((3, None, 16), (24, None, 16), (40, None, 9), (130, None, 17), (17, None, 24)),
    ),
}
#: (M, K, N) just past the M*N*K thresholds 2^28 and 2^30 (every smaller case is below)
MNK = ((16, 4097, 4096), (64, 4097, 4096))
#: (M, K, N) just past the output sizes M*N = 2^22 and 2^24 (a persistent or stream-K schedule, or a tile
#: configuration, picked by the number of output tiles: prefill into a wide layer); every other case's output is
#: smaller. The second takes no bias (its rotation index is odd): planting a bias there costs ~9 s on one core
OUTPUTS = ((2049, 32, 2048), (4097, 32, 4096))
#: largest M*N a CPU run affords (the interpreter's grid); a larger case is ``meta["native_only"]``
CPU_OUTPUTS = 1 << 23
#: M and N both spanning several tiles; prefill shapes (M and K large together)
GRID = (
    (129, 96, 257),
    (257, 64, 513),
    (1025, 64, 1025),
    (256, 1024, 32),
    (512, 2048, 16),
    (300, 1536, 48),
    (130, 8192, 16),
    (2048, 1024, 8),
    (1100, 4096, 5),
)
#: operand layouts, rotating over each axis' cases (``*_uniform``: [M] / [N] scales of
#: one value, a per-tensor fast path's trigger)
LAYOUTS = (
    "dense",
    "b_transposed",
    "a_padded",
    "scales_column",
    "scale_a_0d",
    "b_padded",
    "scales_strided",
    "scale_b_1",
    "bias_strided",
    "all",
    "scale_a_uniform",
    "scale_b_uniform",
)
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
TAG = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def regime_shapes() -> list[tuple[str, int, int, int]]:
    """``(axis, M, K, N)`` of every regime case, in suite order."""
    out = []
    for axis, (values, companions) in AXES.items():
        for i, v in enumerate(sorted(set(values))):
            shapes = [
                tuple(v if x is None else x for x in companions[(i + j) % len(companions)])
                for j in range(len(companions))
            ]
            fits = [s for s in shapes if s[0] * s[1] * s[2] <= AXIS_WORK]
            m, k, n = fits[0] if fits else min(shapes, key=lambda s: s[0] * s[1] * s[2])
            out.append((axis, m, k, n))
    out += [("MNK", m, k, n) for m, k, n in MNK]
    out += [("MN", m, k, n) for m, k, n in OUTPUTS]
    out += [("grid", m, k, n) for m, k, n in GRID]
    return out


def regime_case(axis: str, m: int, k: int, n: int, i: int, seed: int = 0) -> GemmOperands:
    """The i-th regime case of ``axis`` at (m, k, n); ``i`` rotates layout, dtype,
    scale mode (pow2 every fourth) and bias (every second; all +0 every sixth)."""
    layout = LAYOUTS[i % len(LAYOUTS)]
    out_dtype = DTYPES[i % len(DTYPES)]
    mode = "pow2" if i % 4 == 3 else "real"
    bias = i % 2 == 0 or layout in ("bias_strided", "all") or axis == "grid"
    zero_bias = bias and i % 6 == 4  # an all-(+0) bias: a kernel that skips it keeps -0
    name = f"family/regimes/{axis}-M{m}xK{k}xN{n}-{layout}-{mode}-{TAG[out_dtype]}"
    value = {"M": m, "K": k, "N": n, "MN": m * n}.get(axis, m * k * n)
    meta = {"source": "family", "family": "regimes", "seed": seed, "variant": f"{axis}-M{m}xK{k}xN{n}"}
    meta.update(layout=layout, scale_kind=mode, regime={"axis": axis, "value": value})
    meta["trigger"] = f"regime {axis} = {value}"
    if m * n > CPU_OUTPUTS:
        meta["native_only"] = True
    sa_t, sb_t = layout in ("scale_a_0d", "scale_a_uniform"), layout in ("scale_b_1", "scale_b_uniform")
    kw = dict(scale_a_tensor=sa_t, scale_b_tensor=sb_t, rotate=i, meta=meta)
    ops = planted_case(m, k, n, out_dtype, mode, bias, seed=seed, name=name, **kw)
    if zero_bias:
        ops.bias.zero_()
        ops.meta["bias"] = "all +0"
        ops.meta["planted"] = discrimination(ops)
    g = torch.Generator().manual_seed(i * 7919 + seed)
    return with_layout(ops, layout, g)


def regimes_family(seed: int = 0, max_macs: int | None = None, part: tuple[int, int] = (0, 1)) -> list[GemmOperands]:
    """Every regime case in suite order; with ``max_macs``, only those with M*K*N <= max_macs (same names and
    layouts as in the full family: the rotation index counts the skipped ones). ``part=(j, n)``: only the j-th of n
    contiguous slices of the shapes (the n parts, concatenated in order, are the family). The whole family (no
    ``max_macs``, one part) is kept in the artifact cache (folder ``regimes``: its planting costs ~45 CPU s); the
    default suite's slices are built into its own cached list."""
    shapes = regime_shapes()
    j, n_parts = part
    lo, hi = j * len(shapes) // n_parts, (j + 1) * len(shapes) // n_parts

    def build() -> list[GemmOperands]:
        out, per_axis = [], {}
        for pos, (axis, m, k, n) in enumerate(shapes):
            i = per_axis.get(axis, 0)
            per_axis[axis] = i + 1
            if lo <= pos < hi and (max_macs is None or m * k * n <= max_macs):
                out.append(regime_case(axis, m, k, n, i, seed))
        return out

    whole = max_macs is None and part == (0, 1)
    return cached_artifact("regimes", CASE_CODE, f"cases/seed={seed}", build) if whole else build()
