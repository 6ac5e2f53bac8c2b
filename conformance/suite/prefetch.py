"""The sweep's prefetch: ask a case's device questions before any check reads one.

The checks' device questions (``reference.readback``) are memoized on their
tensors inside a ``reference.memo`` scope; asking them here first lets one
read-back serve the whole case. No-ops outside a scope; the checks never import
this module, and verdicts and bits are the same with or without it.
"""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from conformance.checks.accumulator import ObservedAccumulator, headroom_questions
from conformance.checks.compare import ask_comparison, evidence_questions
from conformance.checks.output_bits import (
    C5,
    C6,
    C6_TOL_ULP,
    C8,
    ask_attribution,
    c5_inputs,
    c6_inputs,
    c8_inputs,
    case_epilogue,
    interchangeable_reference,
    risky_count,
    unusable_output,
)
from reference import memo


def prefetch_comparisons(triples: list) -> None:
    """Ask the comparison (``compare.ask_comparison``) of every ``(out, ref, mask)``."""
    if not memo.active():
        return
    for tr in triples:
        ask_comparison(*tr)


def prefetch_failure_evidence(out: Tensor, ref: Tensor, tol_ulp: int, ops=None, exact=None, mask=None, max_listed=5):
    """Ask the failure evidence ``compare.compare_bits`` (same arguments) will
    read when elements differ; reads the comparison itself if it is not read yet."""
    if memo.active():
        evidence_questions(out, ref, tol_ulp, ops, exact, mask, max_listed)


def output_comparisons(spec, ops, run, exact: Tensor) -> list:
    """``(out, ref, tol_ulp, mask, dacc, contract, check id)`` of each comparison the
    output checks will make: C8's (unless it has a step list: compared on the
    CPU) and C5's (pow2) or C6's. Empty without a comparable output. ``run``:
    a KernelRun, or a ``KernelLaunch`` whose verdicts are not read yet."""
    if unusable_output(C8, "", ops, run):
        return []
    out = []
    a_then_w = interchangeable_reference(spec, ops, run)
    de = case_epilogue(spec, ops, run)
    if de.standard:
        o, r, m, d = c8_inputs(spec, ops, run, exact)
        out.append((o, r, 0, m, d, de.contract, C8))
    if ops.scale_mode == "pow2":
        o, r, m, d = c5_inputs(spec, ops, run, exact)[0]
        out.append((o, r, 0, m, d, a_then_w, C5))
    else:
        o, r, m, d = c6_inputs(spec, ops, run, exact)
        out.append((o, r, C6_TOL_ULP, m, d, a_then_w, C6))
    return out


def prefetch_output_comparisons(spec, ops, run, exact: Tensor) -> list:
    """Ask the comparisons of C5 / C6 and C8 (and the at-risk counts of their
    overflow evidence). Returns :func:`output_comparisons`' list ([] outside a
    scope) for :func:`prefetch_output_evidence` / :func:`declared_output_differs`."""
    if not memo.active():
        return []
    pre = output_comparisons(spec, ops, run, exact)
    prefetch_comparisons([(o, r, m) for o, r, _, m, _, _, _ in pre])
    for o, _, tol, _, dacc, contract, _ in pre:
        if dacc.known("at_risk") != 0:
            risky_count(dacc, o, ops, contract, tol)
    return pre


def _settled(spec, ops, run, exact: Tensor, pre: Optional[list]) -> list:
    """``pre`` (asked on the launch) unless the settled run's output is unusable;
    computed when ``pre`` is None."""
    if pre is None:
        return output_comparisons(spec, ops, run, exact)
    return [] if unusable_output(C8, "", ops, run) else pre


def prefetch_output_evidence(spec, ops, run, exact: Tensor, pre: Optional[list] = None) -> None:
    """Ask the failure evidence of every output comparison with differing
    elements; call with the settled KernelRun after the comparisons were read."""
    if not memo.active():
        return
    for o, r, tol, m, _, _, cid in _settled(spec, ops, run, exact, pre):
        prefetch_failure_evidence(o, r, tol, ops, exact, mask=m)
        if cid != C8 and _differs(o, r, m):  # C5 / C6 then say who the failure is due to
            ask_attribution(spec, ops, run, exact, o, r, m, tol)


def _differs(out: Tensor, ref: Tensor, mask) -> bool:
    """The comparison of ``out`` and ``ref`` was read and found a differing element."""
    d = ask_comparison(memo.moved(out, ref.device), ref, None if mask is None else mask.to(ref.device))
    if not d.done:
        return False
    ev = d.get()["ev"]
    return bool(ev["n_bits_differ"] or ev["max_ulp"])


def declared_output_differs(spec, ops, run, exact: Tensor, pre: Optional[list] = None) -> bool:
    """False only when C8's prefetched comparison was read and found no
    differing bit, or there is no output; True otherwise. A hint, never a verdict."""
    if run.output is None:
        return False
    if run.error or not memo.active() or not case_epilogue(spec, ops, run).standard:
        return True
    pre = _settled(spec, ops, run, exact, pre)
    if not pre:
        return True
    o, r, _, m = pre[0][:4]  # C8's
    d = ask_comparison(o, r, m)
    if not d.done:
        return True
    ev = d.get()["ev"]
    return bool(ev["n_bits_differ"] or ev["max_ulp"])


def prefetch_accumulator_questions(spec, ops, acc: Optional[Tensor], manifest: Optional[dict], exact: Tensor) -> None:
    """Ask what C3 and C4 will read; ``acc`` / ``manifest``: the kernel's
    ``int_mm`` result, known before its verdicts are read."""
    if memo.active():
        headroom_questions(spec, ops, ObservedAccumulator(acc, "", None, manifest), exact)
