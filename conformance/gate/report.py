"""Gate reports, written atomically: ``gate.json`` (schema ``int8conf.gate`` v1, everything:
candidate / incumbent (a blocked candidate's ``triage``: where its failing checks live), policy, overall,
per_layer, cases, serving (C13-C15), model, check_changes, comparability, environment, options, elapsed_s, notes,
``partial`` per ``conformance.runtime.partial_run``), ``gate.md`` (a pull-request summary; "Where the bug lives" after the
blocking cases) and ``junit.xml``."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Optional, Union

from conformance.checks.result import CHECK_NAMES
from conformance.gate.junit import reason_text, to_junit_xml
from conformance.gate.run import SCHEMA, SCHEMA_VERSION
from conformance.gate.status import STATUSES
from conformance.runtime.partial_run import complete_run, partial_note
from conformance.suite.report import json_safe, triage_lines
from reference.fileio import atomic_write_text, portable_paths

_MARK = {s: s.upper() if s in ("fail", "crash", "timeout") else s for s in STATUSES}


def per_layer(cases: list) -> list[dict]:
    """Output class per layer (capture cases) and scale mode, plus one row per
    other case source (counts of classes / statuses)."""
    rows: dict[str, dict] = {}
    for d in cases:
        key = d.layer if d.layer else f"({d.source or 'other'} cases)"
        r = rows.setdefault(key, {"layer": key, "statuses": {}})
        cls = (d.delta or {}).get("class") or "-"
        if d.layer:
            mx = (d.delta or {}).get("max_ulp")
            r[d.scale_mode] = f"{d.status}: {cls}" + (f" ({mx} ulp)" if mx else "")
        else:
            classes = r.setdefault("classes", {})
            classes[cls] = classes.get(cls, 0) + 1
        r["statuses"][d.status] = r["statuses"].get(d.status, 0) + 1
    return list(rows.values())


def check_change_summary(cases: list) -> dict:
    """``{check id: {"regression": n, "improvement": n, "changed": n}}`` over cases."""
    out: dict[str, dict] = {}
    for d in cases:
        for ch in d.changes:
            out.setdefault(ch["check"], {"regression": 0, "improvement": 0, "changed": 0})[ch["change"]] += 1
    return dict(sorted(out.items()))


def triage_doc(doc: dict) -> dict:
    """What ``conformance.suite.report.triage_lines`` / ``triage_summary`` read, from a ``gate.json`` document: the
    candidate's ``triage`` (``GateSession.triage``; ``{}`` when it was not triaged) and its checks' names."""
    tri = (doc.get("candidate") or {}).get("triage") or {}
    return {"triage": tri, "checks": [{"check_id": cid, "name": CHECK_NAMES.get(cid, "")} for cid in tri]}


def _head() -> dict:
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "generated_at": now}


def to_json_dict(res) -> dict:
    """The ``gate.json`` document of a ``conformance.gate.run.GateResult``."""
    return json_safe(
        {
            **_head(),
            "candidate": res.candidate,
            "incumbent": res.incumbent,
            "policy": res.policy,
            "overall": res.overall,
            "per_layer": per_layer(res.cases),
            "check_changes": check_change_summary(res.cases),
            "serving": [d.to_dict() for d in getattr(res, "serving", None) or []],
            "model": [d.to_dict() for d in res.model],
            "cases": [d.to_dict() for d in res.cases],
            "comparability": {k: v for k, v in res.comparability.items() if k != "case_ids"},
            "environment": res.environment,
            "options": res.options,
            "elapsed_s": round(res.elapsed_s, 3),
            "notes": list(res.notes),
            "partial": dict(getattr(res, "partial", None) or complete_run(len(res.cases), "gate")),
        }
    )


def not_comparable_doc(candidate: str, baseline: str, reasons: list, policy: Optional[dict]) -> dict:
    """A ``gate.json`` document for a refused baseline (no kernel ran)."""
    return json_safe(
        {
            **_head(),
            "candidate": {"ref": {"label": candidate}},
            "incumbent": {"baseline": baseline},
            "policy": policy,
            "overall": {
                "verdict": "not comparable",
                "exit_code": 2,
                "summary": "NOT COMPARABLE: " + "; ".join(reasons),
                "reasons": reasons,
                "counts": {s: 0 for s in STATUSES},
                "blocking": [],
                "unused_expectations": [],
            },
            "per_layer": [],
            "check_changes": {},
            "serving": [],
            "model": [],
            "cases": [],
            "notes": [],
            "partial": complete_run(0, "gate"),
        }
    )  # refused before any case: nothing was cut short


def _label(side: dict) -> str:
    if side.get("baseline"):
        return f"{(side.get('manifest') or {}).get('name', '?')} (baseline {side['baseline']})"
    ref = side.get("ref") or {}
    return ref.get("label") or (side.get("manifest") or {}).get("name", "?")


def _cell(s, width: int = 160) -> str:
    s = str(s).replace("|", "\\|").replace("\n", " ")
    return s if len(s) <= width else s[: width - 3] + "..."


def render_markdown(doc: dict, max_rows: int = 15) -> str:
    """The pull-request comment: verdict, counts, blocking items with reasons, where a blocked candidate's
    failing checks live (``suite.report.triage_lines`` of :func:`triage_doc`), per-layer classes, check changes,
    serving checks (C13-C15), model-level checks, expectations, reproducers (long lists folded in ``<details>``)."""
    ov = doc["overall"]
    verdict = ov.get("headline") or ov["verdict"].upper()  # "PASS on a reduced suite: ... skipped"
    if partial_note(doc):
        rec = doc.get("partial") or {}
        if rec.get("partial") and rec.get("cases_ran") == rec.get("cases_total"):
            # every case decided, but the stop cut a model-level check short
            cut = f"stopped during {rec['stage']}" if rec.get("stage") else "stopped before the end"
        else:
            cut = "not every case was decided"
        verdict += f" (PARTIAL RUN: {cut})"
    title = f"`{_label(doc['candidate'])}` replacing `{_label(doc['incumbent'])}`"
    lines = [f"## int8conf gate: {title} -- **{verdict}**", ""]
    pol = doc.get("policy") or {}
    if pol:
        req, allow = (", ".join(pol.get(k) or []) or "nothing" for k in ("require", "allow"))
        lines += [
            f"Policy `{pol.get('name')}` ({pol.get('source')}): require {req}; allow {allow}; max token flips above "
            f"threshold {pol.get('max_token_flips_above_threshold')}; engine hash may "
            f"move: {'yes' if pol.get('allow_engine_hash_change') else 'no'}.",
            "",
        ]
    lines += [ov["summary"], ""]
    if ov["verdict"] == "not comparable":
        lines += ["Reasons:", ""] + [f"- {r}" for r in ov.get("reasons", [])] + [""]
        return "\n".join(lines)
    counts = ov.get("counts") or {}
    lines += [
        "| " + " | ".join(STATUSES) + " |",
        "|" + "---|" * len(STATUSES),
        "| " + " | ".join(str(counts.get(s, 0)) for s in STATUSES) + " |",
        "",
    ]
    cases = doc.get("cases") or []
    bad = [c for c in cases if c["blocking"]]
    if bad:
        lines += [f"### Blocking ({len(bad)} cases)", ""]
        for c in bad[:max_rows]:
            why = "; ".join(r["text"] for r in c["reasons"] if r["blocking"])
            rep = (c.get("evidence") or {}).get("repro")
            repro = f" -- reproducer: `{rep}/command.sh`" if rep else ""
            lines.append(f"- `{c['item']}` **{_MARK[c['status']]}**: {_cell(why, 240)}{repro}")
        if len(bad) > max_rows:
            lines.append(f"- ... and {len(bad) - max_rows} more (gate.json)")
        lines.append("")
    where = triage_lines(triage_doc(doc))
    if where:
        lines += [*where[1:], ""]  # triage_lines opens with a blank line
    warn = [c for c in cases if c["status"] == "warn"]
    if warn:
        what = "within policy, not bit-identical or accepted by an expectation"
        lines += [f"<details><summary>Warnings ({len(warn)} cases: {what})</summary>", ""]
        lines += [f"- `{c['item']}`: " + _cell("; ".join(map(reason_text, c["reasons"])), 300) for c in warn[:max_rows]]
        if len(warn) > max_rows:
            lines.append(f"- ... and {len(warn) - max_rows} more (gate.json)")
        lines += ["", "</details>", ""]
    layers = [r for r in doc.get("per_layer") or [] if not r["layer"].startswith("(")]
    other = [r for r in doc.get("per_layer") or [] if r["layer"].startswith("(")]
    if layers or other:
        what = "output vs the incumbent (identical / within_one_spacing / worse)"
        lines += [f"<details><summary>Per layer and case group: {what}</summary>", ""]
        if layers:
            lines += ["| layer | own scales | pow2 scales |", "|---|---|---|"]
            lines += [f"| `{r['layer']}` | {r.get('own', '-')} | {r.get('pow2', '-')} |" for r in layers]
            lines.append("")
        if other:
            lines += ["| cases | output classes | statuses |", "|---|---|---|"]
            for r in other:
                cls = ", ".join(f"{k}: {v}" for k, v in sorted(r.get("classes", {}).items()))
                st = ", ".join(f"{k}: {v}" for k, v in sorted(r["statuses"].items()))
                lines.append(f"| {r['layer'][1:-1]} | {cls} | {st} |")
            lines.append("")
        lines += ["</details>", ""]
    chg = doc.get("check_changes") or {}
    if chg:
        lines += [
            "Check verdict changes (cases): "
            + "; ".join(f"{cid}: " + ", ".join(f"{n} {k}" for k, n in v.items() if n) for cid, v in chg.items()),
            "",
        ]
    serving = doc.get("serving") or []
    if serving:
        lines += [
            "Serving checks (the kernel as a serving stack calls it; a failure blocks unless the incumbent fails "
            "it too, n/a never blocks):",
            "",
        ]
    for m in serving:
        summary = ((m.get("evidence") or {}).get("candidate") or {}).get("summary") or "passes"
        txt = "; ".join(r["text"] for r in m["reasons"]) or f"{m['item']} {CHECK_NAMES.get(m['item'], '')}: {summary}"
        lines.append(f"- **{m['item']}** {_MARK[m['status']]}: {_cell(txt, 300)}")
    if serving:
        lines.append("")
    for m in doc.get("model") or []:
        summary = ((m.get("evidence") or {}).get("candidate") or {}).get("summary") or ""
        txt = "; ".join(r["text"] for r in m["reasons"]) or summary
        lines.append(f"- **{m['item']}** {_MARK[m['status']]}: {_cell(txt, 300)}")
    if doc.get("model"):
        lines.append("")
    exps = pol.get("expectations") or []
    if exps:
        used = set(ov.get("expectations_used") or [])
        lines += [f"Expectations: {len(used)} of {len(exps)} used."]
        for e in ov.get("unused_expectations") or []:
            lines.append(
                f"- unused: {e['check']} on {e.get('case') or e.get('layer') or 'model'}"
                f" ({e['owner']}: {e['reason']}) -- remove it or fix the pattern"
            )
        lines.append("")
    for n in doc.get("notes") or []:
        lines += [f"> {_cell(n, 400)}", ""]
    lines.append(
        "Full evidence: `gate.json`; per-case results: `junit.xml`. Statuses: pass "
        "(bit-identical), warn (within policy, not bit-identical), fail, not-supported, "
        "crash, timeout."
    )
    return "\n".join(lines) + "\n"


#: the files :func:`write_gate_reports` writes, by key of its returned dict.
GATE_REPORT_FILES = {"json": "gate.json", "md": "gate.md", "junit": "junit.xml"}


def write_gate_reports(doc: dict, out_dir: Union[str, Path]) -> dict:
    """Write ``gate.json``, ``gate.md`` and ``junit.xml`` under ``out_dir``; returns their Paths by
    :data:`GATE_REPORT_FILES` key."""
    d = Path(out_dir)
    doc = portable_paths(doc)  # no absolute path of this machine (repro/ keeps real ones)
    paths = {k: d / name for k, name in GATE_REPORT_FILES.items()}
    atomic_write_text(paths["json"], json.dumps(doc, indent=1, allow_nan=False) + "\n")
    atomic_write_text(paths["md"], render_markdown(doc))
    atomic_write_text(paths["junit"], to_junit_xml(doc))
    return paths
