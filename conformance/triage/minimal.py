"""The smallest failing shape of a case (:func:`minimal_case`), on the failing side of every boundary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from conformance.triage.boundary import Boundary, fails
from conformance.triage.focus import Lines
from conformance.triage.reshape import at_shape
from reference.operands import GemmOperands


@dataclass
class MinimalCase:
    """``ops`` (the reshaped case, or the original when no smaller one fails), its ``shape`` [M, K, N], whether its
    failure was verified by a call (``fails``) and the kernel calls spent."""

    ops: GemmOperands
    shape: list
    fails: bool
    calls: int


def smallest_failing(b: Boundary) -> int:
    """The smallest value known to fail in ``b``: the failing value of a boundary whose failing side lies above,
    else (failing side below, or non-monotone) the smallest failing probe."""
    failing = [v for v, f in b.points if f]
    if b.monotone and b.fails_above:
        return b.fails_at
    return min(failing) if failing else b.fails_at


def minimal_case(
    spec,
    ops: GemmOperands,
    check_id: str,
    boundaries: dict,
    device: Optional[str] = None,
    lines: Optional[Lines] = None,
) -> MinimalCase:
    """``ops`` at the smallest failing value of each dimension in ``boundaries`` (``{"m" | "n" | "k": Boundary}``,
    :func:`conformance.triage.boundary.find_boundaries`' ``.boundaries``), verified by a call (then, with
    ``lines``, the search's differing rows / columns, re-planted the same way). If that combination
    passes (the dimensions interact), the dimensions are shrunk one at a time, in M, N, K order, each kept only where
    the case still fails. Never raises for a kernel's failure."""
    want = {d: smallest_failing(b) for d, b in boundaries.items()}
    calls = 1
    cand = at_shape(ops, m=want.get("m"), n=want.get("n"), k=want.get("k"))
    if fails(spec, cand, check_id, device):
        return MinimalCase(cand, [cand.m, cand.k, cand.n], True, calls)
    if lines is not None:  # the differing rows / columns tiled, as the search re-planted its probes
        cand = at_shape(ops, m=want.get("m"), n=want.get("n"), k=want.get("k"), rows=lines.rows, cols=lines.cols)
        calls += 1
        if fails(spec, cand, check_id, device):
            return MinimalCase(cand, [cand.m, cand.k, cand.n], True, calls)
    kept: dict = {}
    best = ops
    for d, v in want.items():
        size = {**kept, d: v}
        trial = at_shape(ops, m=size.get("m"), n=size.get("n"), k=size.get("k"))
        calls += 1
        if fails(spec, trial, check_id, device):
            kept[d], best = v, trial
    return MinimalCase(best, [best.m, best.k, best.n], best is not ops, calls)
