"""Precondition cases (built by the suite to violate C3 / C4: ``meta["violates"]``)
versus precondition violations (the user's own operands leave the range)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import torch

from conformance.cases.accumulator import large_acc_case, overflow_case
from conformance.commands.check import verdict_markup
from conformance.suite.report import render_markdown, to_json_dict
from conformance.suite.run import run_conformance


def _suite_cases():
    return [overflow_case("pow2", torch.float32), large_acc_case("real", torch.bfloat16)]


def _as_users(ops):
    """The same operands as a user's own capture would give them: no suite meta."""
    return dataclasses.replace(ops, name="mine/" + ops.name.rsplit("/", 1)[-1], meta={"source": "capture"})


def _run(cases):
    return run_conformance("cpu", cases=cases, property_examples=0, model_checks=False)


def test_the_suites_own_overflow_cases_are_precondition_cases_not_violations():
    assert [c.meta["violates"] for c in _suite_cases()] == [["C3", "C4"], ["C4"]]
    res = _run(_suite_cases())
    assert res.verdict == "pass"
    assert res.overall["precondition_violations"] == []
    assert res.overall["precondition_cases"] == {"C3": 1, "C4": 2}
    assert res.overall["summary"] == (
        "conformant: no check failed because of the kernel; precondition cases (built by "
        "the suite to violate them, not failures): C3 int32_headroom: 1; "
        "C4 fp32_exact_accumulator: 2"
    )
    assert [cr.precondition_violations for cr in res.cases] == [[], []]
    assert [[r.check_id for r in cr.precondition_cases] for cr in res.cases] == [["C3", "C4"], ["C4"]]
    doc = json.loads(json.dumps(to_json_dict(res)))
    label = {c["check_id"]: c["label"] for c in doc["checks"]}
    assert (label["C3"], label["C4"], label["C8"]) == ("precondition case (1)", "precondition case (2)", "pass")
    c4 = {c["check_id"]: c for c in doc["checks"]}["C4"]["evidence"]
    assert (c4["n_precondition_cases"], c4["n_precondition_violations"]) == (2, 0)
    assert doc["cases"][1]["checks"]["C4"]["evidence"]["precondition_case"] is True
    md = render_markdown(doc)
    assert "| C4   | fp32_exact_accumulator | precondition case (2) |" in md
    assert "| C3   | int32_headroom         | precondition case (1) |" in md
    assert "fail (precondition)" not in md and "### Failure evidence" not in md
    row = [ln for ln in md.splitlines() if ln.startswith("| family/large_acc/run-real-bf16 ")]
    assert [c.strip() for c in row[0].split("|")][9:11] == ["ok", "pre"]  # C3, C4
    assert verdict_markup("fail", c4) == "[cyan]precondition case (2)[/]"


def test_the_same_operands_from_the_user_are_precondition_violations():
    res = _run([_as_users(c) for c in _suite_cases()])
    assert res.verdict == "pass"
    assert res.overall["precondition_violations"] == ["C3", "C4"]
    assert res.overall["precondition_cases"] == {}
    assert res.overall["summary"] == (
        "conformant: no check failed because of the kernel; precondition violated (operands, "
        "not the kernel): C3 int32_headroom: 1 cases; C4 fp32_exact_accumulator: 2 cases"
    )
    assert [[r.check_id for r in cr.precondition_violations] for cr in res.cases] == [["C3", "C4"], ["C4"]]
    doc = json.loads(json.dumps(to_json_dict(res)))
    label = {c["check_id"]: c["label"] for c in doc["checks"]}
    assert (label["C3"], label["C4"]) == ("precondition violated (1)", "precondition violated (2)")
    md = render_markdown(doc)
    assert "| C4   | fp32_exact_accumulator | precondition violated (2) |" in md
    row = [ln for ln in md.splitlines() if ln.startswith("| mine/run-real-bf16[")]
    assert [c.strip() for c in row[0].split("|")][9:11] == ["ok", "violated"]


def test_mixed_precondition_cases_and_violations_are_both_named():
    suite, users = _suite_cases(), [_as_users(c) for c in _suite_cases()]
    res = _run([suite[1], users[1]])
    assert res.overall["precondition_violations"] == ["C4"]
    assert res.overall["precondition_cases"] == {"C4": 1}
    doc = to_json_dict(res)
    assert {c["check_id"]: c["label"] for c in doc["checks"]}["C4"] == (
        "precondition violated (1); precondition case (1)"
    )


def test_pytest_plugin_warns_not_about_the_suites_precondition_cases(tmp_path):
    """The default suite's large_acc family under ``pytest --kernel=cpu``: no
    PreconditionWarning (before: one per case)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--kernel=cpu",
            "--int8conf-no-captures",
            "--int8conf-examples=0",
            "--int8conf-no-model",
            f"--int8conf-reports={tmp_path / 'r'}",
            "-k",
            "large_acc or int32_overflow",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:]
    assert "8 passed" in r.stdout and "PreconditionWarning" not in r.stdout, r.stdout[-2000:]
    doc = json.loads((tmp_path / "r" / "cpu" / "conformance.json").read_text())
    assert doc["overall"]["precondition_cases"] == {"C3": 2, "C4": 8}
