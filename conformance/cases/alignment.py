"""Families reaching alignment and shape trigger conditions (README.md here).

``extreme_pairs``: adjacent (-128)*(-128) products (a pair overflows int16) at
every offset 0..31 of K and runs of 3, 4, 8, cancelled elsewhere so |acc| is
small. ``k_residues``: K = 128..255 and 1..7, nonzero int8. ``m_n_edges``:
M = 1..17 with N and K around tile edges.
"""

from __future__ import annotations

import torch

from conformance.cases.common import (
    GRID,
    MODES,
    OUT_DTYPES,
    channel_scales,
    family_case,
    generator,
    nonzero_int8,
    small_int8,
    token_scales,
)
from reference.operands import GemmOperands

PAIR_OFFSETS = 32  # a pair at every offset 0..31
RUNS = ((3, 0), (3, 1), (4, 0), (4, 1), (4, 2), (4, 3), (8, 0), (8, 8))  # (length, offset)
N_EDGES = (15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129)


def extreme_pairs_case(mode: str, out_dtype: torch.dtype, seed: int = 0, n: int = 8, rand_k: int = 24) -> GemmOperands:
    """One ``extreme_pairs`` case, M = 40, K = 73: K [0, 40) b = -128, row m of ``a``
    -128 on its run of length L (L * 16384); [40, 49) cancels it (b 127 x 8 then
    64, ``a`` -128 x L then -2L); then small random products."""
    g = generator("extreme_pairs", "alignment", seed)
    runs = [(2, p) for p in range(PAIR_OFFSETS)] + list(RUNS)
    m, kp = len(runs), 40
    a = torch.zeros((m, kp + 9), dtype=torch.int16)
    for i, (length, off) in enumerate(runs):
        a[i, off : off + length] = -128
        a[i, kp : kp + length] = -128
        a[i, kp + 8] = -2 * length
    b = torch.zeros((n, kp + 9), dtype=torch.int16)
    b[:, :kp] = -128
    b[:, kp : kp + 8] = 127
    b[:, kp + 8] = 64
    ar, br = small_int8(g, (m, rand_k), -3, 3), small_int8(g, (n, rand_k), -3, 3)
    a = torch.cat([a.to(torch.int8), ar], 1)
    b = torch.cat([b.to(torch.int8), br], 1)
    sa, sw, trigger = (
        token_scales(g, m),
        channel_scales(g, n, mode),
        "adjacent (-128)*(-128) products at every alignment",
    )
    return family_case("extreme_pairs", "alignment", mode, out_dtype, a, b, sa, sw, seed=seed, trigger=trigger)


def k_residue_case(k: int, i: int, seed: int = 0) -> GemmOperands:
    """One ``k_residues`` case at K = ``k``; index ``i`` picks M, N, dtype and bias."""
    mode = "pow2" if k % 128 >= 64 else "real"
    out_dtype = OUT_DTYPES[i % 3]
    m, n = 1 + i % 17, N_EDGES[i % len(N_EDGES)]
    g = generator("k_residues", f"K{k}", seed)
    a, b = nonzero_int8(g, (m, k)), nonzero_int8(g, (n, k))
    bias = (0.5 * torch.randn(n, generator=g)).to(out_dtype) if i % 3 == 2 else None
    sa, sw, trigger = token_scales(g, m), channel_scales(g, n, mode), f"K % 128 = {k % 128}"
    return family_case("k_residues", f"K{k}", mode, out_dtype, a, b, sa, sw, bias=bias, seed=seed, trigger=trigger)


def m_n_edge_case(m: int, seed: int = 0) -> GemmOperands:
    """One ``m_n_edges`` case for M = m (1..17; M = 17 is (17, 16, 16))."""
    ks = (16, 17, 31, 33, 63, 65, 127, 129)
    if m == 17:
        k, n = 16, 16
    else:
        k, n = ks[m % len(ks)], N_EDGES[m % len(N_EDGES)]
    mode, out_dtype = GRID[m % len(GRID)]
    g = generator("m_n_edges", f"M{m}", seed)
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int16).to(torch.int8)
    bias = (0.5 * torch.randn(n, generator=g)).to(out_dtype) if m % 2 else None
    sa, sw, trigger = token_scales(g, m), channel_scales(g, n, mode), "M = 1..17, N and K around tile edges"
    variant = f"M{m}xK{k}xN{n}"
    return family_case("m_n_edges", variant, mode, out_dtype, a, b, sa, sw, bias=bias, seed=seed, trigger=trigger)


def extreme_pairs_family(seed: int = 0) -> list[GemmOperands]:
    """``extreme_pairs``: both modes x bf16/fp16/fp32 (6 cases)."""
    return [extreme_pairs_case(mode, dt, seed) for mode, dt in GRID]


def k_residues_family(seed: int = 0) -> list[GemmOperands]:
    """``k_residues``: K = 128..255 and 1..7 (135 cases)."""
    ks = list(range(128, 256)) + list(range(1, 8))
    return [k_residue_case(k, i, seed) for i, k in enumerate(ks)]


def m_n_edges_family(seed: int = 0) -> list[GemmOperands]:
    """``m_n_edges``: M = 1..17 (17 cases)."""
    return [m_n_edge_case(m, seed) for m in range(1, 18)]


assert MODES == ("real", "pow2")
