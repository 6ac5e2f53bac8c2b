"""Scoring a sweep against pre-registered prediction matrices (DESIGN.md section 7): a check
is observed ``fire`` (fail), ``silent`` (pass) or ``n/a``; FP = fired where ``silent`` was
predicted, FN = silent where ``fire`` was; ``n/a`` cells are scored only where ``n/a`` was
predicted (else ``unexpected_applicable``). Mismatches carry the cell's ground truth.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from conformance.checks.result import Verdict
from conformance.suite.signatures import EXPLANATION_KEY, class_scores, features_of_cell
from faults.catalogue import FAULTS, get_fault
from faults.spec import catalogue_order

CHECK_ORDER = ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "E1", "C11", "C12", "C16")
CORE = ("C1", "C2", "C3", "C4", "C5", "C6", "C7")
_OBS = {Verdict.FAIL: "fire", Verdict.PASS: "silent", Verdict.NOT_APPLICABLE: "n/a"}


def check_span(checks) -> str:
    """Short label of check ids in :data:`CHECK_ORDER` order: the leading run ``C1``..``Cn`` as
    ``C1-Cn``, the rest after `` + `` (``C1-C7``; ``C1-C8 + E1``; ``C1-C6 + C8, C11, C12``)."""
    ids = sorted(checks, key=CHECK_ORDER.index)
    run = 0
    while run < len(ids) and ids[run] == f"C{run + 1}":
        run += 1
    head = f"C1-C{run}" if run > 1 else ", ".join(ids[:run])
    rest = ", ".join(ids[run:])
    return f"{head} + {rest}" if head and rest else head or rest


_OBS_COLUMNS = (
    "layer fault coverage scale_mode seed check_id verdict observed failure_kind summary level gt_selected "
    "gt_changed gt_max_spacing gt_no_op gt_toward_zero gt_away_from_zero max_ulp"
).split()
_GT = ("selected", "changed", "max_spacing", "no_op")
_CELL_KEYS = ["layer", "fault", "coverage", "scale_mode", "seed"]


def observations(rows: Sequence[dict]) -> pd.DataFrame:
    """One row per (cell, check) from ``SweepStore.rows()``: the cell's key, ``check_id,
    verdict, observed, failure_kind, summary, level`` (``layer`` / ``model`` / ``kernel``),
    the ground truth's ``gt_selected, gt_changed, gt_max_spacing, gt_no_op`` (None for model
    cells; a kernel cell's: the fault's on C11's probe operands),
    ``gt_toward_zero, gt_away_from_zero`` and ``max_ulp``."""
    recs = []
    for r in rows:
        gt = r.get("ground_truth") or {}
        d = gt.get("direction_vs_declared") or {}
        model = bool(gt.get("model_level"))
        level = "model" if model else "kernel" if gt.get("kernel_level") else "layer"
        truth = (None,) * len(_GT) if model else tuple(gt.get(k) for k in _GT)
        recs.append(
            (r["layer"], r["fault"], r["coverage"], r["scale_mode"], int(r["seed"]), r["check_id"], r["verdict"])
            + (_OBS[r["verdict"]], r.get("failure_kind"), r.get("summary", ""), level)
            + truth
            + (d.get("toward_zero"), d.get("away_from_zero"), (r.get("evidence") or {}).get("max_ulp"))
        )
    return pd.DataFrame.from_records(recs, columns=_OBS_COLUMNS)


_SCORED = ("TP", "TN", "FP", "FN")


def with_predictions(obs: pd.DataFrame, matrix, tag: str) -> pd.DataFrame:
    """Add ``pred_<tag>`` and ``outcome_<tag>`` columns (``TP``, ``TN``,
    ``FP``, ``FN``, ``na`` (not scored), ``unexpected_applicable``,
    ``na_as_predicted``). ``matrix.predict`` is asked once per distinct (fault, check,
    scale mode); PredictionError as it raises for the first such key that has none."""
    df = obs.copy()
    (fc, fu), (cc, cu), (mc, mu) = (
        pd.factorize(df[k], use_na_sentinel=False) for k in ("fault", "check_id", "scale_mode")
    )
    codes, first = pd.factorize((fc * len(cu) + cc) * len(mu) + mc)  # distinct keys, in order of appearance
    c_, m_ = np.divmod(first, len(mu))
    f_, c_ = np.divmod(c_, len(cu))
    preds = np.array([matrix.predict(fu[f], cu[c], mu[m]) for f, c, m in zip(f_, c_, m_)], dtype=object)[codes]
    df[f"pred_{tag}"] = preds.tolist()
    o = df["observed"].to_numpy(dtype=object)
    outcome = np.where(
        preds == "n/a",
        np.where(o == "n/a", "na_as_predicted", "unexpected_applicable"),
        np.where(
            o == "n/a",
            "na",
            np.where(preds == "fire", np.where(o == "fire", "TP", "FN"), np.where(o == "fire", "FP", "TN")),
        ),
    )
    df[f"outcome_{tag}"] = outcome.tolist()
    return df


def predicted(obs: pd.DataFrame, matrices: dict) -> pd.DataFrame:
    """``obs`` with the ``pred_<tag>`` / ``outcome_<tag>`` columns of every tag of ``matrices``
    (``{tag: PredictionMatrix}``, :func:`with_predictions`)."""
    df = obs
    for tag, m in matrices.items():
        df = with_predictions(df, m, tag)
    return df


def scorecard(obs: pd.DataFrame, matrices: dict, by_mode: bool = True) -> pd.DataFrame:
    """Per fault x check (x scale mode when ``by_mode``): cells, fired, silent, n/a,
    detection rate (fired / (fired + silent)), no-op cells, and per tag of ``matrices``
    (``{tag: PredictionMatrix}``) its prediction(s), FP, FN, scored, unexpected."""
    return table(predicted(obs, matrices), list(matrices), by_mode)


def table(scored: pd.DataFrame, tags: Sequence[str], by_mode: bool = True) -> pd.DataFrame:
    """:func:`scorecard` of observations that already carry the prediction columns of
    ``tags`` (:func:`predicted`)."""
    df = scored
    keys = ["fault", "check_id"] + (["scale_mode"] if by_mode else [])
    observed = df["observed"].to_numpy(dtype=object)
    no_op = df["gt_no_op"].eq(True).to_numpy()  # NaN-safe
    counts = {"fired": observed == "fire", "silent": observed == "silent", "na": observed == "n/a"}
    counts["no_op_cells"] = no_op
    counts["silent_no_op"] = counts["silent"] & no_op  # silent where the fault changed no output: not a miss
    for tag in tags:
        oc = df[f"outcome_{tag}"].to_numpy(dtype=object)
        fn = oc == "FN"
        counts[f"fp_{tag}"] = oc == "FP"
        counts[f"fn_{tag}"] = fn
        counts[f"fn_no_op_{tag}"] = fn & no_op
        counts[f"scored_{tag}"] = fn | (oc == "FP") | (oc == "TP") | (oc == "TN")
        counts[f"unexpected_{tag}"] = oc == "unexpected_applicable"
    ind = pd.DataFrame({k: df[k] for k in keys} | {k: v.astype(np.int64) for k, v in counts.items()})
    ind["cells"] = 1
    sums = ind.groupby(keys, sort=True).sum()
    preds = {}
    for tag in tags:
        seen: dict = {}
        for t in df[keys + [f"pred_{tag}"]].drop_duplicates().itertuples(index=False):
            seen.setdefault(tuple(t[:-1]), set()).add(t[-1])
        preds[tag] = {k: "/".join(sorted(v)) for k, v in seen.items()}
    out = []
    for k, n in zip(sums.index, sums.to_dict("records")):
        fired, silent = int(n["fired"]), int(n["silent"])
        rec = dict(zip(keys, k))
        rec.update(cells=int(n["cells"]), fired=fired, silent=silent, na=int(n["na"]))
        rec["detection_rate"] = (fired / (fired + silent)) if fired + silent else None
        rec["no_op_cells"] = int(n["no_op_cells"])
        rec["silent_no_op"] = int(n["silent_no_op"])
        for tag in tags:
            rec[f"pred_{tag}"] = preds[tag][k]
            for c in ("fp", "fn", "fn_no_op", "scored", "unexpected"):
                rec[f"{c}_{tag}"] = int(n[f"{c}_{tag}"])
        out.append(rec)
    card = pd.DataFrame(out)
    card["_c"] = card["check_id"].map(CHECK_ORDER.index)
    card["_f"] = card["fault"].map(catalogue_order)
    return (
        card.sort_values(["_f", "_c"] + (["scale_mode"] if by_mode else []))
        .drop(columns=["_c", "_f"])
        .reset_index(drop=True)
    )


def mismatches(obs: pd.DataFrame, matrix, tag: str) -> pd.DataFrame:
    """Every cell whose outcome disagrees with ``matrix`` (FP, FN, unexpected-applicable),
    with its ground truth."""
    return mismatch_rows(with_predictions(obs, matrix, tag), tag)


def mismatch_rows(scored: pd.DataFrame, tag: str) -> pd.DataFrame:
    """:func:`mismatches` of observations that already carry ``tag``'s prediction columns."""
    df = scored
    bad = df[df[f"outcome_{tag}"].isin(["FP", "FN", "unexpected_applicable"])]
    cols = ["fault", "check_id", "scale_mode", "coverage", "layer", "seed", f"pred_{tag}", "observed", f"outcome_{tag}"]
    cols += ["gt_selected", "gt_changed", "gt_max_spacing", "gt_no_op", "max_ulp", "summary"]
    return bad[cols].rename(columns={f"pred_{tag}": "predicted", f"outcome_{tag}": "outcome"}).reset_index(drop=True)


def totals(obs: pd.DataFrame, matrix, tag: str) -> dict:
    """Overall counts against one matrix: scored, TP, TN, FP, FN, FN in no-op
    cells, unexpected-applicable; core (C1-C7) and all columns."""
    return tag_totals(with_predictions(obs, matrix, tag), tag)


def tag_totals(scored: pd.DataFrame, tag: str) -> dict:
    """:func:`totals` of observations that already carry ``tag``'s prediction columns."""
    outcome = scored[f"outcome_{tag}"].to_numpy(dtype=object)
    no_op = scored["gt_no_op"].eq(True).to_numpy()  # NaN-safe
    core = scored["check_id"].isin(CORE).to_numpy()
    out = {}
    for name, sel in (("core", core), ("all", np.ones(len(core), dtype=bool))):
        oc = outcome[sel]
        out[name] = {k: int(np.count_nonzero(oc == k)) for k in _SCORED}
        out[name]["FN_no_op"] = int(np.count_nonzero((oc == "FN") & no_op[sel]))
        out[name]["unexpected_applicable"] = int(np.count_nonzero(oc == "unexpected_applicable"))
        out[name]["scored"] = sum(out[name][k] for k in _SCORED)
    return out


def _by_fault(df: pd.DataFrame) -> dict:
    """``{fault: its rows of df}`` (row order kept)."""
    return dict(iter(df.groupby("fault", sort=False))) if len(df) else {}


def headlines(obs: pd.DataFrame) -> dict:
    """The closing-note numbers: ``{"per_fault": {F: {name, detected_by {check: cells
    fired}, layer_cells, model_cells, effective_cells (an output changed), no_op_cells,
    max_spacing}}, "c8_adds": {F: layer cells where C8 alone fired}, "e1_adds": {F: model
    cells where E1 fired and C7 did not}, "f8_fired": check-cells fired under F8 (None when no F8 cell was swept)}``."""
    level = obs["level"].to_numpy(dtype=object)
    fire = obs["observed"].to_numpy(dtype=object) == "fire"
    lay = obs[level == "layer"]
    mod = obs[level == "model"]
    every, lay_f, mod_f = _by_fault(obs), _by_fault(lay), _by_fault(mod)
    fired_f = _by_fault(obs[fire])
    per = {}
    for f in [x.id for x in FAULTS]:
        if f not in every:
            continue
        cells = lay_f[f].drop_duplicates(_CELL_KEYS) if f in lay_f else lay.iloc[:0]
        fired = fired_f[f].groupby("check_id").size().to_dict() if f in fired_f else {}
        per[f] = {
            "name": get_fault(f).name,
            "detected_by": {c: int(fired[c]) for c in CHECK_ORDER if c in fired},
            "layer_cells": int(len(cells)),
            "model_cells": int(len(mod_f[f].drop_duplicates(_CELL_KEYS))) if f in mod_f else 0,
            "effective_cells": int((cells["gt_changed"].fillna(0) > 0).sum()),
            "no_op_cells": int((cells["gt_no_op"] == True).sum()),  # noqa: E712
            "max_spacing": int(cells["gt_max_spacing"].fillna(0).max()) if len(cells) else 0,
        }
    c8_adds, e1_adds = {}, {}
    if not lay.empty:
        check = lay["check_id"].to_numpy(dtype=object)
        lay_fire = fire[level == "layer"]
        if (check == "C8").any():  # a cell where C8 fired and none of C1-C6 did
            ind = pd.DataFrame(
                {"c8": lay_fire & (check == "C8"), "core": lay_fire & lay["check_id"].isin(CORE[:6]).to_numpy()},
                index=lay.index,
            )
            per_cell = ind.groupby([lay[k] for k in _CELL_KEYS], sort=False).any()
            only8 = per_cell["c8"] & ~per_cell["core"]
            n8 = only8.groupby(level="fault", sort=True).sum()
            c8_adds = {f: int(n) for f, n in n8.items() if n}
    if not mod.empty:
        pm = mod.pivot_table(index=_CELL_KEYS, columns="check_id", values="observed", aggfunc="first")
        if "E1" in pm.columns and "C7" in pm.columns:
            only = (pm["E1"] == "fire") & (pm["C7"] != "fire")
            e1_adds = {f: int(n) for f, n in only[only].groupby(level="fault").size().items()}
    f8 = int(len(fired_f.get("F8", ()))) if "F8" in every else None  # None: F8 was not swept
    return {"per_fault": per, "c8_adds": c8_adds, "e1_adds": e1_adds, "f8_fired": f8}


def signature_hits(rows: Sequence[dict]) -> pd.DataFrame:
    """Per layer cell with a failure, in the order of its first failing row: the fault classes
    it is consistent with (``suite.signatures.class_scores`` of ``features_of_cell`` and, where a
    failing row stored one (a block-scaled kernel's C8), the cell's emulation test, ``EXPLANATION_KEY``:
    the criterion ``check`` prints as "consistent with") and whether the injected fault is among
    them (``features_of_cell`` reads failing rows only, so only those are grouped)."""
    by = {}
    for r in rows:
        if r["verdict"] != "fail" or (r.get("ground_truth") or {}).get("model_level"):
            continue
        by.setdefault(tuple(r[k] for k in _CELL_KEYS), []).append(r)
    recs = []
    for key, rs in by.items():
        ex = next((e for r in rs if (e := (r.get("evidence") or {}).get(EXPLANATION_KEY))), None)
        ids = list(class_scores(features_of_cell(rs), ex))
        recs.append((*key, ",".join(ids), key[1] in ids, len(ids)))
    return pd.DataFrame.from_records(recs, columns=[*_CELL_KEYS, "matched", "hit", "n_matched"])
