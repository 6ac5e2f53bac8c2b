"""The smallest failing case (:func:`minimal_case`): the smallest shape on the failing side of every boundary, then
the fewest non-zero elements of ``a`` and ``b`` that keep the failure (:func:`fewest_nonzero`).

The non-zero reduction zeroes logical elements (the operands' forms kept: padded / transposed views are rebuilt by
``reshape.reform``, padding bytes untouched). First, where the failing check's evidence names an output element
(i, j), every row of ``a`` but i and of ``b`` but j (one call); else the rows of ``a``, then of ``b``, by halving.
Then the elements that meet only zeros of the other operand (one call: every accumulator unchanged), then the
columns (K) of both, by halving: zero the upper half of the live units, else the lower, else recurse into
both. A reduction is kept only where the check still fails (``boundary.judge``); at most ``budget`` calls.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import torch

from conformance.triage.boundary import Boundary, judge
from conformance.triage.focus import Lines
from conformance.triage.reshape import META_KEY, at_shape, operand_forms, reform
from reference.operands import GemmOperands

#: Kernel calls the non-zero reduction may spend unless told.
ZERO_BUDGET = 16


@dataclass
class MinimalCase:
    """``ops`` (the reshaped and zeroed case, or the original when no smaller one fails), its ``shape`` [M, K, N],
    whether its failure was verified by a call (``fails``), the kernel calls spent and ``nonzero``: ``{"a":
    (before, after), "b": (before, after)}``, the non-zero element counts of the shrunk case before and after
    :func:`fewest_nonzero` (empty when it did not run)."""

    ops: GemmOperands
    shape: list
    fails: bool
    calls: int
    nonzero: dict = field(default_factory=dict)


def smallest_failing(b: Boundary) -> int:
    """The smallest value known to fail in ``b``: the failing value of a boundary whose failing side lies above,
    else (failing side below, or non-monotone) the smallest failing probe."""
    failing = [v for v, f in b.points if f]
    if b.monotone and b.fails_above:
        return b.fails_at
    return min(failing) if failing else b.fails_at


def nonzero_count(t: torch.Tensor) -> int:
    """Non-zero logical elements of an int8 / float8 operand (any layout; -0.0 counts as zero)."""
    return int((t.detach().to(torch.float32) != 0).sum())


def zeroed(ops: GemmOperands, zero_a: torch.Tensor, zero_b: torch.Tensor) -> GemmOperands:
    """``ops`` with the logical elements of ``a`` where ``zero_a`` (bool [M, K]) and of ``b`` where ``zero_b``
    (bool [N, K]) set to +0, every operand in its form (``reform``); ``meta`` copied."""

    def zero(t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        v = t.detach().contiguous().clone()
        v.view(torch.uint8)[mask] = 0  # int8 and float8 alike: the all-zero byte is +0
        return v

    dense = dataclasses.replace(ops, a=zero(ops.a, zero_a), b=zero(ops.b, zero_b), meta=dict(ops.meta))
    return reform(dense, operand_forms(ops))


class _Zeroer:
    """The committed zero masks of a failing case and the calls spent, against a budget."""

    def __init__(self, spec, ops, check_id, budget, device):
        self.spec, self.ops, self.check_id, self.budget, self.device = spec, ops, check_id, budget, device
        self.za = torch.zeros((ops.m, ops.k), dtype=torch.bool)
        self.zb = torch.zeros((ops.n, ops.k), dtype=torch.bool)
        self.live_a = ops.a.detach().to(torch.float32) != 0
        self.live_b = ops.b.detach().to(torch.float32) != 0
        self.calls = 0

    @property
    def spent(self) -> bool:
        return self.calls >= self.budget

    def attempt(self, za: torch.Tensor, zb: torch.Tensor) -> bool:
        """Zero ``za`` / ``zb`` on top of the committed masks; kept (True) when the check still fails."""
        if self.spent:
            return False
        za, zb = self.za | za, self.zb | zb
        if torch.equal(za, self.za) and torch.equal(zb, self.zb):
            return True
        self.calls += 1
        if not judge(self.spec, zeroed(self.ops, za, zb), self.check_id, self.device)[0]:
            return False
        self.za, self.zb = za, zb
        return True

    def inert(self) -> None:
        """Zero, in one call, the elements of ``a`` whose column of ``b`` is all zero and vice versa (every
        accumulator unchanged)."""
        a, b = self.live_a & ~self.za, self.live_b & ~self.zb
        self.attempt(a & ~b.any(0)[None, :], b & ~a.any(0)[None, :])

    def rows(self, which: str) -> list[int]:
        live = (self.live_a & ~self.za) if which == "a" else (self.live_b & ~self.zb)
        return [int(i) for i in live.any(1).nonzero().reshape(-1)]

    def cols(self) -> list[int]:
        live = (self.live_a & ~self.za).any(0) | (self.live_b & ~self.zb).any(0)
        return [int(i) for i in live.nonzero().reshape(-1)]

    def masks(self, kind: str, units: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        za, zb = torch.zeros_like(self.za), torch.zeros_like(self.zb)
        idx = torch.tensor(units, dtype=torch.int64)
        if kind == "a":
            za[idx] = True
        elif kind == "b":
            zb[idx] = True
        else:
            za[:, idx], zb[:, idx] = True, True
        return za, zb

    def halve(self, kind: str, units: list[int]) -> None:
        """Zero as many of ``units`` (rows of ``a`` / ``b``, or columns ``k``) as the budget finds unneeded."""
        if len(units) <= 1 or self.spent:
            return
        lo, hi = units[: len(units) // 2], units[len(units) // 2 :]
        if self.attempt(*self.masks(kind, hi)):
            self.halve(kind, lo)
        elif self.attempt(*self.masks(kind, lo)):
            self.halve(kind, hi)
        else:
            self.halve(kind, lo)
            self.halve(kind, hi)


def fewest_nonzero(
    spec,
    ops: GemmOperands,
    check_id: str,
    element: Optional[tuple[int, int]] = None,
    budget: int = ZERO_BUDGET,
    device: Optional[str] = None,
) -> tuple[GemmOperands, dict, int]:
    """``(ops', nonzero, calls)``: failing case ``ops`` with the fewest non-zero elements of ``a`` / ``b`` the
    reduction finds within ``budget`` kernel calls (module docstring; ``element``: the failing output element (i,
    j), e.g. ``boundary.judge``'s), ``nonzero`` ``{"a": (before, after), "b": (before, after)}``. ``ops'`` is
    ``ops`` itself when nothing could be zeroed; else its ``meta[META_KEY]["nonzero"]`` holds the counts.
    Deterministic; never raises for a kernel's failure."""
    z = _Zeroer(spec, ops, check_id, max(0, budget), device)
    hinted = False
    if element is not None:
        i, j = element
        keep_a, keep_b = [r for r in range(ops.m) if r != i], [r for r in range(ops.n) if r != j]
        hinted = z.attempt(z.masks("a", keep_a)[0], z.masks("b", keep_b)[1])
    if not hinted:
        z.halve("a", z.rows("a"))
        z.halve("b", z.rows("b"))
    z.inert()
    z.halve("k", z.cols())
    before = {"a": nonzero_count(ops.a), "b": nonzero_count(ops.b)}
    if not (z.za.any() or z.zb.any()):
        return ops, {k: (v, v) for k, v in before.items()}, z.calls
    out = zeroed(ops, z.za, z.zb)
    nz = {"a": (before["a"], nonzero_count(out.a)), "b": (before["b"], nonzero_count(out.b))}
    out.meta[META_KEY] = {**out.meta.get(META_KEY, {}), "nonzero": {k: list(v) for k, v in nz.items()}}
    return out, nz, z.calls


def minimal_case(
    spec,
    ops: GemmOperands,
    check_id: str,
    boundaries: dict,
    device: Optional[str] = None,
    zero_budget: int = ZERO_BUDGET,
    lines: Optional[Lines] = None,
) -> MinimalCase:
    """``ops`` at the smallest failing value of each dimension in ``boundaries`` (``{"m" | "n" | "k": Boundary}``,
    :func:`conformance.triage.boundary.find_boundaries`' ``.boundaries``), verified by a call (then, with
    ``lines``, the search's differing rows / columns tiled, as its probes were re-planted). If that combination
    passes (the dimensions interact), the dimensions are shrunk one at a time, in M, N, K order, each kept only where
    the case still fails. Then :func:`fewest_nonzero` within ``zero_budget`` calls (0: none; without a verified
    smaller shape one more call judges ``ops``). Never raises for a kernel's failure."""
    want = {d: smallest_failing(b) for d, b in boundaries.items()}
    calls = 1
    cand = at_shape(ops, m=want.get("m"), n=want.get("n"), k=want.get("k"))
    bad, element = judge(spec, cand, check_id, device)
    if not bad and lines is not None:  # the differing rows / columns tiled, as the search re-planted its probes
        cand = at_shape(ops, m=want.get("m"), n=want.get("n"), k=want.get("k"), rows=lines.rows, cols=lines.cols)
        calls += 1
        bad, element = judge(spec, cand, check_id, device)
    best, verified = (cand, True) if bad else (ops, False)
    if not bad:
        kept: dict = {}
        for d, v in want.items():
            size = {**kept, d: v}
            trial = at_shape(ops, m=size.get("m"), n=size.get("n"), k=size.get("k"))
            calls += 1
            bad, hint = judge(spec, trial, check_id, device)
            if bad:
                kept[d], best, element, verified = v, trial, hint, True
    nonzero: dict = {}
    if zero_budget > 0:
        if not verified:
            calls += 1
            bad, element = judge(spec, best, check_id, device)
            zero_budget -= 1
        if verified or bad:
            best, nonzero, spent = fewest_nonzero(spec, best, check_id, element, zero_budget, device)
            calls += spent
            verified = verified or best is not ops
    return MinimalCase(best, [best.m, best.k, best.n], verified, calls, nonzero)
