"""Scoring a sweep against pre-registered prediction matrices (DESIGN.md section 7): a check
is observed ``fire`` (fail), ``silent`` (pass) or ``n/a``; FP = fired where ``silent`` was
predicted, FN = silent where ``fire`` was; ``n/a`` cells are scored only where ``n/a`` was
predicted (else ``unexpected_applicable``). Mismatches carry the cell's ground truth.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from conformance.suite.signatures import features_of_cell, match_signatures
from faults.catalogue import FAULTS, get_fault

CHECK_ORDER = ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "E1", "C11", "C12")
CORE = ("C1", "C2", "C3", "C4", "C5", "C6", "C7")
_OBS = {"fail": "fire", "pass": "silent", "n/a": "n/a"}


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
        rec = {k: r[k] for k in ("layer", "fault", "coverage", "scale_mode", "check_id", "verdict")}
        rec.update(seed=int(r["seed"]), observed=_OBS[r["verdict"]], failure_kind=r.get("failure_kind"))
        level = "model" if model else "kernel" if gt.get("kernel_level") else "layer"
        rec.update(summary=r.get("summary", ""), level=level)
        rec.update({f"gt_{k}": None if model else gt.get(k) for k in _GT})
        rec.update(gt_toward_zero=d.get("toward_zero"), gt_away_from_zero=d.get("away_from_zero"))
        rec["max_ulp"] = (r.get("evidence") or {}).get("max_ulp")
        recs.append(rec)
    return pd.DataFrame.from_records(recs, columns=_OBS_COLUMNS)


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


def scorecard(obs: pd.DataFrame, matrices: dict, by_mode: bool = True) -> pd.DataFrame:
    """Per fault x check (x scale mode when ``by_mode``): cells, fired, silent, n/a,
    detection rate (fired / (fired + silent)), no-op cells, and per tag of ``matrices``
    (``{tag: PredictionMatrix}``) its prediction(s), FP, FN, scored, unexpected."""
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
        rec.update(cells=len(g), fired=fired, silent=silent, na=int((g["observed"] == "n/a").sum()))
        rec["detection_rate"] = (fired / (fired + silent)) if fired + silent else None
        rec["no_op_cells"] = int(g["gt_no_op"].eq(True).sum())  # NaN-safe
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
    return (
        card.sort_values(["_f", "_c"] + (["scale_mode"] if by_mode else []))
        .drop(columns=["_c", "_f"])
        .reset_index(drop=True)
    )


def mismatches(obs: pd.DataFrame, matrix, tag: str) -> pd.DataFrame:
    """Every cell whose outcome disagrees with ``matrix`` (FP, FN, unexpected-applicable),
    with its ground truth."""
    df = with_predictions(obs, matrix, tag)
    bad = df[df[f"outcome_{tag}"].isin(["FP", "FN", "unexpected_applicable"])]
    cols = ["fault", "check_id", "scale_mode", "coverage", "layer", "seed", f"pred_{tag}", "observed", f"outcome_{tag}"]
    cols += ["gt_selected", "gt_changed", "gt_max_spacing", "gt_no_op", "max_ulp", "summary"]
    return bad[cols].rename(columns={f"pred_{tag}": "predicted", f"outcome_{tag}": "outcome"}).reset_index(drop=True)


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
    """The closing-note numbers: ``{"per_fault": {F: {name, detected_by {check: cells
    fired}, layer_cells, model_cells, effective_cells (an output changed), no_op_cells,
    max_spacing}}, "c8_adds": {F: layer cells where C8 alone fired}, "e1_adds": {F: model
    cells where E1 fired and C7 did not}, "f8_fired": check-cells fired under F8}``."""
    lay = obs[obs["level"] == "layer"]
    mod = obs[obs["level"] == "model"]
    per = {}
    for f in [x.id for x in FAULTS]:
        g = obs[obs["fault"] == f]
        if g.empty:
            continue
        gl = lay[lay["fault"] == f]
        cells = gl.drop_duplicates(_CELL_KEYS)
        fired = g[g["observed"] == "fire"].groupby("check_id").size().to_dict()
        per[f] = {
            "name": get_fault(f).name,
            "detected_by": {c: int(fired[c]) for c in CHECK_ORDER if c in fired},
            "layer_cells": int(len(cells)),
            "model_cells": int(len(mod[mod["fault"] == f].drop_duplicates(_CELL_KEYS))),
            "effective_cells": int((cells["gt_changed"].fillna(0) > 0).sum()),
            "no_op_cells": int((cells["gt_no_op"] == True).sum()),  # noqa: E712
            "max_spacing": int(cells["gt_max_spacing"].fillna(0).max()) if len(cells) else 0,
        }
    c8_adds, e1_adds = {}, {}
    if not lay.empty:
        piv = lay.pivot_table(index=_CELL_KEYS, columns="check_id", values="observed", aggfunc="first")
        core = [c for c in ("C1", "C2", "C3", "C4", "C5", "C6") if c in piv.columns]
        if "C8" in piv.columns:
            only8 = (piv["C8"] == "fire") & ~(piv[core] == "fire").any(axis=1)
            c8_adds = {f: int(n) for f, n in only8[only8].groupby(level="fault").size().items()}
    if not mod.empty:
        pm = mod.pivot_table(index=_CELL_KEYS, columns="check_id", values="observed", aggfunc="first")
        if "E1" in pm.columns and "C7" in pm.columns:
            only = (pm["E1"] == "fire") & (pm["C7"] != "fire")
            e1_adds = {f: int(n) for f, n in only[only].groupby(level="fault").size().items()}
    f8 = obs[(obs["fault"] == "F8") & (obs["observed"] == "fire")]
    return {"per_fault": per, "c8_adds": c8_adds, "e1_adds": e1_adds, "f8_fired": int(len(f8))}


def signature_hits(rows: Sequence[dict]) -> pd.DataFrame:
    """Per layer cell with a failure: the matched fault classes and whether the injected
    fault is among them."""
    by = {}
    for r in rows:
        if (r.get("ground_truth") or {}).get("model_level"):
            continue
        by.setdefault(tuple(r[k] for k in _CELL_KEYS), []).append(r)
    recs = []
    for key, rs in by.items():
        ft = features_of_cell(rs)
        if not ft.failed:
            continue
        ids = [f for f, _ in match_signatures(ft)]
        recs.append((*key, ",".join(ids), key[1] in ids, len(ids)))
    return pd.DataFrame.from_records(recs, columns=[*_CELL_KEYS, "matched", "hit", "n_matched"])
