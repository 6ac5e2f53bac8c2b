"""The gate's triage (issue 43): a blocked candidate whose own checks fail carries "Where the bug lives" as
``int8conf check`` does (gate.json's ``candidate.triage``, gate.md's section, the junit failure, a line on stdout,
the minimal case's reproducer); an allowed candidate, ``--no-triage`` and ``GateOptions(triage=False)`` carry none.
``buggy_kernels:decode_path_order`` is wrong on its M = 1 path only: the record pins M passes at 2, fails at 1."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.cases import make_case
from conformance.cli import main
from conformance.gate.policy import parse_policy
from conformance.gate.report import to_json_dict, write_gate_reports
from conformance.gate.run import GateOptions, run_gate
from conformance.runtime.pool import KernelRef

#: synthetic/m1-s0 (M = 1) takes decode_path_order's wrong path, synthetic/ordinary-s0 (M = 8) does not
CASES = [make_case("ordinary", 0), make_case("m1", 0)]
M1 = "synthetic/m1-s0"
POLICY = parse_policy({"name": "bit", "require": "bit_identical"})
FAST = ["--no-model", "--no-captures", "--no-tile-edges", "-q"]


def _gate(tmp_path: Path, incumbent: str, **opts):
    res = run_gate(
        KernelRef("buggy_kernels:decode_path_order"),
        KernelRef(incumbent),
        policy=POLICY,
        cases=CASES,
        out_dir=tmp_path,
        options=GateOptions(model_checks=False, **opts),
    )
    paths = write_gate_reports(to_json_dict(res), tmp_path)
    return res, json.loads(paths["json"].read_text()), paths


def test_a_blocked_candidate_carries_where_its_failing_check_lives(tmp_path):
    res, doc, paths = _gate(tmp_path, "cpu")
    assert doc["overall"]["verdict"] == "blocked" and doc["overall"]["blocking"] == [M1]
    assert [c["candidate_failed"] for c in doc["cases"]] == [[], ["C8"]]
    tri = doc["candidate"]["triage"]
    assert set(tri) == set(res.candidate["triage"]) == {"C8"}
    t = tri["C8"]
    m = t["boundaries"]["m"]
    assert t["case"] == M1 and (m["passes_at"], m["fails_at"], m["exact"]) == (2, 1, True)
    assert t["minimal"]["fails"] and t["minimal"]["shape"][0] == 1
    repro = tmp_path / "repro" / Path(t["repro"]).name
    assert repro.name == "triage-C8-synthetic_m1-s0" and (repro / "command.sh").is_file()
    section = paths["md"].read_text().split("## Where the bug lives")[1].split("\n## ")[0]
    assert "### C8 declared_contract" in section and f"`{M1}`" in section
    assert any(line.replace(" ", "").startswith("|M|2|1|") for line in section.splitlines())
    failure = paths["junit"].read_text().split(f'name="{M1}"')[1].split("</testcase>")[0]
    assert f"where C8 lives (case {M1}): M passes at 2, fails at 1" in failure


def test_an_allowed_candidate_failing_as_the_incumbent_does_is_not_triaged(tmp_path):
    # the same kernel as incumbent: C8 fails on both sides, the outputs are identical, the swap is allowed
    res, doc, paths = _gate(tmp_path, "buggy_kernels:decode_path_order")
    assert doc["overall"]["verdict"] == "pass" and doc["cases"][1]["candidate_failed"] == ["C8"]
    assert "triage" not in doc["candidate"] and "Where the bug lives" not in paths["md"].read_text()
    assert not (tmp_path / "repro").exists()


def test_triage_off_leaves_a_blocked_candidate_untriaged(tmp_path):
    res, doc, paths = _gate(tmp_path, "cpu", triage=False)
    assert doc["overall"]["verdict"] == "blocked" and "triage" not in doc["candidate"]
    assert "Where the bug lives" not in paths["md"].read_text() and not (tmp_path / "repro").exists()


def test_gate_cli_prints_a_line_per_triaged_check_and_no_triage_drops_it(tmp_path, capsys):
    args = ["gate", "--candidate", "buggy_kernels:decode_path_order", "--incumbent", "cpu", *FAST]
    assert main([*args, "--out", str(tmp_path / "on")]) == 1
    out = capsys.readouterr().out
    assert f"  where C8 lives (case {M1}): M passes at 2, fails at 1;" in out
    assert json.loads((tmp_path / "on" / "gate.json").read_text())["candidate"]["triage"]["C8"]["case"] == M1
    assert main([*args, "--no-triage", "--out", str(tmp_path / "off")]) == 1
    doc = json.loads((tmp_path / "off" / "gate.json").read_text())
    assert "where C8 lives" not in capsys.readouterr().out and "triage" not in doc["candidate"]
    assert doc["options"]["triage"] is False and not (tmp_path / "off" / "repro").exists()
