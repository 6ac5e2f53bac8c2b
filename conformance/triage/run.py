"""Triage of a failing ``int8conf check`` run (:func:`triage_result`): for the first failing case of each failing
per-case check, the boundary search (:func:`conformance.triage.boundary.find_boundaries`) and the minimal case
(:func:`conformance.triage.minimal.minimal_case`), as a plain JSON-able dict the report renders
(``conformance.suite.report`` reads it without importing this package), the minimal case saved as a reproducer.

The kernel calls run in this process (the suite's containment is over): a run in which the kernel crashed or hung
(``overall["crashes"]``) is not triaged at all, since a probe could kill or stall the command before its report. The calls are budgeted: at most ``share`` (10 %) of the run's elapsed time in all, split evenly between
the checks triaged, each search's calls estimated from the case's cost (its ``elapsed_s``, or one timed call on it
when that is larger), at least :data:`MIN_DIM_CALLS` per dimension.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from conformance.cases import case_id
from conformance.runtime.repro import reproducer_dirname, save_reproducer
from conformance.suite.workers import kernel_ref
from conformance.triage.boundary import DIMENSIONS, fails, find_boundaries
from conformance.triage.flips import flips
from conformance.triage.minimal import minimal_case

#: The per-case checks triaged (C3 / C4 only where the kernel's own accumulator failed, not a precondition case).
TRIAGED_CHECKS = ("C1", "C2", "C3", "C4", "C5", "C6", "C8", "C12")
#: The share of the run's elapsed time triage may add.
DEFAULT_SHARE = 0.10
#: Kernel calls per dimension, whatever the time budget says.
MIN_DIM_CALLS = 4
#: The most kernel calls per dimension.
MAX_DIM_CALLS = 24
#: Seconds a kernel call is assumed to take at least (a check and a reshape ride along).
MIN_CALL_S = 1e-3
#: ``repro_dir`` subfolder name prefix of a minimal case's reproducer: ``triage-<check>-<case>``.
REPRO_PREFIX = "triage"


def first_failures(result) -> list[tuple[str, str]]:
    """``[(check id, case id)]``: the first case (in the run's order, property examples included) on which each of
    :data:`TRIAGED_CHECKS` failed as the kernel's failure; a case that crashed or hung is skipped."""
    out: dict[str, str] = {}
    for cr in result.cases:
        if cr.crash is not None:
            continue
        for cid in TRIAGED_CHECKS:
            r = cr.checks.get(cid)
            if cid not in out and r is not None and r.is_kernel_failure:
                out[cid] = cr.case
    return [(cid, out[cid]) for cid in TRIAGED_CHECKS if cid in out]


def call_budget(run_s: float, case_s: float, n_searches: int, n_flips: int, share: float = DEFAULT_SHARE) -> int:
    """Kernel calls per dimension of one search: ``share`` of ``run_s`` split over ``n_searches``, less the
    ``n_flips`` calls and two for the verification and the minimal case, over three dimensions, at a call's cost
    ``case_s``; between :data:`MIN_DIM_CALLS` and :data:`MAX_DIM_CALLS`."""
    calls = share * max(0.0, run_s) / max(1, n_searches) / max(MIN_CALL_S, case_s)
    per_dim = int((calls - n_flips - 2) // len(DIMENSIONS))
    return max(MIN_DIM_CALLS, min(MAX_DIM_CALLS, per_dim))


def triage_result(
    spec, result, cases, repro_dir=None, device: Optional[str] = None, share: float = DEFAULT_SHARE
) -> dict:
    """``{check id: record}`` for the first failing case of each failing per-case check of ``result`` (a
    ``ConformanceResult``; :func:`first_failures`), found among ``cases`` (the run's operands) by case id; ``{}``
    for a passing run or one without such a failure. A record: ``case``, ``shape`` [M, K, N], ``boundaries``
    (``BoundarySearch.to_dict()``'s, per ``m`` / ``n`` / ``k``), ``flips`` (``[{attribute, value, fails}]``),
    ``minimal`` (``{shape, fails, calls}``), ``repro`` (the reproducer directory, with ``repro_dir``) and
    ``replay`` (its ``command.sh``), ``budget`` (calls per dimension), ``calls``, ``seconds``; a case not among
    ``cases`` gives ``{case, skipped: reason}``; ``{}`` too for a run with a crash or a hang (module docstring).
    Never raises for a kernel's failure."""
    if result.conformant or result.overall.get("crashes"):
        return {}
    todo = first_failures(result)
    by_id = {case_id(ops): ops for ops in cases}
    elapsed = {cr.case: cr.elapsed_s for cr in result.cases}
    ref = kernel_ref(spec)
    out: dict[str, dict] = {}
    for cid, case in todo:
        ops = by_id.get(case)
        if ops is None:
            out[cid] = {"case": case, "skipped": "not among the run's fixed cases (a property example?)"}
            continue
        t0 = time.perf_counter()
        first_fails = fails(spec, ops, cid, device)  # one timed call: what a probe costs here
        cost = max(elapsed.get(case, 0.0), time.perf_counter() - t0)
        if not first_fails:
            out[cid] = {"case": case, "skipped": "the case passes when re-run here (not reproducible in-process)"}
            continue
        budget = call_budget(result.elapsed_s, cost, len(todo), len(flips(ops)), share)
        search = find_boundaries(spec, ops, cid, budget=budget, device=device)
        mc = minimal_case(spec, ops, cid, search.boundaries, device=device)
        d = search.to_dict()
        rec = {
            "case": case,
            "shape": d["shape"],
            "boundaries": d["boundaries"],
            "flips": d["flips"],
            "minimal": {"shape": mc.shape, "fails": mc.fails, "calls": mc.calls},
            "budget": budget,
            "calls": 1 + search.calls + mc.calls,
        }
        if repro_dir is not None and mc.fails:
            name = f"{REPRO_PREFIX}-{cid}-{reproducer_dirname(case)}"
            what = {"status": "fail", "check": cid, "error": f"{cid} fails on the minimal case of {case}"}
            rd = save_reproducer(
                Path(repro_dir) / name, mc.ops, None if ref is None else ref.to_dict(), case_id(mc.ops), what
            )
            rec["repro"], rec["replay"] = str(rd), f"sh {rd / 'command.sh'}"
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        out[cid] = rec
    return out
