"""Fault signatures (DESIGN.md section 6): which fault classes a set of failures is consistent with,
from the failing checks, the largest spacing distance and the direction of the differing elements
against the declared-contract reference. Reports name them; the sweep scores them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Optional

from conformance.checks.result import DECLARATION
from faults.catalogue import get_fault

#: The output checks whose spacing distance a signature reads.
OUTPUT_CHECKS = ("C5", "C6", "C8")


@dataclass
class FailureFeatures:
    """What a set of failures looks like (one case, one cell, or a report).

    ``failed`` / ``precondition``: failed check ids (all / as C3-C4 precondition violations);
    ``max_ulp``: largest spacing distance of failing output checks (None: none); ``toward_zero``,
    ``away_from_zero``, ``sign_change``: differing elements by direction (None: unknown), over
    ``direction_basis``; ``acc_mismatch``: C3 found the kernel's own ``int_mm`` accumulator off the
    exact sum (``n_acc_mismatch`` > 0); ``contradicted``: fault ids a failing element contradicts.
    """

    failed: set = field(default_factory=set)
    precondition: set = field(default_factory=set)
    max_ulp: Optional[int] = None
    toward_zero: Optional[int] = None
    away_from_zero: Optional[int] = None
    sign_change: Optional[int] = None
    direction_basis: str = "all differing elements"
    pow2_output_failure: bool = False
    acc_mismatch: bool = False
    contradicted: set = field(default_factory=set)

    @property
    def direction(self) -> str:
        """``toward zero`` | ``away from zero`` | ``mixed`` | ``unknown``."""
        if self.toward_zero is None:
            return "unknown"
        t, a, s = self.toward_zero, self.away_from_zero or 0, self.sign_change or 0
        if t and not a and not s:
            return "toward zero"
        if a and not t and not s:
            return "away from zero"
        return "mixed" if (t or a or s) else "unknown"


def _small(ft: FailureFeatures) -> bool:
    # exactly one spacing: 0 means the failures are ±0 sign differences only, which no
    # post-processing fault makes without also moving magnitudes
    return ft.max_ulp == 1


def _post(ft: FailureFeatures) -> bool:
    # a post-processing fault (F1-F5) leaves the accumulator exact: no precondition,
    # and C3 did not find the kernel's own accumulator off the exact sum
    return _small(ft) and not ft.precondition and not ft.acc_mismatch


#: fault id -> (predicate over FailureFeatures, description of the signature).
SIGNATURES = {
    "F1": (
        lambda ft: _post(ft) and "C2" not in ft.failed,
        "1-spacing output errors with in-range accumulators and the reference's operands",
    ),
    "F2": (
        lambda ft: _post(ft) and "C2" not in ft.failed,
        "1-spacing output errors with in-range accumulators and the reference's operands",
    ),
    "F3": (
        lambda ft: _post(ft) and "C2" not in ft.failed and not ft.pow2_output_failure and ft.direction != "toward zero",
        "1-spacing errors in both directions, none under power-of-two scales",
    ),
    "F4": (lambda ft: _post(ft) and ft.direction == "toward zero", "1-spacing errors, all toward zero"),
    "F5": (
        lambda ft: _post(ft) and "C2" not in ft.failed and not ft.pow2_output_failure and ft.direction != "toward zero",
        "1-spacing errors in both directions, none under power-of-two scales",
    ),
    "F6": (
        lambda ft: "C3" in ft.precondition and "F6" not in ft.contradicted,
        "an accumulator bound beyond 2^31-1 (int32 overflow), output garbage where it wraps",
    ),
    "F7": (
        lambda ft: (
            "C4" in ft.precondition
            and "C3" not in ft.precondition
            and not ft.acc_mismatch
            and "F7" not in ft.contradicted
        ),
        "|acc| >= 2^24 with int32 headroom (float32 conversion inexact)",
    ),
    "F9": (lambda ft: "C2" in ft.failed, "the kernel received operands other than the reference's"),
    "F10": (
        lambda ft: (
            "C2" not in ft.failed
            and ("C11" in ft.failed or ("C12" in ft.failed and (ft.max_ulp is None or ft.max_ulp > 1)))
        ),
        "an FP8 accumulator keeping less than declared (C11 measured fewer bits, or outputs beyond C12's bound by more "
        "than one spacing)",
    ),
}


#: precision (significand bits) and smallest normal of each output dtype
_PRECISION = {"torch.bfloat16": (8, 2.0**-126), "torch.float16": (11, 2.0**-14), "torch.float32": (24, 2.0**-126)}


def contradicted_classes(worst: dict, k: int, out_dtype: str, bias: bool) -> set:
    """Precondition fault classes one failing output element (``worst``: ``acc``, ``out``, ``ref``)
    contradicts on a case of depth ``k``: F6 where |acc| <= 2^31-1; F7 where |acc| < 2^24, or,
    without bias, where the output is further from the reference (relative) than a float32
    accumulator can move it: (k-1) u / (1 - (k-1) u) * k * 2^14 / |acc| (recursive summation,
    |a*b| <= 2^14, u = 2^-24) plus the epilogue's roundings (4 output spacings and 2^-20).
    """
    acc = worst.get("acc")
    if not isinstance(acc, int) or isinstance(acc, bool):
        return set()
    out = set()
    if abs(acc) <= 2**31 - 1:
        out.add("F6")
    if abs(acc) < 2**24:
        return out | {"F7"}
    o, r = worst.get("out"), worst.get("ref")
    prec = _PRECISION.get(out_dtype)
    if bias or prec is None or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (o, r)):
        return out
    p, tiny = prec
    g = (k - 1) * 2.0**-24
    if abs(r) < tiny or g >= 0.5:
        return out
    rel = g / (1 - g) * k * 2**14 / abs(acc) + 4 * 2.0 ** (1 - p) + 2.0**-20
    return out | {"F7"} if abs(o - r) > abs(r) * rel else out


def match_signatures(ft: FailureFeatures) -> list[tuple[str, str]]:
    """``[(fault id, "consistent with F4 output truncation: ...")]`` for the signatures ``ft`` matches
    (empty when nothing failed; F8 never matches)."""
    if not ft.failed:
        return []
    out = []
    for fid, (pred, desc) in SIGNATURES.items():
        if pred(ft):
            name = get_fault(fid).name.replace("_", " ")
            out.append((fid, f"consistent with {fid} {name}: {desc}"))
    return out


def features_of_cell(rows: Iterable[dict]) -> FailureFeatures:
    """Features of one sweep cell from its store rows (direction: all differing elements)."""
    ft = FailureFeatures()
    for r in rows:
        if r["verdict"] != "fail":
            continue
        ft.failed.add(r["check_id"])
        if r.get("failure_kind") == "precondition":
            ft.precondition.add(r["check_id"])
        if r["check_id"] == "C3" and (r.get("evidence") or {}).get("n_acc_mismatch"):
            ft.acc_mismatch = True
        if r["check_id"] in OUTPUT_CHECKS:
            mu = (r.get("evidence") or {}).get("max_ulp")
            if mu is not None:
                ft.max_ulp = max(ft.max_ulp or 0, int(mu))
            if r["scale_mode"] == "pow2":
                ft.pow2_output_failure = True
        d = (r.get("ground_truth") or {}).get("direction_vs_declared")
        if d and ft.toward_zero is None:
            ft.toward_zero, ft.away_from_zero = d["toward_zero"], d["away_from_zero"]
            ft.sign_change = d["sign_change"]
    return ft


def features_of_case(cr) -> FailureFeatures:
    """Features of one ``CaseResult``; direction from the worst element of each failing output check."""
    ft = FailureFeatures(direction_basis="worst element of each failing output check")
    tz = az = sc = 0
    seen = False
    for cid, r in cr.checks.items():
        if r.verdict != "fail":
            continue
        ft.failed.add(cid)
        if r.is_precondition_violation:
            ft.precondition.add(cid)
        if cid == "C3" and (r.evidence or {}).get("n_acc_mismatch"):
            ft.acc_mismatch = True
        if cid in OUTPUT_CHECKS:
            ev = r.evidence or {}
            if ev.get("max_ulp") is not None:
                ft.max_ulp = max(ft.max_ulp or 0, int(ev["max_ulp"]))
            if cr.scale_mode == "pow2":
                ft.pow2_output_failure = True
            w = ev.get("worst") or {}
            ft.contradicted |= contradicted_classes(w, int(cr.shape[1]), str(cr.out_dtype), bool(cr.bias))
            o, rf = w.get("out"), w.get("ref")
            if isinstance(o, (int, float)) and isinstance(rf, (int, float)):
                seen = True
                if (o > 0 and rf < 0) or (o < 0 and rf > 0):
                    sc += 1
                elif abs(o) < abs(rf):
                    tz += 1
                elif abs(o) > abs(rf):
                    az += 1
    if seen:
        ft.toward_zero, ft.away_from_zero, ft.sign_change = tz, az, sc
    return ft


def no_signature_line(n_failing: int) -> str:
    """The line for ``n_failing`` failing cases matching no fault class of the catalogue."""
    return (
        f"the failures match no fault class of the catalogue ({n_failing} failing case{'' if n_failing == 1 else 's'})"
    )


def declaration_only(cr) -> bool:
    """Every failing check of case result ``cr`` that is not a precondition is the declaration's
    (``failure_kind`` ``declaration``: the kernel gives its declared contract's bits)."""
    bad = [r for r in cr.checks.values() if r.verdict == "fail" and not r.is_precondition_violation]
    return bool(bad) and all(r.evidence.get("failure_kind") == DECLARATION for r in bad)


def declaration_line(n_declared: int, n_failing: int) -> str:
    """The line for ``n_declared`` of ``n_failing`` failing cases failed only by the declaration."""
    return (
        f"the declaration, not the implementation: in {n_declared} of {n_failing} failing cases the kernel gives "
        "exactly the bits of its declared contract (C8), which is not interchangeable with the reference there "
        "(C5 / C6); no fault class is matched for them"
    )


def signature_lines(result) -> list[str]:
    """A failing ConformanceResult's lines: the cases failed only by the declaration
    (:func:`declaration_line`), then each fault class matching at least one other failing case
    (cases matched one by one; precondition-only failures and cases whose kernel process crashed or hung,
    which produced no output, do not count), most matched first, with its count;
    :func:`no_signature_line` when none matches; empty when no case failed."""
    failing = [
        cr
        for cr in result.cases
        if getattr(cr, "crash", None) is None
        and any(r.verdict == "fail" and not r.is_precondition_violation for r in cr.checks.values())
    ]
    declared = [cr for cr in failing if declaration_only(cr)]
    failing = [cr for cr in failing if not declaration_only(cr)]
    counts: dict = {}
    lines_of: dict = {}
    acc_off = 0
    for cr in failing:
        ft = features_of_case(cr)
        acc_off += ft.acc_mismatch
        for fid, line in match_signatures(ft):
            counts[fid] = counts.get(fid, 0) + 1
            lines_of[fid] = line
    n = len(failing) + len(declared)
    head = [accumulator_line(acc_off, n)] if acc_off else []
    head += [declaration_line(len(declared), n)] if declared else []
    if failing and not counts:
        return head + [no_signature_line(len(failing))]
    order = sorted(counts, key=lambda f: (-counts[f], int(f[1:])))
    return head + [f"{lines_of[f]} ({counts[f]} of {n} failing cases)" for f in order]


def accumulator_line(n_off: int, n_failing: int) -> str:
    """The line for C3 finding the kernel's own accumulator off the exact sum in ``n_off`` of
    ``n_failing`` failing cases: a main-loop bug, for which F1-F5 and F7 are not offered."""
    return (
        f"the kernel's accumulator differs from the exact integer sum (C3) in {n_off} "
        f"of {n_failing} failing cases: a main-loop bug, not a post-processing fault"
    )
