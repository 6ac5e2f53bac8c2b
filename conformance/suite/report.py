"""Conformance reports: ``<out>/<kernel>/conformance.json`` and ``.md``.

JSON schema ``int8conf.conformance`` v:data:`SCHEMA_VERSION`; top-level keys ``schema,
schema_version, generated_at`` (UTC ISO-8601), ``kernel`` (``KernelSpec.manifest()``),
``environment``, ``captures {available, note, source}``, ``overall`` (``run.overall_verdict``),
``checks`` (aggregated, plus ``label``: :func:`verdict_label`), ``cases`` (``CaseResult.to_dict``),
``property_tests``, ``pairwise`` (or null), ``elapsed_s``, ``notes``, ``partial``
(``conformance.runtime.partial_run``; absent in older v1 reports), ``comparability``
(``run.comparability``), ``coverage`` (``coverage.coverage_table`` rows), ``invocation {command,
options}`` and ``fault_signatures`` (:func:`fault_signatures`; ``[]`` unless the run failed); for an
e4m3 kernel also ``fp8`` (``run.fp8_summary``: declared and measured accumulator, C12's observed
maximum beside its bound); for a triaged failing run also ``triage`` (``ConformanceResult.triage``: check id ->
where its failure lives, rendered as "Where the bug lives" by :func:`triage_lines`).
Paths are written portably (``reference.fileio.portable_paths``), non-finite floats as strings
(strict JSON); both files are written atomically.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path
from typing import Optional, Union

from conformance.cases.tile_edges import SOURCE as TILE_EDGES_SOURCE
from conformance.checks.result import CHECK_NAMES, Verdict, bound_line
from conformance.runtime.output_dirs import kernel_dirname
from conformance.runtime.partial_run import complete_run, is_partial, partial_note
from conformance.suite.signatures import signature_lines
from reference.errors import Int8confError
from reference.fileio import atomic_write_text, portable_paths

SCHEMA = "int8conf.conformance"
SCHEMA_VERSION = 1


def json_safe(x):
    """Recursively make ``x`` strict-JSON-able."""
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if isinstance(x, float):
        return x if math.isfinite(x) else repr(x)
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    return str(x)


def to_json_dict(result) -> dict:
    """The report's JSON document for a ``ConformanceResult`` (paths portable)."""
    fp8 = getattr(result, "fp8", None)
    triage = getattr(result, "triage", None) or {}
    return portable_paths(
        json_safe(
            {
                "schema": SCHEMA,
                "schema_version": SCHEMA_VERSION,
                "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "kernel": result.kernel,
                "environment": result.environment,
                "captures": result.captures,
                "overall": result.overall,
                "checks": [dict(c.to_dict(), label=verdict_label(c.verdict, c.evidence)) for c in result.checks],
                "cases": [c.to_dict() for c in result.cases],
                "property_tests": result.property_tests,
                "pairwise": result.pairwise,
                "elapsed_s": round(result.elapsed_s, 3),
                "notes": list(result.notes),
                "partial": dict(
                    getattr(result, "partial", None)
                    or complete_run(sum(1 for c in result.cases if c.source != "property"))
                ),
                "comparability": getattr(result, "comparability", None) or None,
                "fault_signatures": fault_signatures(result),
                "coverage": list(getattr(result, "coverage", []) or []),
                "invocation": dict(getattr(result, "invocation", {}) or {}),
            }
            | ({} if fp8 is None else {"fp8": fp8})
            | ({"triage": triage} if triage else {})
        )
    )


def case_count(cases) -> str:
    """``777 cases (776 fixed + 1 property example)`` of a run's case results (``source`` ``property``: a property
    example; the others are the fixed cases, what the progress lines count); ``776 cases`` when no property example
    ran."""
    n_prop = sum(1 for c in cases if c.source == "property")
    if not n_prop:
        return f"{len(cases)} cases"
    return f"{len(cases)} cases ({len(cases) - n_prop} fixed + {n_prop} property example{'s' if n_prop > 1 else ''})"


def fault_signatures(result) -> list:
    """``signature_lines`` of a failing run (fault classes its failures match, or one line saying
    none); empty for a run that did not fail."""
    if result.overall.get("verdict") != Verdict.FAIL:
        return []
    return signature_lines(result)


def _table(rows: list, columns: Optional[list] = None, cells: bool = False) -> str:
    """Markdown table of ``rows`` (tuples under ``columns``, or dicts; ``cells``: each value through
    :func:`_cell`) via pandas + tabulate, else a fixed-width block."""
    import pandas as pd  # heavy: loaded when a report is rendered, not with the suite

    df = pd.DataFrame(rows, columns=columns)
    df = df.map(_cell) if cells else df
    if df.empty:
        return "_(none)_"
    try:
        return df.to_markdown(index=False)
    except ImportError:
        return "```\n" + df.to_string(index=False) + "\n```"


def _kv(rows: list) -> str:
    return _table(rows, ["field", "value"], cells=True)


def is_precondition_failure(verdict: str, evidence: dict) -> bool:
    """A failing precondition check (C3/C4) caused by the operands."""
    return verdict == Verdict.FAIL and (evidence or {}).get("failure_kind") == "precondition"


def is_precondition_case(verdict: str, evidence: dict) -> bool:
    """A precondition failure on case(s) the suite built to violate it (PRECONDITION_CASE)."""
    return is_precondition_failure(verdict, evidence) and evidence.get("precondition_case") is True


def verdict_label(verdict: str, evidence: dict) -> str:
    """A check's verdict as report, JSON (``checks[].label``) and console show it: for C3/C4
    failing on the operands ``precondition violated (N)`` and/or ``precondition case (N)``."""
    if not is_precondition_failure(verdict, evidence):
        return verdict
    n_case = evidence.get("n_precondition_cases")
    if n_case is None:  # one case's result
        n_case = 1 if evidence.get("precondition_case") is True else 0
    n_viol = evidence.get("n_precondition_violations", 1 - n_case)
    return "; ".join(
        [f"precondition violated ({n_viol})"] * bool(n_viol) + [f"precondition case ({n_case})"] * bool(n_case)
    )


def _case_cell(verdict: str, evidence: dict) -> str:
    if is_precondition_failure(verdict, evidence):
        return "pre" if is_precondition_case(verdict, evidence) else "violated"
    marks: dict[str, str] = {Verdict.PASS: "ok", Verdict.FAIL: "FAIL", Verdict.NOT_APPLICABLE: "-"}
    return marks.get(verdict, verdict)


def _hist_str(h: dict) -> str:
    return " ".join(f"{k}:{v}" for k, v in (h or {}).items() if v)


def _cell(s: str, width: int = 140) -> str:
    s = str(s).replace("|", "\\|").replace("\n", " ")
    return s if len(s) <= width else s[: width - 3] + "..."


def _not_run_lines(ov: dict) -> list[str]:
    n, total = ov.get("cases_not_run") or 0, ov.get("cases_total") or 0
    if not n:
        return []
    lines = [
        f"**Cases not run: {n} of {total}** (the kernel produced no output on them; "
        f"the verdict covers only the {total - n} cases that ran):",
        "",
    ]
    for why, cnt in sorted((ov.get("not_run_reasons") or {}).items(), key=lambda kv: -kv[1])[:10]:
        lines.append(f"- {cnt} cases: {why}")
    return lines + [""]


#: crash / timeout lines a terminal gets before one line counts the rest (the report lists every one)
CONSOLE_CRASHES = 5


def crash_lines(overall: dict, limit: Optional[int] = None) -> list[str]:
    """One line per crash / timeout of a run (``overall["crashes"]``): where, what, the reproducer; with ``limit``,
    the first ``limit`` of them and one line counting the rest."""
    out = []
    crashes = overall.get("crashes") or []
    for c in crashes[:limit]:
        where = f"case {c['case']}" if c.get("case") else f"check {c.get('check')}"
        repro = f"; reproducer: {c['repro']}/command.sh" if c.get("repro") else ""
        out.append(f"{c['status'].upper()} {where}: {c.get('line')}{repro}")
    if limit is not None and len(crashes) > limit:
        out.append(f"... and {len(crashes) - limit} more crashes / timeouts (conformance.md: Crashes and hangs)")
    return out


def _crash_lines(doc: dict) -> list[str]:
    """The report's ``Crashes and hangs`` section: each crash with the child's last log lines (its
    ``faulthandler`` stack)."""
    ov = doc["overall"]
    if not ov.get("crashes"):
        return []
    stacks = {cs["case"]: cs["crash"] for cs in doc.get("cases") or [] if cs.get("crash")}
    stacks.update({ch["check_id"]: ch["evidence"]["crash"] for ch in doc["checks"] if "crash" in ch["evidence"]})
    lines = ["## Crashes and hangs", ""]
    for c, line in zip(ov["crashes"], crash_lines(ov)):
        lines.append(f"- **{line}**")
        tail = (stacks.get(c.get("case") or c.get("check")) or {}).get("log_tail") or []
        if tail:
            lines += ["", "  ```", *[f"  {x}" for x in tail[:16] if x.strip()], "  ```"]
    return lines + [
        "",
        "Each kernel call ran in a child process; a crash or a hang (no result within the timeout, `--timeout`) "
        "killed only that child. A reproducer's `command.sh` re-runs the case in its own process, without "
        "isolation (`python -m conformance.runtime.repro DIR [--timeout S]`).",
        "",
    ]


def pair_difference_line(pw: dict) -> str:
    """One line saying whether two kernels are bit-interchangeable (``pw``: ``summarize_pairs``),
    naming ``differ-expected`` cases as NOT interchangeable though no failure; "" when none compared."""
    per = pw.get("per_case") or []
    if not per:
        return ""
    exp = [p for p in per if p.get("status") == "differ-expected"]
    if pw.get("interchangeable"):
        return f"`{pw['kernel']}` and `{pw['other']}` are bit-interchangeable on all {len(per)} cases compared."
    if not exp:
        return ""
    n_el = sum(int(p.get("n_elements", 0)) for p in exp)
    n_diff = sum(int(p.get("n_elements", 0)) - int(p.get("n_equal", 0)) for p in exp)
    return (
        f"`{pw['kernel']}` and `{pw['other']}` are NOT bit-interchangeable: they differ on "
        f"{len(exp)} of {len(per)} cases ({n_diff}/{n_el} elements of those cases) where "
        f"their declared contracts allow it (differ-expected); not a failure, but swapping "
        f"one for the other changes output bits."
    )


def _semantics_lines(env: dict) -> list[str]:
    """The "Interpreter semantics" subsection (empty unless run under the Triton interpreter)."""
    sem = env.get("interpreter_semantics")
    if not isinstance(sem, dict):
        return []
    lines = [
        "",
        "### Interpreter semantics",
        "",
        "Measured by `conformance.kernels.triton_probe` under the Triton interpreter "
        f"(triton {sem.get('triton_version', '?')}): how each epilogue step rounds there "
        "(rne = round to nearest even, rtz = toward zero). These are the interpreter's "
        "numpy semantics, not necessarily the compiled kernel's on a GPU. A kernel whose "
        "epilogue relies on a step marked rtz or other would not round as declared there; "
        "the built-in `triton` kernel rounds to bf16 with integer operations and "
        "bit-casts bias and output, so these steps do not reach its output (C8 checks "
        "its bits either way).",
        "",
    ]
    rows = [(key, val) for key, val in sem.items() if key not in ("mode", "triton_version")]
    lines.append(_table(rows, ["step", "measured"], cells=True))
    return lines


def _coverage_lines(rows: list) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "## Coverage of trigger conditions",
        "",
        "What the cases the kernel ran on actually exercised (from the operands, the exact "
        "accumulator and the reference output of the declared contract), so that PASS says "
        "what it covers. `covered`: yes / partial / no against what the default suite "
        "aims for.",
        "",
    ]
    lines.append(
        _table(
            [(r.get("condition"), _cell(r.get("reached"), 200), r.get("cases"), r.get("covered")) for r in rows],
            ["condition", "reached", "cases", "covered"],
        )
    )
    return lines


def _overflow_text(decl) -> str:
    """`wrap`, or per device (`cpu`: `wrap`, `cuda`: `undefined`)."""
    if isinstance(decl, dict):
        return ", ".join(f"`{d}`: `{b}`" for d, b in decl.items())
    return f"`{decl}`"


def block_lines(kernel: Optional[dict]) -> list[str]:
    """A block-scaled kernel's declaration lines (``KernelSpec.manifest()["block"]``: sizes, block accumulation,
    epilogue); [] for another kernel."""
    blk = (kernel or {}).get("block")
    if not isinstance(blk, dict):
        return []
    sizes = ", ".join(f"{bn}x{bk}" for bn, bk in blk.get("sizes") or [])
    return [
        f"block sizes (block_n x block_k): {sizes}",
        f"block accumulation: {blk.get('accumulation')}",
        f"epilogue: {blk.get('epilogue')}",
    ]


def accumulator_lines(fp8: Optional[dict]) -> list[str]:
    """An e4m3 kernel's accumulator lines (declared, measured by C11, C12's observed maximum beside
    its bound); [] for an int8 report."""
    if not fp8:
        return []
    decl = fp8.get("declared")
    decl = ", ".join(f"{d}: {v}" for d, v in decl.items()) if isinstance(decl, dict) else decl
    c11 = fp8.get("c11") or {}
    measured = fp8.get("measured")
    lines = [
        f"accumulator declared: {decl!r}"
        + (f" (C11 compared with {fp8['c11_declared']!r})" if fp8.get("c11_declared") else ""),
        f"accumulator measured (C11): {measured!r} - {c11.get('verdict', 'not run')}"
        if measured
        else f"accumulator measured (C11): none - {c11.get('verdict', 'not run')}: {c11.get('summary', '')}",
    ]
    b = fp8.get("c12_bound")
    c12 = fp8.get("c12") or {}
    if b:
        lines.append(f"C12 fp8_error_bound ({c12.get('verdict')}): {bound_line(b)}; {b['n_bound_over']} elements over")
    else:
        lines.append(f"C12 fp8_error_bound: {c12.get('verdict', 'not run')} ({c12.get('summary', '')})")
    if fp8.get("not_afforded"):
        lines.append(f"C12 regimes not afforded here: {fp8['not_afforded']}")
    return lines


def _declared_row(k: dict, c: dict) -> tuple:
    """The Kernel table's declaration row: a block-scaled kernel's block declaration (:func:`block_lines`: it
    governs its cases), else the per-token contract."""
    if block_lines(k):
        return "declared block accumulation", "; ".join(block_lines(k))
    return (
        "declared contract",
        f"scale order `{c.get('scale_order')}`, bias `{c.get('bias_point')}`, rounding `{c.get('rounding')}`",
    )


def _steps_text(steps) -> str:
    """A manifest's ``steps`` (one ``{name, steps}`` or a selector mapping of them) as one line; ``-`` when none."""
    if not steps:
        return "-"
    if "steps" in steps:
        return "; ".join(steps["steps"])
    return " | ".join(f"`{k}`: " + "; ".join(v["steps"]) for k, v in steps.items())


def _values_text(values: list) -> str:
    return ", ".join(str(v) for v in values) if values else "-"


def _alike(fault_classes: dict) -> str:
    """`` (alike: ...)`` where two or more classes share the best score on a minimal case (its few differing
    elements cannot tell them apart, and a bug outside the catalogue can fit them all), else ``""``."""
    best = max(fault_classes.values())
    top = [f for f, v in fault_classes.items() if v == best]
    if len(top) < 2:
        return ""
    return (
        f" ({' and '.join(top)} alike: the minimal case cannot tell them apart, nor from a bug outside the catalogue)"
    )


def _probed(b: dict) -> str:
    """A boundary without a passing value: the values it probed, and whether its calls ran out before value 1 (a
    failure that holds at every probe may still switch off below them)."""
    vals = [int(v) for v, _ in b.get("points") or []] or [int(b["fails_at"])]
    out = f"{min(vals)} to {max(vals)}"
    return out + ("; its calls ran out before 1" if min(vals) > 1 and b.get("form_floor") is None else "")


def _boundary_row(dim: str, b: dict) -> tuple:
    """One row of the "Where the bug lives" table: attribute, passes at, fails at, calls."""
    if not b.get("monotone", True):
        pts = b.get("points") or []
        passing = [v for v, f in pts if not f]
        failing = [v for v, f in pts if f]
        if b.get("period"):
            aligned = f"multiples of {b['period']} only ({_values_text(passing)})"
            return (dim.upper(), aligned, f"every other value probed ({_values_text(failing)})", b.get("calls"))
        return (dim.upper(), f"{_values_text(passing)} (not monotone)", _values_text(failing), b.get("calls"))
    if b.get("passes_at") is None:
        floor = b.get("form_floor")
        held = "" if floor is None else f" (at {floor} the case's operand layout cannot be held)"
        return (
            dim.upper(),
            f"none found in {b.get('calls')} calls{held}",
            f"{b['fails_at']} and every probe ({_probed(b)})",
            b.get("calls"),
        )
    near = "" if b.get("exact") else " (bisection not finished)"
    blind = " (values there tell no legal epilogues apart: may be the values' pass)" if b.get("blind") else ""
    passes, fails = f"{b['passes_at']}{near}{blind}", str(b["fails_at"])
    if b.get("upper_passes_at") is not None:
        passes, fails = f"{passes} and {b['upper_passes_at']}", _failing_span(b)
    return (dim.upper(), passes, fails, b.get("calls"))


def _failing_span(b: dict) -> str:
    """A bucket's failing values: ``17`` (one value), ``33 to 63``, ``3 to at least 4 (5 not probed)`` where the
    bisection toward its passing value was not finished."""
    first, last, up = b["fails_at"], b["upper_fails_at"], b["upper_passes_at"]
    if up - last == 1:
        return str(first) if last == first else f"{first} to {last}"
    gap = f"{last + 1}" if up - last == 2 else f"{last + 1} to {up - 1}"
    return (f"{first}" if last == first else f"{first} to at least {last}") + f" ({gap} not probed)"


def _mkn(shape) -> str:
    return ",".join(map(str, shape or []))


def _flip_text(f: dict) -> str:
    """A flip as ``attribute value`` (``attribute from -> value`` where the record names the case's own value),
    ``(on the case's values only)`` where its re-planted retries were not made, ``(here only: ...)`` where a failing
    case of the run has the flipped value (``contradicted_by``)."""
    text = f"{f['attribute']} {f['from']} -> {f['value']}" if f.get("from") else f"{f['attribute']} {f['value']}"
    if f.get("contradicted_by"):
        text += f" (here only: case {f['contradicted_by']} with it fails)"
    return text + (" (on the case's values only)" if f.get("unverified") else "")


def triage_summary(triage: dict) -> list[str]:
    """One line per triaged check of ``triage`` (``ConformanceResult.triage``), for the terminal: each dimension's
    passing and failing values (``not monotone``, or ``fails at every probe``), a verified product (M*N*K, M*N,
    ...), the flips that pass, the minimal shape (and whether the call itself fails there)."""
    out = []
    for cid, t in (triage or {}).items():
        if t.get("skipped"):
            died = t.get("died_on") or {}
            on = f"; it was probing {died['probe']} at M,K,N {_mkn(died.get('shape'))}" if died.get("probe") else ""
            out.append(f"where {cid} lives: not triaged ({t['skipped']}{on})")
            continue
        parts = []
        for dim, b in (t.get("boundaries") or {}).items():
            if b.get("period"):
                parts.append(f"{dim.upper()} passes only at multiples of {b['period']}, fails at {b['fails_at']}")
            elif not b.get("monotone", True):
                parts.append(f"{dim.upper()} not monotone")
            elif b.get("passes_at") is None:
                floor = b.get("form_floor")
                parts.append(
                    f"{dim.upper()} fails at every probe"
                    + (
                        f" ({_probed(b)})"
                        if floor is None
                        else f" down to {b['fails_at']} (its layout cannot be held at {floor})"
                    )
                )
            else:
                blind = " (values-limited)" if b.get("blind") else ""
                up = b.get("upper_passes_at")
                fails = f"{b['fails_at']}" if up is None else f"{_failing_span(b)}, passes again at {up}"
                parts.append(f"{dim.upper()} passes at {b['passes_at']}{blind}, fails at {fails}")
        pr = t.get("product") or {}
        if pr.get("verified"):
            parts.append(f"{pr.get('attribute', 'M*N*K')} passes at {pr['passes_at']}, fails at {pr['fails_at']}")
        passing = [_flip_text(f) for f in t.get("flips") or [] if not f["fails"]]
        if passing:
            parts.append("passes with " + ", ".join(passing))
        mn = t.get("minimal") or {}
        if mn.get("shape"):
            shape = ",".join(map(str, mn["shape"]))
            parts.append(f"minimal M,K,N {shape}" if mn.get("fails") else f"no smaller failing shape than {shape}")
            broke = mn.get("call_failure")
            if broke:
                parts[-1] += f" (there the call itself fails, {broke['check']}: {broke['line']})"
        fc = mn.get("fault_classes") or {}
        if fc:
            parts.append("consistent with " + ", ".join(fc) + _alike(fc))
        out.append(f"where {cid} lives (case {t.get('case')}): " + "; ".join(parts))
    return out


def triage_lines(doc: dict) -> list[str]:
    """The "Where the bug lives" section of a report document's ``triage`` (``ConformanceResult.triage``; none
    without it): per triaged check the case it started from, a table attribute | passes at | fails at (the probed
    points when not monotone; a product row (M*N*K, M*N, ...) where ``product`` is verified, else its note), the
    categorical flips that make it pass, the minimal failing shape (whether the call itself fails there) and its
    non-zero counts, and the replay command of its reproducer."""
    tri = doc.get("triage") or {}
    if not tri:
        return []
    names = CHECK_NAMES | {ch["check_id"]: ch["name"] for ch in doc.get("checks") or []}
    lines = [
        "",
        "## Where the bug lives",
        "",
        "The first failing case of each failing check, re-run at other shapes and with one attribute flipped "
        "(`conformance.triage`): where the failure switches on. A probe that passes cropped is retried with the "
        "case's differing rows / columns (K: a case planted at that K) before it counts as passing; a boundary "
        "marked values-limited may still be where the values stop telling the epilogues apart.",
    ]
    for cid, t in tri.items():
        lines += ["", f"### {cid} {names.get(cid, '')}".rstrip(), ""]
        rows = [_boundary_row(d, b) for d, b in (t.get("boundaries") or {}).items()]
        if t.get("skipped"):
            lines.append(f"Case `{t.get('case')}`: not triaged ({t['skipped']}).")
            died = t.get("died_on") or {}
            if died.get("probe"):
                lines.append(f"It was probing {died['probe']} (M,K,N {_mkn(died.get('shape'))}) when it stopped.")
            if rows:
                lines += [
                    "",
                    "Found before it stopped:",
                    "",
                    _table(rows, ["attribute", "passes at", "fails at", "calls"]),
                ]
            continue
        lines += [f"From case `{t['case']}` (M,K,N {_mkn(t['shape'])}).", ""]
        dif = t.get("differing")
        if dif:
            lines += [
                f"Its output differs in {dif['elements']} element(s) on {dif['rows']} row(s) and {dif['cols']} "
                "column(s); a probe that passes cropped is retried with those rows / columns tiled (K: a planted "
                "case at that K), so a pass is the path's, not the values'.",
                "",
            ]
        pr = t.get("product") or {}
        if pr.get("verified"):
            rows.append((pr.get("attribute", "M*N*K"), str(pr["passes_at"]), str(pr["fails_at"]), pr.get("calls")))
        lines += [_table(rows, ["attribute", "passes at", "fails at", "calls"]), ""]
        if pr.get("verified"):
            at = "; ".join(f"M,K,N {q[0]},{q[1]},{q[2]} {'fails' if q[3] else 'passes'}" for q in pr["probes"])
            lines.append(f"{pr.get('attribute', 'M*N*K')} decides, verified at another aspect ratio ({at}).")
        elif pr.get("note"):
            lines.append(f"Products of M, N, K: {pr['note']}.")
        fl = t.get("flips") or []
        passing = [_flip_text(f) for f in fl if not f["fails"]]
        if passing:
            lines.append(
                "Passes when flipped: "
                + ", ".join(f"`{x}`" for x in passing)
                + " (the failure needs the case's value)."
            )
        elif fl:
            lines.append(
                "Fails under every flip tried (" + ", ".join(f"{f['attribute']} {f['value']}" for f in fl) + ")."
            )
        mn = t.get("minimal") or {}
        if mn:
            ok = "verified failing" if mn.get("fails") else "no smaller failing shape found; the case itself"
            lines.append(f"Minimal failing shape: M,K,N {_mkn(mn.get('shape'))} ({ok}).")
            broke = mn.get("call_failure")
            if broke:
                lines.append(
                    f"There the call itself fails ({broke['check']}: {broke['line']}): the search counts a probe whose "
                    f"call fails as failing, so the shapes above may be that failure's, not {cid}'s alone; the "
                    f"reproducer replays {broke['check']}."
                )
            fc = mn.get("fault_classes") or {}
            if fc:
                lines.append(
                    "Its evidence is consistent with: "
                    + ", ".join(f"{f} (score {v:g})" for f, v in fc.items())
                    + _alike(fc)
                    + "."
                )
            nz = mn.get("nonzero") or {}
            if nz:
                kept = ", ".join(f"`{k}` {v[0]} -> {v[1]}" for k, v in nz.items())
                lines.append(f"Non-zero elements kept (the rest zeroed, the failure kept): {kept}.")
        if t.get("replay"):
            lines.append(
                f"Replay: `{t['replay']}` (re-judges the check on the minimal case, the kernel in a child process: "
                f"exit 1 while it fails; `command.sh` there runs it in this process for a debugger; operands and "
                f"case.json in `{t['repro']}`)."
            )
        lines.append(
            f"{t.get('calls')} kernel calls, {t.get('seconds')} s (budget {t.get('budget')} calls per dimension)."
        )
    return lines


def render_markdown(doc: dict) -> str:
    """Readable report for a kernel engineer, from :func:`to_json_dict`'s doc."""
    k, env, ov = doc["kernel"], doc["environment"], doc["overall"]
    c = k.get("contract", {})
    v = ov.get("headline") or ov["verdict"].upper()  # "PASS on a reduced suite: ... skipped"
    head = (
        f"**Overall verdict: NOT RUN (inconclusive: the kernel produced output on no case, "
        f"nothing was verified)** - {ov['summary']}"
        if ov["verdict"] == Verdict.NOT_RUN
        else f"**Overall verdict: {v}** - {ov['summary']}"
    )
    partial = partial_note(doc)
    if partial:  # a verdict over part of the suite must not read like the whole one
        head = head.replace(f"**Overall verdict: {v}**", f"**Overall verdict: {v} (PARTIAL RUN: only what finished)**")
        head = f"**PARTIAL RUN** ({partial})\n\n{head}"
    sig = doc.get("fault_signatures") or []
    sig_lines = (
        ["Failure signature (`conformance.suite.signatures`):", ""] + [f"- {x}" for x in sig] + [""] if sig else []
    )
    lines = (
        [f"# Conformance report: `{k['name']}`", "", head, ""]
        + _crash_lines(doc)
        + sig_lines
        + _not_run_lines(ov)
        + [
            f"Generated {doc['generated_at']} (schema {doc['schema']} v{doc['schema_version']}); "
            f"suite time {doc['elapsed_s']} s.",
            "",
            f"Captures: {doc['captures']['note']}.",
            "",
        ]
    )
    inv = doc.get("invocation") or {}
    if inv.get("command"):
        lines += [f"Produced by: `{inv['command']}`", ""]
    for note in doc.get("notes") or []:
        lines += [f"> Note: {note}", ""]
    lines += ["## Kernel", ""]
    lines.append(
        _kv(
            [
                ("name", k["name"]),
                ("origin", k.get("origin")),
                ("description", k.get("description")),
                _declared_row(k, c),
                ("declared steps", _steps_text(k.get("steps"))),
                ("not interchangeable", "; ".join(k.get("not_interchangeable") or []) or "-"),
                ("devices", ", ".join(k.get("devices", []))),
                ("version", k.get("version")),
                ("source digest", f"`{k.get('source_digest')}`"),
                ("accumulator entry (int_mm)", "yes" if k.get("has_int_mm") else "no"),
                (
                    "shape constraints",
                    ", ".join(
                        f"{a}={b}"
                        for a, b in (k.get("constraints") or {}).items()
                        if b not in (None, "", 1) or a == "min_m"
                    ),
                ),
            ]
        )
    )
    lines += ["", "## Environment", ""]
    lines.append(
        _kv(
            [
                ("execution", env.get("execution")),
                ("code paths taken", _hist_str(env.get("paths_used"))),
                ("devices used", ", ".join(env.get("devices_used", []))),
                ("python", env.get("python")),
                ("torch", env.get("torch")),
                ("triton", env.get("triton")),
                ("hypothesis", env.get("hypothesis")),
                ("platform", env.get("platform")),
                ("CUDA device", env.get("cuda_device") or "none"),
                ("TRITON_INTERPRET", env.get("triton_interpret_env") or "unset"),
            ]
        )
    )
    lines += _semantics_lines(env)
    blk_lines = block_lines(doc.get("kernel"))
    if blk_lines:
        lines += ["", "## Block declaration", "", *[f"- `{_cell(x, 400)}`" for x in blk_lines]]
        lines += [
            "",
            "The block plan: the block families of every declared size (conformance/cases/block.py); C8 holds each "
            "case bit-exactly to this declaration, C5 the power-of-two cases to every legal block accumulation, "
            "C16 probes the accumulation; the coverage table below lists the block regimes each size met.",
        ]
    acc_lines = accumulator_lines(doc.get("fp8"))
    if acc_lines:
        lines += ["", "## FP8 accumulator", "", *[f"- {_cell(x, 400)}" for x in acc_lines]]
        lines += [
            "",
            "C11 measures the accumulator on discriminating rows and fails a kernel that keeps less than it "
            "declares. On the accumulator-safe FP8 families (and every case where the declared accumulator is "
            "provably exact) C5/C6/C8 judge the epilogue bit-exactly; on captured layers and elsewhere C12 holds "
            "every element within the interval the declared accumulator and epilogue imply (DESIGN.md 3b).",
        ]
    lines += ["", "## Checks", ""]
    lines.append(
        _table(
            [
                (ch["check_id"], ch["name"], verdict_label(ch["verdict"], ch["evidence"]), _cell(ch["summary"], 200))
                for ch in doc["checks"]
            ],
            ["id", "check", "verdict", "summary"],
        )
    )
    lines += [
        "",
        "C3/C4 are preconditions: their failure means the operands leave the range where "
        "int32 accumulation is exact and order-free (or float32(acc) is exact); it fails the "
        "overall verdict only when the kernel's own accumulator is wrong. \"precondition "
        'case (N)": N cases the suite built to leave that range on purpose (expected for '
        'every kernel); "precondition violated (N)": N other cases (e.g. your captures) '
        "whose operands leave it. C5 compares to the "
        "power-of-two reference (canonical scale order, the declared bias point); C6 allows "
        "1 spacing against the reference with scale order a_then_w and the declared bias "
        "point; C8 demands 0 ulp against the declared contract. C7's reference arm (\"ppl "
        "ref X vs kernel Y\") is the reference emulating the kernel's declared "
        "contract (same scale order, bias point and rounding), not a bf16 or "
        "contract-free model: C7 measures what the kernel changes relative to its own "
        "declaration; its threshold is the largest change of a top-1 logit difference "
        "any legal epilogue makes on the same windows. Where an accumulator can leave "
        "int32, C3/C5/C6/C8 compare with the kernel's declared overflow behaviour "
        f"({_overflow_text(k.get('overflow', 'wrap'))} here). C5/C8 compare bits: +0 vs -0 differs "
        "(counted as n_signed_zero), NaN payloads do not. C9 needs no reference: "
        "sampled rows must give the same bits alone (M=1), in batches of other sizes "
        "and in a repeated call.",
    ]
    failing = [
        ch
        for ch in doc["checks"]
        if ch["verdict"] == Verdict.FAIL and not is_precondition_case(ch["verdict"], ch["evidence"])
    ]
    if failing:
        lines += ["", "### Failure evidence", ""]
        for ch in failing:
            ev = ch["evidence"]
            lines.append(f"- **{ch['check_id']} {ch['name']}**: {ch['summary']}")
            wc = ev.get("worst_case")
            if wc:
                w = wc["evidence"].get("worst")
                lines.append(f"  - worst case `{wc['case']}`: {wc['summary']}")
                if w:
                    lines.append(
                        "  - worst element: "
                        + ", ".join(
                            f"{a}={w[a]}"
                            for a in ("index", "out_bits", "ref_bits", "ulp", "acc", "scale_a", "scale_b", "bias")
                            if a in w
                        )
                    )
            if ev.get("ulp_histogram"):
                lines.append(f"  - ulp histogram: {_hist_str(ev['ulp_histogram'])}")
            if ev.get("failed_cases"):
                lines.append(
                    f"  - failing cases ({ev.get('n_failed_cases')}): "
                    + ", ".join(f"`{x}`" for x in ev["failed_cases"][:10])
                )
            for d in (ev.get("differences") or [])[:5]:  # C9: row, batch, differing bits
                cols = ", ".join(
                    f"col {c['col']} {c['bits']} vs {c['reference_call_bits']}" for c in d.get("columns", [])[:3]
                )
                lines.append(
                    f"  - `{d['case']}` row {d['row']}, {d['context']}: "
                    + (
                        f"kernel failed: {d['error']}"
                        if "error" in d
                        else f"{d['n_differ']} element(s) differ from the case's own call ({cols})"
                    )
                )
    lines += triage_lines(doc)
    lines += _coverage_lines(doc.get("coverage") or [])
    pt = doc.get("property_tests")
    if pt:
        lines += ["", "## Property test (hypothesis)", ""]
        if pt.get("skipped"):
            lines.append(f"Skipped: {pt['skipped']}")
        else:
            prop = [cs for cs in doc["cases"] if cs["source"] == "property"]
            n_skip = sum(1 for cs in prop if cs.get("not_run_reason"))
            ok = "NOT RUN" if prop and n_skip == len(prop) else "all passed"
            lines.append(
                f"{pt.get('examples')} examples ({pt.get('settings')}); "
                + (f"**failed**: {pt.get('failure')}" if pt.get("failed") else ok)
                + f". Strategy: `{pt.get('strategy')}`."
            )
            if n_skip:
                lines.append(
                    f"The kernel did not run on {n_skip} of {len(prop)} examples (not "
                    f"runnable here); those examples verified nothing."
                )
    ids = [
        ch["check_id"]
        for ch in doc["checks"]
        if ch["check_id"] not in ("IF", "CALL", "C7", "C9", "C11", "C13", "C14", "C15", "E1")
    ]
    for src, title in (
        ("capture", "Per-layer results (captures)"),
        ("synthetic", "Synthetic cases"),
        (TILE_EDGES_SOURCE, "Tile-edge shapes"),
        ("family", "Trigger-condition families"),
        ("property", "Property-test examples"),
    ):
        rows = [cs for cs in doc["cases"] if cs["source"] == src]
        if not rows:
            continue
        lines += ["", f"## {title}", ""]
        recs = []
        for cs in rows:
            c8 = cs["checks"].get("C8", {}).get("evidence", {})
            r = {
                "case": cs["case"],
                "scale": cs["scale_mode"],
                "M,K,N": ",".join(map(str, cs["shape"])),
                "out": cs["out_dtype"].replace("torch.", ""),
                "bias": "y" if cs["bias"] else "",
                "verdict": f"FAIL interface: {cs['interface']}"
                if cs.get("interface")
                else f"FAIL raised: {cs['raised']}"
                if cs.get("raised")
                else cs["verdict"],
            }
            for cid in ids:
                ch = cs["checks"].get(cid, {})
                v = ch.get("verdict", "")
                r[cid] = _case_cell(v, ch.get("evidence", {}))
            if cs.get("not_run_reason"):  # C3/C4 pass on the reference alone; kernel never ran
                r.update({cid: "skip" for cid in ids if r[cid] == "-"})
            r["max ulp vs declared"] = c8.get("max_ulp", "")
            r["max abs acc"] = cs["checks"].get("C4", {}).get("evidence", {}).get("max_abs", "")
            r["path"] = cs.get("path") or ""
            recs.append(r)
        lines.append(_table(recs))
    pw = doc.get("pairwise")
    if pw:
        lines += ["", f"## Pairwise: `{pw['kernel']}` vs `{pw['other']}`", "", f"**{pw['summary']}**", ""]
        diff_line = pair_difference_line(pw)
        if diff_line:
            lines += [diff_line, ""]
        lines += [
            f"Element agreement {pw['n_equal']}/{pw['n_elements']}; ulp histogram: {_hist_str(pw['ulp_histogram'])}",
            "",
        ]
        recs = [
            {
                "case": p["case"],
                "status": p["status"],
                "agreement": (f"{p['agreement']:.4f}" if isinstance(p.get("agreement"), float) else ""),
                "max ulp": p.get("max_ulp", ""),
                "ulp histogram": _hist_str(p.get("ulp_histogram")),
                "expected identical": "yes" if p["expected_identical"] else "no",
            }
            for p in pw["per_case"]
        ]
        lines.append(_table(recs))
    lines += [
        "",
        "---",
        "Verdicts: ok = pass, FAIL = fail, pre = precondition case (C3/C4: "
        "the suite built this case to violate it; expected), violated = precondition "
        "violated by these operands (C3/C4; not a kernel failure), - = not applicable or not run (a case whose "
        "verdict reads 'FAIL interface: ...', 'FAIL raised: ...', crash or timeout gave no valid output, so no "
        "check ran on it), skip = the kernel "
        "could not run on this case here (not runnable), case verdict 'not run'. Distances are in "
        "spacings (ulp) of the output dtype, from ordered bit encodings. The JSON file next "
        "to this one holds every number shown here and the full evidence.",
        "",
    ]
    return "\n".join(lines)


def read_report(path: Union[str, Path]) -> dict:
    """Load a ``conformance.json``; raises Int8confError (one line) for an unreadable file, not
    JSON, another schema or a newer schema version."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise Int8confError(f"{p}: cannot read conformance report ({e.strerror})") from None
    except ValueError as e:
        raise Int8confError(f"{p}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise Int8confError(f"{p}: not an {SCHEMA} report")
    v = doc.get("schema_version")
    if not isinstance(v, int) or v > SCHEMA_VERSION:
        raise Int8confError(f"{p}: schema_version {v!r} not readable (this code reads <= {SCHEMA_VERSION})")
    return current_names(doc)


#: the tile-edge shapes' former name (``meta["source"]`` and case-id prefix), now the fault-injection sweep's alone
OLD_TILE_EDGES_SOURCE = "sweep"
#: invocation options of a report written under the former name -> their current names
OLD_TILE_EDGES_OPTIONS = {"include_sweep": "include_tile_edges", "no_sweep": "no_tile_edges"}
#: the former ``overall.reduced_suite`` phrase of a run without them (now ``plan.TILE_EDGES_LEFT_OUT``)
OLD_TILE_EDGES_LEFT_OUT = "the shape sweep and case families"


def current_names(doc: dict) -> dict:
    """``doc`` (a ``conformance.json`` document, changed in place) with the tile-edge shapes under their current
    names where a report written before their rename says ``sweep``: the cases' ``source`` and id prefix
    (``sweep/M17xK17xN17`` -> ``tile_edges/M17xK17xN17``: the same operands), the invocation's options
    (:data:`OLD_TILE_EDGES_OPTIONS`) and the reduced-suite phrase. A comparability record that matched the old
    case rows is recomputed over the renamed ones; one that did not stays as it is (and the gate refuses it)."""
    cases = [c for c in doc.get("cases") or [] if isinstance(c, dict)]
    old = [c for c in cases if c.get("source") == OLD_TILE_EDGES_SOURCE]
    if old:
        from conformance.suite.run import comparability  # only for a report written before the rename

        comp = doc.get("comparability")
        matched = isinstance(comp, dict) and comp.get("cases_digest") == comparability(cases)["cases_digest"]
        prefix = OLD_TILE_EDGES_SOURCE + "/"
        for c in old:
            c["source"] = TILE_EDGES_SOURCE
            if str(c.get("case", "")).startswith(prefix):
                c["case"] = f"{TILE_EDGES_SOURCE}/{c['case'][len(prefix) :]}"
        if matched and isinstance(comp, dict):
            new = comparability(cases)
            comp.update(cases_digest=new["cases_digest"], case_ids=new["case_ids"])
    opts = (doc.get("invocation") or {}).get("options")
    if isinstance(opts, dict):
        doc["invocation"]["options"] = {OLD_TILE_EDGES_OPTIONS.get(k, k): v for k, v in opts.items()}
    ov = doc.get("overall")
    if isinstance(ov, dict) and isinstance(ov.get("reduced_suite"), list):
        from conformance.suite.plan import TILE_EDGES_LEFT_OUT

        ov["reduced_suite"] = [TILE_EDGES_LEFT_OUT if s == OLD_TILE_EDGES_LEFT_OUT else s for s in ov["reduced_suite"]]
    return doc


#: the files :func:`write_reports` writes in ``<out_dir>/<kernel>/``.
REPORT_FILES = ("conformance.json", "conformance.md")


#: where a partial run's report goes when a complete one already lives in the folder
PARTIAL_REPORT_FILES = ("conformance.partial.json", "conformance.partial.md")


def add_triage(json_path: Union[str, Path], md_path: Union[str, Path], triage: dict) -> None:
    """Add a run's ``triage`` (``ConformanceResult.triage``) to its written report, without rendering it again: the
    JSON document gains its ``triage`` key (paths portable), the markdown :func:`triage_lines` where
    :func:`render_markdown` puts them (before the coverage section, else at the end). Both files atomically."""
    jp, mp = Path(json_path), Path(md_path)
    doc = json.loads(jp.read_text())
    doc["triage"] = portable_paths(json_safe(triage))
    atomic_write_text(jp, json.dumps(doc, indent=1, allow_nan=False) + "\n")
    md, section = mp.read_text(), "\n".join(triage_lines(doc))
    at = md.find("\n## Coverage of trigger conditions\n")
    atomic_write_text(mp, md[:at] + section + "\n" + md[at:] if at >= 0 else md.rstrip("\n") + section + "\n")


def write_reports(result, out_dir: Union[str, Path]) -> tuple[Path, Path]:
    """Write ``<out_dir>/<kernel>/conformance.{json,md}`` for a ConformanceResult; returns the paths.
    A partial run (pytest ``-k``, ``-x``, Ctrl-C) never replaces a complete report: when the folder's
    ``conformance.json`` is a complete run, it writes ``conformance.partial.{json,md}`` beside it. A complete
    run removes a stale ``conformance.partial.*`` of the folder."""
    doc = to_json_dict(result)
    d = Path(out_dir) / kernel_dirname(result.kernel["name"])
    names = REPORT_FILES
    if is_partial(doc) and _complete_report(d / REPORT_FILES[0]):
        names = PARTIAL_REPORT_FILES
    jp, mp = (d / name for name in names)
    atomic_write_text(jp, json.dumps(doc, indent=1, allow_nan=False) + "\n")
    atomic_write_text(mp, render_markdown(doc))
    if names == REPORT_FILES and not is_partial(doc):
        for name in PARTIAL_REPORT_FILES:
            (d / name).unlink(missing_ok=True)
    return jp, mp


def _complete_report(path: Path) -> bool:
    """Whether ``path`` is a readable conformance.json of a complete run."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("schema") == SCHEMA and not is_partial(doc)
