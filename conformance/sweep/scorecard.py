"""Write a sweep's scorecard (``reports/sweep/<kernel>/``): ``scorecard.json`` (everything:
identity and timing, matrices with digests, the fault x check x scale mode table, totals,
every mismatch with its ground truth, headlines, signature hits), ``scorecard.csv`` (the
table), ``mismatches.csv`` (all matrices, column ``matrix``), ``scorecard.md`` and
``detection.png`` (``plots`` extra: detection-rate heatmap, fired/applicable cells as
text, a red box where the latest matrix's prediction disagrees).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pandas as pd

from conformance.kernels.spec import FP8
from conformance.sweep.scoring import (
    CHECK_ORDER,
    headlines,
    mismatch_rows,
    observations,
    predicted,
    signature_hits,
    table,
    tag_totals,
)
from faults.catalogue import get_fault
from reference.fileio import atomic_write_json, atomic_write_text, portable_paths, portable_text


def build(rows: list, matrices: dict, meta: dict) -> dict:
    """All scorecard content (no files) from ``SweepStore.rows()``, ``{tag:
    PredictionMatrix}`` in protocol order (v1 first) and the sweep description ``meta``."""
    obs = observations(rows)
    scored = predicted(obs, matrices)
    card = table(scored, list(matrices), by_mode=True)
    card_f = table(scored, list(matrices), by_mode=False)
    mm = {tag: mismatch_rows(scored, tag) for tag in matrices}
    sig = signature_hits(rows)
    sig_rate = {}
    if not sig.empty:
        for f, g in sig.groupby("fault"):
            sig_rate[f] = {
                "cells_with_failures": int(len(g)),
                "injected_fault_matched": int(g["hit"].sum()),
                "mean_classes_matched": round(float(g["n_matched"].mean()), 2),
            }
    return {
        "meta": meta,
        "matrices": {
            tag: {
                "file": m.path.name,
                "sha256": m.sha256,
                "amends": m.amends,
                "rows": list(m.rows),
                "core_cells": m.n_core_cells(),
                "changes": m.changes,
            }
            for tag, m in matrices.items()
        },
        "table": card,
        "table_by_fault": card_f,
        "mismatches": mm,
        "totals": {tag: tag_totals(scored, tag) for tag in matrices},
        "headlines": headlines(obs),
        "signatures": sig_rate,
    }


def heat_cell(r) -> tuple:
    """``(rate, text)`` of one heatmap cell from a :func:`conformance.sweep.scoring.table` row: the detection rate
    over the cells where the fault changed an output (a silent no-op cell is no miss), ``fired/effective`` with
    ``+k no-op``; ``(nan, "no-op")`` when the fault changed nothing there, ``(nan, "n/a")`` when nothing applied."""
    quiet = int(getattr(r, "silent_no_op", 0) or 0)
    effective = int(r.fired) + int(r.silent) - quiet
    extra = f"\n+{quiet} no-op" if quiet else ""
    if effective > 0:
        return r.fired / effective, f"{r.fired}/{effective}{extra}"
    return float("nan"), "no-op" if quiet else "n/a"


def heatmap(card: pd.DataFrame, tag: str, path: Path, title: str) -> None:
    """Detection-rate heatmap (rows fault@mode, columns checks) to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = sorted({(r.fault, r.scale_mode) for r in card.itertuples()}, key=lambda t: (int(t[0][1:]), t[1]))
    cols = [c for c in CHECK_ORDER if c in set(card["check_id"])]
    z = np.full((len(rows), len(cols)), np.nan)
    txt = [["" for _ in cols] for _ in rows]
    box = np.zeros_like(z, dtype=bool)
    for r in card.itertuples():
        i, j = rows.index((r.fault, r.scale_mode)), cols.index(r.check_id)
        z[i, j], txt[i][j] = heat_cell(r)
        n = {k: getattr(r, f"{k}_{tag.replace('.', '_')}", 0) or 0 for k in ("fp", "fn", "fn_no_op")}
        # false negatives in cells where the fault changed nothing are not the check's miss
        box[i, j] = n["fp"] + n["fn"] - n["fn_no_op"] > 0
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * len(cols), 0.9 + 0.36 * len(rows)))
    im = ax.imshow(z, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for i in range(len(rows)):
        for j in range(len(cols)):
            fg = "dimgray" if np.isnan(z[i, j]) else "white" if z[i, j] < 0.6 else "black"  # n/a, no-op: grey
            ax.text(j, i, txt[i][j], ha="center", va="center", fontsize=7, color=fg)
            if box[i, j]:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", lw=1.6))
    ax.set_xticks(range(len(cols)), cols)
    ax.set_yticks(range(len(rows)), [f"{f} {get_fault(f).name} [{m}]" for f, m in rows], fontsize=7)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label="detection rate (fired / cells where the fault changed an output)")
    note = f"red box: disagrees with predictions {tag} (FP, or FN in a cell where the fault changed an output)"
    fig.text(0.01, 0.005, f"{note}; n/a: not applicable there; no-op: the fault changed no output", fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _md_cell(v) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return ""
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def _md_table(df: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(map(_md_cell, r)) + " |" for r in df.itertuples(index=False)]
    return "\n".join(lines)


def markdown(sc: dict, max_mismatches: int = 60) -> str:
    """The scorecard as Markdown."""
    m = sc["meta"]
    tags = list(sc["matrices"])
    out = [f"# Fault-injection sweep scorecard: kernel `{m['kernel']}`", ""]
    out += [f"Produced by `{m.get('command', 'int8conf sweep')}`.", ""]
    # a sweep with kernel cells (C11: e4m3, C16: block-scaled) and no model cells
    kc = m.get("kernel_cells_check", "C11" if m.get("operands") == FP8 else None)
    fp8 = kc is not None
    asked = (
        f"{m['layer_cells']} layer cells ({m['layers']} layers x {m['faults']} faults x "
        f"{m['coverages']} coverages x {m['scale_modes']} scale modes x {m['seeds']} seeds) + "
        f"{m['model_cells']} {f'kernel cells ({kc})' if fp8 else 'model cells (C7, E1)'}"
    )
    stored = (m.get("stored_layer_cells"), m.get("stored_model_cells"))
    if None in stored or stored == (m["layer_cells"], m["model_cells"]):
        out += [f"- cells: {asked}"]
    else:  # a slice run on a store holding more: the tables score every stored cell
        out += [
            f"- cells scored: every cell in the store, {stored[0]} layer cells + {stored[1]} "
            f"{'kernel' if fp8 else 'model'} cells (this command asked for {asked})"
        ]
    out.append(f"- store: `{m['db']}` ({m['rows']} rows, one per cell x check)")
    lines = [("timing", "timing_line"), ("C7 inside the sweep", "c7_line"), ("E1", "e1_line")]
    if fp8:
        lines += [("scale modes", "scale_modes_line"), ("kernel cells", "kernel_cells_line")]
    for label, key in lines:
        out.append(f"- {label}: {m.get(key, '')}")
    out += [f"- machine: {m.get('machine', '')}", "", "## Matrices", ""]
    for mx in sc["matrices"].values():
        am = f", amends {mx['amends']['file']}@{mx['amends']['sha256'][:12]}" if mx["amends"] else ""
        out.append(
            f"- `{mx['file']}` sha256 `{mx['sha256'][:16]}...`: {len(mx['rows'])} rows, "
            f"{mx['core_cells']} core cells{am}; {len(mx['changes'])} changed cells"
        )
    out += ["", "## Totals", ""]
    for tag, t in sc["totals"].items():
        for part in ("core", "all"):
            x = t[part]
            span = m.get("checks_core", "C1-C7") if part == "core" else m.get("checks_all", "C1-C8 + E1")
            out.append(
                f"- against {tag}, {span}: "
                f"{x['scored']} scored check-cells, TP {x['TP']}, TN {x['TN']}, FP {x['FP']}, "
                f"FN {x['FN']} (of which {x['FN_no_op']} in cells where the fault changed "
                f"nothing), unexpected-applicable {x['unexpected_applicable']}"
            )
    h = sc["headlines"]
    out += ["", "## Headlines", ""]
    if h.get("f8_fired") is not None:  # only where the null fault was swept
        out += [f"- F8 (null) fired a check in {h['f8_fired']} check-cells.", ""]
    out.append(
        "| fault | detected by (cells fired) | layer cells | effective (changed output) | no-op | max spacings moved |"
    )
    out.append("|---|---|---|---|---|---|")
    for f, d in h["per_fault"].items():
        det = ", ".join(f"{c} {n}" for c, n in d["detected_by"].items()) or "none"
        out.append(
            f"| {f} {d['name']} | {det} | {d['layer_cells']} | {d['effective_cells']} | "
            f"{d['no_op_cells']} | {d['max_spacing']} |"
        )
    out += [
        "",
        "What C8 adds over C1-C6 (layer cells where only C8 fired): "
        + (", ".join(f"{f} {n}" for f, n in h["c8_adds"].items()) or "nothing"),
        "",
    ]
    if not fp8:
        out += [
            "What E1 adds over C7 (model cells where E1 fired and C7 did not): "
            + (", ".join(f"{f} {n}" for f, n in h["e1_adds"].items()) or "nothing"),
            "",
        ]
    if sc["signatures"]:
        out += [
            "Fault signatures (the lines a failing conformance report prints), checked on "
            "every layer cell with a failure: "
            + "; ".join(
                f"{f} {v['injected_fault_matched']}/{v['cells_with_failures']} cells name the "
                f"injected fault (mean {v['mean_classes_matched']} classes matched)"
                for f, v in sc["signatures"].items()
            ),
            "",
        ]
    out += ["## Fault x check", ""]
    na = (
        "n/a cells (C3, C4, C6, C12 for block-scaled kernels: C8 judges the declared block accumulation bit "
        "for bit; C5 under real group scales) are not scored; C16 rows come from the kernel cells"
        if kc == "C16"
        else "n/a cells (C3 and C5 for e4m3 operands and real scales; C5 / C6 / C8 where the declared "
        "accumulator is not provably exact) are not scored; C11 rows come from the kernel cells"
        if fp8
        else "n/a cells (C5 under own scales, C6 under pow2) are not scored"
    )
    out += [f"Detection rate = fired / (fired + silent) cells; {na}. `pred`, `FP`, `FN` per matrix.", ""]
    card = sc["table_by_fault"]
    cols = ["fault", "check_id", "cells", "fired", "silent", "na", "detection_rate", "no_op_cells"]
    for tag in tags:
        cols += [f"pred_{tag}", f"fp_{tag}", f"fn_{tag}"]
    out += [_md_table(card[cols]), "", "### By scale mode", ""]
    card = sc["table"]
    out += [_md_table(card[["scale_mode"] + cols]), ""]
    for tag in tags:
        mm = sc["mismatches"][tag]
        out += [f"## Mismatches against {tag} ({len(mm)} check-cells)", ""]
        if len(mm):
            summary = (
                mm.groupby(["fault", "check_id", "scale_mode", "outcome"])
                .agg(
                    cells=("layer", "size"),
                    no_op=("gt_no_op", lambda s: int((s == True).sum())),  # noqa: E712
                    max_spacing=("gt_max_spacing", "max"),
                )
                .reset_index()
            )
            first = f"First {min(max_mismatches, len(mm))} cells (all of them in mismatches.csv / scorecard.json):"
            out += [_md_table(summary), "", first, ""]
            show = mm.head(max_mismatches).copy()
            show["summary"] = show["summary"].str.slice(0, 90)
            out += [_md_table(show), ""]
    return "\n".join(out) + "\n"


def write(sc: dict, out_dir, heat_title: Optional[str] = None) -> list[Path]:
    """Write every scorecard file into ``out_dir``; returns the paths. Paths inside are
    written portably (``reference.fileio.portable_paths``), never as this machine's."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tags = list(sc["matrices"])
    sc = dict(sc, meta=portable_paths(sc.get("meta")))
    js = {k: v for k, v in sc.items() if k not in ("table", "table_by_fault", "mismatches")}
    js["table"] = json.loads(sc["table"].to_json(orient="records"))
    js["table_by_fault"] = json.loads(sc["table_by_fault"].to_json(orient="records"))
    js["mismatches"] = {t: json.loads(df.to_json(orient="records")) for t, df in sc["mismatches"].items()}
    paths = [out / "scorecard.json", out / "scorecard.csv", out / "mismatches.csv", out / "scorecard.md"]
    atomic_write_json(paths[0], portable_paths(js))
    atomic_write_text(paths[1], portable_text(sc["table"].to_csv(index=False)))
    mm = (
        pd.concat([df.assign(matrix=t) for t, df in sc["mismatches"].items()], ignore_index=True)
        if sc["mismatches"]
        else pd.DataFrame()
    )
    atomic_write_text(paths[2], portable_text(mm.to_csv(index=False)))
    atomic_write_text(paths[3], portable_text(markdown(sc)))
    card = sc["table"].rename(columns=lambda c: c.replace(".", "_"))
    try:
        import matplotlib  # noqa: F401 -- optional extra int8conf[plots]
    except ImportError:
        # an older picture there would sit beside the new scorecard as if it were its heatmap
        (out / "detection.png").unlink(missing_ok=True)
        return paths
    paths.append(out / "detection.png")
    title = f"{sc['meta']['kernel']}: fault x check detection ({sc['meta']['layer_cells']} layer cells)"
    heatmap(card, tags[-1], paths[4], heat_title or title)
    return paths
