"""The conformance suite as a library call (:func:`run_conformance`, :func:`run_suite`) and the
aggregation of its results into a :class:`ConformanceResult` (:func:`build_result`), the content
of ``reports/<kernel>/conformance.*``.

Overall verdict: ``fail`` when a check fails because of the kernel (any failure except C3 / C4
precondition violations caused by the operands); ``not run`` (inconclusive) when nothing failed
and the kernel produced output on zero cases; ``pass`` when nothing failed, the kernel ran on at
least one case and a check passed; ``n/a`` otherwise. Cases built to violate a precondition
(``meta["violates"]``) are counted in ``overall["precondition_cases"]``, other violations in
``overall["precondition_violations"]``.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

from conformance.cases import CaptureReplay, case_id
from conformance.cases.fp8 import PAPER_NOT_AFFORDED
from conformance.checks.result import (
    CALL_ID,
    CHECK_NAMES,
    INTERFACE_ID,
    CheckResult,
    Verdict,
    aggregate,
    failed_line,
    is_call_failure,
    not_applicable,
)
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import cuda_device, validate_device
from conformance.kernels.spec import conformance_run
from conformance.runtime.environment import environment as base_environment
from conformance.runtime.graceful_stop import raise_if_requested
from conformance.runtime.partial_run import INTERRUPTED, complete_run, partial_run
from conformance.runtime.threads import available_cores
from conformance.suite.coverage import block_coverage_table, coverage_table, fp8_coverage_table
from conformance.suite.coverage import invocation as call_invocation
from conformance.suite.evaluate import OWNERSHIP_CHECK, CaseResult, per_case_checks
from conformance.suite.pairwise import summarize_pairs
from conformance.suite.plan import (  # noqa: F401 -- re-exported: the suite's public names
    CASE,
    CHECK,
    CLI_MODEL_HINT,
    MODEL_CHECKS,
    NOT_REACHED,
    PLANS,
    PROPERTY,
    SERVING_CHECKS,
    SuiteState,
    cli_capture_message,
    default_cases,
    given_cases,
    load_captures,
    mark_ownership_probes,
    reduced_suite,
    run_batch_invariance,
    run_model_check,
    suite_cases,
    suite_steps,
)
from conformance.suite.workers import (
    Containment,
    checks_in_worker,
    containment_ok,
    evaluate_in_workers,
    import_in_background,
    parallel_ok,
)
from reference.errors import first_line
from reference.model.forward import model_class

REPORT_ORDER = (
    *(
        "IF",
        "CALL",
        "C1",
        "C2",
        "C3",
        "C4",
        "C5",
        "C6",
        "C7",
        "C8",
        "C9",
        "C10",
        "C11",
        "C12",
        "C13",
        "C14",
        "C15",
        "C16",
        "C17",
    ),
    "E1",
)
#: Version of the suite's case construction and check semantics: two reports compare
#: (``int8conf gate --baseline``) only when equal; bump it when a generator or a check's meaning changes.
SUITE_VERSION = "3"


def environment(manifests: Sequence[dict] = ()) -> dict:
    """``conformance.runtime.environment.environment()`` plus what the runs used (from their
    KernelRun manifests): ``devices_used, paths_used {path: count}, execution`` (``interpreter`` /
    ``native`` / ``mixed`` / ``unknown``), ``interpreter_semantics`` (the Triton interpreter's measured
    epilogue semantics from the first manifest whose ``extra`` carries it, or None)."""
    paths: dict[str, int] = {}
    devices: set[str] = set()
    interp: set[bool] = set()
    semantics = None
    for m in manifests:
        if semantics is None and isinstance((m.get("extra") or {}).get("interpreter_semantics"), dict):
            semantics = dict(m["extra"]["interpreter_semantics"])
        p = str(m.get("path") or "unreported")
        paths[p] = paths.get(p, 0) + 1
        if m.get("device"):
            devices.add(str(m["device"]))
        if m.get("interpreter") is not None:
            interp.add(bool(m["interpreter"]))
    execution = "unknown" if not interp else "mixed" if len(interp) > 1 else "interpreter" if interp.pop() else "native"
    return {
        **base_environment(),
        "devices_used": sorted(devices),
        "paths_used": paths,
        "execution": execution,
        "interpreter_semantics": semantics,
    }


@dataclass
class ConformanceResult:
    """Everything a conformance report holds (``conformance.suite.report`` writes it).

    ``overall``: :func:`overall_verdict`; ``partial``: ``conformance.runtime.partial_run`` record
    (whether the verdict covers the whole run); ``comparability``: :func:`comparability`;
    ``coverage``: ``coverage_table`` rows; ``invocation``: command line and options (``{}`` unknown);
    ``fp8``: :func:`fp8_summary` for an e4m3 kernel, else None; ``triage``: check id -> where its failure
    lives (a plain JSON-able dict the front door fills after the run, e.g. ``int8conf check`` with
    ``conformance.triage.run.triage_result``; ``{}`` when not triaged).
    """

    kernel: dict
    environment: dict
    checks: list
    cases: list
    captures: dict
    property_tests: Optional[dict] = None
    pairwise: Optional[dict] = None
    overall: dict = field(default_factory=dict)
    elapsed_s: float = 0.0
    notes: list = field(default_factory=list)
    comparability: dict = field(default_factory=dict)
    coverage: list = field(default_factory=list)
    invocation: dict = field(default_factory=dict)
    partial: dict = field(default_factory=dict)
    fp8: Optional[dict] = None
    triage: dict = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """``pass`` | ``fail`` | ``not run`` | ``n/a``."""
        return self.overall.get("verdict", Verdict.NOT_APPLICABLE)

    @property
    def conformant(self) -> bool:
        return self.verdict == Verdict.PASS

    def check(self, check_id: str) -> CheckResult:
        """The aggregated result of one check (KeyError if absent)."""
        for c in self.checks:
            if c.check_id == check_id:
                return c
        raise KeyError(check_id)


def _digest_rows(rows: list) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode("utf-8")).hexdigest()


def comparability(cases: Sequence[dict], environment_: Optional[dict] = None, captures: Optional[dict] = None) -> dict:
    """What two runs must share to be compared case by case.

    ``cases``: per-case dicts (``CaseResult.to_dict()`` or a report's ``cases``; property examples
    are left out). The digests are SHA-256 over the sorted ``[case id, scale mode, out dtype, operand
    digests, source]`` rows (all fixed cases, resp. the layer captures): equal digests, same bits.
    Versions and device are recorded, not required equal.
    """
    rows = sorted(
        [d["case"], d.get("scale_mode"), d.get("out_dtype"), d.get("operand_digests") or {}, d.get("source")]
        for d in cases
        if d.get("source") != "property"
    )
    cap = [r for r in rows if r[4] == "capture"]
    env = environment_ or {}
    return {
        "suite_version": SUITE_VERSION,
        "n_cases": len(rows),
        "cases_digest": _digest_rows(rows),
        "n_capture_cases": len(cap),
        "captures_digest": _digest_rows(cap) if cap else None,
        "captures_source": (captures or {}).get("source") or None,
        "case_ids": [r[0] for r in rows],
        "environment": {
            k: env.get(k) for k in ("torch", "triton", "python", "execution", "cuda_device", "devices_used")
        },
    }


def not_run_counts(case_results: Sequence[CaseResult]) -> dict[str, int]:
    """``{reason: number of cases}`` for cases the kernel could not run on."""
    out: dict[str, int] = {}
    for cr in case_results:
        why = cr.not_run_reason
        if why is not None:
            out[why] = out.get(why, 0) + 1
    return out


def _reasons_text(reasons: dict[str, int], limit: int = 3) -> str:
    top = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    text = "; ".join(f"{why} ({n} cases)" for why, n in top[:limit])
    if len(top) > limit:
        text += f"; and {len(top) - limit} other reasons"
    return text


def crash_records(checks: Sequence[CheckResult], case_results: Sequence[CaseResult] = ()) -> list[dict]:
    """Every crash / timeout of a run (``suite.workers.Containment``'s records, without the stack): the cases'
    (``CaseResult.crash``, property examples included) and the kernel-level checks' (``evidence["crash"]``)."""
    keys = ("status", "line", "signal", "exitcode", "timeout_s", "repro")
    out = [{"case": cr.case, **{k: cr.crash.get(k) for k in keys}} for cr in case_results if cr.crash]
    for c in checks:
        rec = (c.evidence or {}).get("crash")
        if isinstance(rec, dict):
            out.append({"check": c.check_id, **{k: rec.get(k) for k in keys}})
    return out


def raise_records(checks: Sequence[CheckResult], case_results: Sequence[CaseResult] = ()) -> list[dict]:
    """Every kernel call of a run that raised: the cases' (``CaseResult.raised``, property examples included;
    ``exception`` ``<type>: <first line>``, ``line`` the runner's line) and the kernel-level checks'
    (``evidence["raised"]``: their first call that raised, and how many did)."""
    out = [{"case": cr.case, "exception": cr.raised, "line": cr.error} for cr in case_results if cr.raised]
    for c in checks:
        rec = (c.evidence or {}).get("raised")
        if isinstance(rec, dict):
            out.append({"check": c.check_id, **{k: rec.get(k) for k in ("exception", "line", "calls")}})
    return out


def _call_text(crashes: Sequence[dict], raised: Sequence[dict] = ()) -> str:
    """``the kernel's process died on 1 case (first: family/x: SIGSEGV); the kernel hung on 1 step (first: C9: no
    result within 3 s); the kernel raised on 2 cases and C9 (first: family/y: RuntimeError: <first line>)``."""
    parts = []
    for status, verb in (("crash", "the kernel's process died"), ("timeout", "the kernel hung"), ("raised", "")):
        got = list(raised) if status == "raised" else [c for c in crashes if c["status"] == status]
        if not got:
            continue
        first = got[0]
        what = first.get("case") or first.get("check")
        why = first.get("signal") or f"exit status {first.get('exitcode')}"
        if status == "timeout":
            why = f"no result within {first.get('timeout_s'):g} s"
        elif status == "raised":
            verb, why = "the kernel raised", first.get("exception")
        cases, steps = [c for c in got if c.get("case")], [c["check"] for c in got if not c.get("case")]
        if cases and steps:  # N cases and C9
            where = f"{len(cases)} case{'s' if len(cases) > 1 else ''} and {', '.join(steps)}"
        else:
            where = f"{len(got)} {'case' if cases else 'step'}{'s' if len(got) > 1 else ''}"
        parts.append(f"{verb} on {where} (first: {what}: {why})")
    return "; ".join(parts)


def _failure_text(c: CheckResult) -> str:
    """How the headline names a failing check: an interface failure by its line (``interface: ...``), any other by
    :func:`checks.result.failed_line`."""
    return c.summary if c.check_id == INTERFACE_ID or c.evidence.get("failure_kind") == "interface" else failed_line(c)


def reduced_headline(verdict: str, skipped: Sequence[str]) -> str:
    """The verdict as a headline says it: ``PASS``, or ``PASS on a reduced suite: <what>, <what> skipped``."""
    head = verdict.upper()
    return f"{head} on a reduced suite: {', '.join(skipped)} skipped" if skipped else head


def overall_verdict(
    checks: Sequence[CheckResult],
    property_tests: Optional[dict] = None,
    case_results: Optional[Sequence[CaseResult]] = None,
    skipped: Sequence[str] = (),
    partial: Optional[dict] = None,
) -> dict:
    """The ``overall`` record (module docstring); a failed property test fails it too. With
    ``case_results``, a kernel that produced output on none gets ``not run`` (unless something
    failed) and skipped cases are counted (``cases_run``, ``cases_not_run``, ``not_run_reasons``).
    ``crashes``: :func:`crash_records`, ``raised``: :func:`raise_records` (each one fails the verdict; the summary
    leads with them, and names a check only where it failed on a valid output: ``checks.result.is_call_failure``);
    ``reduced_suite``: ``skipped``, what of the default suite the run left out (``plan.reduced_suite``);
    ``headline``: :func:`reduced_headline`; ``partial``: the run's ``partial_run`` record; an interrupted one
    adds ``cases_planned`` and turns a verdict without a failure into no PASS (:func:`_interrupted`)."""
    failed = [c for c in checks if c.is_kernel_failure]
    crashes = crash_records(checks, case_results or ())
    raised = raise_records(checks, case_results or ())
    lead = _call_text(crashes, raised)
    pre = [c for c in checks if c.is_precondition_violation and c.evidence.get("n_precondition_violations", 1)]
    pre_cases = {
        c.check_id: c.evidence["n_precondition_cases"]
        for c in checks
        if c.is_precondition_violation and c.evidence.get("n_precondition_cases")
    }
    prop_failed = bool(property_tests and property_tests.get("failed"))
    if failed or prop_failed:
        verdict = Verdict.FAIL
        summary = "NOT conformant: " + "; ".join(
            ([lead] if lead else [])
            + [_failure_text(c) for c in failed if not is_call_failure(c)]
            + ([f"property test failed: {(property_tests or {}).get('failure')}"] if prop_failed and not failed else [])
        )
    elif case_results and not any(cr.produced_output for cr in case_results):
        verdict = Verdict.NOT_RUN
        reasons = not_run_counts(case_results)
        summary = f"inconclusive, nothing verified: the kernel produced output on 0 of {len(case_results)} cases" + (
            ": " + _reasons_text(reasons) if reasons else ""
        )
    elif any(c.verdict == Verdict.PASS for c in checks):
        verdict = Verdict.PASS
        summary = "conformant: no check failed because of the kernel"
    else:
        verdict, summary = Verdict.NOT_APPLICABLE, "no check could run"
    if pre:
        summary += "; precondition violated (operands, not the kernel): " + "; ".join(
            f"{c.check_id} {c.name}: "
            f"{c.evidence.get('n_precondition_violations', c.evidence.get('n_failed_cases', 1))} "
            f"cases"
            for c in pre
        )
    if pre_cases:
        summary += "; precondition cases (built by the suite to violate them, not failures): " + "; ".join(
            f"{cid} {CHECK_NAMES[cid]}: {n}" for cid, n in pre_cases.items()
        )
    out: dict[str, Any] = {
        "verdict": verdict,
        "headline": reduced_headline(verdict, skipped),
        "reduced_suite": list(skipped),
        "crashes": crashes,
        "raised": raised,
        "summary": summary,
        "failed_checks": [c.check_id for c in failed],
        "precondition_violations": [c.check_id for c in pre],
        "precondition_cases": pre_cases,
    }
    if case_results is not None:
        reasons = not_run_counts(case_results)
        n_skip = sum(reasons.values())
        out.update(
            cases_total=len(case_results),
            cases_run=len(case_results) - n_skip,
            cases_not_run=n_skip,
            not_run_reasons=reasons,
        )
        if n_skip and verdict != Verdict.NOT_RUN:
            out["summary"] += (
                f"; {n_skip} of {len(case_results)} cases not run (not covered "
                f"by this verdict): " + _reasons_text(reasons)
            )
    return _interrupted(out, partial) if partial and partial["reason"] == INTERRUPTED else out


def _interface_summary(r: CheckResult, failed: list, total: int) -> CheckResult:
    """The aggregated interface failure ``r`` re-worded over all ``total`` cases: ``interface: <first line> on
    <first case> (N of total cases)`` (``failed``: its ``(case, CheckResult)`` pairs)."""
    case, first = failed[0]
    return CheckResult(
        r.check_id, r.name, r.verdict, f"{first.summary} on {case} ({len(failed)} of {total} cases)", r.evidence
    )


def _call_summary(r: CheckResult, failed: list, total: int) -> CheckResult:
    """The aggregated kernel-call failure ``r`` re-worded over all ``total`` cases: ``no output on N of total
    cases; first: <case>: <its line>`` (``failed``: its ``(case, CheckResult)`` pairs)."""
    case, first = failed[0]
    line = f"no output on {len(failed)} of {total} cases; first: {case}: {first.summary}"
    return CheckResult(r.check_id, r.name, r.verdict, line, r.evidence)


def _interrupted(overall: dict, part: dict) -> dict:
    """An interrupted run's ``overall`` (``part``: its ``partial_run`` record): ``cases_planned``, the run's fixed
    cases (``cases_total`` counts those that ran); a verdict without a failure is no PASS: ``verdict`` becomes
    ``incomplete``, its headline and summary say how far the run got (a FAIL or NOT RUN stays)."""
    out = dict(overall, cases_planned=part["cases_total"])
    if overall["verdict"] in (Verdict.FAIL, Verdict.NOT_RUN):
        return out
    out["verdict"] = Verdict.INCOMPLETE
    ran, total = part["cases_ran"], part["cases_total"]
    skipped = overall.get("reduced_suite") or []
    out["headline"] = "INCOMPLETE (interrupted, not a PASS)" + (
        f" on a reduced suite: {', '.join(skipped)} skipped" if skipped else ""
    )
    out["summary"] = f"not a verdict: interrupted after {ran} of {total} fixed cases; no check failed on what ran"
    return out


def build_result(
    spec,
    case_results: Sequence[CaseResult],
    captures: CaptureReplay,
    model_results: Sequence[CheckResult] = (),
    property_tests: Optional[dict] = None,
    against=None,
    elapsed_s: float = 0.0,
    notes: Sequence[str] = (),
    invocation: Optional[dict] = None,
    partial: Optional[dict] = None,
    warm_up: Optional[dict] = None,
    skipped: Sequence[str] = (),
) -> ConformanceResult:
    """Aggregate per-case results (property examples included) and kernel-level ones (C9, C7, E1;
    absent ones are n/a "not run") into a ConformanceResult; ``against``: the other KernelSpec
    when pairwise results are present. ``partial``: ``partial_run`` record, None = complete; a
    partial record's ``note`` goes first in the notes. ``warm_up``: the suite's warm-up record
    (``environment["warm_up"]``); ``skipped``: what of the default suite the run left out
    (``plan.reduced_suite``; the verdict's headline says so).
    """
    per: dict[str, list] = {cid: [] for cid, _ in per_case_checks(spec) + (OWNERSHIP_CHECK,)}
    for cr in case_results:
        for cid, r in cr.checks.items():
            per.setdefault(cid, []).append((cr.case, r))
    agg = {cid: aggregate(cid, lst) for cid, lst in per.items()}
    if per.get(INTERFACE_ID):
        agg[INTERFACE_ID] = _interface_summary(agg[INTERFACE_ID], per[INTERFACE_ID], len(case_results))
    if per.get(CALL_ID):
        agg[CALL_ID] = _call_summary(agg[CALL_ID], per[CALL_ID], len(case_results))
    for r in model_results:
        agg[r.check_id] = r
    for cid, _, _ in MODEL_CHECKS:
        agg.setdefault(cid, not_applicable(cid, "not run (model-level checks disabled)"))
    for cid in ("C9", *SERVING_CHECKS):
        agg.setdefault(cid, not_applicable(cid, "not run"))
    if spec.is_fp8:
        agg.setdefault("C11", not_applicable("C11", "not run"))
    for cid, _, _ in PLANS[spec.kind].checks:
        agg.setdefault(cid, not_applicable(cid, "not run"))
    checks = [agg[c] for c in REPORT_ORDER if c in agg] + [r for c, r in agg.items() if c not in REPORT_ORDER]
    pairwise = None
    if against is not None:
        pairs = [(cr.case, cr.pair) for cr in case_results if cr.pair is not None]
        pairwise = summarize_pairs(spec.name, against.name, pairs, against.manifest())
    env = environment([cr.run_manifest for cr in case_results])
    if warm_up is not None:
        env["warm_up"] = warm_up
    cap = {"available": captures.available, "note": captures.note, "source": captures.source}
    if partial is None:
        partial = complete_run(sum(1 for cr in case_results if cr.source != "property"))
    notes = ([partial["note"]] if partial["partial"] else []) + [n for n in notes if n != partial["note"]]
    return ConformanceResult(
        kernel=spec.manifest(),
        environment=env,
        checks=checks,
        cases=list(case_results),
        captures=cap,
        property_tests=property_tests,
        pairwise=pairwise,
        overall=overall_verdict(checks, property_tests, list(case_results), skipped, partial),
        elapsed_s=elapsed_s,
        notes=notes,
        coverage=_coverage_rows(spec, case_results),
        invocation=dict(invocation or {}),
        partial=partial,
        comparability=comparability([cr.to_dict() for cr in case_results], env, cap),
        fp8=fp8_summary(spec, checks, [cr.case for cr in case_results]),
    )


def fp8_summary(spec, checks: Sequence[CheckResult], case_names: Sequence[str] = ()) -> Optional[dict]:
    """An e4m3 kernel's accumulator record (None for int8): ``declared`` (``KernelSpec.manifest``'s
    text, or per device), ``c11_declared`` (the declaration C11 compared with, on the device it ran
    on), ``measured`` (C11's measured model text, None if it did not measure), ``measured_model``,
    ``c11`` / ``c12`` (verdict and summary) and ``c12_bound`` (C12's observed maximum beside its
    bound, ``result.bound_summary``; None if no case ran it), ``not_afforded`` (the paper-size regimes the
    run's cases, ``case_names``, left out: ``fp8.PAPER_NOT_AFFORDED``, or None)."""
    if not spec.is_fp8:
        return None
    by = {c.check_id: c for c in checks}
    c11, c12 = by.get("C11"), by.get("C12")
    ev11 = c11.evidence if c11 is not None else {}
    return {
        "operands": "e4m3",
        "declared": spec.manifest().get("accumulator"),
        "c11_declared": ev11.get("declared"),
        "measured": ev11.get("measured"),
        "measured_model": ev11.get("measured_model"),
        "c11": None if c11 is None else {"verdict": c11.verdict, "summary": c11.summary},
        "c12": None if c12 is None else {"verdict": c12.verdict, "summary": c12.summary},
        "c12_bound": None if c12 is None else c12.evidence.get("bound"),
        "not_afforded": PAPER_NOT_AFFORDED
        if any("/paper_layers/" in n and "-full-" not in n for n in case_names)
        else None,
    }


def _block_sizes(spec) -> Optional[tuple]:
    """A block-scaled kernel's declared block sizes (the block plan's), None for another kernel."""
    return None if spec.block is None else spec.block.sizes


def _coverage_rows(spec, case_results) -> list:
    """The report's coverage rows: the block table for a block-scaled kernel, the FP8 one for e4m3, else
    :func:`_coverage`."""
    if spec.is_block:
        return block_coverage_table(case_results)
    return fp8_coverage_table(case_results) if spec.is_fp8 else _coverage(case_results)


def _coverage(case_results) -> list:
    """``coverage_table`` of the cases; a failure becomes one row saying so."""
    try:
        return coverage_table(case_results)
    except Exception as e:  # noqa: BLE001 -- coverage is evidence, never a crash
        return [
            {
                "condition": "coverage table",
                "reached": f"not computed: {type(e).__name__}: {first_line(e, None)}",
                "cases": 0,
                "covered": "no",
            }
        ]


def run_conformance(
    kernel,
    against=None,
    *,
    cases: Optional[Sequence] = None,
    include_captures: bool = True,
    include_tile_edges: bool = True,
    seeds: Sequence[int] = (0, 1),
    property_examples: int = 25,
    model_checks: bool = True,
    max_capture_layers: Optional[int] = None,
    capture_dir=None,
    model_dir=None,
    device: Optional[str] = None,
    progress: Optional[Callable[[str], None]] = None,
    invocation: Optional[dict] = None,
    timeout_s: Optional[float] = None,
    repro_dir=None,
) -> ConformanceResult:
    """Run the whole conformance suite for one kernel (a KernelSpec or a registry name).

    ``against``: other kernel for pairwise interchangeability; ``cases``: explicit GemmOperands
    (replace the default cases, see ``plan.default_cases``); ``capture_dir`` / ``model_dir``:
    replay these captures; ``property_examples``: 0 = skip; ``progress``: called with a line per
    step; ``invocation``: None = this call's own arguments; ``timeout_s`` / ``repro_dir``: as
    :func:`run_suite`. Never raises for a kernel's failure.

    Raises:
        SuiteInterrupted: Ctrl-C / SIGTERM during the run (carries the partial result).
        KernelLoadError: a kernel name that does not resolve (one line).
        CaptureError: an inconsistent capture set (one line).
        Int8confError: an invalid or unavailable ``device`` (one line).
    """
    validate_device(device)
    t0 = time.perf_counter()
    spec = get_kernel(kernel) if isinstance(kernel, str) else kernel
    other = get_kernel(against) if isinstance(against, str) else against
    explicit = cases is not None
    if cases is None:
        cases, cap = suite_cases(
            include_captures,
            include_tile_edges,
            capture_dir,
            model_dir,
            seeds=seeds,
            max_capture_layers=max_capture_layers,
            operands=spec.operands,
            native=cuda_device(spec, device) is not None,
            block_sizes=_block_sizes(spec),
            azp=spec.is_azp,
        )
    else:  # probed as the plan probes its own cases (C10's marks), unless the caller's cases carry them
        cases = list(cases)
        if not all("ownership_probe" in (c.meta or {}) for c in cases):
            cases = mark_ownership_probes([replace(c, meta=dict(c.meta or {})) for c in cases])
        cap = given_cases(cases)
    if invocation is None:
        invocation = call_invocation(
            {
                "kernel": spec.name,
                "against": getattr(other, "name", None),
                "include_captures": include_captures,
                "include_tile_edges": include_tile_edges,
                "property_examples": property_examples,
                "model_checks": model_checks,
                "device": device,
                "explicit_cases": len(cases),
            },
            prog="conformance.suite.run.run_conformance",
        )
    skipped = reduced_suite(
        include_captures,
        include_tile_edges,
        property_examples,
        model_checks,
        spec.operands,
        max_capture_layers,
        explicit,
        kind=spec.kind,
    )
    state = SuiteState(spec, cases, cap, other, device, t0=t0, skipped=skipped)
    return run_suite(
        state, property_examples, model_checks, progress, invocation, timeout_s=timeout_s, repro_dir=repro_dir
    )


def run_suite(
    state: SuiteState,
    property_examples: int = 25,
    model_checks: bool = True,
    progress: Optional[Callable[[str], None]] = None,
    invocation: Optional[dict] = None,
    jobs: int = 1,
    timeout_s: Optional[float] = None,
    repro_dir=None,
) -> ConformanceResult:
    """The plan's steps (``plan.suite_steps``) for a prepared :class:`SuiteState` (spec resolved,
    device validated, cases built); pairwise comparisons run with each case; ``jobs`` > 1: the
    fixed cases in that many forked workers first (``suite.workers``; same results). ``timeout_s``:
    every kernel call runs contained (``suite.workers.Containment``: a crash or a hang fails its case
    or check, the run goes on; a reproducer per case in ``repro_dir``), ``timeout_s`` seconds per
    case; None: in this process. Raises as :func:`run_conformance` does for a stop."""
    with conformance_run():
        contained, why = None, None
        if timeout_s is not None:
            why = containment_ok()
            contained = Containment(state, timeout_s, repro_dir) if why is None else None
        state.contained = contained
        try:
            return _run_steps(state, property_examples, model_checks, progress, invocation, jobs, why)
        finally:
            state.contained = None
            if contained is not None:
                contained.close()


def _start_beside(state: SuiteState, check_ids: list, beside: dict, say, what: str) -> None:
    """Start ``check_ids`` in a worker process (``checks_in_worker``); their result getters go into
    ``beside``; ``what`` is said when a worker started."""
    started = checks_in_worker(state, check_ids, state.contained if isinstance(state.contained, Containment) else None)
    beside.update(started)
    if started:
        say(f"{state.spec.name}: {what}")


def _run_steps(
    state: SuiteState, property_examples, model_checks, progress, invocation, jobs, uncontained=None
) -> ConformanceResult:
    spec, cases = state.spec, state.cases
    contained = state.contained if isinstance(state.contained, Containment) else None
    say = progress or (lambda s: None)
    say(f"{spec.name}: {len(cases)} fixed cases; {state.captures.note}")
    notes = []
    if uncontained:
        notes.append(f"the kernel ran in the suite's own process (a crash or a hang is not contained): {uncontained}")
        say(f"{spec.name}: {notes[-1]}")
    steps = state.steps(property_examples, model_checks, against=False)
    checks = [s.check_id for s in steps if s.kind == CHECK and s.check_id is not None]
    stopped, stage, unreached = None, "fixed cases", []
    running: set = set()  # the cases in flight in the workers
    try:
        state.warm_up(say, property_examples)
        why = parallel_ok(state) if jobs > 1 else None
        if why:
            say(f"{spec.name}: the cases run in this process: {why}")
        beside: dict = {}  # kernel-level checks running in a worker beside the in-process steps
        if jobs > 1 and not why:  # C7's model library imported meanwhile, on a core the workers leave idle
            spare = available_cores() > jobs
            preload = (lambda: import_in_background(model_class)) if "C7" in checks and spare else None
            evaluate_in_workers(state, jobs, say, after_fork=preload, contained=contained, running=running)
            serving = [cid for cid in checks if cid in SERVING_CHECKS]
            if serving and cuda_device(spec, state.device) is not None:  # after the cases: none share the GPU
                what = f"{', '.join(serving)} in a worker process beside the property test and the model checks"
                _start_beside(state, serving, beside, say, what)
        in_workers = set(state.results)
        for s in steps:
            if s.kind != PROPERTY:  # the property test checks after each example
                raise_if_requested()
            if s.kind == CASE:
                assert s.index is not None  # a CASE step carries its case's index
                stage = f"case {case_id(cases[s.index])}"  # a stop names the case it cut short
                cr = state.evaluate(s.index)
                stage = "fixed cases"
                if s.index not in in_workers:
                    say(f"[{s.index + 1}/{len(cases)}] {cr.case}: {cr.verdict}")
            elif s.kind == PROPERTY:
                stage = "the property test"
                say(f"{spec.name}: property test (at most {property_examples} hypothesis examples)")
                state.run_property(property_examples, lambda cr: raise_if_requested())
            else:
                assert s.check_id is not None  # a CHECK step carries its check id
                stage = s.check_id
                if s.check_id in beside:
                    say(f"{spec.name}: {s.check_id} {CHECK_NAMES[s.check_id]} (its worker's result)")
                    r, why_not = beside.pop(s.check_id)()
                    if r is not None:
                        state.model[s.check_id] = r
                        continue
                    notes.append(
                        f"{s.check_id} ran in this process after the cases: its worker gave no result ({why_not})"
                    )
                    say(f"{spec.name}: {notes[-1]}")
                pair = s.check_id == "C7" and "E1" in checks and spec.operands == "int8"
                if pair and jobs > 1 and parallel_ok(state) is None:
                    # the two engines' forwards at once
                    _start_beside(state, ["E1"], beside, say, f"E1 {CHECK_NAMES['E1']} in a worker process beside C7")
                say(f"{spec.name}: {s.check_id} {CHECK_NAMES[s.check_id]}")
                state.run_check(s.check_id)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM via conformance.runtime.graceful_stop
        if running and stage == "fixed cases":
            stage = "case " + ", ".join(sorted(running))
        if state.property is None:
            state.prop_cases = []  # never half of the property test
        unreached = state.missing(property_examples, model_checks, NOT_REACHED)
        for cid in checks:
            state.model.setdefault(cid, not_applicable(cid, "not run: the run was interrupted"))
        stopped = partial_run(len(state.results), len(cases), interrupted=True, stage=stage, kind="suite")
    res = build_result(
        spec,
        state.case_results(),
        state.captures,
        list(state.model.values()),
        state.property,
        state.against,
        time.perf_counter() - state.t0,
        notes=notes + state.notes() + (contained.notes() if contained is not None else []),
        invocation=invocation,
        partial=stopped or complete_run(len(cases)),
        warm_up=state.warm,
        skipped=state.skipped + (unreached if stopped else []),
    )
    if stopped:
        raise SuiteInterrupted(res)
    return res


class SuiteInterrupted(KeyboardInterrupt):
    """:func:`run_conformance` was interrupted; ``result`` is the partial ConformanceResult of what
    finished (its notes say "partial run"), for the caller to write before it stops."""

    def __init__(self, result: ConformanceResult):
        super().__init__(result.notes[0] if result.notes else "interrupted")
        self.result = result
