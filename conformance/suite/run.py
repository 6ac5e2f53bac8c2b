"""The conformance suite as a library call: ``run_conformance``.

Used by both ``int8conf check`` and the pytest plugin (``pytest
--kernel=NAME``), which share ``conformance.suite.evaluate.evaluate_case`` (one
operand case through every per-case check) and :func:`build_result`
(aggregation into a :class:`ConformanceResult`, the content of
``reports/<kernel>/conformance.*``).

Overall verdict: ``fail`` when any check fails because of the kernel (every
failure except precondition violations C3 / C4 caused by the operands, see
``conformance.checks.result.PRECONDITION_CHECKS``); ``not run`` (inconclusive)
when nothing failed and the kernel produced output on zero cases (not runnable
here: wrong device, shape constraints excluding every case); ``pass`` when
nothing failed, the kernel ran on at least one case and at least one check
passed; ``n/a`` otherwise. Cases the kernel could not run on are counted in
``overall["cases_not_run"]`` with their reasons (C3 / C4 pass on the
reference accumulator alone, so they never make a run conclusive).
Precondition violations are listed separately: they say which cases leave
the range where integer accumulation is exact and order-free. A case the
suite built to violate a precondition (``meta["violates"]``) is a
*precondition case*: counted in ``overall["precondition_cases"]`` ({check:
cases}), not in ``overall["precondition_violations"]`` (checks the operands
violated otherwise, e.g. the user's captures).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Optional, Sequence

from conformance.cases import NO_CAPTURES, CaptureReplay, capture_cases, shape_sweep, synthetic_cases
from conformance.checks.result import CHECK_NAMES, CheckResult, aggregate, not_applicable
from conformance.kernels.runner import validate_device
from conformance.runtime.environment import environment as base_environment
from conformance.runtime.partial_run import complete_run, partial_run
from conformance.suite.evaluate import NOT_RUN, OWNERSHIP_CHECK, PER_CASE_CHECKS, CaseResult, check_error, evaluate_case
from reference.errors import Int8confError, first_line

#: Model-level checks: (check id, module, attribute); each callable takes the
#: KernelSpec and returns a CheckResult. Missing modules give ``n/a``.
MODEL_CHECKS: tuple[tuple[str, str, str], ...] = (
    ("C7", "conformance.checks.token_flip", "check_token_flip"),
    ("E1", "conformance.checks.engine_hash", "check_engine_hash"),
)
REPORT_ORDER = ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "C10", "E1")
#: Version of the suite's case construction and check semantics. Two reports
#: compare (``int8conf gate --baseline``) only when it is equal; bump it when
#: a case generator or a check's meaning changes.
SUITE_VERSION = "3"  # 3: planted cases, family regimes, C10


def run_batch_invariance(spec, cases: Sequence, device: Optional[str] = None) -> CheckResult:
    """C9 batch_invariance over the fixed cases (``conformance.checks.batch_invariance``):
    one kernel-level result; a check that raises gives a ``harness`` failure."""
    from conformance.checks.batch_invariance import check_batch_invariance

    try:
        return check_batch_invariance(spec, cases, device=device)
    except Exception as e:  # noqa: BLE001 -- report, never crash the suite
        return check_error("C9", e)


def run_model_check(check_id: str, spec, module: Optional[str] = None, attr: Optional[str] = None) -> CheckResult:
    """Run one model-level check (C7 token_flip, E1 engine_hash) if importable.

    Args:
        check_id: ``C7`` or ``E1`` (or any id of :data:`MODEL_CHECKS`).
        spec: KernelSpec.
        module, attr: override where the callable lives.

    Returns:
        The check's CheckResult; ``n/a`` with the reason when the module or
        attribute is missing or the check raises an Int8confError (e.g. no
        default model here); ``fail`` (``failure_kind == "harness"``) when it
        raises anything else.
    """
    if module is None or attr is None:
        module, attr = {cid: (m, a) for cid, m, a in MODEL_CHECKS}[check_id]
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        return not_applicable(check_id, f"{module}.{attr} is not available: {type(e).__name__}: {first_line(e, None)}")
    try:
        res = fn(spec)
    except Int8confError as e:
        return not_applicable(check_id, f"{module}.{attr} could not run: {e}")
    except Exception as e:  # noqa: BLE001
        return check_error(check_id, e)
    if not isinstance(res, CheckResult):
        return check_error(check_id, TypeError(f"{attr} returned {type(res).__name__}"))
    return res


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

    Attributes:
        kernel: the declared manifest (``KernelSpec.manifest()``).
        environment: :func:`environment`.
        checks: one aggregated CheckResult per check, report order.
        cases: per-case (per-layer) results.
        captures: ``{"available", "note", "source"}``.
        property_tests: summary of the hypothesis property test, or None.
        pairwise: ``conformance.suite.pairwise.summarize_pairs`` result, or None.
        overall: ``{"verdict", "summary", "failed_checks", "precondition_violations",
            "precondition_cases"}`` (:func:`overall_verdict`).
        elapsed_s: wall time of the suite.
        notes: lines the report shows under the verdict (e.g. a partial run).
        partial: ``conformance.runtime.partial_run.partial_run`` record: whether the
            verdict covers the whole run (the report's top-level ``partial``
            object; its ``note`` is also in ``notes``).
        comparability: :func:`comparability` of the fixed cases (what makes
            two reports comparable).
        coverage: ``conformance.suite.coverage.coverage_table`` rows: the trigger
            conditions the cases the kernel ran on actually reached.
        invocation: ``conformance.suite.coverage.invocation``: the command line and
            options that produced the report (``{}`` when unknown).
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

    @property
    def verdict(self) -> str:
        """``pass`` | ``fail`` | ``not run`` | ``n/a`` (see module docstring)."""
        return self.overall.get("verdict", "n/a")

    @property
    def conformant(self) -> bool:
        """True when the overall verdict is ``pass``."""
        return self.verdict == "pass"

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

    Args:
        cases: per-case dicts (``CaseResult.to_dict()`` or a report's
            ``cases``): keys ``case, source, scale_mode, out_dtype,
            operand_digests``. Property-test examples are left out (they are
            not a fixed case set).
        environment_: :func:`environment` (versions and device are recorded,
            not required equal: a swap across devices is a legal comparison).
        captures: the report's ``captures`` dict (its ``source`` is recorded).

    Returns:
        ``{"suite_version", "n_cases", "cases_digest", "n_capture_cases",
        "captures_digest", "captures_source", "case_ids", "environment"}``:
        the digests are SHA-256 over the sorted ``[case id, scale mode,
        out dtype, operand digests]`` rows (all fixed cases, resp. only the
        layer captures), so equal digests mean the same operand bits.
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
    """``reason (n cases); ...`` for the most frequent ``limit`` reasons."""
    top = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    text = "; ".join(f"{why} ({n} cases)" for why, n in top[:limit])
    if len(top) > limit:
        text += f"; and {len(top) - limit} other reasons"
    return text


def overall_verdict(
    checks: Sequence[CheckResult],
    property_tests: Optional[dict] = None,
    case_results: Optional[Sequence[CaseResult]] = None,
) -> dict:
    """Overall verdict from aggregated checks (module docstring); a property
    test that failed without a failing example (e.g. hypothesis itself
    errored) also fails it.

    Args:
        checks: aggregated CheckResults.
        property_tests: property-test summary or None.
        case_results: the evaluated cases; when given, a kernel that produced
            output on none of them gets ``not run`` (unless something failed),
            and skipped cases are counted (``cases_run``, ``cases_not_run``,
            ``not_run_reasons``) and named in the summary.
    """
    failed = [c for c in checks if c.is_kernel_failure]
    pre = [c for c in checks if c.is_precondition_violation and c.evidence.get("n_precondition_violations", 1)]
    pre_cases = {
        c.check_id: c.evidence["n_precondition_cases"]
        for c in checks
        if c.is_precondition_violation and c.evidence.get("n_precondition_cases")
    }
    prop_failed = bool(property_tests and property_tests.get("failed"))
    if failed or prop_failed:
        verdict = "fail"
        summary = "NOT conformant: " + "; ".join(
            [f"{c.check_id} {c.name} failed" for c in failed]
            + ([f"property test failed: {property_tests.get('failure')}"] if prop_failed and not failed else [])
        )
    elif case_results and not any(cr.produced_output for cr in case_results):
        verdict = NOT_RUN
        reasons = not_run_counts(case_results)
        summary = f"inconclusive, nothing verified: the kernel produced output on 0 of {len(case_results)} cases" + (
            ": " + _reasons_text(reasons) if reasons else ""
        )
    elif any(c.verdict == "pass" for c in checks):
        verdict = "pass"
        summary = "conformant: no check failed because of the kernel"
    else:
        verdict, summary = "n/a", "no check could run"
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
    out = {
        "verdict": verdict,
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
        if n_skip and verdict != NOT_RUN:
            out["summary"] += (
                f"; {n_skip} of {len(case_results)} cases not run (not covered "
                f"by this verdict): " + _reasons_text(reasons)
            )
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
) -> ConformanceResult:
    """Aggregate per-case and model-level results into a ConformanceResult.

    Args:
        spec: KernelSpec under test.
        case_results: every evaluated case (any source, property examples included).
        captures: what :func:`conformance.cases.capture_cases` found.
        model_results: kernel-level results: C9 batch_invariance, C7, E1
            (absent ones are reported n/a "not run").
        property_tests: property-test summary (``conformance.suite.property``).
        against: the other KernelSpec when pairwise results are present.
        elapsed_s: suite wall time.
        notes: extra report lines.
        invocation: command line and options (``conformance.suite.coverage.invocation``).
        partial: ``conformance.runtime.partial_run.partial_run`` record of the run;
            None = complete (every case given ran). A partial record's
            ``note`` goes first in the notes (the report's one source of
            "partial run").
    """
    per: dict[str, list] = {cid: [] for cid, _ in PER_CASE_CHECKS + (OWNERSHIP_CHECK,)}
    for cr in case_results:
        for cid, r in cr.checks.items():
            per.setdefault(cid, []).append((cr.case, r))
    agg = {cid: aggregate(cid, lst) for cid, lst in per.items()}
    for r in model_results:
        agg[r.check_id] = r
    for cid, _, _ in MODEL_CHECKS:
        agg.setdefault(cid, not_applicable(cid, "not run (model-level checks disabled)"))
    agg.setdefault("C9", not_applicable("C9", "not run"))
    checks = [agg[c] for c in REPORT_ORDER if c in agg] + [r for c, r in agg.items() if c not in REPORT_ORDER]
    pairwise = None
    if against is not None:
        from conformance.suite.pairwise import summarize_pairs

        pairs = [(cr.case, cr.pair) for cr in case_results if cr.pair is not None]
        pairwise = summarize_pairs(spec.name, against.name, pairs, against.manifest())
    env = environment([cr.run_manifest for cr in case_results])
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
        overall=overall_verdict(checks, property_tests, list(case_results)),
        elapsed_s=elapsed_s,
        notes=notes,
        coverage=_coverage(case_results),
        invocation=dict(invocation or {}),
        partial=partial,
        comparability=comparability([cr.to_dict() for cr in case_results], env, cap),
    )


def _coverage(case_results) -> list:
    """``conformance.suite.coverage.coverage_table`` of the cases (never raises: a
    failure becomes one row saying so)."""
    try:
        from conformance.suite.coverage import coverage_table

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


def default_cases(
    include_captures: bool = True,
    include_sweep: bool = True,
    seeds: Sequence[int] = (0, 1),
    max_capture_layers: Optional[int] = None,
    capture_set=None,
) -> tuple[list, CaptureReplay]:
    """The suite's fixed cases: synthetic (per seed), the shape sweep and the
    trigger-condition families (``conformance.cases.families``; both skipped
    with ``include_sweep=False``), and the layer captures in both scale modes
    (when available).

    Returns:
        ``(cases, captures)``; ``captures.note`` says "no captures available:
        synthetic only" when there are none (or captures were not requested).
    """
    cases = list(synthetic_cases(seeds))
    if include_sweep:
        from conformance.cases.families import family_cases

        cases += shape_sweep() + family_cases()
    if include_captures:
        cap = capture_cases(capture_set=capture_set, max_layers=max_capture_layers)
    else:
        cap = CaptureReplay(note=f"{NO_CAPTURES} (capture replay not requested)")
    return mark_ownership_probes(cases + list(cap.cases)), cap


def mark_ownership_probes(cases: list) -> list:
    """Set ``meta["ownership_probe"]`` (check C10, ``conformance.kernels.runner``):
    True on the first case of each power-of-two size class of (M, N, K), False on
    the rest. A buffer reused across calls shows on any call of a path that
    reuses it; the probe's second kernel call is paid once per class (cases above
    the runner's ``OWNERSHIP_MAX_WORK`` are never probed). Returns ``cases``."""
    seen: set = set()
    for c in cases:
        key = ((c.m - 1).bit_length(), (c.n - 1).bit_length(), (c.k - 1).bit_length())
        c.meta["ownership_probe"] = key not in seen
        seen.add(key)
    return cases


#: Hint of reference.model.capture for a moved parent model, and its CLI form.
_API_MODEL_HINT = "pass model_dir to load_capture_set"
CLI_MODEL_HINT = "pass --model DIR (the parent model the captures were taken from)"


def load_captures(capture_dir, model_dir=None):
    """``reference.model.capture.load_capture_set(capture_dir, model_dir=model_dir)``.

    Args:
        capture_dir: a capture directory (``manifest.json`` inside).
        model_dir: the parent model directory, when it moved since capture.

    Raises:
        CaptureError: missing / inconsistent capture (one line).
    """
    from reference.model.capture import load_capture_set

    return load_capture_set(capture_dir, model_dir=model_dir)


def cli_capture_message(e: BaseException) -> str:
    """An error line with reference.model.capture's Python-API hint replaced by the
    command-line option (``--model DIR``)."""
    line = first_line(e, None) or type(e).__name__
    return line.replace(_API_MODEL_HINT, CLI_MODEL_HINT)


def run_conformance(
    kernel,
    against=None,
    *,
    cases: Optional[Sequence] = None,
    include_captures: bool = True,
    include_sweep: bool = True,
    seeds: Sequence[int] = (0, 1),
    property_examples: int = 25,
    model_checks: bool = True,
    max_capture_layers: Optional[int] = None,
    capture_dir=None,
    model_dir=None,
    device: Optional[str] = None,
    progress: Optional[Callable[[str], None]] = None,
    invocation: Optional[dict] = None,
) -> ConformanceResult:
    """Run the whole conformance suite for one kernel.

    Args:
        kernel: KernelSpec, or a name for ``conformance.kernels.registry.get_kernel``.
        against: optional other kernel (spec or name) for pairwise
            interchangeability on the fixed cases.
        cases: explicit GemmOperands list (replaces synthetic + sweep +
            captures; the report then says no captures were replayed unless
            some cases have ``meta["source"] == "capture"``).
        include_captures, include_sweep, seeds, max_capture_layers: see
            :func:`default_cases`.
        capture_dir: replay this capture directory instead of the default
            model's shipped captures.
        model_dir: the parent model of ``capture_dir`` when it is no longer
            where the capture manifest recorded it.
        property_examples: hypothesis examples of the property test (0 = skip).
        model_checks: run C7 token_flip and E1 engine_hash when importable.
        device: device for kernel runs (None = runner default); checked
            by :func:`validate_device`.
        progress: called with a short line per step (e.g. ``print``).
        invocation: the command line and options to record in the report
            (``conformance.suite.coverage.invocation``); None = this call's own
            arguments as ``run_conformance(...)``.

    Returns:
        ConformanceResult (never raises for a kernel's failure).

    Raises:
        SuiteInterrupted: Ctrl-C (or SIGTERM, see ``conformance.runtime.graceful_stop``)
            during the run; it carries the partial result.
        KernelLoadError: a kernel name that does not resolve (one line).
        CaptureError: an inconsistent capture set (one line).
        Int8confError: an invalid or unavailable ``device`` (one line).
    """
    from conformance.kernels.registry import get_kernel

    validate_device(device)
    t0 = time.perf_counter()
    spec = get_kernel(kernel) if isinstance(kernel, str) else kernel
    other = get_kernel(against) if isinstance(against, str) else against
    say = progress or (lambda s: None)
    if cases is None:
        cs = None
        if capture_dir is not None and include_captures:
            cs = load_captures(capture_dir, model_dir)
        cases, cap = default_cases(include_captures, include_sweep, seeds, max_capture_layers, cs)
    else:
        cases = list(cases)
        n_cap = sum(1 for c in cases if (c.meta or {}).get("source") == "capture")
        cap = CaptureReplay(
            cases=[],
            available=bool(n_cap),
            note=(f"{n_cap} captured cases given" if n_cap else f"{NO_CAPTURES} (explicit case list)"),
        )
    say(f"{spec.name}: {len(cases)} cases; {cap.note}")
    results: list[CaseResult] = []
    model: list[CheckResult] = []
    prop, n_fixed, stopped, stage = None, 0, None, "fixed cases"
    from conformance.runtime.graceful_stop import raise_if_requested

    steps = [("C9", partial(run_batch_invariance, spec, cases, device))]  # kernel-level checks
    if model_checks:
        steps += [(cid, partial(run_model_check, cid, spec, mod, attr)) for cid, mod, attr in MODEL_CHECKS]
    try:
        for i, ops in enumerate(cases):
            raise_if_requested()
            cr = evaluate_case(spec, ops, against=other, device=device)
            results.append(cr)
            n_fixed = len(results)
            say(f"[{i + 1}/{len(cases)}] {cr.case}: {cr.verdict}")
        if property_examples > 0:
            from conformance.suite.property import run_property_test

            stage = "the property test"
            say(f"{spec.name}: property test ({property_examples} hypothesis examples)")
            prop_cases: list[CaseResult] = []

            def keep(cr: CaseResult) -> None:
                prop_cases.append(cr)
                raise_if_requested()

            prop = run_property_test(spec, keep, max_examples=property_examples, device=device)
            results += prop_cases  # only once the property test finished: never half of it
        for cid, run in steps:
            raise_if_requested()
            stage = cid
            say(f"{spec.name}: {cid} {CHECK_NAMES[cid]}")
            model.append(run())
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM via conformance.runtime.graceful_stop
        done = {r.check_id for r in model}
        model += [not_applicable(cid, "not run: the run was interrupted") for cid, _ in steps if cid not in done]
        stopped = partial_run(n_fixed, len(cases), interrupted=True, stage=stage, kind="suite")
    if invocation is None:
        from conformance.suite.coverage import invocation as _inv

        invocation = _inv(
            {
                "kernel": spec.name,
                "against": getattr(other, "name", None),
                "include_captures": include_captures,
                "include_sweep": include_sweep,
                "property_examples": property_examples,
                "model_checks": model_checks,
                "device": device,
                "explicit_cases": len(cases),
            },
            prog="conformance.suite.run.run_conformance",
        )
    res = build_result(
        spec,
        results,
        cap,
        model,
        prop,
        other,
        time.perf_counter() - t0,
        invocation=invocation,
        partial=stopped or complete_run(len(cases)),
    )
    if stopped:
        raise SuiteInterrupted(res)
    return res


class SuiteInterrupted(KeyboardInterrupt):
    """:func:`run_conformance` was interrupted; ``result`` is the partial
    ConformanceResult of what finished (its notes say "partial run"), for the
    caller to write before it stops. A KeyboardInterrupt, so callers that do
    not care stop as on Ctrl-C."""

    def __init__(self, result: ConformanceResult):
        super().__init__(result.notes[0] if result.notes else "interrupted")
        self.result = result
