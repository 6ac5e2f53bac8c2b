"""The gate as a library call, :func:`run_gate`: resolve both kernels and the policy, build the
suite's cases, check a ``baseline``'s comparability before any kernel runs (:class:`NotComparable`
with every reason), run each kernel isolated (``conformance.runtime.pool``; a crash or hang saves a
reproducer), then decide every case, the model-level checks and the serving checks C13-C15 (``suite.plan.SERVING_CHECKS``,
run by the suite's own kernel-level check runner in each kernel's child; ``conformance.gate.compare``); a
blocked candidate's failing checks are then triaged (:meth:`GateSession.triage`: where each switches on,
``conformance.triage``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from conformance.cases import by_case_id, case_id
from conformance.checks.output_bits import declared_output
from conformance.checks.result import CHECK_NAMES, Verdict
from conformance.gate import compare as C
from conformance.gate.policy import Policy, default_policy
from conformance.gate.status import CRASH, EXIT_BLOCKED, EXIT_PASS, TIMEOUT, status_counts
from conformance.kernels.runner import validate_device
from conformance.kernels.spec import Declaration, declared_epilogue, enter_conformance_run
from conformance.runtime.graceful_stop import raise_if_requested
from conformance.runtime.partial_run import partial_run
from conformance.runtime.pool import CRASHED, HARNESS_ERROR, OK, TIMED_OUT, IsolatedKernel, KernelRef
from conformance.runtime.repro import reproducer_dirname, save_reproducer
from conformance.suite.plan import (
    DEFAULT_EXAMPLES,
    PLANS,
    SERVING_CHECKS,
    afforded_cases,
    large_cases_left_out,
    plan_checks,
)
from conformance.suite.report import read_report
from conformance.suite.run import (
    MODEL_CHECKS,
    SUITE_VERSION,
    comparability,
    environment,
    reduced_headline,
    reduced_suite,
)
from conformance.suite.setup import CaseSource, RunCases
from conformance.suite.workers import CASE_TIMEOUT_S, SUITE_REQUESTS
from conformance.triage.run import first_failing, triage_cases
from faults import injection_of
from reference.errors import Int8confError
from reference.operands import tensor_digest

SCHEMA = "int8conf.gate"
SCHEMA_VERSION = 1


class NotComparable(Int8confError):
    """A stored baseline cannot be compared with this run (reasons in ``reasons``)."""

    def __init__(self, path, reasons: Sequence[str]):
        self.path, self.reasons = str(path), list(reasons)
        super().__init__(f"baseline {path} is not comparable with this run: " + "; ".join(reasons))


@dataclass
class GateOptions:
    """How the gate runs (defaults = the full suite). ``include_captures`` .. ``model_dir``: the case set
    (``conformance.suite.run.default_cases``); ``model_checks``: run C7 / E1 (``--no-model`` turns them off);
    ``device``: None = runner default; ``timeout_s`` / ``model_timeout_s``: seconds one case / model-level check
    may take (per kernel) before its child is killed; ``method``: start method (None = ``start_method()``);
    ``triage``: triage a blocked candidate's failing checks (:meth:`GateSession.triage`; ``--no-triage`` turns it
    off); ``serving_checks``: run C13-C15 (``--no-serving`` turns them off); ``serving_timeout_s``: seconds one of
    them may take per kernel (as ``check``'s default step limit: C14 compiles with inductor)."""

    include_captures: bool = True
    include_tile_edges: bool = True
    seeds: tuple = (0, 1)
    max_capture_layers: Optional[int] = None
    capture_dir: Optional[str] = None
    model_dir: Optional[str] = None
    model_checks: bool = True
    device: Optional[str] = None
    timeout_s: float = 60.0
    model_timeout_s: float = 1800.0
    method: Optional[str] = None
    triage: bool = True
    serving_checks: bool = True
    serving_timeout_s: float = CASE_TIMEOUT_S

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class GateResult:
    """Everything the gate report holds (``conformance.gate.report``): ``candidate`` / ``incumbent``
    (``{"ref", "manifest"}``, or ``{"baseline", "manifest", ...}``; a triaged candidate's also ``triage``,
    :meth:`GateSession.triage`), ``policy``, Decisions ``cases`` / ``model`` (C7 / E1) / ``serving`` (C13-C15),
    ``overall`` (verdict, exit_code, summary, counts, serving_counts, blocking, unused_expectations),
    ``comparability``, ``environment``, ``options``, ``elapsed_s``, ``notes``, ``partial`` (kind ``gate``)."""

    candidate: dict
    incumbent: dict
    policy: dict
    cases: list
    model: list
    overall: dict
    comparability: dict
    environment: dict
    options: dict
    elapsed_s: float = 0.0
    notes: list = field(default_factory=list)
    partial: dict = field(default_factory=dict)
    serving: list = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return self.overall["exit_code"]

    def decision(self, item: str) -> C.Decision:
        """The Decision of one case id, serving check or model check (KeyError if absent)."""
        found = next((d for d in [*self.cases, *self.serving, *self.model] if d.item == item), None)
        if found is None:
            raise KeyError(item)
        return found


def case_rows(cases) -> list[dict]:
    """The comparability rows of GemmOperands (as ``CaseResult.to_dict`` has them)."""
    return [
        {
            "case": case_id(o),
            "source": (o.meta or {}).get("source", "synthetic"),
            "scale_mode": o.scale_mode,
            "out_dtype": str(o.out_dtype),
            "operand_digests": o.digests(),
        }
        for o in cases
    ]


def layer_of(ops) -> Optional[str]:
    """Layer name of a capture case (its ``name``), else None."""
    return ops.name if (ops.meta or {}).get("source") == "capture" else None


def _row_difference(theirs: dict, ours: dict) -> Optional[str]:
    """How a baseline case row differs from this run's (None if it does not)."""
    td, od = theirs.get("operand_digests") or {}, ours.get("operand_digests") or {}
    for k in list(od) + sorted(set(td) - set(od)):
        if td.get(k) != od.get(k):
            return f"operand digest '{k}' is {str(td.get(k))[:12]} in the baseline, {str(od.get(k))[:12]} in this run"
    for k in ("scale_mode", "out_dtype", "source"):
        if theirs.get(k) != ours.get(k):
            return f"{k} is {theirs.get(k)!r} in the baseline, {ours.get(k)!r} in this run"
    return None


def baseline_problems(doc: dict, mine: dict, path, rows: Sequence[dict] = ()) -> list[str]:
    """Why a stored report cannot be compared with this run ([] if it can):
    every baseline case must match this run's case of the same id
    (operand digests, scale mode, out dtype, source). ``doc``: the report (``read_report``); ``mine``:
    ``comparability`` of this run's cases; ``rows``: this run's :func:`case_rows`; ``path``: for messages."""
    rerun = "re-run `int8conf check` for the incumbent"
    probs = []
    comp = doc.get("comparability")
    if not isinstance(comp, dict):
        probs.append(f"it has no comparability record (written before int8conf recorded case digests); {rerun}")
        comp = comparability(doc.get("cases") or [], doc.get("environment"), doc.get("captures"))
        comp["suite_version"] = None
    if comp.get("suite_version") not in (None, SUITE_VERSION):
        changed = "cases or checks changed since it was written"
        probs.append(f"suite version {comp.get('suite_version')} != {SUITE_VERSION} ({changed})")
    rec = doc.get("partial")
    if isinstance(rec, dict) and rec.get("partial"):
        probs.append(f"it is a partial run ({rec.get('note') or rec.get('reason')})")
    else:  # a report written before the ``partial`` record: its notes say so
        probs += [f"it is a partial run ({note})" for note in doc.get("notes") or [] if "partial run" in str(note)]
    if comp.get("captures_digest") != mine.get("captures_digest"):
        b, m = ((str(c.get("captures_digest"))[:12], c.get("captures_source")) for c in (comp, mine))
        probs.append(
            f"different captures: baseline {comp.get('n_capture_cases', 0)} capture cases (digest {b[0]}, from {b[1]})"
            f" vs this run {mine.get('n_capture_cases')} (digest {m[0]}, from {m[1]})"
        )
    theirs = {c.get("case"): c for c in doc.get("cases") or [] if c.get("source") != "property"}
    ours = {r["case"]: r for r in rows}
    only_b, only_m = sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))
    if only_b or only_m:
        detail = [f"{len(only_b)} cases only in the baseline (e.g. {only_b[0]})"] if only_b else []
        detail += [f"{len(only_m)} only in this run (e.g. {only_m[0]})"] if only_m else []
        probs.append(
            "different case set: " + ", ".join(detail) + "; run the gate with the options the baseline was made with "
            "(--no-captures / --no-tile-edges / --captures DIR)"
        )
    common = [cid for cid in ours if cid in theirs]
    diffs = [(cid, d) for cid in common for d in [_row_difference(theirs[cid], ours[cid])] if d]
    if diffs:
        cid, d = diffs[0]
        probs.append(f"case {cid}: {d} ({len(diffs)} of {len(common)} cases differ)")
    elif not (only_b or only_m) and comp.get("cases_digest") != mine.get("cases_digest"):
        digests = f"{str(comp.get('cases_digest'))[:12]} vs {str(mine.get('cases_digest'))[:12]}"
        probs.append(f"its comparability record does not match its own cases (cases digest {digests}); {rerun}")
    cases = doc.get("cases") or []
    if cases and any(c.get("source") != "property" and "output_digest" not in c for c in cases):
        probs.append(f"its cases carry no output digests (an older report); {rerun}")
    return probs


def reduced_baseline_problem(doc: dict, policy: Policy, own: Sequence[str] = ()) -> list[str]:
    """``[why]`` when the baseline report ran a reduced suite (``overall.reduced_suite``) beyond what this gate
    run leaves out itself (``own``: the large cases not afforded here, :func:`plan.large_cases_left_out`) and
    ``policy`` does not set ``allow_reduced_baseline``, else ``[]``."""
    skipped = [s for s in (doc.get("overall") or {}).get("reduced_suite") or [] if s not in own]
    if not skipped or policy.allow_reduced_baseline:
        return []
    return [
        f"it ran a reduced suite ({', '.join(map(str, skipped))} skipped): its PASS covers less than the default "
        f"suite; re-run `int8conf check` without those options, or set allow_reduced_baseline: true in the policy"
    ]


def _ref_dict(kernel) -> Optional[dict]:
    return kernel.to_dict() if isinstance(kernel, KernelRef) else None


def _side(outcome) -> C.Side:
    if outcome.kind == OK:
        return C.side_from_case_result(outcome.value)
    status = {CRASHED: CRASH, TIMED_OUT: TIMEOUT, HARNESS_ERROR: C.HARNESS}[outcome.kind]
    ev = {"exitcode": outcome.exitcode, "signal": outcome.signal, "log_tail": outcome.log_tail}
    return C.Side(status, error=outcome.error, evidence={**ev, "elapsed_s": round(outcome.elapsed_s, 3)})


def _baseline_delta(cand: C.Side, inc: C.Side, ops, kernel: dict, device: Optional[str]) -> Optional[dict]:
    """Output class vs a stored baseline (module docstring, step 5); ``kernel``: the baseline report's kernel
    manifest, whose declaration for ``device`` and the case's out dtype reproduces the baseline's output."""
    if cand.output is None or inc.status != C.RAN or inc.output_digest is None:
        return None
    n = int(cand.output.numel())
    if cand.output_digest == inc.output_digest:
        return {
            "class": C.IDENTICAL,
            "max_ulp": 0,
            "n_differ": 0,
            "n_elements": n,
            "via": "output digest equal to the baseline's",
        }
    try:
        ref = declared_output(ops, declared_epilogue(Declaration.from_manifest(kernel or {}), device, ops.out_dtype))
    except Exception as e:  # noqa: BLE001 -- a malformed contract in the stored report
        return {"class": C.UNKNOWN, "why": f"the baseline's declared contract is unusable ({e})"}
    if tensor_digest(ref) != inc.output_digest:
        return {
            "class": C.UNKNOWN,
            "why": "output differs from the baseline's, and the baseline's output on this "
            "case is not the reference of its declared contract, so the distance is "
            "unknown; gate with --incumbent to measure it",
        }
    d = C.output_delta(cand.output, ref)
    d["via"] = "baseline output reproduced by the reference of its declared contract"
    return d


#: the kernel-level checks a plan kind adds (``suite.plan.PLANS``: C16 block, C17 zero-point), decided like C13-C15
KERNEL_CHECKS = tuple(plan_checks())


def kernel_checks(spec) -> tuple:
    """The ids of :data:`KERNEL_CHECKS` that ``spec``'s plan runs: the zero-point plan has no fixed case, so C17 is
    its whole verdict."""
    return tuple(cid for cid, _, _ in PLANS[spec.kind].checks)


def _overall(decisions: list, model: list, policy: Policy, skipped: Sequence[str] = (), serving: list = ()) -> dict:
    """The gate's ``overall`` record; ``skipped``: what of the default suite the gate left out
    (``suite.plan.reduced_suite``: ``reduced_suite``, and the ``headline`` / ``summary`` say "on a reduced suite",
    as ``int8conf check``'s do); ``serving``: the C13-C15 Decisions (``serving_counts``; a blocking one blocks)."""
    serving = list(serving)
    used = sorted({i for d in decisions + model for i in d.expectations_used})
    unused = [e.to_dict() for e in policy.expectations if e.index not in used]
    blocking = [d.item for d in decisions + serving + model if d.blocking]
    counts = status_counts(d.status for d in decisions)
    if unused and policy.fail_on_unused_expectations:
        blocking.append("unused expectations")
    parts = ", ".join(f"{counts[s]} {s}" for s in counts if counts[s])
    verdict = "blocked" if blocking else "pass"
    headline = reduced_headline(verdict, skipped)
    summary = f"{headline}{'; ' if skipped else ' '}under policy '{policy.name}': {len(decisions)} cases ({parts})"
    for label, group in (
        ("serving", [d for d in serving if d.item in SERVING_CHECKS]),
        ("plan checks", [d for d in serving if d.item not in SERVING_CHECKS]),  # C16 block, C17 zero-point
    ):
        if group:
            summary += f"; {label}: " + ", ".join(f"{d.item} {d.status}" for d in group)
    if model:
        summary += "; model-level: " + ", ".join(f"{d.item} {d.status}" for d in model)
    if unused:
        summary += f"; {len(unused)} unused expectation{'s' if len(unused) > 1 else ''}"
    return {
        "verdict": verdict,
        "exit_code": EXIT_BLOCKED if blocking else EXIT_PASS,
        "headline": headline,
        "reduced_suite": list(skipped),
        "summary": summary,
        "counts": counts,
        "model_counts": status_counts(d.status for d in model),
        "serving_counts": status_counts(d.status for d in serving),
        "blocking": blocking,
        "unused_expectations": unused,
        "expectations_used": used,
    }


def check_same_kind(cand, inc) -> None:
    """Int8confError (exit 2, not comparable) unless the incumbent (None: a baseline) is of the candidate's kind and
    operands (``KernelSpec.kind``, ``operands``): each kind has its own case list, so an incumbent of another kind
    answers none of the candidate's cases and nothing would be compared."""
    if inc is None or (inc.kind, inc.operands) == (cand.kind, cand.operands):
        return
    raise Int8confError(
        f"not comparable: candidate {cand.name!r} is a {cand.kind} kernel on {cand.operands} operands, incumbent "
        f"{inc.name!r} a {inc.kind} kernel on {inc.operands} operands: the gate compares kernels of one kind"
    )


class GateSession:
    """A gate in progress: kernels resolved, cases built, baseline checked;
    cases are decided one at a time (:meth:`run_case`), so the pytest plugin
    can spread them over xdist workers and :func:`run_gate` can loop. Arguments and errors (raised at
    construction, before any kernel runs) as :func:`run_gate`."""

    def __init__(
        self,
        candidate,
        incumbent=None,
        baseline=None,
        policy: Optional[Policy] = None,
        options: Optional[GateOptions] = None,
        out_dir: Union[str, Path] = "reports/gate",
        cases: Optional[Sequence] = None,
        progress: Optional[Callable[[str], None]] = None,
    ):
        self.t0 = time.perf_counter()
        enter_conformance_run()  # the pool's children inherit it
        self.opts = options or GateOptions()
        self.policy = policy or default_policy()
        self.say = progress or (lambda s: None)
        if (incumbent is None) == (baseline is None):
            raise Int8confError("give exactly one of --incumbent KERNEL or --baseline REPORT")
        validate_device(self.opts.device)
        self.candidate, self.incumbent, self.baseline = candidate, incumbent, baseline
        self.cand_spec = candidate.resolve("--candidate") if isinstance(candidate, KernelRef) else candidate
        self.inc_spec = incumbent.resolve("--incumbent") if isinstance(incumbent, KernelRef) else incumbent
        check_same_kind(self.cand_spec, self.inc_spec)
        opts = self.opts
        explicit = cases is not None
        large: list = []  # the large cases left out here, as a reduced-suite phrase
        if cases is None:  # the candidate's cases, as `int8conf check` builds them (suite.setup)
            source = CaseSource(
                opts.include_captures,
                opts.include_tile_edges,
                opts.capture_dir,
                opts.model_dir,
                tuple(opts.seeds),
                opts.max_capture_layers,
            )
            cases, cap = RunCases(source, opts.device).for_kernel(self.cand_spec, injection_of(self.cand_spec))
            cases, left_out = afforded_cases(self.cand_spec, opts.device, cases)  # as `check` runs them
            if left_out:
                self.say(f"{len(left_out)} large cases not afforded on the CPU left out, as `int8conf check` does")
                large = [large_cases_left_out(len(left_out))]
            cap_d = {"available": cap.available, "note": cap.note, "source": cap.source}
        else:
            cases = list(cases)
            cap_d = {"available": False, "note": "explicit case list", "source": ""}
        self.skipped = (
            reduced_suite(
                opts.include_captures,
                opts.include_tile_edges,
                DEFAULT_EXAMPLES,  # the gate has no property test: it leaves none of it out
                opts.model_checks,
                self.cand_spec.operands,
                opts.max_capture_layers,
                explicit_cases=explicit,
                serving_checks=opts.serving_checks,
                kind=self.cand_spec.kind,
            )
            + large
        )
        self.cases, self.rows = cases, case_rows(cases)
        self.comparability = comparability(self.rows, None, cap_d)
        self.doc = None
        if baseline is not None:
            self.doc = read_report(baseline)
            probs = baseline_problems(self.doc, self.comparability, baseline, self.rows)
            probs += reduced_baseline_problem(self.doc, self.policy, large)
            if probs:
                raise NotComparable(baseline, probs)
        self.base_cases = {c["case"]: c for c in (self.doc or {}).get("cases") or []}
        self.out = Path(out_dir)
        self.log_dir = self.out / "logs"  # per xdist worker: logs/<worker id>
        self.runners: dict = {}
        self.repros: list = []

    def _runner(self, role: str) -> IsolatedKernel:
        if role not in self.runners:
            k = self.candidate if role == "candidate" else self.incumbent
            self.runners[role] = IsolatedKernel(
                k,
                self.cases,
                self.opts.timeout_s,
                self.log_dir,
                self.opts.device,
                self.opts.method,
                handlers=SUITE_REQUESTS,
            )
        return self.runners[role]

    @property
    def roles(self) -> tuple:
        """``("candidate", "incumbent")``, or only the candidate with a baseline."""
        return ("candidate",) if self.doc is not None else ("candidate", "incumbent")

    def run_case(self, i: int) -> C.Decision:
        """Run case ``i`` on the kernel(s), isolated, and decide it under the policy; the Decision's
        ``manifest`` holds the candidate's run manifest (or None)."""
        ops, row = self.cases[i], self.rows[i]
        cid = row["case"]
        sides, manifest = {}, None
        for role in self.roles:
            r = self._runner(role)
            oc = r.run_case(i)
            sides[role] = _side(oc)
            if oc.kind == OK and role == "candidate":
                manifest = oc.value.run_manifest
            elif oc.kind in (CRASHED, TIMED_OUT):
                ref = _ref_dict(r.kernel)
                info = {"status": sides[role].status, "role": role, "error": oc.error, "signal": oc.signal}
                info.update(exitcode=oc.exitcode, log_tail=oc.log_tail, timeout_s=self.opts.timeout_s)
                d = save_reproducer(self.out / "repro" / f"{role}-{reproducer_dirname(cid)}", ops, ref, cid, info)
                sides[role].evidence["repro"] = str(d)
                self.repros.append(str(d))
        cand = sides["candidate"]
        if self.doc is not None:
            b = self.base_cases.get(cid)
            inc = C.side_from_report_case(b) if b is not None else None
            used = (self.doc.get("environment") or {}).get("devices_used") or ["cpu"]
            delta = _baseline_delta(cand, inc, ops, self.doc["kernel"], used[0]) if inc else None
        else:
            inc = sides["incumbent"]
            delta = (
                C.output_delta(cand.output, inc.output) if cand.output is not None and inc.output is not None else None
            )
        dec = C.decide_case(cid, cand, inc, delta, self.policy, ops.scale_mode, layer_of(ops), row["source"])
        if "incumbent" in sides and sides["incumbent"].status in (CRASH, TIMEOUT):
            dec.evidence["incumbent"] = sides["incumbent"].evidence
        dec.manifest = manifest
        self.say(f"[{i + 1}/{len(self.cases)}] {cid}: {dec.status}")
        return dec

    def _on_both(self, check_id: str, what: str, ask) -> tuple:
        """``ask(runner)`` for each role; ``(candidate outcome, its result dict or None, the incumbent's result dict
        or None, the incumbent's outcome or None)``: with a baseline, the incumbent's result is its report's
        ``checks[]`` entry (None in a report written before that check) and its outcome None."""
        res = {}
        for role in self.roles:
            self.say(f"gate: {what} for the {role}")
            res[role] = ask(self._runner(role))
        oc = res["candidate"]
        cand_d = oc.value.to_dict() if oc.kind == OK else None
        if self.doc is not None:
            inc_d = next((c for c in self.doc.get("checks") or [] if c.get("check_id") == check_id), None)
            return oc, cand_d, inc_d, None
        io = res["incumbent"]
        return oc, cand_d, io.value.to_dict() if io.kind == OK else None, io

    @staticmethod
    def _status(oc) -> tuple:
        """``(status, evidence)`` of the candidate's outcome for a decision (evidence None when it ran)."""
        st = {OK: C.RAN, CRASHED: CRASH, TIMED_OUT: TIMEOUT, HARNESS_ERROR: C.HARNESS}[oc.kind]
        return st, ({"signal": oc.signal, "exitcode": oc.exitcode, "log_tail": oc.log_tail} if oc.kind != OK else None)

    def run_model(self, check_id: str) -> C.Decision:
        """Run model-level check ``check_id`` (C7 / E1) isolated and decide it."""
        oc, cand_d, inc_d, _ = self._on_both(
            check_id, check_id, lambda r: r.run_model(check_id, self.opts.model_timeout_s)
        )
        st, ev = self._status(oc)
        return C.decide_model(check_id, cand_d, inc_d, self.policy, st, oc.error, ev)

    def run_serving(self, check_id: str) -> C.Decision:
        """Run serving check ``check_id`` (C13 / C14 / C15) in each kernel's child (the suite's ``check`` request:
        ``suite.plan.run_kernel_check``, as ``int8conf check`` runs it) and decide it (``compare.decide_serving``).
        An incumbent that crashed or hung during the check fails it."""
        oc, cand_d, inc_d, io = self._on_both(
            check_id,
            f"{check_id} {CHECK_NAMES[check_id]}",
            lambda r: r.request("check", check_id, self.opts.serving_timeout_s),
        )
        if io is not None and io.kind in (CRASHED, TIMED_OUT):
            why = f"kernel failed ({CRASH if io.kind == CRASHED else TIMEOUT}): {io.error}"
            inc_d = {"check_id": check_id, "verdict": Verdict.FAIL, "summary": why}
        st, ev = self._status(oc)
        dec = C.decide_serving(check_id, cand_d, inc_d, st, oc.error, ev)
        self.say(f"gate: {check_id}: {dec.status}")
        return dec

    def triage(self, res: GateResult) -> dict:
        """Where a blocked candidate's failing checks live: ``conformance.triage.run.triage_cases`` on the first case
        each check of ``TRIAGED_CHECKS`` failed on as the candidate's failure (``Decision.candidate_failed``), its
        searches in children of this process (call it after :meth:`close`, as ``check`` triages after its runs),
        the minimal cases' reproducers under ``<out>/repro/``; the ``{check id: record}`` also goes to
        ``res.candidate["triage"]``. ``{}`` (no kernel call) for a passing candidate, ``triage=False``, or a
        block without such a failure."""
        if not self.opts.triage or res.overall["verdict"] != "blocked":
            return {}
        todo = first_failing((d.item, d.candidate_failed) for d in res.cases)
        if not todo:
            return {}
        self.say(f"gate: triage: where the candidate's failing checks switch on ({', '.join(c for c, _ in todo)})")
        tri = triage_cases(
            self.cand_spec, todo, by_case_id(self.cases), res.elapsed_s, {}, self.out / "repro", self.opts.device
        )
        res.candidate["triage"] = tri
        return tri

    def close(self) -> None:
        """Stop the child processes."""
        for r in self.runners.values():
            r.close()
        self.runners = {}

    def result(
        self,
        decisions: Sequence,
        model: Sequence = (),
        elapsed_s: Optional[float] = None,
        interrupted: bool = False,
        stage: Optional[str] = None,
        serving: Sequence = (),
    ) -> GateResult:
        """The GateResult of case Decisions (any order; sorted into case order), model-level ones and ``serving``
        ones (C13-C15, any order; sorted into :data:`SERVING_CHECKS` order). ``elapsed_s``: None = since the session
        started; ``interrupted``: stopped (Ctrl-C / SIGTERM) before the end, partial even with every case decided;
        ``stage``: what it was doing then (``"cases"``, ``"C13"`` .. ``"C15"``, ``"C7"``, ``"E1"``, None = not
        known). ``partial`` is the ``partial_run`` record; its note is in ``notes``."""
        order = {row["case"]: i for i, row in enumerate(self.rows)}
        decisions = sorted(decisions, key=lambda d: order.get(d.item, len(order)))
        model = list(model)
        serving = sorted(serving, key=lambda d: [*SERVING_CHECKS, *KERNEL_CHECKS].index(d.item))
        env = environment([d.manifest for d in decisions if getattr(d, "manifest", None)])
        doc, policy, notes = self.doc, self.policy, []
        if doc is not None:
            their_env = (doc.get("comparability") or {}).get("environment")
            inc_info = {"baseline": str(self.baseline), "manifest": doc.get("kernel")}
            inc_info.update(generated_at=doc.get("generated_at"), environment=their_env)
            theirs = their_env or {}
            keys = ("torch", "triton", "execution", "cuda_device")
            diff = [f"{k}: baseline {theirs.get(k)} vs now {env.get(k)}" for k in keys if theirs.get(k) != env.get(k)]
            if diff:
                why = "bits are compared as they are; kernels may legitimately take other paths"
                notes.append(f"environment differs from the baseline's ({why}): " + "; ".join(diff))
        else:
            inc_info = {"ref": _ref_dict(self.incumbent), "manifest": self.inc_spec.manifest()}
        repros = [d.evidence["repro"] for d in decisions if (d.evidence or {}).get("repro")]
        if repros:
            notes.append(f"{len(repros)} reproducer(s) saved: " + ", ".join(repros))
        part = partial_run(len(decisions), len(self.rows), interrupted=interrupted, stage=stage, kind="gate")
        if part["partial"]:
            notes.append(part["note"])
        return GateResult(
            candidate={"ref": _ref_dict(self.candidate), "manifest": self.cand_spec.manifest()},
            incumbent=inc_info,
            policy=policy.to_dict(),
            cases=list(decisions),
            model=model,
            overall=_overall(list(decisions), model, policy, self.skipped, serving),
            comparability=self.comparability,
            environment=env,
            options=self.opts.to_dict(),
            elapsed_s=(time.perf_counter() - self.t0) if elapsed_s is None else elapsed_s,
            notes=notes,
            partial=part,
            serving=serving,
        )


def run_gate(
    candidate: Union[KernelRef, object],
    incumbent: Union[KernelRef, object, None] = None,
    baseline: Union[str, Path, None] = None,
    policy: Optional[Policy] = None,
    options: Optional[GateOptions] = None,
    out_dir: Union[str, Path] = "reports/gate",
    cases: Optional[Sequence] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> GateResult:
    """Decide whether ``candidate`` (KernelRef, or a KernelSpec under fork) may replace ``incumbent``
    or the incumbent of a stored ``baseline`` report, under ``policy`` (default bit identity
    everywhere). ``out_dir`` receives reproducers and child logs; ``cases`` replaces the suite's cases;
    ``progress`` gets one line per step. Never raises for a kernel's behaviour. Raises Int8confError
    (bad kernel name, both or neither of incumbent / baseline, unreadable baseline, bad device),
    NotComparable, GateInterrupted (carries the partial result)."""
    s = GateSession(candidate, incumbent, baseline, policy, options, out_dir, cases, progress)
    s.say(f"gate: {len(s.cases)} cases; candidate {s.cand_spec.name}")

    decisions, serving, model, stopped = [], [], [], False
    stage: Optional[str] = "cases"  # None once every case, serving and model check is decided
    try:
        for i in range(len(s.cases)):
            raise_if_requested()
            decisions.append(s.run_case(i))
        for cid in kernel_checks(s.cand_spec):  # a block / zero-point kernel's own check, decided as C13-C15 are
            stage = cid
            raise_if_requested()
            serving.append(s.run_serving(cid))
        for cid, _, _ in MODEL_CHECKS if s.opts.model_checks else ():
            stage = cid
            raise_if_requested()
            model.append(s.run_model(cid))
        for cid in SERVING_CHECKS if s.opts.serving_checks else ():  # the suite's order: C13-C15 after C7 / E1
            stage = cid
            raise_if_requested()
            serving.append(s.run_serving(cid))
        stage = None
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM via conformance.runtime.graceful_stop
        stopped = True
    finally:
        try:
            s.close()
        except KeyboardInterrupt:  # the stop landed while the children shut down: still report
            stopped = True
    # a stop after the last decision (while the children shut down) cut nothing short
    res = s.result(decisions, model, interrupted=stopped and stage is not None, stage=stage, serving=serving)
    if stopped:
        raise GateInterrupted(res)
    try:
        s.triage(res)
    except KeyboardInterrupt:  # stopped during the triage: every decision stands, the report goes without it
        res.candidate.pop("triage", None)
        raise GateInterrupted(res) from None
    return res


class GateInterrupted(KeyboardInterrupt):
    """:func:`run_gate` was interrupted; ``result`` is the GateResult of the
    cases decided so far (its notes say "partial run"), for the caller to
    write before it stops."""

    def __init__(self, result: "GateResult"):
        super().__init__("gate interrupted")
        self.result = result
