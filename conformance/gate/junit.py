"""JUnit XML of a gate report: one ``<testsuite name="int8conf-gate">``, a ``<testcase>`` per case
(``gate.<source>``), per serving check C13-C15 (``gate.serving``) and per model-level check (``gate.model``),
property ``status`` on each. pass / warn -> passed; fail -> ``<failure>``; crash / timeout -> ``<error type=...>``; not-supported ->
``<skipped>`` (plus ``<failure>`` when it blocks). A blocked candidate's triage (``candidate.triage``) adds its
one-line summary (``suite.report.triage_summary``) to the failure of the case each check's search started from."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from conformance.suite.report import triage_summary


def reason_text(r: dict) -> str:
    """A Decision reason's text, with the expectation that accepted it."""
    return r["text"] + (f" [expected: {r['expected']}]" if r.get("expected") else "")


def to_junit_xml(doc: dict) -> str:
    """The JUnit XML text of a ``gate.json`` document."""
    items = [(c, f"gate.{c.get('source') or 'case'}") for c in doc.get("cases") or []]
    items += [(m, "gate.serving") for m in doc.get("serving") or []]
    items += [(m, "gate.model") for m in doc.get("model") or []]
    counts = {"failures": 0, "errors": 0, "skipped": 0}
    suite = ET.Element("testsuite", name="int8conf-gate")
    tri = (doc.get("candidate") or {}).get("triage") or {}
    for d, cls in items:
        secs = str((d.get("evidence") or {}).get("elapsed_s", 0) or 0)
        tc = ET.SubElement(suite, "testcase", classname=cls, name=d["item"], time=secs)
        ET.SubElement(ET.SubElement(tc, "properties"), "property", name="status", value=d["status"])
        text = "\n".join(map(reason_text, d["reasons"]))
        msg = "; ".join(r["text"] for r in d["reasons"] if r["blocking"])[:500]
        st = d["status"]
        if st in ("crash", "timeout"):
            e = ET.SubElement(tc, "error", type=st, message=msg or st)
            tail = (d.get("evidence") or {}).get("log_tail") or []
            e.text = text + ("\n" + "\n".join(tail) if tail else "")
            counts["errors"] += 1
        elif st == "not-supported":
            ET.SubElement(tc, "skipped", message=text[:500])
            counts["skipped"] += 1
            if d["blocking"]:
                ET.SubElement(tc, "failure", message=msg).text = text
                counts["failures"] += 1
        elif d["blocking"]:
            where = triage_summary({cid: t for cid, t in tri.items() if t.get("case") == d["item"]})
            ET.SubElement(tc, "failure", message=msg).text = "\n".join([text, *where])
            counts["failures"] += 1
        elif text:
            ET.SubElement(tc, "system-out").text = f"{st}: {text}"
    suite.set("tests", str(len(items)))
    for k, v in counts.items():
        suite.set(k, str(v))
    suite.set("time", str(doc.get("elapsed_s", 0)))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
