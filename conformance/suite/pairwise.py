"""Pairwise interchangeability of two kernels (``--against=OTHER``): outputs on the same operands
compared bit for bit. Whether identity is expected follows from the declared contracts (DESIGN.md
section 1): identical contracts must agree, and so must pow2-scale cases when the bias points agree
(or there is no bias); otherwise legal kernels may differ. Two FP8 kernels must agree only where
both declared accumulators are provably exact on the case (DESIGN.md 3b).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from conformance.checks.compare import compare_bits, output_problem
from conformance.checks.fp8_exactness import retained_bits
from conformance.checks.output_bits import overflow_of, run_device
from conformance.checks.overflow import declared_accumulator, may_leave_int32
from conformance.checks.result import merge_histograms
from conformance.kernels.spec import declared_epilogue
from reference.accumulate import exact_int_mm
from reference.fp8 import E4M3, exact_at_bits

if TYPE_CHECKING:
    from conformance.kernels.runner import KernelRun
    from conformance.kernels.spec import KernelSpec
    from reference.operands import GemmOperands


def _overflow_frees(
    spec_a: KernelSpec, spec_b: KernelSpec, ops: GemmOperands, dev_a: Optional[str], dev_b: Optional[str]
) -> Optional[str]:
    """Why overflow frees the pair from bit identity on ``ops`` (an accumulator can leave int32 and
    the declarations are not both ``wrap``, which is order-free), or None."""
    ba, bb = overflow_of(spec_a, dev_a), overflow_of(spec_b, dev_b)
    if ops.a.dtype == E4M3 or ba == bb == "wrap" or not may_leave_int32(ops.a.shape[1]):
        return None
    n = declared_accumulator(ops, exact_int_mm(ops.a, ops.b), "wrap").n_at_risk
    if not n:
        return None
    return (
        f"an accumulator can leave int32 at {n} elements and the declared overflow "
        f"behaviours are {ba} ({spec_a.name}) and {bb} ({spec_b.name})"
    )


def _fp8_frees(
    spec_a: KernelSpec, spec_b: KernelSpec, ops: GemmOperands, dev_a: Optional[str], dev_b: Optional[str]
) -> Optional[str]:
    """Why FP8 accumulation frees the pair from bit identity on ``ops`` (e4m3 operands and a declared accumulator
    that is not provably exact on the case, ``conformance.checks.fp8_exactness``), or None."""
    if ops.a.dtype != E4M3:
        return None
    for spec, dev in ((spec_a, dev_a), (spec_b, dev_b)):
        model = spec.accumulator_on(dev)
        if model is None:
            return f"{spec.name} declares no FP8 accumulator"
        if model.kind != "exact" and not bool(exact_at_bits(ops.a.cpu(), ops.b.cpu(), retained_bits(model)).all()):
            return (
                f"the declared FP8 accumulator of {spec.name} ({model.label()}) is not provably exact on this case: "
                f"legal accumulators may differ"
            )
    return None


def expected_agreement(
    spec_a: KernelSpec, spec_b: KernelSpec, ops: GemmOperands, dev_a: Optional[str] = None, dev_b: Optional[str] = None
) -> tuple[bool, str]:
    """``(must two correct kernels give identical bits on ops, reason)``; ``dev_a`` / ``dev_b``:
    the device types they ran on (declarations may differ by device and out dtype:
    ``kernels.spec.declared_epilogue``)."""
    freed = _overflow_frees(spec_a, spec_b, ops, dev_a, dev_b) or _fp8_frees(spec_a, spec_b, ops, dev_a, dev_b)
    if freed:
        return False, freed
    da, db = declared_epilogue(spec_a, dev_a, ops.out_dtype), declared_epilogue(spec_b, dev_b, ops.out_dtype)
    if da.steps.to_list() == db.steps.to_list():
        return True, f"same declared contract {da.label()}"
    if not (da.standard and db.standard):
        return False, f"declared epilogues differ ({da.label()} vs {db.label()}), one not a standard contract"
    ca, cb = da.contract, db.contract
    if ops.scale_mode == "pow2" and (ops.bias is None or ca.bias_point == cb.bias_point):
        return True, "power-of-two weight scales: every scale order gives the same bits"
    return False, f"declared contracts differ ({ca.label()} vs {cb.label()})"


def compare_pair(spec_a: KernelSpec, spec_b: KernelSpec, ops: GemmOperands, run_a: KernelRun, run_b: KernelRun) -> dict:
    """Bit agreement of two kernels' KernelRuns on one case: ``status`` (``identical`` |
    ``differ-expected`` | ``differ-unexpected`` | ``error``), ``expected_identical``, ``reason``,
    ``n_elements``, ``n_equal``, ``agreement``, ``max_ulp``, ``ulp_histogram``, ``worst``, ``error``."""
    expect, reason = expected_agreement(spec_a, spec_b, ops, run_device(run_a), run_device(run_b))
    out = {"expected_identical": expect, "reason": reason}
    shape = (ops.m, ops.n)
    pa = output_problem(run_a.output, shape, ops.out_dtype, run_a.error)
    pb = output_problem(run_b.output, shape, ops.out_dtype, run_b.error)
    if pa or pb:
        out.update(status="error", error="; ".join(f"{s.name}: {p}" for s, p in ((spec_a, pa), (spec_b, pb)) if p))
        return out
    assert run_a.output is not None and run_b.output is not None  # else output_problem named it
    _, ev = compare_bits(run_a.output, run_b.output, 0, ops)
    ev.pop("operand_digests", None)
    ev.pop("first_over_tol", None)
    n = ev["n_elements"]
    out.update(
        n_elements=n,
        n_equal=n - ev["n_differ"],
        agreement=(n - ev["n_differ"]) / n if n else 1.0,
        max_ulp=ev["max_ulp"],
        ulp_histogram=ev["ulp_histogram"],
    )
    if "worst" in ev:
        out["worst"] = ev["worst"]
    if ev["n_differ"] == 0:
        out["status"] = "identical"
    else:
        out["status"] = "differ-expected" if not expect else "differ-unexpected"
    return out


def summarize_pairs(
    kernel: str, other: str, pairs: list[tuple[str, dict]], other_manifest: Optional[dict] = None
) -> dict:
    """The report's pairwise section from ``(case id, compare_pair result)`` pairs: ``kernel, other,
    other_manifest, interchangeable`` (bit identical on every case), ``summary, counts`` (per status),
    ``n_elements, n_equal, agreement, max_ulp, ulp_histogram, per_case``."""
    counts: dict[str, int] = {}
    for _, p in pairs:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    ok = [p for _, p in pairs if p["status"] != "error"]
    n_el = sum(p["n_elements"] for p in ok)
    n_eq = sum(p["n_equal"] for p in ok)
    max_ulp = max((p["max_ulp"] for p in ok), default=0)
    inter = bool(pairs) and counts.get("identical", 0) == len(pairs)
    if not pairs:
        summary = "no cases compared"
    elif inter:
        summary = f"interchangeable: bit-identical on all {len(pairs)} cases ({n_el} elements)"
    else:
        summary = (
            f"not interchangeable: {len(pairs) - counts.get('identical', 0)}/{len(pairs)} "
            f"cases differ; {n_el - n_eq}/{n_el} elements differ (max {max_ulp} ulp)"
        )
        if counts.get("differ-unexpected"):
            summary += (
                f"; {counts['differ-unexpected']} cases differ where the declared contracts require identical bits"
            )
        if counts.get("error"):
            summary += f"; {counts['error']} cases errored"
    return {
        "kernel": kernel,
        "other": other,
        "other_manifest": other_manifest,
        "interchangeable": inter,
        "summary": summary,
        "counts": counts,
        "n_elements": n_el,
        "n_equal": n_eq,
        "agreement": n_eq / n_el if n_el else None,
        "max_ulp": max_ulp,
        "ulp_histogram": merge_histograms(p["ulp_histogram"] for p in ok),
        "per_case": [{"case": c, **p} for c, p in pairs],
    }
