"""``int8conf check``'s triage (conformance.triage.run, issue 43): a failing run's report carries "Where the bug
lives" (conformance.json's ``triage``, the md section, a reproducer of the minimal case); a passing run's does not;
``--no-triage`` leaves it out. ``prefill_scale_order`` pins M 128 / 129 from the run's first failing case."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from subprocesses import run_python

from conformance.cli import main
from conformance.suite.report import triage_lines
from conformance.triage.run import triage_result

QUICK = ["--no-model", "--no-captures", "--examples", "0", "--quiet"]


def _check(tmp_path: Path, kernel: str, *extra: str) -> tuple[dict, str, Path]:
    out = tmp_path / "reports"
    main(["check", "--kernel", kernel, *QUICK, *extra, "--out", str(out)])
    kdir = out / kernel.split(":")[-1]
    doc = json.loads((kdir / "conformance.json").read_text())
    return doc, (kdir / "conformance.md").read_text(), kdir


def test_prefill_scale_order_report_names_m_128_129(tmp_path):
    out = tmp_path / "r"
    args = ["-m", "conformance.cli", "check", "--kernel", "buggy_kernels:prefill_scale_order", *QUICK, "--out", out]
    proc = run_python(args, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "prefill_scale_order: where C8 lives (case " in proc.stdout
    assert "M passes at 128, fails at 129" in proc.stdout
    kdir = out / "prefill_scale_order"
    doc = json.loads((kdir / "conformance.json").read_text())
    t = doc["triage"]["C8"]
    m = t["boundaries"]["m"]
    assert (m["passes_at"], m["fails_at"], m["exact"]) == (128, 129, True)
    assert t["minimal"]["fails"] and t["minimal"]["shape"][0] == 129
    assert t["calls"] <= 3 * 24 + len(t["flips"]) + 8
    md = (kdir / "conformance.md").read_text()
    section = md.split("## Where the bug lives")[1].split("\n## ")[0]
    assert "### C8 declared_contract" in section and f"`{t['case']}`" in section
    assert any(line.replace(" ", "").startswith("|M|128|129|") for line in section.splitlines())
    repro = Path(t["repro"])  # written portably (${TMPDIR:-/tmp}/...): its name is what counts
    assert "command.sh" in t["replay"] and t["replay"] in section
    assert (kdir / "repro" / repro.name / "command.sh").is_file()
    case = json.loads((kdir / "repro" / repro.name / "case.json").read_text())
    assert case["shape"] == t["minimal"]["shape"] and case["what_happened"]["check"] == "C8"


def test_a_passing_run_has_no_triage(tmp_path):
    doc, md, kdir = _check(tmp_path, "cpu", "--no-tile-edges")
    assert doc["overall"]["verdict"] == "pass"
    assert "triage" not in doc and "Where the bug lives" not in md and not (kdir / "repro").exists()


def test_no_triage_leaves_it_out_of_a_failing_report(tmp_path):
    on, md_on, _ = _check(tmp_path / "on", "buggy_kernels:decode_path_order", "--no-tile-edges")
    assert on["overall"]["verdict"] == "fail"
    t = on["triage"]["C8"]
    assert t["boundaries"]["m"]["passes_at"] == 2 and t["boundaries"]["m"]["fails_at"] == 1  # the M = 1 path
    assert t["budget"] >= 4 and "## Where the bug lives" in md_on
    off, md_off, kdir = _check(tmp_path / "off", "buggy_kernels:decode_path_order", "--no-tile-edges", "--no-triage")
    assert off["overall"]["verdict"] == "fail"
    assert "triage" not in off and "Where the bug lives" not in md_off and not (kdir / "repro").exists()


def test_triage_lines_render_points_and_skips():
    doc = {
        "checks": [{"check_id": "C8", "name": "declared_contract"}],
        "triage": {
            "C8": {
                "case": "x",
                "shape": [4, 8, 2],
                "boundaries": {
                    "k": {
                        "passes_at": 4,
                        "fails_at": 8,
                        "calls": 3,
                        "monotone": False,
                        "exact": False,
                        "points": [[2, True], [4, False], [8, True]],
                    }
                },
                "flips": [{"attribute": "bias", "value": "absent", "fails": False}],
                "minimal": {"shape": [4, 2, 2], "fails": True, "calls": 1},
                "calls": 5,
                "seconds": 0.1,
                "budget": 4,
            },
            "C5": {"case": "y", "skipped": "not among the run's fixed cases"},
        },
    }
    text = "\n".join(triage_lines(doc))
    assert "| K " in text and "4 (not monotone)" in text and "2, 8" in text
    assert "`bias absent`" in text and "M,K,N 4,2,2" in text and "not triaged (not among" in text
    assert triage_lines({"checks": []}) == []


def test_a_run_with_a_crash_is_not_triaged():
    # its probes would run in the command's own process: a kernel that died once must not be called there again
    res = SimpleNamespace(conformant=False, overall={"crashes": [{"case": "x", "status": "crash"}]}, cases=[])
    assert triage_result(None, res, []) == {}
