"""Fault signatures (DESIGN.md section 6): which fault classes a set of failures is consistent with, ranked by how
well each explains the evidence, and the shape / dtype / layout pattern of the failing cases.

Evidence per failing case: the failing checks, the largest spacing distance and the direction of the differing
elements against the declared-contract reference (:class:`FailureFeatures`, :data:`SIGNATURES`), and, where the case
kept its output, the post-processing faults' emulations tested against it (:func:`explain_output`: of the elements
whose bits differ from the declared reference, how many each of F1-F5's epilogue,
``faults.postprocessing.faulty_epilogue``, and F7's float32 running sum reproduce bit for bit; :func:`explain_block_output` for a block-scaled
case, which a block sweep stores per cell, :func:`stored_explanation`). A class's score on a case is the
fraction of the differing elements its emulation reproduces (consistent when more than half), or 1 / 0 by its
predicate where no emulation applies; its report score is the mean over the failing cases (:func:`rank_classes`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import torch

from conformance.checks.result import CALL_ID, CHECK_NAMES, DECLARATION, Verdict
from conformance.kernels.declared import declared_reference
from faults.accumulator import F7_TILES, float32_running_sum, narrowed_model
from faults.block import BLOCK_EMULATED, block_fault_output
from faults.catalogue import faults_for, get_fault
from faults.postprocessing import faulty_epilogue
from faults.spec import POSTPROCESSING_FAULTS, catalogue_order, f10_deficit
from reference.accumulate import accumulator_row_col_bound
from reference.bits import bits_of
from reference.epilogue import apply_epilogue, cached_epilogue

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


def contradicted_classes(worst: dict, k: int, out_dtype: str, bias: bool, sum_abs: Optional[int] = None) -> set:
    """Precondition fault classes one failing output element (``worst``: ``acc``, ``out``, ``ref``)
    contradicts on a case of depth ``k``: F6 where |acc| <= 2^31-1; F7 where no float32 running sum can round:
    |acc| < 2^24 and ``sum_abs`` (the case's largest ``sum |a*b|``, C4's ``bound_tight_max``; None: unknown) below
    2^24, or, without bias, where the output is further from the reference (relative) than a float32 accumulator
    can move it: (k-1) u / (1 - (k-1) u) * S / |acc| (recursive summation, S = ``sum_abs``, else k * 2^14;
    u = 2^-24) plus the epilogue's roundings (4 output spacings and 2^-20).
    """
    acc = worst.get("acc")
    if not isinstance(acc, int) or isinstance(acc, bool):
        return set()
    out = set()
    if abs(acc) <= 2**31 - 1:
        out.add("F6")
    total = sum_abs if sum_abs is not None else k * 2**14  # sum |a*b|, else its bound
    reach = sum_abs is not None and sum_abs >= 2**24
    if abs(acc) < 2**24 and not reach:
        return out | {"F7"}
    o, r = worst.get("out"), worst.get("ref")
    prec = _PRECISION.get(out_dtype)
    if (
        bias
        or prec is None
        or acc == 0
        or not (isinstance(o, (int, float)) and math.isfinite(o) and isinstance(r, (int, float)) and math.isfinite(r))
    ):
        return out
    p, tiny = prec
    g = (k - 1) * 2.0**-24
    if abs(r) < tiny or g >= 0.5:
        return out
    rel = g / (1 - g) * total / abs(acc) + 4 * 2.0 ** (1 - p) + 2.0**-20
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
        if r["verdict"] != Verdict.FAIL:
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
    c4 = cr.checks.get("C4")
    bound = (c4.evidence or {}).get("bound_tight_max") if c4 is not None else None
    bound = bound if isinstance(bound, int) and not isinstance(bound, bool) else None
    for cid, r in cr.checks.items():
        if r.verdict != Verdict.FAIL:
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
            k, dtype = int(cr.shape[1]), str(cr.out_dtype)
            ft.contradicted |= contradicted_classes(w, k, dtype, bool(cr.bias), bound)
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
    """Every failing check of case result ``cr`` is the declaration's (``failure_kind`` ``declaration``: the kernel
    gives its declared contract's bits), and no precondition is violated: past the int32 headroom (C3) or float32
    exactness (C4) the declared overflow gives those bits, and the precondition classes (F6, F7) explain them."""
    fails = [r for r in cr.checks.values() if r.verdict == Verdict.FAIL]
    bad = [r for r in fails if not r.is_precondition_violation]
    if len(bad) < len(fails):
        return False
    return bool(bad) and all(r.evidence.get("failure_kind") == DECLARATION for r in bad)


def declaration_line(n_declared: int, n_failing: int) -> str:
    """The line for ``n_declared`` of ``n_failing`` failing cases failed only by the declaration."""
    return (
        f"the declaration, not the implementation: in {n_declared} of {n_failing} failing cases the kernel gives "
        "exactly the bits of its declared contract (C8), which is not interchangeable with the reference there "
        "(C5 / C6); no fault class is matched for them"
    )


def explain_output(spec, ops, out, exact) -> Optional[dict]:
    """Test each post-processing fault against an int8 kernel's output: ``{"n_differ": n, "explained": {fid: k},
    "predicted": {fid: p}}`` over the elements whose accumulator fits int32 (the others are the overflow
    declaration's): ``n`` differ in bits from the declared contract's reference, ``k`` of them equal fault ``fid``'s
    epilogue (F1-F5, ``faults.postprocessing.faulty_epilogue`` on the exact accumulator), which changes ``p``
    elements; F7 too where a differing element's ``sum |a*b|`` reaches 2^24 (a float32 running sum may round
    there): the declared epilogue of ``faults.accumulator.float32_running_sum`` at a tile depth (:func:`_f7_explained`).
    ``out``: out_dtype [M, N]; ``exact``: int64 [M, N]. None where nothing differs, for an e4m3 kernel,
    or a kernel declaring a step list (no F1-F5 emulation of it)."""
    if out is None or getattr(spec, "operands", "int8") != "int8" or getattr(spec, "steps", None) is not None:
        return None
    dev = exact.device
    out = out.to(dev)
    sa, sb = ops.scale_a.to(dev), ops.scale_b.to(dev)
    bias = None if ops.bias is None else ops.bias.to(dev)
    fits = exact.abs() <= 2**31 - 1
    ref = bits_of(cached_epilogue(exact, sa, sb, spec.contract, bias=bias, out_dtype=ops.out_dtype))
    ob = bits_of(out)
    diff = (ob != ref) & fits
    n = int(diff.sum())
    if n == 0:
        return None
    explained, predicted = {}, {}
    for fid in POSTPROCESSING_FAULTS:
        alt = bits_of(faulty_epilogue(exact, sa, sb, spec.contract, fid, bias, ops.out_dtype))
        changed = (alt != ref) & fits
        explained[fid] = int((changed & (alt == ob)).sum())
        predicted[fid] = int(changed.sum())
    if int(ops.a.shape[1]) * 2**14 >= 2**24:
        reach = (diff & (accumulator_row_col_bound(ops.a, ops.b).to(dev) >= 2**24)).any(dim=1)
        if bool(reach.any()):
            explained["F7"], predicted["F7"] = _f7_explained(spec, ops, ob, ref, fits, reach)
    return {"n_differ": n, "explained": explained, "predicted": predicted}


#: Rows of a case F7's tile depths are first tried on (:func:`_f7_explained`).
F7_SAMPLE_ROWS = 8


def _f7_explained(spec, ops, ob, ref, fits, reach) -> tuple[int, int]:
    """``(explained, predicted)`` of F7 on the rows ``reach`` (bool [M]: a differing element there can be reached by
    a float32 partial sum): the tile depth of :data:`F7_TILES` that reproduces the most differing elements on
    :data:`F7_SAMPLE_ROWS` of those rows (``sampled_rows``), then run over all of them; ``ob`` / ``ref``: the
    output's / declared reference's bits, ``fits``: |acc| <= 2^31-1 (bool [M, N])."""
    dev = ob.device
    a, b = ops.a.to(dev), ops.b.to(dev)
    sa, sb = ops.scale_a.to(dev), ops.scale_b.to(dev)
    bias = None if ops.bias is None else ops.bias.to(dev)

    def counts(block, rows) -> tuple[int, int]:
        acc = torch.zeros(ob.shape, dtype=torch.float32, device=dev)
        acc[rows] = float32_running_sum(a[rows], b, block)
        alt = bits_of(apply_epilogue(acc, sa, sb, spec.contract, bias=bias, out_dtype=ops.out_dtype))
        keep = torch.zeros(ob.shape[0], dtype=torch.bool, device=dev)
        keep[rows] = True
        changed = (alt != ref) & fits & keep.unsqueeze(1)
        return int((changed & (alt == ob)).sum()), int(changed.sum())

    sample = sampled_rows(reach, F7_SAMPLE_ROWS)
    best = max(F7_TILES, key=lambda block: counts(block, sample)[0])
    return counts(best, reach.nonzero().reshape(-1))


def explain_block_output(
    spec, ops, out, device: Optional[str] = None, reference: Optional[torch.Tensor] = None, rows: Optional[int] = None
) -> Optional[dict]:
    """:func:`explain_output` for a block-scaled case: the elements whose bits differ from the declared block
    reference (``reference`` when given: ``conformance.kernels.declared``'s output on ``ops``, out_dtype [M, N]),
    and how many of them each block fault class's emulation (``faults.block.block_fault_output``: F1-F5, F11-F14
    of ``faults_for(operands, "block")``; e4m3: F10 at the default deficit) reproduces; the same dict. ``rows`` None: every element is emulated and
    tested. ``rows`` r: only the differing elements of at most r rows, spread evenly over the rows holding one
    (:func:`sampled_rows`), are emulated and tested: ``n_differ`` counts those, ``sampled_from`` every differing
    element, ``predicted`` counts within the rows x columns of those elements. None where nothing differs or the
    case has no block size."""
    if out is None or ops.block_size is None or spec.block is None:
        return None
    ref = reference if reference is not None else declared_reference(spec, ops, device).output
    dev = ref.device
    ob, rb = bits_of(out.to(dev)), bits_of(ref)
    diff = ob != rb
    n_all = int(diff.sum())
    if n_all == 0:
        return None
    if rows is None:
        tested = diff
        mask = box = torch.ones(diff.shape, dtype=torch.bool)
    else:
        keep = torch.zeros(diff.shape[0], dtype=torch.bool, device=dev)
        keep[sampled_rows(diff.any(dim=1), rows)] = True
        tested = mask = diff & keep.unsqueeze(1)
        box = tested.any(dim=1, keepdim=True) & tested.any(dim=0, keepdim=True)
    n = int(tested.sum())
    acc = spec.accumulator_on(torch.device(device or "cpu").type) if spec.operands == "e4m3" else None
    call = (ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias, ops.out_dtype, ops.block_size, spec.block)
    explained, predicted = {}, {}
    for fc in faults_for(spec.operands, "block"):
        if fc.id not in BLOCK_EMULATED:
            continue
        # F10: the accumulator narrowed by the default deficit (the sweep's injection; another deficit goes unnamed)
        model = narrowed_model(acc, f10_deficit(None)) if fc.id == "F10" and acc is not None else acc
        alt = bits_of(block_fault_output(*call, fc.id, mask, model).to(dev))
        changed = (alt != rb) & box.to(dev)
        explained[fc.id] = int((changed & (alt == ob) & tested).sum())
        predicted[fc.id] = int(changed.sum())
    return {"n_differ": n, "explained": explained, "predicted": predicted} | (
        {} if rows is None else {"sampled_from": n_all}
    )


def sampled_rows(holding: torch.Tensor, rows: int) -> torch.Tensor:
    """int64 indices of at most ``rows`` (>= 1) of the True entries of ``holding`` (bool [M]): all of them when there
    are no more, else ``rows`` spread evenly over them (the first and the last included), ascending."""
    idx = holding.nonzero().reshape(-1)
    if len(idx) <= rows:
        return idx
    pick = torch.linspace(0, len(idx) - 1, max(1, rows), dtype=torch.float64).round().to(torch.int64)
    return idx[pick.unique()]


#: Evidence key of a sweep store's failing C8 row holding the cell's :func:`stored_explanation`.
EXPLANATION_KEY = "fault_explanation"


def stored_explanation(explanation: dict) -> dict:
    """What a sweep row keeps of an :func:`explain_output` / :func:`explain_block_output` dict: ``{"n_differ": n,
    "explained": {fid: k}}`` (every class tested, 0 included: a tested class is judged by its emulation alone) and
    ``sampled_from`` where present, the ``predicted`` counts dropped; plain ints, catalogue order."""
    ex = explanation["explained"]
    out = {
        "n_differ": int(explanation["n_differ"]),
        "explained": {fid: int(ex[fid]) for fid in sorted(ex, key=catalogue_order)},
    }
    if "sampled_from" in explanation:
        out["sampled_from"] = int(explanation["sampled_from"])
    return out


def case_scores(cr, ft: Optional[FailureFeatures] = None) -> dict:
    """:func:`class_scores` of one failing ``CaseResult`` (its features, ``features_of_case`` unless given, and its
    ``fault_explanation``)."""
    return class_scores(ft if ft is not None else features_of_case(cr), getattr(cr, "fault_explanation", None))


def class_scores(ft: FailureFeatures, explanation: Optional[dict] = None) -> dict:
    """``{fault id: score in [0, 1]}`` of one failing case or sweep cell: for each class ``explanation`` tested
    (:func:`explain_output` / :func:`explain_block_output`: ``{"n_differ": n, "explained": {fid: k}}``) ``k / n``
    when its emulation reproduces more than half of the ``n`` differing elements, else 0; for the others 1 where
    :data:`SIGNATURES`' predicate matches ``ft``, else 0. Only classes scoring above 0 appear (a class is
    "consistent with" the case exactly when it appears), in catalogue order."""
    out = {fid: 1.0 for fid, _ in match_signatures(ft)}
    if explanation:
        n = explanation["n_differ"]
        for fid, k in explanation["explained"].items():
            out.pop(fid, None)
            if 2 * k > n:
                out[fid] = k / n
    return {fid: out[fid] for fid in sorted(out, key=catalogue_order)}


@dataclass
class ClassRank:
    """One consistent class of a report: ``score`` (mean of :func:`case_scores` over the failing cases),
    ``precision`` (of the elements its emulation changes, the fraction that differ: the tie-break), ``cases``
    (failing cases it is consistent with), ``explained`` of the ``differ`` elements differing from the declared
    reference over every failing case tested (emulated classes F1-F5 only; else 0)."""

    fault: str
    score: float
    precision: float
    cases: int
    explained: int = 0
    differ: int = 0
    block: bool = False

    def line(self, n_failing: int, failed: Sequence[str]) -> str:
        """The report line: ``failed`` the checks the ``n_failing`` failing cases fail (:func:`failed_checks`)."""
        name = get_fault(self.fault).name.replace("_", " ")
        if self.differ:
            what = "epilogue" if self.fault in POSTPROCESSING_FAULTS and not self.block else "emulation"
            how = (
                f"{get_fault(self.fault).description}: its {what} reproduces {self.explained} of the "
                f"{self.differ} differing elements"
            )
        else:
            how = SIGNATURES[self.fault][1]
        # not the explanation of most failing cases, or its emulation leaves some differing element unexplained
        partly = "partly " if 2 * self.cases <= n_failing or self.explained < self.differ else ""
        return (
            f"{partly}consistent with {self.fault} {name}: {how} (score {self.score:.2f}; {self.cases} of "
            f"{n_failing} cases failing {_either(failed)})"
        )


def failed_checks(cases: Iterable) -> list[str]:
    """The ids of the checks that fail on any of the case results ``cases`` (``CaseResult.kernel_failures``: not a
    precondition violated), in ``CHECK_NAMES`` order."""
    ids = {r.check_id for cr in cases for r in cr.kernel_failures}
    return [cid for cid in CHECK_NAMES if cid in ids]


def _either(ids: Sequence[str]) -> str:
    """``C8``, ``C5 or C8``, ``C5, C8 or C10``."""
    return ids[0] if len(ids) == 1 else f"{', '.join(ids[:-1])} or {ids[-1]}"


def rank_classes(failing: list) -> list[ClassRank]:
    """The classes consistent with at least one of the ``failing`` CaseResults, best explanation first: score, then
    precision, then cases, then catalogue order."""
    n = len(failing)
    acc: dict = {}
    block = any(str(cr.case).startswith(BLOCK_CASE_PREFIX) for cr in failing)
    explained: dict = {}
    predicted: dict = {}
    differ = 0
    for cr in failing:
        ex = getattr(cr, "fault_explanation", None)
        if ex:
            differ += ex["n_differ"]
            for fid, k in ex["explained"].items():
                explained[fid] = explained.get(fid, 0) + k
                predicted[fid] = predicted.get(fid, 0) + ex["predicted"][fid]
        for fid, sc in case_scores(cr).items():
            r = acc.setdefault(fid, ClassRank(fid, 0.0, 0.0, 0))
            r.score += sc  # summed here, the mean below
            r.cases += 1
    for r in acc.values():
        r.score /= n
        if r.fault in explained and differ:
            r.explained, r.differ, r.block = explained[r.fault], differ, block
            r.precision = r.explained / predicted[r.fault] if predicted[r.fault] else 0.0
        else:
            r.precision = r.score
    return sorted(
        acc.values(), key=lambda r: (-round(r.score, 9), -round(r.precision, 9), -r.cases, catalogue_order(r.fault))
    )


_SCALE_MODE_LABELS = {"pow2": "power-of-two", "own": "checkpoint (real)", "synthetic": "real (not power-of-two)"}


def _dtype_label(text: str) -> str:
    return {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}.get(text, text)


#: how the pattern names a case source (``CaseResult.source``)
_SOURCE_LABELS = {
    "family": "planted-family cases",
    "capture": "captured-layer cases",
    "tile_edges": "tile-edge cases",
    "synthetic": "synthetic cases",
}


#: The sizes :func:`failing_pattern` bounds, of a case result's shape ``[M, K, N]``: each dimension, then (where no
#: dimension alone is bounded) the output elements and the MACs.
_SIZES = {
    "M": lambda c: int(c.shape[0]),
    "K": lambda c: int(c.shape[1]),
    "N": lambda c: int(c.shape[2]),
    "M*N": lambda c: int(c.shape[0]) * int(c.shape[2]),
    "M*K*N": lambda c: int(c.shape[0]) * int(c.shape[1]) * int(c.shape[2]),
}


def failing_pattern(cases: list, failing: list) -> Optional[str]:
    """``all failing cases: bf16 out, M >= 4095``: what every failing case shares and some passing case does not
    (out dtype, bias, scale mode, source, the layout of ``a`` and ``b``, a per-tensor scale, a strided bias, a lower
    or upper bound on M, N, K, else on M*N or M*K*N); None when every case failed or nothing sets the failing ones
    apart. A bound is named
    where no passing case crosses it, else where no passing case sharing the named attributes does, or those and one
    scale's form (a conjunction: ``scale_a dense, M >= 65`` where per-tensor-scale cases pass at any M). ``cases``:
    every case that ran."""
    fail_ids = {id(c) for c in failing}
    rest = [c for c in cases if id(c) not in fail_ids]
    if not failing or not rest:
        return None

    def layouts(c, k):
        return ((c.run_manifest or {}).get("extra") or {}).get("operand_layouts", {}).get(k)

    def common(get):
        """The value every failing case has and some passing case has not, else None."""
        vals = {get(c) for c in failing}
        return None if len(vals) != 1 or None in vals or all(get(c) in vals for c in rest) else next(iter(vals))

    def unusual(k, usual):
        """Operand ``k``'s layout where it is not one of ``usual`` (the default path), else None (not named)."""
        return lambda c: None if layouts(c, k) in usual else layouts(c, k)

    attrs = (
        (lambda c: _dtype_label(c.out_dtype), "{} out"),
        (lambda c: bool(c.bias), None),  # no format: "with bias" / "no bias"
        (lambda c: _SCALE_MODE_LABELS.get(c.scale_mode, c.scale_mode), "{} scales"),
        (lambda c: _SOURCE_LABELS.get(c.source, f"{c.source} cases"), "{}"),
        (lambda c: layouts(c, "a"), "a {}"),
        (lambda c: layouts(c, "b"), "b {}"),
        (unusual("scale_a", ("dense",)), "scale_a {}"),  # a per-tensor (scalar) or strided scale: its own path
        (unusual("scale_b", ("dense",)), "scale_b {}"),
        (unusual("bias", ("none", "dense", None)), "bias {}"),  # a strided or broadcast bias
    )
    # a scale's form shared by the failing cases (getter, value, name): named only with a bound it makes hold
    form_gets = {k: (lambda c, k=k: layouts(c, k)) for k in ("scale_a", "scale_b")}
    forms = [(get, v, f"{k} {v}") for k, get in form_gets.items() if (v := common(get)) is not None]
    parts, shared = [], []
    for get, fmt in attrs:
        v = common(get)
        if v is not None:
            shared.append((get, v))
            parts.append(("with bias" if v else "no bias") if fmt is None else fmt.format(v))

    def bound(size, dim: str, pool: list) -> Optional[str]:
        lo, hi = min(size(c) for c in failing), max(size(c) for c in failing)
        if any(size(c) < lo for c in pool) and not any(size(c) >= lo for c in pool):
            return f"{dim} >= {lo}"
        if any(size(c) > hi for c in pool) and not any(size(c) <= hi for c in pool):
            return f"{dim} <= {hi}"
        return None

    alike = [c for c in rest if all(get(c) == v for get, v in shared)]  # passing cases with the named attributes
    bounds = 0
    for dim in ("M", "K", "N"):
        found = bound(_SIZES[dim], dim, rest) or bound(_SIZES[dim], dim, alike)
        for get, v, named in forms if found is None else ():
            found = bound(_SIZES[dim], dim, [c for c in alike if get(c) == v])
            if found is not None:
                parts += [] if named in parts else [named]
                break
        parts += [found] if found else []
        bounds += found is not None
    for dim in ("M*N", "M*K*N") if not bounds else ():  # no dimension alone: the output size, the MACs
        found = bound(_SIZES[dim], dim, rest) or bound(_SIZES[dim], dim, alike)
        if found:
            parts.append(found)
            break
    if not parts:
        return None
    return "all failing cases: " + ", ".join(parts)


#: block-scaled cases (``conformance.cases.block``) and what their signature says
BLOCK_CASE_PREFIX = "block/"
BLOCK_SIGNATURE_LINE = (
    "block-scaled cases: no block fault class's emulation (F1-F5, F11-F14) reproduces more than half of the differing "
    "elements (C8 names the first differing element and, where one fits, the field form the kernel's bits are)"
)


def signature_lines(result) -> list[str]:
    """A failing ConformanceResult's lines: the interface failures (not numeric); the cases failed only by the
    declaration (:func:`declaration_line`); the pattern the failing cases share (:func:`failing_pattern`); each
    consistent fault class, best explanation first (:func:`rank_classes`), with its score and case count ("partly
    consistent" where it explains at most half of the failing cases, or its emulation reproduces only some of the
    differing elements);
    :func:`no_signature_line` when none is; empty when no case failed. Precondition-only failures and cases whose
    kernel call gave no output (it raised, its process crashed or hung: ``checks.result.CALL_ID``) do not count as
    failing: a signature explains numerics only."""
    failing = [
        cr
        for cr in result.cases
        if getattr(cr, "crash", None) is None
        and CALL_ID not in cr.checks
        and any(r.verdict == Verdict.FAIL and not r.is_precondition_violation for r in cr.checks.values())
    ]
    iface = [cr for cr in failing if getattr(cr, "interface", None)]
    failing = [cr for cr in failing if not getattr(cr, "interface", None)]
    declared = [cr for cr in failing if declaration_only(cr)]
    failing = [cr for cr in failing if not declaration_only(cr)]
    head = [interface_line(len(iface))] if iface else []
    failed = failed_checks(failing + declared)
    ran = [cr for cr in result.cases if cr.produced_output and not getattr(cr, "interface", None)]
    pattern = failing_pattern(ran, failing)
    if failing and all(str(cr.case).startswith(BLOCK_CASE_PREFIX) for cr in failing):
        ranks = rank_classes(failing)
        head += [pattern] if pattern else []
        return head + ([r.line(len(failing) + len(declared), failed) for r in ranks] or [BLOCK_SIGNATURE_LINE])
    acc_off = sum(features_of_case(cr).acc_mismatch for cr in failing)
    n = len(failing) + len(declared)
    head += [accumulator_line(acc_off, n)] if acc_off else []
    head += [declaration_line(len(declared), n)] if declared else []
    head += [pattern] if pattern else []
    ranks = [r for r in rank_classes(failing) if not withdrawn(r, result)]
    if failing and not ranks:
        return head + [no_signature_line(len(failing))]
    return head + [r.line(n, failed) for r in ranks]


def withdrawn(rank: "ClassRank", result) -> bool:
    """Whether a ranked class is not offered: its emulation was tested and reproduces none of the differing elements
    (a "partly consistent" score from its predicate on other cases explains nothing); or F10 named by its predicate
    alone while C11 measured the accumulator keeping every declared bit (passed)."""
    if rank.differ and not rank.explained:
        return True
    if rank.fault != "F10" or rank.differ:
        return False
    c11 = next((c for c in getattr(result, "checks", ()) if c.check_id == "C11"), None)
    return c11 is not None and c11.verdict == Verdict.PASS


def interface_line(n: int) -> str:
    """The line for ``n`` cases whose call broke the interface (check IF: an invalid output or an operand written):
    no numeric fault class applies."""
    return (
        f"interface failure on {n} case{'' if n == 1 else 's'} (check IF): the kernel's call broke the interface "
        f"there (its output or an operand; IF says which), so no numeric fault class is offered for "
        f"{'it' if n == 1 else 'them'}"
    )


def accumulator_line(n_off: int, n_failing: int) -> str:
    """The line for C3 finding the kernel's own accumulator off the exact sum in ``n_off`` of
    ``n_failing`` failing cases: a main-loop bug, for which F1-F5 and F7 are not offered."""
    return (
        f"the kernel's accumulator differs from the exact integer sum (C3) in {n_off} "
        f"of {n_failing} failing cases: a main-loop bug, not a post-processing fault"
    )
