"""The full-suite scoreboard: one row per ``int8conf check`` report (``conformance.json``, schema
``int8conf.conformance``) found under the given directories, each kernel judged on the whole default suite against
its own declaration: overall verdict, per-check verdicts (a check's label: ``precondition case (n)`` for a precondition check), cases run / refused by its declared constraints (with
the reasons), code paths taken, the FP8 accumulator it declares and the one C11 measures, its library versions,
and (when timed on CUDA, :mod:`conformance.bench.throughput`) its throughput at three shapes beside the baseline.
Written as ``suite.json`` (schema ``int8conf.suite-scoreboard`` v1) and ``suite.md``, atomically. A directory
without a report: Int8confError (one line)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

from reference.errors import Int8confError
from reference.fileio import atomic_write_json, atomic_write_text

SCHEMA, SCHEMA_VERSION = "int8conf.suite-scoreboard", 1
CHECK_ORDER = ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "C10", "C11", "C12", "C13", "C14", "C15", "E1")


def read_reports(dirs: list) -> list[dict]:
    """Every ``conformance.json`` under ``dirs`` (sorted by path); Int8confError when a directory holds none or a
    report is not an int8conf conformance report."""
    reports = []
    for d in dirs:
        found = sorted(Path(d).rglob("conformance.json"))
        if not found:
            raise Int8confError(f"{d}: no conformance.json under it (write one with `int8conf check --out DIR`)")
        for p in found:
            try:
                doc = json.loads(p.read_text())
            except (OSError, ValueError) as e:
                raise Int8confError(f"{p}: not readable as JSON ({type(e).__name__})") from None
            if not isinstance(doc, dict) or doc.get("schema") != "int8conf.conformance":
                schema = doc.get("schema") if isinstance(doc, dict) else None
                raise Int8confError(f"{p}: schema {schema!r} is not int8conf.conformance")
            reports.append(doc)
    return reports


def suite_row(doc: dict) -> dict:
    """The scoreboard row of one conformance report."""
    env, overall, kernel = doc["environment"], doc["overall"], doc["kernel"]
    fp8 = doc.get("fp8") or {}
    failed = overall.get("failed_checks", [])
    return {
        "kernel": kernel["name"],
        "devices": env.get("devices_used") or [],
        "device_name": env.get("cuda_device") if "cuda" in (env.get("devices_used") or []) else env.get("machine"),
        "operands": kernel.get("operands", "int8"),
        "description": kernel.get("description", ""),
        "version": kernel.get("version", ""),
        "verdict": overall["verdict"],
        "failed_checks": failed,
        "checks": {c["check_id"]: c.get("label") or c["verdict"] for c in doc["checks"]},
        "check_summaries": {c["check_id"]: c["summary"] for c in doc["checks"] if c["check_id"] in failed},
        "cases_total": overall.get("cases_total"),
        "cases_run": overall.get("cases_run"),
        "not_run_reasons": overall.get("not_run_reasons", {}),
        "constraints": kernel.get("constraints", {}),
        "paths": env.get("paths_used", {}),
        "accumulator": {"declared": fp8.get("c11_declared"), "measured": fp8.get("measured")} if fp8 else None,
        "libraries": env.get("libraries", {}),
        "library_record_sha256": env.get("library_record_sha256", {}),
        "torch": env.get("torch"),
    }


def build(dirs: list, timer: Optional[Callable[[str], list]] = None) -> dict:
    """The document: a row per report, with ``throughput`` from ``timer(kernel_name)`` when given."""
    rows = [suite_row(d) for d in read_reports(dirs)]
    for r in rows:
        if timer is not None and "cuda" in r["devices"]:
            r["throughput"] = timer(r["kernel"])
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "rows": rows}


def _tops(rows: Optional[list]) -> str:
    def one(r: dict) -> str:
        if "tops" not in r:
            return "refused"
        return f"{r['tops']:.0f} ({r['ratio']:.2f}x)" if "ratio" in r else f"{r['tops']:.0f} (no baseline)"

    return " / ".join(one(r) for r in rows) if rows else "-"


def render(doc: dict) -> str:
    """Markdown: a verdict table (per check), then per row what it refused and the paths it took."""
    L = [
        "# int8conf scoreboard: the full default suite",
        "",
        "Each kernel through `int8conf check --kernel NAME --device cuda` (the whole default suite), judged against "
        "its own declaration. Throughput: TOPS at decode 16x4096x4096 / prefill 512x4096x4096 / 4096^3 "
        "(bf16 out, no bias), and in brackets the ratio to the baseline timed beside it (torch._int_mm for int8, "
        "torch._scaled_mm rowwise for e4m3).",
        "",
        "| kernel | operands | device | verdict | failed | cases run | accumulator declared / measured | "
        "TOPS (x baseline) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        acc = r["accumulator"]
        acc_text = f"{acc['declared'] or '-'} / {acc['measured'] or 'not measured'}" if acc else "int32 (exact)"
        L.append(
            f"| {r['kernel']} | {r['operands']} | {r['device_name']} | **{r['verdict']}** | "
            f"{', '.join(r['failed_checks']) or '-'} | {r['cases_run']}/{r['cases_total']} | {acc_text} | "
            f"{_tops(r.get('throughput'))} |"
        )
    L += ["", "## Per-check verdicts", "", "| kernel | " + " | ".join(CHECK_ORDER) + " |"]
    L.append("|---|" + "---|" * len(CHECK_ORDER))
    for r in doc["rows"]:
        L.append(f"| {r['kernel']} | " + " | ".join(r["checks"].get(c, "-") for c in CHECK_ORDER) + " |")
    for r in doc["rows"]:
        L += ["", f"## {r['kernel']}", "", f"{r['description']} ({r['version']})", ""]
        L += [f"- {c} failed: {s}" for c, s in r["check_summaries"].items()]
        L += [f"- not run ({n} cases): {why}" for why, n in r["not_run_reasons"].items()]
        L.append("- paths: " + (", ".join(f"{p} ({n})" for p, n in r["paths"].items()) or "-"))
        for t in r.get("throughput") or []:
            figures = t.get("error") or f"{t['us']:.1f} us, {t['tops']:.1f} TOPS" + (
                f"; {t['baseline']} {t['baseline_us']:.1f} us, ratio {t['ratio']:.2f}"
                if "ratio" in t
                else f"; baseline: {t.get('baseline_error', '-')}"
            )
            where = f" on {t['device']}" if t.get("device") else ""
            L.append(f"- {t['label']} {t['M']}x{t['K']}x{t['N']}{where}: {figures}")
    return "\n".join(L) + "\n"


def write(doc: dict, out: Path) -> None:
    """``out/suite.json`` and ``out/suite.md``, each written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "suite.json", doc)
    atomic_write_text(out / "suite.md", render(doc))
