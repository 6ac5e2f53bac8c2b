"""Triage of a failing ``int8conf check`` run (:func:`triage_result`): for the first failing case of each failing
per-case check, the boundary search (:func:`conformance.triage.boundary.find_boundaries`) and the minimal case
(:func:`conformance.triage.minimal.minimal_case`), as a plain JSON-able dict the report renders
(``conformance.suite.report`` reads it without importing this package), the minimal case saved as a reproducer.

Each check's search runs in a child process (:class:`conformance.runtime.pool.IsolatedKernel`, handed
:data:`TRIAGE_REQUESTS`; forked where this process may fork, as the suite's cases are, else a fresh interpreter
resolving the kernel by name), so a kernel that crashes or hangs on a reshaped probe costs only that check's
search: its record says ``skipped`` (the kernel's process died / hung during the boundary search) and the run goes
on. The calls are budgeted: at most ``share`` (10 %) of the run's elapsed time in all, split evenly between the
checks triaged, each search's calls estimated from one timed call on its case in the child, at least
:data:`MIN_DIM_CALLS` per dimension; a search's child is killed after :func:`search_timeout` seconds (from the case's
cost in the suite). A search that dies keeps what it found (:func:`partial_record`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

from conformance.cases import by_case_id, case_id
from conformance.checks.result import CALL_ID, INTERFACE_ID, Verdict
from conformance.runtime.forking import Forked, start_method
from conformance.runtime.pool import CRASHED, OK, TIMED_OUT, IsolatedKernel, Outcome, Served
from conformance.runtime.repro import reproducer_dirname, save_reproducer
from conformance.suite.evaluate import CRASH, evaluate_case
from conformance.suite.replay import replay_command
from conformance.suite.signatures import case_scores
from conformance.suite.workers import kernel_ref
from conformance.triage.boundary import CALL_CHECKS, DIMENSIONS, PRODUCT_CALLS, BoundarySearch, fails, find_boundaries
from conformance.triage.flips import flips, own_values
from conformance.triage.minimal import ZERO_BUDGET, minimal_case
from reference.fileio import atomic_write_json
from reference.operands import GemmOperands

#: The per-case checks triaged (C3 / C4 only where the kernel's own accumulator failed, not a precondition case)
#: and the call's own pseudo-checks (it raised or gave no output; it broke the interface, e.g. the wrong dtype).
TRIAGED_CHECKS = (CALL_ID, INTERFACE_ID, "C1", "C2", "C3", "C4", "C5", "C6", "C8", "C12")
#: The share of the run's elapsed time triage may add.
DEFAULT_SHARE = 0.10
#: The run seconds an on-demand search (``int8conf replay --triage``) is budgeted as: at share 1.0, the most calls.
ON_DEMAND_RUN_S = 60.0
#: Kernel calls a probed value costs on average (a passing one is retried re-planted).
CALLS_PER_VALUE = 2
#: Values probed per dimension, whatever the time budget says.
MIN_DIM_CALLS = 4
#: The most values probed per dimension.
MAX_DIM_CALLS = 24
#: Calls a search makes whatever its budget: the case verified and timed (two), its differing lines, the minimal
#: case (two), its fault classes.
FIXED_CALLS = 2 + 1 + 2 + 1
#: Seconds the searches' child takes to start and answer (its fork, the report's rewrite), taken off their share.
CHILD_START_S = 0.5
#: Seconds a search may take whatever its share says (its fixed calls, a few values per dimension).
MIN_SEARCH_S = 0.3
#: Seconds a kernel call is assumed to take at least (a check and a reshape ride along).
MIN_CALL_S = 1e-3
#: ``repro_dir`` subfolder name prefix of a minimal case's reproducer: ``triage-<check>-<case>``.
REPRO_PREFIX = "triage"
#: Seconds a search's child is given at least, whatever the budget says (a fresh child's start, the first call).
MIN_SEARCH_TIMEOUT_S = 30.0
#: Seconds a probe's own child is given at least (a search of a run whose kernel died or hung), and how many times
#: the case's suite cost: a probe past it counts as hung, a failing probe.
PROBE_TIMEOUT_S, PROBE_TIMEOUT_FACTOR = 2.0, 20.0
#: How many times the search's estimated time its child is given before it is killed as hung.
SEARCH_TIMEOUT_FACTOR = 20.0


def first_failures(result) -> list[tuple[str, str]]:
    """``[(check id, case id)]``: the first case (in the run's order, property examples included) on which each of
    :data:`TRIAGED_CHECKS` failed as the kernel's failure; a case whose process died counts as a ``CALL`` failure
    (its search calls the kernel in a child per probe: :attr:`SearchArg.isolate_calls`), one that hung is skipped."""

    def failed(cr) -> list[str]:
        if cr.crash is not None:
            return [CALL_ID] if cr.crash.get("status") == CRASH else []
        return [cid for cid, r in cr.checks.items() if r is not None and r.is_kernel_failure]

    return first_failing((cr.case, failed(cr)) for cr in result.cases)


def first_failing(rows: Iterable[tuple[str, Iterable[str]]]) -> list[tuple[str, str]]:
    """``[(check id, case id)]`` in :data:`TRIAGED_CHECKS`' order: for each of them, the first of ``rows`` (``(case
    id, the ids of the checks the kernel failed on it)``, in the run's order) that names it."""
    out: dict[str, str] = {}
    for case, failed in rows:
        for cid in failed:
            out.setdefault(cid, case)
    return [(cid, out[cid]) for cid in TRIAGED_CHECKS if cid in out]


def total_calls(run_s: float, case_s: float, n_searches: int, share: float = DEFAULT_SHARE) -> int:
    """Kernel calls one search may make: ``share`` of ``run_s`` split over ``n_searches``, at a call's cost
    ``case_s`` (at least :data:`MIN_CALL_S`)."""
    return int(share * max(0.0, run_s) / max(1, n_searches) / max(MIN_CALL_S, case_s))


def search_seconds(arg: "SearchArg") -> float:
    """Seconds one search may take: ``arg.share`` of the run's ``run_s`` split over its ``n_searches``, less the
    child's start (:data:`CHILD_START_S`, shared); at least :data:`MIN_SEARCH_S`."""
    return max(MIN_SEARCH_S, (arg.share * arg.run_s - CHILD_START_S) / max(1, arg.n_searches))


def call_budget(total: int) -> int:
    """Values probed per dimension out of a search's ``total`` calls: the dimensions come first (a third each, less
    the :data:`FIXED_CALLS`, at :data:`CALLS_PER_VALUE`), between :data:`MIN_DIM_CALLS` and :data:`MAX_DIM_CALLS`;
    the flips, the product and the non-zero reduction get what the dimensions leave (each flip one call at least)."""
    return max(MIN_DIM_CALLS, min(MAX_DIM_CALLS, (total - FIXED_CALLS) // (len(DIMENSIONS) * CALLS_PER_VALUE)))


@dataclass(frozen=True)
class SearchArg:
    """One search request's argument: the failing case's operands ``ops`` (case id ``case``), the check ``check_id``
    that failed on it, the budget's inputs (:func:`total_calls`: the run's ``run_s``, ``n_searches``, ``share``, the
    case's ``case_s`` in the suite), ``repro_dir`` (the minimal case's reproducer goes under it; None: none) and
    ``ref`` (``KernelRef.to_dict()`` of the kernel for the reproducer's command, or None), ``progress`` (a file
    the search writes before each kernel call: :func:`partial_record`; None: none), ``isolate_calls`` (a case
    killed the kernel's process or hung: every probe's call runs in a child of its own, ``runtime.forking.Forked``,
    where this child may fork, one past :data:`PROBE_TIMEOUT_S` or 20 times the case's cost a failing probe)."""

    ops: Any
    case: str
    check_id: str
    run_s: float
    case_s: float
    n_searches: int
    share: float = DEFAULT_SHARE
    repro_dir: Optional[str] = None
    ref: Optional[dict] = None
    progress: Optional[str] = None
    isolate_calls: bool = False

    def label(self) -> str:
        return f"{self.check_id} on {self.case}"

    def __repr__(self) -> str:  # the child's log line names the case, not the operands' values
        return f"SearchArg({self.label()})"


def search_timeout(arg: SearchArg, n_flips: int) -> float:
    """Seconds a search's child may take: :data:`SEARCH_TIMEOUT_FACTOR` times its calls (the most
    :func:`call_budget` allows at the case's cost, the flips, the fixed ones) at the case's suite cost, at
    least :data:`MIN_SEARCH_TIMEOUT_S`."""
    per_dim = call_budget(total_calls(arg.run_s, arg.case_s, arg.n_searches, arg.share))
    calls = FIXED_CALLS + ZERO_BUDGET + PRODUCT_CALLS + 3 * n_flips + len(DIMENSIONS) * 3 * (per_dim + 2)
    est = max(arg.share * arg.run_s / max(1, arg.n_searches), calls * max(MIN_CALL_S, arg.case_s))
    return max(MIN_SEARCH_TIMEOUT_S, SEARCH_TIMEOUT_FACTOR * est)


def search_case(spec, arg: SearchArg, served: Served) -> dict:
    """The triage record of one failing check (a request handler, :data:`TRIAGE_REQUESTS`; run in the kernel's
    child): a call verifying the case fails and a timed one (the search's :func:`total_calls`), the boundary
    search (:func:`call_budget` values per dimension, :func:`search_seconds` in all; flips and product within what
    is left), the minimal case (its non-zero reduction within what is left), the fault classes its evidence is
    consistent with, saved as a reproducer under ``arg.repro_dir``.
    JSON-able (:func:`triage_result`'s record). Before each kernel call the search so far and the probe about to
    run go to ``arg.progress`` (atomically), so a crash or hang leaves them (:func:`partial_record`)."""
    ops, cid, case, device = arg.ops, arg.check_id, arg.case, served.device
    t0 = time.perf_counter()
    if arg.isolate_calls and start_method() == "fork":  # a crash of a probe is that probe's failure
        limit = max(PROBE_TIMEOUT_S, PROBE_TIMEOUT_FACTOR * arg.case_s)
        spec = dataclasses.replace(spec, scaled_mm=Forked(spec.scaled_mm, limit))

    def tell(what: str, probe, search: Optional[BoundarySearch] = None) -> None:
        if arg.progress is not None:
            doc = {} if search is None else _search_fields(search)
            doc |= {"probing": what, "probe_shape": [int(probe.m), int(probe.k), int(probe.n)]}
            atomic_write_json(Path(arg.progress), doc)

    tell("the case", ops)
    if not fails(spec, ops, cid, device):
        return {"case": case, "skipped": "the case passes when re-run here (not reproducible in a fresh process)"}
    t1 = time.perf_counter()
    fails(spec, ops, cid, device)  # a second, timed call: what a probe costs here (the first pays for warm-up)
    cost = max(MIN_CALL_S, time.perf_counter() - t1)
    total, seconds = total_calls(arg.run_s, cost, arg.n_searches, arg.share), search_seconds(arg)
    budget = call_budget(total)
    search = find_boundaries(
        spec, ops, cid, budget=budget, device=device, on_call=tell, total=total - FIXED_CALLS, seconds=seconds
    )
    tell("the minimal case", ops, search)
    time_left = seconds - (time.perf_counter() - t0)
    zeros = max(0, min(ZERO_BUDGET, total - FIXED_CALLS - search.calls, int(time_left / cost)))
    mc = minimal_case(spec, ops, cid, search.boundaries, device=device, zero_budget=zeros, lines=search.lines)
    rec: dict[str, Any] = {"case": case} | _search_fields(search)
    rec["minimal"] = {"shape": mc.shape, "fails": mc.fails, "calls": mc.calls}
    if mc.fails:
        rec["product"] = product_against_minimal(rec.get("product"), mc.shape)
    rec["minimal"]["nonzero"] = {k: list(v) for k, v in mc.nonzero.items()}
    rec["budget"], rec["calls"] = budget, 2 + search.calls + mc.calls
    judged = cid  # the check the reproducer replays: the call's own where the call fails at the minimal case
    if mc.fails and cid not in CALL_CHECKS:
        tell("the minimal case's call and fault classes", mc.ops, search)
        cr = evaluate_case(spec, mc.ops, device=device, coverage=False, output_digest=False)
        rec["calls"] += 1
        broke = broken_call(cr)
        if broke is not None:  # a probe whose call fails counts as failing: say that it is the call's failure there
            judged = broke[0]
            rec["minimal"]["call_failure"] = {"check": broke[0], "line": broke[1]}
        else:  # a call that gave no output is no fault class's
            rec["minimal"]["fault_classes"] = fault_classes(cr)
    if arg.repro_dir is not None:  # no smaller failing shape found: the case itself is the reproducer
        name = f"{REPRO_PREFIX}-{cid}-{reproducer_dirname(case)}"
        error = f"{judged} fails on the minimal case of {case}" if mc.fails else f"{cid} fails on case {case}"
        what = {"status": "fail", "check": judged, "error": error}
        rd = save_reproducer(Path(arg.repro_dir) / name, mc.ops if mc.fails else ops, arg.ref, case_id(mc.ops), what)
        rec["repro"], rec["replay"] = str(rd), replay_command(rd, arg.ref, judged)
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec


def product_against_minimal(product: Optional[dict], shape: list) -> Optional[dict]:
    """A verified product record (``ProductBoundary.to_dict()``) unverified where the failing minimal case
    (``shape`` [M, K, N]) has a product no larger than its largest passing one: two aspect ratios agreed with the
    product, a third disagrees (a gate on the output's tile count, not on M*N, can do that)."""
    if not product or not product.get("verified"):
        return product
    size, label = dict(zip("MKN", shape)), product.get("attribute", "M*N*K")
    value = math.prod(size[d] for d in label.split("*"))
    if value > product["passes_at"]:
        return product
    at = ",".join(map(str, shape))
    note = (
        f"the dimensions act separately (the minimal case M,K,N {at} fails at {label} {value}, "
        f"below the {product['passes_at']} that passed)"
    )
    return dict(product, verified=False, note=note)


def broken_call(cr) -> Optional[tuple[str, str]]:
    """``(check id, line)`` when the kernel's call itself failed on the case of ``CaseResult`` ``cr``: ``IF`` (it broke
    the interface: a wrong shape, dtype or an operand written) or ``CALL`` (it raised or gave no output); None when
    it gave a valid output."""
    if cr.interface:
        return INTERFACE_ID, cr.interface
    if cr.raised is not None or not cr.produced_output:
        return CALL_ID, cr.raised or cr.error or "no output"
    return None


def _search_fields(search: BoundarySearch) -> dict:
    """The record's ``shape``, ``boundaries``, ``product``, ``flips`` and ``differing`` from a search (finished or
    not)."""
    d = search.to_dict()
    return {k: d[k] for k in ("shape", "boundaries", "product", "flips", "differing") if k in d}


def fault_classes(cr) -> dict:
    """``{fault id: score}`` (best first) of the fault classes the evidence of ``CaseResult`` ``cr`` is consistent
    with (``suite.signatures.case_scores``); ``{}`` when none or the case does not fail."""
    if cr.verdict != Verdict.FAIL:
        return {}
    scores = case_scores(cr)
    return {fid: round(v, 3) for fid, v in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))}


def partial_record(progress: Optional[str]) -> dict:
    """What a search whose child died or hung had found (its ``arg.progress`` file): ``died_on`` (the probe being
    run and its shape [M, K, N]) and the boundaries and flips finished; ``{}`` when none was written."""
    if progress is None or not Path(progress).is_file():
        return {}
    try:
        doc = json.loads(Path(progress).read_text())
    except (OSError, ValueError):
        return {}
    out = {k: doc[k] for k in ("boundaries", "flips", "differing") if k in doc}
    return out | {"died_on": {"probe": doc.get("probing"), "shape": doc.get("probe_shape")}}


#: request kind -> handler, handed to ``runtime.pool.IsolatedKernel`` (the pool does not import this package)
TRIAGE_REQUESTS: dict[str, Callable[..., object]] = {"triage": search_case}


def isolated(spec, timeout_s: float, log_dir: str, device: Optional[str] = None) -> IsolatedKernel:
    """The IsolatedKernel the searches of ``spec`` run in: forked with the in-memory kernel where this process may
    fork (``runtime.forking.start_method``), else a fresh interpreter resolving it by name
    (``suite.workers.kernel_ref``); a kernel without such a name is forked all the same."""
    method = start_method()
    ref = kernel_ref(spec)
    if method == "fork" or ref is None:
        return IsolatedKernel(spec, [], timeout_s, log_dir, device=device, method="fork", handlers=TRIAGE_REQUESTS)
    return IsolatedKernel(ref, [], timeout_s, log_dir, device=device, method=method, handlers=TRIAGE_REQUESTS)


def skipped_line(oc: Outcome, timeout_s: float) -> str:
    """One line for a search whose child crashed, hung (killed after ``timeout_s``) or erred."""
    if oc.kind == CRASHED:
        how = f"killed by {oc.signal}" if oc.signal else f"exit status {oc.exitcode}"
        return f"the kernel's process died during the boundary search ({how})"
    if oc.kind == TIMED_OUT:
        return f"the kernel's process hung during the boundary search (killed after {timeout_s:g} s)"
    return f"the boundary search failed in its process: {oc.error}"


#: why a block-scaled or asymmetric kernel's failures are not triaged
NOT_TRIAGED_SCALES = (
    "the boundary search reshapes per-token x per-channel cases; block / zero-point cases are not searched"
)


def triage_result(
    spec, result, cases, repro_dir=None, device: Optional[str] = None, share: float = DEFAULT_SHARE
) -> dict:
    """``{check id: record}`` for the first failing case of each failing per-case check of ``result`` (a
    ``ConformanceResult``; :func:`first_failures`), found among ``cases`` (the run's operands) by case id; ``{}``
    for a passing run or one without such a failure. A record: ``case``, ``shape`` [M, K, N], ``boundaries``
    (``BoundarySearch.to_dict()``'s, per ``m`` / ``n`` / ``k``), ``flips`` (``[{attribute, value, fails}]``),
    ``differing`` (rows, columns, elements of the case that differ), ``minimal`` (``{shape, fails, calls,
    fault_classes}``), ``repro`` (the reproducer directory, with ``repro_dir``) and
    ``replay`` (its ``command.sh``), ``budget`` (calls per dimension), ``calls``, ``seconds``; a case not among
    ``cases`` gives ``{case, skipped: reason}``, a search whose child crashed, hung or erred ``{case, shape,
    skipped: one line, seconds}`` (:func:`skipped_line`) with what it had found (:func:`partial_record`: the probe it
    died on, the boundaries and flips finished). Never raises for a kernel's failure."""
    if result.conformant:
        return {}
    if spec.is_block or spec.is_azp:
        # the searches reshape and re-form per-token x per-channel cases; C8's evidence names the first element
        return {cid: {"case": case, "skipped": NOT_TRIAGED_SCALES} for cid, case in first_failures(result)}
    elapsed = {cr.case: cr.elapsed_s for cr in result.cases}
    died = any(cr.crash is not None for cr in result.cases)  # it died or hung: each probe in a child of its own
    todo = first_failures(result)
    by_id = by_case_id(cases)
    out = triage_cases(spec, todo, by_id, result.elapsed_s, elapsed, repro_dir, device, share, died)
    return contradicted_flips(out, result, by_id)


def contradicted_flips(records: dict, result, by_id: Mapping[str, GemmOperands]) -> dict:
    """``records`` (:func:`triage_result`'s) with each passing flip that a failing case of the run contradicts marked
    ``contradicted_by`` (that case's id): the case has the flipped value and the same check failed on it, so the
    value alone does not make the failure pass (the flip passed on the triaged case's values or shape). ``by_id``:
    the run's cases by id (``conformance.cases.by_case_id``)."""
    for cid, rec in records.items():
        failing = [
            cr.case
            for cr in result.cases
            if cr.case in by_id and (r := cr.checks.get(cid)) is not None and r.is_kernel_failure
        ]
        own = {case: own_values(by_id[case]) for case in failing}
        for f in rec.get("flips") or []:
            if not f["fails"]:
                hit = next((case for case in failing if own[case].get(f["attribute"]) == f["value"]), None)
                if hit is not None:
                    f["contradicted_by"] = hit
    return records


def triage_cases(
    spec,
    todo: list[tuple[str, str]],
    by_id: Mapping[str, GemmOperands],
    run_s: float,
    case_s: Mapping[str, float],
    repro_dir=None,
    device: Optional[str] = None,
    share: float = DEFAULT_SHARE,
    isolate_calls: bool = False,
) -> dict:
    """:func:`triage_result`'s records for ``todo`` (``[(check id, case id)]``, :func:`first_failing`) of a run of
    ``run_s`` seconds, its cases ``by_id`` (``conformance.cases.by_case_id``); ``case_s``: a case id's seconds in
    the run (absent: the search's timed call alone sets the cost); ``isolate_calls``: the kernel's process died or
    hung in the run, so every search calls it in a child per probe (:attr:`SearchArg.isolate_calls`). The searches
    share one :func:`isolated` child, replaced after a crash."""
    ref = kernel_ref(spec)
    out: dict[str, dict] = {}
    if not todo:
        return out
    with tempfile.TemporaryDirectory(prefix="int8conf-triage-") as logs:
        with isolated(spec, MIN_SEARCH_TIMEOUT_S, logs, device) as iso:
            for cid, case in todo:
                ops = by_id.get(case)
                if ops is None:
                    out[cid] = {"case": case, "skipped": "not among the run's fixed cases (a property example?)"}
                    continue
                arg = SearchArg(
                    ops,
                    case,
                    cid,
                    run_s,
                    case_s.get(case, 0.0),
                    len(todo),
                    share,
                    None if repro_dir is None else str(Path(repro_dir).resolve()),  # a replay pastes anywhere
                    None if ref is None else ref.to_dict(),
                    str(Path(logs) / f"progress-{cid}.json"),
                    isolate_calls,
                )
                limit = search_timeout(arg, len(flips(ops)))
                oc = iso.request("triage", arg, limit)
                if oc.kind == OK and isinstance(oc.value, dict):
                    out[cid] = oc.value
                    continue
                why = skipped_line(oc, limit)
                shape = [int(ops.m), int(ops.k), int(ops.n)]
                out[cid] = {"case": case, "shape": shape, "skipped": why} | partial_record(arg.progress)
                out[cid]["seconds"] = round(oc.elapsed_s, 3)
    return out
