"""``CheckResult``: the verdict and JSON-able evidence of one check (DESIGN.md section 6),
and :func:`aggregate`, which combines one check's per-case results."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Iterable, Optional


class Verdict(StrEnum):
    """A verdict as reports write it (a ``str``: ``Verdict.FAIL == "fail"``). A check's is ``PASS``, ``FAIL`` or
    ``NOT_APPLICABLE`` (:data:`VERDICTS`); ``NOT_RUN`` is a kernel's overall verdict when no case could be called,
    ``INCOMPLETE`` an interrupted run's when nothing failed on what ran (no PASS)."""

    PASS = "pass"
    FAIL = "fail"
    NOT_APPLICABLE = "n/a"
    NOT_RUN = "not run"
    INCOMPLETE = "incomplete"


#: the verdicts of one check
VERDICTS = (Verdict.PASS, Verdict.FAIL, Verdict.NOT_APPLICABLE)

#: check id -> name; ``E1`` is the detllm engine-hash oracle (DESIGN.md section 4).
CHECK_NAMES: dict[str, str] = {
    "C1": "kernel_manifest",
    "C2": "operand_sharing",
    "C3": "int32_headroom",
    "C4": "fp32_exact_accumulator",
    "C5": "pow2_bit_identity",
    "C6": "real_scale_spacing",
    "C7": "token_flip",
    "C8": "declared_contract",
    "C9": "batch_invariance",
    "C10": "call_independence",
    "C11": "fp8_accumulator",
    "C12": "fp8_error_bound",
    "C13": "graph_replay",
    "C14": "compile",
    "C15": "streams_devices",
    "C16": "block_accumulation",
    "C17": "zero_point",
    "E1": "engine_hash",
    "IF": "interface",
    "CALL": "kernel_call",
}
#: The interface pseudo-check: present on a case only when the kernel's call returned something the contract's
#: interface refuses (``conformance.kernels.runner.interface_violation``, an operand written in place); that case's
#: other checks are then ``n/a`` (not run), never ``pass``.
INTERFACE_ID, INTERFACE_NAME = "IF", "interface"
#: The kernel-call pseudo-check: present on a case only when the kernel's call gave no output because it raised
#: or its process died or hung (``failure_kind`` one of :data:`CALL_FAILURES`); that case's other checks are then
#: ``n/a`` (not run), never ``pass`` or ``fail``. A kernel-level check (C9, C7, ...) whose calls failed that way
#: alone carries the same ``failure_kind``. The run's headline names these as the kernel raising / dying / hanging
#: (``overall.raised``, ``overall.crashes``), never as a numeric check's failure.
CALL_ID, CALL_NAME = "CALL", "kernel_call"
#: ``failure_kind`` of a call that gave no output: it raised, its process died, it hung
RAISED, CRASHED, TIMED_OUT = "raised", "crash", "timeout"
CALL_FAILURES = (RAISED, CRASHED, TIMED_OUT)

#: Their failure with ``failure_kind == "precondition"`` blames the operands
#: (F6 / F7), not the kernel; any other ``failure_kind`` is the kernel run's
#: (``declaration``: the kernel's declaration is what fails, :data:`DECLARATION`).
PRECONDITION_CHECKS = ("C3", "C4")
#: ``failure_kind`` of an output-check failure where the kernel gives exactly its declaration's bits and the
#: declaration is what differs from the interchangeable reference (``checks.output_bits.attribution``).
DECLARATION = "declaration"


def failed_line(r: "CheckResult") -> str:
    """``C5 pow2_bit_identity failed`` for an aggregated failing result, with the declaration's share when its
    failing cases are (some of them) the declaration's, not the kernel's."""
    line = f"{r.check_id} {r.name} failed"
    n_decl, n_fail = r.evidence.get("n_declaration_cases", 0), r.evidence.get("n_failed_cases", 0)
    if r.evidence.get("failure_kind") == DECLARATION:
        return line + " (the declaration is not interchangeable here: the kernel gives its declared contract's bits)"
    if n_decl:
        return line + f" (on {n_decl} of {n_fail} failing cases the declaration, not the kernel)"
    return line


#: Evidence flag: a precondition violation on a case built to violate it
#: (``meta["violates"]``); on an aggregate, set when every failing case is one.
PRECONDITION_CASE = "precondition_case"
#: Evidence keys a report keeps of a passing / n/a check (a failing check keeps all).
KEPT_EVIDENCE = (
    "max_ulp",
    "n_differ",
    "n_over_tol",
    "ulp_histogram",
    "premise_violations",
    "observed_max_abs",
    "exact_max_abs",
    "max_abs",
    "bound_tight_max",
    "acc_source",
    "mismatched",
    "reason",
    "accumulator",
    "n_bound_over",
    "max_abs_err",
    "bound_at_max_err",
    "ratio_at_max_err",
    "max_ratio",
)
#: ... and a sweep store row, which also keeps C3's count and C7's token-flip figures.
SWEEP_KEPT_EVIDENCE = KEPT_EVIDENCE + (
    "n_at_or_over",
    "flips",
    "flips_above_threshold",
    "total_positions",
    "max_flip_margin",
    "ppl_reference",
    "ppl_kernel",
)


@dataclass
class CheckResult:
    """One check on one case (or aggregated): a :data:`VERDICTS` verdict, a summary line, evidence."""

    check_id: str
    name: str
    verdict: Verdict
    summary: str
    evidence: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {[str(v) for v in VERDICTS]}")
        self.verdict = Verdict(self.verdict)

    @property
    def is_kernel_failure(self) -> bool:
        """A failure that is the kernel's, not the operands' (:data:`PRECONDITION_CHECKS`)."""
        if self.verdict != Verdict.FAIL:
            return False
        if self.check_id in PRECONDITION_CHECKS:
            return self.evidence.get("failure_kind") != "precondition"
        return True

    @property
    def is_precondition_violation(self) -> bool:
        return self.verdict == Verdict.FAIL and not self.is_kernel_failure

    @property
    def is_precondition_case(self) -> bool:
        return self.is_precondition_violation and self.evidence.get(PRECONDITION_CASE) is True

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "CheckResult":
        return cls(d["check_id"], d["name"], d["verdict"], d["summary"], dict(d.get("evidence", {})))


def not_applicable(check_id: str, reason: str, **evidence: Any) -> CheckResult:
    """An ``n/a`` result whose summary is ``reason``."""
    return CheckResult(
        check_id, CHECK_NAMES.get(check_id, check_id), Verdict.NOT_APPLICABLE, reason, {"reason": reason, **evidence}
    )


def interface_failure(line: str) -> CheckResult:
    """The ``fail`` result of :data:`INTERFACE_ID` for the runner's interface line (``KernelRun.interface``)."""
    return CheckResult(
        INTERFACE_ID,
        INTERFACE_NAME,
        Verdict.FAIL,
        f"interface: {line}",
        {"failure_kind": "interface", "interface": line},
    )


def call_failure(kind: str, line: str, **evidence: Any) -> CheckResult:
    """The ``fail`` result of :data:`CALL_ID` for a call that gave no output: ``kind`` one of :data:`CALL_FAILURES`,
    ``line`` the runner's (or the containment's) one line."""
    return CheckResult(CALL_ID, CALL_NAME, Verdict.FAIL, line, {"failure_kind": kind, "kernel_error": line, **evidence})


def is_call_failure(r: CheckResult) -> bool:
    """``r`` failed only because the kernel's calls gave no output (:data:`CALL_FAILURES`): the :data:`CALL_ID`
    pseudo-check, or a kernel-level check whose failing calls all raised, died or hung."""
    if r.verdict != Verdict.FAIL:
        return False
    if r.check_id == CALL_ID:
        return True
    kinds = r.evidence.get("failure_kinds") or [r.evidence.get("failure_kind")]
    return all(k in CALL_FAILURES for k in kinds)


def merge_histograms(hists: Iterable[dict]) -> dict[str, int]:
    """Sum ulp histograms bin by bin (bins in first-seen order)."""
    out: dict[str, int] = {}
    for h in hists:
        for k, v in h.items():
            out[k] = out.get(k, 0) + int(v)
    return out


#: Evidence keys ranking how bad a case is, most significant first (:func:`severity`).
SEVERITY_KEYS = (
    "max_ulp",
    "n_over_tol",
    "n_bits_differ",
    "n_acc_mismatch",
    "n_at_or_over",
    "n_bound_over",
    "exact_max_abs",
    "max_abs",
    "bound_tight_max",
)


def severity(r: CheckResult) -> tuple:
    """Sort key of a per-case result, larger is worse (:data:`SEVERITY_KEYS`; missing -> 0)."""
    ev = r.evidence or {}
    return tuple(
        int(ev[k]) if isinstance(ev.get(k), (int, float)) and not isinstance(ev.get(k), bool) else 0
        for k in SEVERITY_KEYS
    )


def _order(v: Any) -> float:
    """A number to rank by: ``v`` as float (``"inf"`` text included), NaN and text that is no number as +inf."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.inf
    return math.inf if math.isnan(f) else f


def bound_summary(per_case: list[tuple[str, CheckResult]]) -> Optional[dict]:
    """C12's observed error beside its bound over the cases that ran it (evidence ``max_abs_err``): the case with
    the largest ``max_abs_err`` (its bound at that element and their ratio), the largest ratio and its case, the
    elements out of bound; None when no case has that evidence."""
    ran = [
        (c, r.evidence)
        for c, r in per_case
        if r.verdict != Verdict.NOT_APPLICABLE and "max_abs_err" in (r.evidence or {})
    ]
    if not ran:
        return None
    c_err, e_err = max(ran, key=lambda ce: _order(ce[1]["max_abs_err"]))
    c_rat, e_rat = max(ran, key=lambda ce: _order(ce[1].get("max_ratio", 0.0)))
    return {
        "max_abs_err": e_err["max_abs_err"],
        "bound_at_max_err": e_err.get("bound_at_max_err"),
        "ratio_at_max_err": e_err.get("ratio_at_max_err"),
        "max_err_case": c_err,
        "max_ratio": e_rat.get("max_ratio", 0.0),
        "max_ratio_case": c_rat,
        "n_bound_over": sum(int(e.get("n_bound_over", 0)) for _, e in ran),
        "accumulators": sorted({str(e.get("accumulator")) for _, e in ran}),
    }


def _num(v: Any, spec: str) -> str:
    """``v`` formatted with ``spec``; a value a JSON round trip left as text (``"inf"``, ``"nan"``) or None as is."""
    try:
        return format(float(v), spec)
    except (TypeError, ValueError):
        return str(v)


def bound_line(b: dict) -> str:
    """One line of :func:`bound_summary`: the observed maximum beside its bound."""
    return (
        f"max |err| {_num(b['max_abs_err'], '.6g')} beside its bound {_num(b['bound_at_max_err'], '.6g')} (ratio "
        f"{_num(b['ratio_at_max_err'], '.3g')}, {b['max_err_case']}); largest ratio {_num(b['max_ratio'], '.3g')} "
        f"({b['max_ratio_case']}); accumulator {', '.join(b['accumulators'])}"
    )


def aggregate(check_id: str, per_case: list[tuple[str, CheckResult]], max_listed: int = 20) -> CheckResult:
    """One result from ``(case name, CheckResult)`` pairs: ``fail`` if any case
    fails, else ``pass`` if any passes, else ``n/a``. Evidence: counts per
    verdict, failing case names (first ``max_listed``), summed ulp histogram, the
    worst case (largest :func:`severity`, failing else passing), n/a reasons;
    for C3 / C4 the precondition case / violation counts; for C12 its
    :func:`bound_summary` (``bound``)."""
    name = CHECK_NAMES.get(check_id, check_id)
    if not per_case:
        return not_applicable(check_id, "no case exercised this check")
    counts = {v: 0 for v in VERDICTS}
    for _, r in per_case:
        counts[r.verdict] += 1
    failed = [(c, r) for c, r in per_case if r.verdict == Verdict.FAIL]
    hists = [
        r.evidence["ulp_histogram"]
        for _, r in per_case
        if r.verdict != Verdict.NOT_APPLICABLE and isinstance(r.evidence.get("ulp_histogram"), dict)
    ]
    ev: dict = {"cases": counts, "failed_cases": [c for c, _ in failed[:max_listed]], "n_failed_cases": len(failed)}
    if hists:
        ev["ulp_histogram"] = merge_histograms(hists)
    pool = failed or [(c, r) for c, r in per_case if r.verdict == Verdict.PASS]
    if pool:
        worst_case, worst = max(pool, key=lambda cr: severity(cr[1]))
        ev["worst_case"] = {"case": worst_case, "summary": worst.summary, "evidence": worst.evidence}
    reasons = sorted({r.summary for _, r in per_case if r.verdict == Verdict.NOT_APPLICABLE})
    if reasons:
        ev["na_reasons"] = reasons[:max_listed]
    n = len(per_case)
    if failed:
        kinds = sorted({r.evidence.get("failure_kind", "kernel") for _, r in failed})
        ev["failure_kinds"] = kinds
        # one kind -> that kind; a mix -> "kernel" (not only a precondition)
        ev["failure_kind"] = kinds[0] if len(kinds) == 1 else "kernel"
        n_decl = sum(1 for _, r in failed if r.evidence.get("failure_kind") == DECLARATION)
        if n_decl:
            ev["n_declaration_cases"] = n_decl
        verdict = Verdict.FAIL
        if check_id in PRECONDITION_CHECKS:
            n_case = sum(1 for _, r in failed if r.is_precondition_case)
            ev["n_precondition_cases"] = n_case
            ev["n_precondition_violations"] = sum(1 for _, r in failed if r.is_precondition_violation) - n_case
            if n_case == len(failed):
                ev[PRECONDITION_CASE] = True
        summary = f"failed on {len(failed)}/{n} cases; first: {failed[0][0]}: {failed[0][1].summary}"
        if ev.get(PRECONDITION_CASE):
            summary = (
                f"precondition case on {len(failed)}/{n} cases (built to violate it); "
                f"first: {failed[0][0]}: {failed[0][1].summary}"
            )
    elif counts[Verdict.PASS]:
        verdict = Verdict.PASS
        summary = f"passed on {counts[Verdict.PASS]}/{n} cases" + (
            f" (n/a on {counts[Verdict.NOT_APPLICABLE]})" if counts[Verdict.NOT_APPLICABLE] else ""
        )
        passed = [r.evidence for _, r in per_case if r.verdict == Verdict.PASS]
        n_el = sum(int(e.get("n_compared", 0)) for e in passed)
        if n_el:
            ev["n_elements_compared"] = n_el
            summary += f"; {n_el} elements compared"
        for key, label in (("max_abs", "max |acc|"), ("bound_tight_max", "max |acc| bound")):
            vals = [int(e[key]) for e in passed if isinstance(e.get(key), int)]
            if vals:
                ev[f"overall_{key}"] = max(vals)
                summary += f"; {label} {max(vals)}"
                break
    else:
        verdict = Verdict.NOT_APPLICABLE
        summary = f"n/a on all {n} cases: " + "; ".join(reasons[:3])
    bound = bound_summary(per_case)
    if bound is not None:
        ev["bound"] = bound
        summary += f"; {bound_line(bound)}"
    return CheckResult(check_id, name, verdict, summary, ev)
