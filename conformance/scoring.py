"""Scoring a fault-injection sweep against pre-registered prediction matrices
(DESIGN.md section 7), and the fault signatures a failing conformance report
names.

Observed outcome of a check in a cell: ``fire`` (verdict ``fail``, any
failure kind, precondition included), ``silent`` (``pass``) or ``n/a``.
Against a matrix (:mod:`predictions`): a false positive is a cell that fired
where ``silent`` was predicted, a false negative a cell that stayed silent
where ``fire`` was predicted. A cell where the check returned ``n/a`` (C5
under own scales, C6 under pow2, a kernel that cannot run) is not scored
unless ``n/a`` was predicted; a cell that fired or stayed silent where
``n/a`` was predicted is counted as ``unexpected_applicable``. Every scored
mismatch is listed with the cell's ground truth (elements changed, spacings
moved, no-op), so a false negative in a cell where the fault changed
nothing (``no_op``) is told apart from a check that missed a real change.

Fault signatures (:data:`SIGNATURES`, :func:`match_signatures`): which
fault classes a set of failures is consistent with, from the failing checks,
the largest spacing distance, and the direction of the differing elements
against the declared-contract reference. The sweep scores them too
(``signature_hit``: the injected fault is among the matched classes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import pandas as pd

from faults.catalogue import FAULTS, get_fault

CHECK_ORDER = ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "E1")
CORE = ("C1", "C2", "C3", "C4", "C5", "C6", "C7")
OUTPUT_CHECKS = ("C5", "C6", "C8")
_OBS = {"fail": "fire", "pass": "silent", "n/a": "n/a"}


# --------------------------------------------------------------------------
# observations
# --------------------------------------------------------------------------

def observations(rows: Sequence[dict]) -> pd.DataFrame:
    """One row per (cell, check) from store rows (``SweepStore.rows()``).

    Returns:
        DataFrame with columns ``layer, fault, coverage, scale_mode, seed,
        check_id, verdict, observed, failure_kind, summary, level`` (``layer``
        / ``model``), and ground-truth columns ``gt_selected, gt_changed,
        gt_max_spacing, gt_no_op, gt_toward_zero, gt_away_from_zero``
        (NaN for model cells).
    """
    recs = []
    for r in rows:
        gt = r.get("ground_truth") or {}
        d = gt.get("direction_vs_declared") or {}
        model = bool(gt.get("model_level"))
        recs.append({
            "layer": r["layer"], "fault": r["fault"], "coverage": r["coverage"],
            "scale_mode": r["scale_mode"], "seed": int(r["seed"]), "check_id": r["check_id"],
            "verdict": r["verdict"], "observed": _OBS[r["verdict"]],
            "failure_kind": r.get("failure_kind"), "summary": r.get("summary", ""),
            "level": "model" if model else "layer",
            "gt_selected": None if model else gt.get("selected"),
            "gt_changed": None if model else gt.get("changed"),
            "gt_max_spacing": None if model else gt.get("max_spacing"),
            "gt_no_op": None if model else gt.get("no_op"),
            "gt_toward_zero": d.get("toward_zero"), "gt_away_from_zero": d.get("away_from_zero"),
            "max_ulp": (r.get("evidence") or {}).get("max_ulp"),
        })
    cols = ["layer", "fault", "coverage", "scale_mode", "seed", "check_id", "verdict", "observed",
            "failure_kind", "summary", "level", "gt_selected", "gt_changed", "gt_max_spacing",
            "gt_no_op", "gt_toward_zero", "gt_away_from_zero", "max_ulp"]
    return pd.DataFrame.from_records(recs, columns=cols)


def with_predictions(obs: pd.DataFrame, matrix, tag: str) -> pd.DataFrame:
    """Add ``pred_<tag>`` and ``outcome_<tag>`` columns (``TP``, ``TN``,
    ``FP``, ``FN``, ``na`` (not scored), ``unexpected_applicable``,
    ``na_as_predicted``)."""
    df = obs.copy()
    preds = [matrix.predict(f, c, m) for f, c, m in zip(df["fault"], df["check_id"], df["scale_mode"])]
    df[f"pred_{tag}"] = preds

    def outcome(p, o):
        if p == "n/a":
            return "na_as_predicted" if o == "n/a" else "unexpected_applicable"
        if o == "n/a":
            return "na"
        if p == "fire":
            return "TP" if o == "fire" else "FN"
        return "FP" if o == "fire" else "TN"

    df[f"outcome_{tag}"] = [outcome(p, o) for p, o in zip(preds, df["observed"])]
    return df


# --------------------------------------------------------------------------
# scorecard
# --------------------------------------------------------------------------

def scorecard(obs: pd.DataFrame, matrices: dict, by_mode: bool = True) -> pd.DataFrame:
    """Per fault x check (x scale mode): cells, fired, silent, n/a,
    detection rate (fired / (fired + silent)), no-op cells, and per matrix
    tag its prediction(s), FP, FN, scored cells and unexpected-applicable.

    Args:
        obs: :func:`observations`.
        matrices: ``{tag: PredictionMatrix}`` (e.g. ``{"v1": ..., "v1.1": ...}``).
        by_mode: group by scale mode too.
    """
    df = obs
    for tag, m in matrices.items():
        df = with_predictions(df, m, tag)
    keys = ["fault", "check_id"] + (["scale_mode"] if by_mode else [])
    out = []
    for k, g in df.groupby(keys, sort=True):
        k = k if isinstance(k, tuple) else (k,)
        fired = int((g["observed"] == "fire").sum())
        silent = int((g["observed"] == "silent").sum())
        rec = dict(zip(keys, k))
        rec.update(cells=len(g), fired=fired, silent=silent, na=int((g["observed"] == "n/a").sum()),
                   detection_rate=(fired / (fired + silent)) if fired + silent else None,
                   no_op_cells=int((g["gt_no_op"] == True).sum()))  # noqa: E712 -- NaN-safe
        for tag in matrices:
            oc = g[f"outcome_{tag}"]
            rec[f"pred_{tag}"] = "/".join(sorted(set(g[f"pred_{tag}"])))
            rec[f"fp_{tag}"] = int((oc == "FP").sum())
            rec[f"fn_{tag}"] = int((oc == "FN").sum())
            rec[f"fn_no_op_{tag}"] = int(((oc == "FN") & (g["gt_no_op"] == True)).sum())  # noqa: E712
            rec[f"scored_{tag}"] = int(oc.isin(["TP", "TN", "FP", "FN"]).sum())
            rec[f"unexpected_{tag}"] = int((oc == "unexpected_applicable").sum())
        out.append(rec)
    card = pd.DataFrame(out)
    card["_c"] = card["check_id"].map(CHECK_ORDER.index)
    card["_f"] = card["fault"].map(lambda f: int(f[1:]))
    return card.sort_values(["_f", "_c"] + (["scale_mode"] if by_mode else [])).drop(
        columns=["_c", "_f"]).reset_index(drop=True)


def mismatches(obs: pd.DataFrame, matrix, tag: str) -> pd.DataFrame:
    """Every scored cell whose outcome disagrees with ``matrix`` (FP, FN,
    unexpected-applicable), with its ground truth."""
    df = with_predictions(obs, matrix, tag)
    bad = df[df[f"outcome_{tag}"].isin(["FP", "FN", "unexpected_applicable"])]
    cols = ["fault", "check_id", "scale_mode", "coverage", "layer", "seed", f"pred_{tag}",
            "observed", f"outcome_{tag}", "gt_selected", "gt_changed", "gt_max_spacing",
            "gt_no_op", "max_ulp", "summary"]
    return bad[cols].rename(columns={f"pred_{tag}": "predicted", f"outcome_{tag}": "outcome"}) \
        .reset_index(drop=True)


def totals(obs: pd.DataFrame, matrix, tag: str) -> dict:
    """Overall counts against one matrix: scored, TP, TN, FP, FN, FN in no-op
    cells, unexpected-applicable; core (C1-C7) and all columns."""
    df = with_predictions(obs, matrix, tag)
    out = {}
    for name, sub in (("core", df[df["check_id"].isin(CORE)]), ("all", df)):
        oc = sub[f"outcome_{tag}"]
        out[name] = {k: int((oc == k).sum()) for k in ("TP", "TN", "FP", "FN")}
        out[name]["FN_no_op"] = int(((oc == "FN") & (sub["gt_no_op"] == True)).sum())  # noqa: E712
        out[name]["unexpected_applicable"] = int((oc == "unexpected_applicable").sum())
        out[name]["scored"] = sum(out[name][k] for k in ("TP", "TN", "FP", "FN"))
    return out


def headlines(obs: pd.DataFrame) -> dict:
    """The closing-note numbers.

    Returns:
        ``{"per_fault": {F: {"detected_by": {check: cells fired}, "cells",
        "effective_cells" (layer cells where the fault changed an output),
        "max_spacing" (largest ground-truth spacing moved, layer cells),
        "spacing_hist", "no_op_cells"}}, "c8_adds": {F: layer cells where C8
        fired and none of C1-C6 did}, "e1_adds": {F: model cells where E1
        fired and C7 did not}, "f8_fired": cells where any check fired under F8}``.
    """
    lay = obs[obs["level"] == "layer"]
    mod = obs[obs["level"] == "model"]
    cell_keys = ["layer", "fault", "coverage", "scale_mode", "seed"]
    per = {}
    for f in [x.id for x in FAULTS]:
        g = obs[obs["fault"] == f]
        if g.empty:
            continue
        gl = lay[lay["fault"] == f]
        cells = gl.drop_duplicates(cell_keys)
        fired = g[g["observed"] == "fire"].groupby("check_id").size().to_dict()
        per[f] = {"name": get_fault(f).name,
                  "detected_by": {c: int(fired[c]) for c in CHECK_ORDER if c in fired},
                  "layer_cells": int(len(cells)),
                  "model_cells": int(len(mod[mod["fault"] == f].drop_duplicates(cell_keys))),
                  "effective_cells": int((cells["gt_changed"].fillna(0) > 0).sum()),
                  "no_op_cells": int((cells["gt_no_op"] == True).sum()),  # noqa: E712
                  "max_spacing": int(cells["gt_max_spacing"].fillna(0).max()) if len(cells) else 0}
    c8_adds, e1_adds = {}, {}
    if not lay.empty:
        piv = lay.pivot_table(index=cell_keys, columns="check_id", values="observed",
                              aggfunc="first")
        core = [c for c in ("C1", "C2", "C3", "C4", "C5", "C6") if c in piv.columns]
        if "C8" in piv.columns:
            only8 = (piv["C8"] == "fire") & ~(piv[core] == "fire").any(axis=1)
            c8_adds = {f: int(n) for f, n in only8[only8].groupby(level="fault").size().items()}
    if not mod.empty:
        pm = mod.pivot_table(index=cell_keys, columns="check_id", values="observed", aggfunc="first")
        if "E1" in pm.columns and "C7" in pm.columns:
            only = (pm["E1"] == "fire") & (pm["C7"] != "fire")
            e1_adds = {f: int(n) for f, n in only[only].groupby(level="fault").size().items()}
    f8 = obs[(obs["fault"] == "F8") & (obs["observed"] == "fire")]
    return {"per_fault": per, "c8_adds": c8_adds, "e1_adds": e1_adds, "f8_fired": int(len(f8))}


# --------------------------------------------------------------------------
# fault signatures
# --------------------------------------------------------------------------

@dataclass
class FailureFeatures:
    """What a set of failures looks like (one case, one cell, or a report).

    Attributes:
        failed: check ids that failed (any failure kind).
        precondition: check ids that failed as precondition violations (C3 / C4).
        max_ulp: largest spacing distance among failing output checks (None: none failed).
        toward_zero, away_from_zero, sign_change: counts of differing elements
            by direction against the declared-contract reference (None: unknown).
        direction_basis: what the counts cover (``all differing elements`` /
            ``worst element of each failing case``).
        pow2_output_failure: an output check failed on a power-of-two case.
        acc_mismatch: C3 found the kernel's own accumulator (its ``int_mm`` entry)
            off the exact / declared sum at some elements (evidence
            ``n_acc_mismatch`` > 0; an entry that raised or returned another shape
            does not count: it says nothing about the sums).
        contradicted: fault ids whose signature a failing element contradicts
            (:func:`contradicted_classes`; empty: none known).
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
    "F1": (lambda ft: _post(ft) and "C2" not in ft.failed,
           "1-spacing output errors with in-range accumulators and the reference's operands"),
    "F2": (lambda ft: _post(ft) and "C2" not in ft.failed,
           "1-spacing output errors with in-range accumulators and the reference's operands"),
    "F3": (lambda ft: _post(ft) and "C2" not in ft.failed
           and not ft.pow2_output_failure and ft.direction != "toward zero",
           "1-spacing errors in both directions, none under power-of-two scales"),
    "F4": (lambda ft: _post(ft) and ft.direction == "toward zero",
           "1-spacing errors, all toward zero"),
    "F5": (lambda ft: _post(ft) and "C2" not in ft.failed
           and not ft.pow2_output_failure and ft.direction != "toward zero",
           "1-spacing errors in both directions, none under power-of-two scales"),
    "F6": (lambda ft: "C3" in ft.precondition and "F6" not in ft.contradicted,
           "an accumulator bound beyond 2^31-1 (int32 overflow), output garbage where it wraps"),
    "F7": (lambda ft: "C4" in ft.precondition and "C3" not in ft.precondition
           and not ft.acc_mismatch and "F7" not in ft.contradicted,
           "|acc| >= 2^24 with int32 headroom (float32 conversion inexact)"),
    "F9": (lambda ft: "C2" in ft.failed,
           "the kernel received operands other than the reference's"),
}


#: precision (significand bits) and smallest normal of each output dtype
_PRECISION = {"torch.bfloat16": (8, 2.0 ** -126), "torch.float16": (11, 2.0 ** -14),
              "torch.float32": (24, 2.0 ** -126)}


def contradicted_classes(worst: dict, k: int, out_dtype: str, bias: bool) -> set:
    """Precondition fault classes that one failing output element contradicts
    (``worst``: a failing output check's worst element, with ``acc``, ``out``,
    ``ref``), on a case of depth ``k``:

    * F6 changes no output where the accumulator fits int32: |acc| <= 2^31-1
      contradicts it;
    * F7 changes no output where float32(acc) is exact: |acc| < 2^24
      contradicts it; so does, without bias, an output further from the
      reference (relative) than a float32 accumulator can move it: (k-1) u /
      (1 - (k-1) u) * k * 2^14 / |acc| (recursive summation of products
      |a*b| <= 2^14, u = 2^-24) plus the epilogue's roundings (4 output
      spacings and 2^-20 relative).
    """
    acc = worst.get("acc")
    if not isinstance(acc, int) or isinstance(acc, bool):
        return set()
    out = set()
    if abs(acc) <= 2 ** 31 - 1:
        out.add("F6")
    if abs(acc) < 2 ** 24:
        return out | {"F7"}
    o, r = worst.get("out"), worst.get("ref")
    prec = _PRECISION.get(out_dtype)
    if bias or prec is None or not all(isinstance(x, (int, float)) and math.isfinite(x)
                                       for x in (o, r)):
        return out
    p, tiny = prec
    g = (k - 1) * 2.0 ** -24
    if abs(r) < tiny or g >= 0.5:
        return out
    rel = g / (1 - g) * k * 2 ** 14 / abs(acc) + 4 * 2.0 ** (1 - p) + 2.0 ** -20
    return out | {"F7"} if abs(o - r) > abs(r) * rel else out


def match_signatures(ft: FailureFeatures) -> list[tuple[str, str]]:
    """Fault classes whose signature ``ft`` matches: ``[(id, line)]`` where
    line reads e.g. ``consistent with F4 output truncation: 1-spacing errors,
    all toward zero``. Empty when nothing failed (F8 never matches)."""
    if not ft.failed:
        return []
    out = []
    for fid, (pred, desc) in SIGNATURES.items():
        if pred(ft):
            name = get_fault(fid).name.replace("_", " ")
            out.append((fid, f"consistent with {fid} {name}: {desc}"))
    return out


def features_of_cell(rows: Iterable[dict]) -> FailureFeatures:
    """Features of one sweep cell from its store rows (direction from the
    ground truth's ``direction_vs_declared``, all differing elements)."""
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
    """Features of one conformance case (``conformance.evaluate.CaseResult``)
    from its failing checks' evidence; the direction is that of the worst
    element of each failing output check (a report keeps no other)."""
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
            ft.contradicted |= contradicted_classes(w, int(cr.shape[1]), str(cr.out_dtype),
                                                    bool(cr.bias))
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
    """The signature line of a report whose ``n_failing`` failing cases match
    no fault class of the catalogue (e.g. a kernel that drops the bias):
    ``the failures match no fault class of the catalogue (6 failing cases)``."""
    return (f"the failures match no fault class of the catalogue ({n_failing} failing "
            f"case{'' if n_failing == 1 else 's'})")


def signature_lines(result) -> list[str]:
    """Lines for a failing conformance report (``ConformanceResult``): each
    fault class whose signature matches at least one failing case, most
    matched first, with how many of the failing cases it matches. Cases are
    matched one by one (a precondition violation in one case does not hide
    a rounding signature in another). A case whose only failures are
    precondition violations (C3/C4 on a large accumulator: a correct kernel
    has them too) is not a failing case here. Empty when no case failed;
    the one line :func:`no_signature_line` when cases failed but none
    matches a class (so a reader sees the hint was computed)."""
    failing = [cr for cr in result.cases
               if any(r.verdict == "fail" and not r.is_precondition_violation
                      for r in cr.checks.values())]
    counts: dict = {}
    lines_of: dict = {}
    acc_off = 0
    for cr in failing:
        ft = features_of_case(cr)
        acc_off += ft.acc_mismatch
        for fid, line in match_signatures(ft):
            counts[fid] = counts.get(fid, 0) + 1
            lines_of[fid] = line
    n = len(failing)
    head = [accumulator_line(acc_off, n)] if acc_off else []
    if n and not counts:
        return head + [no_signature_line(n)]
    order = sorted(counts, key=lambda f: (-counts[f], int(f[1:])))
    return head + [f"{lines_of[f]} ({counts[f]} of {n} failing cases)" for f in order]


def accumulator_line(n_off: int, n_failing: int) -> str:
    """The line of a report where C3 found the kernel's own int32 accumulator
    (its ``int_mm`` entry) off the exact sum in ``n_off`` of ``n_failing`` failing
    cases (``FailureFeatures.acc_mismatch``): a main-loop bug (a K column dropped or padded with non-zeros, a wrong
    tile), which no post-processing class (F1-F5) or F7 explains; they are not
    offered for those cases."""
    return (f"the kernel's accumulator differs from the exact integer sum (C3) in {n_off} "
            f"of {n_failing} failing cases: a main-loop bug, not a post-processing fault")


def signature_hits(rows: Sequence[dict]) -> pd.DataFrame:
    """Per layer cell with a failure: the matched fault classes and whether
    the injected fault is among them (validates the signatures on the sweep)."""
    by = {}
    for r in rows:
        if (r.get("ground_truth") or {}).get("model_level"):
            continue
        by.setdefault((r["layer"], r["fault"], r["coverage"], r["scale_mode"], r["seed"]), []).append(r)
    recs = []
    for key, rs in by.items():
        ft = features_of_cell(rs)
        if not ft.failed:
            continue
        ids = [f for f, _ in match_signatures(ft)]
        recs.append({"layer": key[0], "fault": key[1], "coverage": key[2], "scale_mode": key[3],
                     "seed": key[4], "matched": ",".join(ids), "hit": key[1] in ids,
                     "n_matched": len(ids)})
    return pd.DataFrame.from_records(recs, columns=["layer", "fault", "coverage", "scale_mode",
                                                    "seed", "matched", "hit", "n_matched"])
