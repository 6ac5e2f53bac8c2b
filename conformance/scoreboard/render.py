"""The scoreboard document as Markdown and as a PNG (verdict strip + interchangeability heat map)."""

from __future__ import annotations

import io
import re
from pathlib import Path

from reference.fileio import atomic_write_bytes

STANDARD = tuple(f"{o}/{b}" for o in ("a_then_w", "w_then_a", "fused") for b in ("fp32_before_round", "after_round"))


def _anchor(kernel: str, device: str, check: str) -> tuple[str, str]:
    """Heading text of a failure section and its GitHub anchor."""
    text = re.sub(r"[^A-Za-z0-9_-]", "_", f"{kernel}-{device}-{check}")
    return text, text.lower()


def _libraries(env: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in env.get("libraries", {}).items())


def _declared(r: dict) -> str:
    st = r["declared"]["steps"]
    if st and "steps" in st:
        return "; ".join(st["steps"])
    if st:
        return " / ".join(f"{k}: {'; '.join(v['steps'])}" for k, v in st.items())
    c = r["declared"]["contract"]
    return f"{c.get('scale_order')}/{c.get('bias_point')}" if c else "-"


def render_markdown(doc: dict) -> str:
    env = doc["environment"]
    L = [
        "# int8conf scoreboard",
        "",
        f"torch {env.get('torch')}, devices {env.get('devices')}, {len(doc['cases'])} cases, "
        f"libraries: " + _libraries(env),
        "",
        *[
            f"Merged rows from {e.get('cuda_device') or e.get('machine')}: torch {e.get('torch')}, "
            f"devices {e.get('devices')}, libraries: {_libraries(e)}\n"
            for e in env.get("merged_environments", [])
        ],
        "Verdicts are against each kernel's **own declared epilogue** (C8: 0 ulp) plus the "
        "other per-case checks (C1, C2, C5 pow2 bit identity, C6 within 1 spacing of the "
        "a_then_w reference at the declared bias point).",
        "",
        "## Verdicts",
        "",
    ]
    checks = sorted({c for r in doc["rows"] for c in r["checks"]})
    L.append("| kernel | device | overall | " + " | ".join(checks) + " | cases | paths |")
    L.append("|---|---|---|" + "---|" * len(checks) + "---|---|")
    for r in doc["rows"]:
        cells = _check_cells(r, checks)
        L.append(
            f"| {r['kernel']} | {r['device']} | **{r['overall']}** | "
            + " | ".join(cells)
            + f" | {r['cases_run']} | {', '.join(r['paths'])} |"
        )
    L += _comparison_tables(
        doc,
        (
            "## Maximum spacing (ulp) from each standard contract",
            "## Bit interchangeability (cases with identical output bits / shared cases)",
            "## Declared epilogues",
        ),
    )
    if doc.get("fp8"):
        L += _fp8_section(doc["fp8"])
    L += ["", "## Failures and reproducers", ""]
    any_f = False
    for r in doc["rows"] + (doc.get("fp8") or {}).get("rows", []):
        for chk, lk in r["repro"].items():
            any_f = True
            size = "x".join(str(s) for s in lk["shape"])
            L += [
                f"### {_anchor(r['kernel'], r['device'], chk)[0]}",
                "",
                f"{r['kernel']} on {r['device']}, {chk}: {lk['summary']}",
                "",
                f"reproducer: [`{lk['file']}`]({lk['file']}) "
                f"({'single element' if lk['minimal'] else 'whole case'} {size} of `{lk['case']}`)",
                "",
                f"```\n{lk['command']}\n```",
                "",
            ]
        if r["cases_timeout"]:
            any_f = True
            L.append(f"- {r['kernel']}@{r['device']}: timeouts on {', '.join(r['cases_timeout'])}")
        if r["error"]:
            L.append(f"- {r['kernel']}@{r['device']}: {r['error']}")
    if not any_f:
        L.append("none")
    return "\n".join(L) + "\n"


def _fp8_section(fp8: dict) -> list:
    """Markdown lines of the FP8 (e4m3) rows: verdicts with the declared and the measured accumulator (C11),
    maximum spacing from each standard contract on the exact sum, bit interchangeability."""
    L = [
        "",
        "## FP8 (e4m3) rows",
        "",
        f"{len(fp8['cases'])} FP8 cases (the accumulator-safe families and captured layers quantized to e4m3). "
        "C4 passes and C5 / C6 / C8 judge a case bit-exactly where the declared accumulator provably keeps the "
        "exact sum; C12 holds the output within the bound the declared accumulator implies (captures, and where "
        "it does not); C11 measures the accumulator on its probe rows and fails one that keeps less than declared.",
        "",
    ]
    checks = sorted({c for r in fp8["rows"] for c in r["checks"]})
    L.append(
        "| kernel | device | overall | " + " | ".join(checks) + " | declared accumulator | measured (C11) | cases |"
    )
    L.append("|---|---|---|" + "---|" * len(checks) + "---|---|---|")
    for r in fp8["rows"]:
        acc = r.get("accumulator") or {}
        measured = f"{acc.get('measured') or '-'} ({acc.get('verdict', 'not run')})"
        cells = _check_cells(r, checks)
        L.append(
            f"| {r['kernel']} | {r['device']} | **{r['overall']}** | "
            + " | ".join(cells)
            + f" | `{acc.get('declared') or '-'}` | `{measured}` | {r['cases_run']} |"
        )
    L += _comparison_tables(
        fp8,
        (
            "### FP8: maximum spacing (ulp) from each standard contract on the exact sum",
            "### FP8: bit interchangeability (cases with identical output bits / shared cases)",
            "### FP8: declared epilogues",
        ),
    )
    return L


def _check_cells(r: dict, checks: list) -> list[str]:
    """A row's verdict per check, a failure linked to its reproducer when there is one."""
    return [
        f"[{v}](#{_anchor(r['kernel'], r['device'], c)[1]})" if v == "fail" and c in r["repro"] else v
        for c, v in ((c, r["checks"].get(c, "-")) for c in checks)
    ]


def _comparison_tables(part: dict, titles: tuple[str, str, str]) -> list[str]:
    """Markdown lines of ``part`` (the int8 document or its ``fp8`` part) under the three ``titles``: maximum
    spacing from each standard contract, bit interchangeability, declared epilogues."""
    L = ["", titles[0], ""]
    L += ["| row | " + " | ".join(STANDARD) + " |", "|---|" + "---|" * len(STANDARD)]
    for key, d in part["max_spacing_from_standard"].items():
        L.append(f"| {key} | " + " | ".join("-" if d[s] is None else str(d[s]) for s in STANDARD) + " |")
    inter = part["interchangeability"]
    L += ["", titles[1], ""]
    L += ["| | " + " | ".join(inter) + " |", "|---|" + "---|" * len(inter)]
    for ka, row in inter.items():
        L.append(f"| {ka} | " + " | ".join(f"{v['identical']}/{v['shared']}" for v in row.values()) + " |")
    L += ["", titles[2], ""]
    L += [f"- **{r['kernel']}@{r['device']}** ({r.get('version')}): `{_declared(r)}`" for r in part["rows"]]
    return L


def render_png(doc: dict, path: Path) -> None:
    """Verdict strip + interchangeability heat map (matplotlib, Agg) of the int8 rows, else of the FP8 rows; no
    file without rows."""
    if not doc["rows"]:
        doc = doc.get("fp8") or doc
    if not doc["rows"]:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    inter = doc["interchangeability"]
    keys, n = list(inter), len(inter)
    cells = [list(inter[k].values()) for k in keys]
    frac = [[(v["identical"] / v["shared"]) if v["shared"] else float("nan") for v in row] for row in cells]
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(6 + 0.7 * n, 1.5 + 0.5 * n), gridspec_kw={"width_ratios": [1, 3]})
    colors = {"conformant": "#2e7d32", "not conformant": "#c62828", "timeout": "#ef6c00", "not run": "#9e9e9e"}
    ov = {f"{r['kernel']}@{r['device']}": r["overall"] for r in doc["rows"]}
    for i, k in enumerate(keys):
        ax0.barh(i, 1, color=colors.get(ov.get(k), "#9e9e9e"))
        ax0.text(0.5, i, ov.get(k, ""), ha="center", va="center", color="white", fontsize=8)
    ax0.set_yticks(range(n), keys, fontsize=8)
    ax0.invert_yaxis()
    ax0.set_xticks([])
    ax0.set_title("overall verdict (C1-C8; C8 = own declared epilogue)", fontsize=9)
    im = ax1.imshow(frac, vmin=0, vmax=1, cmap="viridis")
    ax1.set_xticks(range(n), keys, rotation=60, ha="right", fontsize=8)
    ax1.set_yticks(range(n), keys, fontsize=8)
    for i in range(n):
        for j, v in enumerate(cells[i]):
            color = "white" if (frac[i][j] or 0) < 0.6 else "black"
            ax1.text(j, i, f"{v['identical']}/{v['shared']}", ha="center", va="center", fontsize=6, color=color)
    ax1.set_title("bit-identical cases / shared cases", fontsize=9)
    fig.colorbar(im, ax=ax1, fraction=0.03)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
