"""The tile-edge shapes: one case per shape straddling the tile edges (``meta["source"] == "tile_edges"``)."""

from __future__ import annotations

from typing import Sequence

from conformance.cases.synthetic import make_case
from reference.operands import GemmOperands

#: Tile edges the shapes straddle (typical BLOCK_M/N/K of GPU int8 GEMMs).
TILE_EDGES = (16, 32, 64, 128)
#: ``meta["source"]`` of these cases and the prefix of their names (``tile_edges/M17xK17xN17``).
SOURCE = "tile_edges"
#: the prefix their planting is seeded with (``planting.generator`` hashes the case name): their name before the
#: rename, kept so the cases keep their bits and a report written then stays comparable (``report.current_names``)
SEED_PREFIX = "sweep"


def tile_edge_shapes(edges: Sequence[int] = TILE_EDGES) -> list[tuple[int, int, int]]:
    """(M, K, N) shapes, unique, in order: cubes at e - 1, e, e + 1 per edge e,
    M = 1..9 at odd K and N, then K and N alone at e - 1, e, e + 1 (M = 3)."""
    out: list[tuple[int, int, int]] = []
    for e in edges:
        for s in (e - 1, e, e + 1):
            out.append((s, s, s))
    for m in range(1, 10):
        out.append((m, 65, 33))
    for e in edges:
        for s in (e - 1, e, e + 1):
            out.append((3, s, 17))
            out.append((3, 33, s))
    seen, uniq = set(), []
    for s in out:
        if s not in seen:
            seen.add(s)
            uniq.append(s)
    return uniq


def tile_edge_cases(edges: Sequence[int] = TILE_EDGES, seed: int = 0) -> list[GemmOperands]:
    """One ``ordinary`` case per :func:`tile_edge_shapes` shape, every second with a bias."""
    cases = []
    for i, (m, k, n) in enumerate(tile_edge_shapes(edges)):
        shape = f"M{m}xK{k}xN{n}"
        c = make_case(
            "ordinary", seed=seed + i, m=m, k=k, n=n, bias=bool(i % 2), source=SOURCE, name=f"{SEED_PREFIX}/{shape}"
        )
        c.name = f"{SOURCE}/{shape}"
        c.meta.update({"kind": SOURCE, "shape": [m, k, n]})
        cases.append(c)
    return cases
