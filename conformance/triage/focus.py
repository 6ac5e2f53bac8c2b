"""Where a failing case is wrong (:func:`differing_lines`): the rows (M) and columns (N) holding an element that
differs, so a probe at another shape can be re-planted with them (``reshape.at_shape(rows=, cols=)``).

An element differs when its bits differ from the declaration's reference (C8's,
``checks.output_bits.c8_reference``) or, for the accumulator checks C3 / C4, when the kernel's own
``int_mm`` accumulator differs from the exact sum. A cropped probe that loses every such row passes because of its
values, not because the kernel took another path: the search retries a passing probe re-planted with these lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from conformance.checks.accumulator import observe_accumulator
from conformance.checks.output_bits import c8_reference
from conformance.kernels.runner import run_kernel
from reference.bits import bits_of
from reference.contract import BIAS_POINTS, SCALE_ORDERS, EpilogueContract
from reference.epilogue import apply_epilogue
from reference.fp8 import exact_accumulator
from reference.operands import GemmOperands

#: The checks whose evidence is the kernel's own accumulator.
ACCUMULATOR_CHECKS = ("C3", "C4")


@dataclass(frozen=True)
class Lines:
    """int64 indices of the differing rows (``rows``, < M) and columns (``cols``, < N), and the differing
    elements' count ``n``."""

    rows: torch.Tensor
    cols: torch.Tensor
    n: int

    def to_dict(self) -> dict:
        return {"rows": int(self.rows.numel()), "cols": int(self.cols.numel()), "elements": self.n}


def differing_mask(spec, ops: GemmOperands, check_id: str, device: Optional[str] = None) -> Optional[torch.Tensor]:
    """bool [M, N] (CPU) of the elements ``check_id``'s evidence differs on (module docstring); None when the kernel
    gives no output or accumulator to compare. Raises what the kernel call raises."""
    exact = exact_accumulator(ops.a, ops.b)
    if check_id in ACCUMULATOR_CHECKS:
        obs = observe_accumulator(spec, ops, device=device)
        if obs.acc is None:
            return None
        return obs.acc.cpu().to(torch.int64) != exact.cpu().to(torch.int64)
    run = run_kernel(spec, ops, device=device)
    if run.output is None or run.error:
        return None
    out, ref, mask, _, _ = c8_reference(spec, ops, run, exact)
    diff = bits_of(out.cpu()) != bits_of(ref.cpu())
    return diff if mask is None else diff & mask.cpu()


def differing_lines(spec, ops: GemmOperands, check_id: str, device: Optional[str] = None) -> Optional[Lines]:
    """:class:`Lines` of :func:`differing_mask`; None when nothing differs (or nothing to compare). Never raises
    for a kernel's failure."""
    try:
        diff = differing_mask(spec, ops, check_id, device)
    except Exception:  # noqa: BLE001 -- a kernel that raises here leaves the search un-focused, not crashed
        return None
    if diff is None or not bool(diff.any()):
        return None
    rows = torch.nonzero(diff.any(1)).reshape(-1)
    cols = torch.nonzero(diff.any(0)).reshape(-1)
    return Lines(rows, cols, int(diff.sum()))


def told_apart(ops: GemmOperands) -> Optional[frozenset]:
    """The pairs of legal epilogue contracts (``reference.contract``'s scale orders x bias points, labelled
    ``order/point``) whose output bits differ somewhere on ``ops`` (INT8 operands; None for e4m3). A probe whose
    values tell a pair apart no more passes whatever the kernel does between those two: a pass there says nothing
    of that epilogue difference's path."""
    if ops.a.dtype != torch.int8:
        return None
    acc = exact_accumulator(ops.a, ops.b)
    sa, sb = ops.scale_a.reshape(-1), ops.scale_b.reshape(-1)
    bias = None if ops.bias is None else ops.bias.reshape(-1)
    bits = {
        f"{o}/{p}": bits_of(apply_epilogue(acc, sa, sb, EpilogueContract(o, p), bias, ops.out_dtype))
        for o in SCALE_ORDERS
        for p in BIAS_POINTS
    }
    names = sorted(bits)
    return frozenset((x, y) for i, x in enumerate(names) for y in names[i + 1 :] if not torch.equal(bits[x], bits[y]))
