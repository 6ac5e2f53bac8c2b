"""issue 42, item 1: a kernel that kills its process or hangs fails the case it does it on, under ``int8conf
check`` and under ``pytest --kernel``, and the run goes on: exit code 1, the case named with its signal or its
stack, a reproducer, the other cases' results in the report. Item 2: such runs say "on a reduced suite", and a
stopped plugin run says PARTIAL, never "overall PASS". Every hang is ended by the ``--timeout`` the test passes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conformance.cases import make_case
from conformance.kernels.registry import get_kernel
from conformance.runtime.repro import reproducer_dirname
from conformance.suite.report import write_reports
from conformance.suite.run import run_conformance

REPO = Path(__file__).resolve().parents[2]
HELPERS = REPO / "tests" / "helpers"
#: the two fixed cases with K == buggy_kernels.HOSTILE_K among the 22 of --no-sweep --no-captures
TAILS = ["synthetic/tails-s0", "synthetic/tails-s1"]
QUICK = ["--no-model", "--no-captures", "--no-sweep"]


def _run(args: list, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HELPERS)])}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _fixed(doc: dict) -> dict:
    return {c["case"]: c["verdict"] for c in doc["cases"] if c["source"] != "property"}


def test_check_segfault_in_a_worker_fails_that_case_and_the_run_goes_on(tmp_path):
    out = tmp_path / "r"
    kernel = "buggy_kernels:segfaulting_kernel"
    r = _run(
        ["-m", "conformance.cli", "check", "--kernel", kernel, *QUICK, "--examples", "0", "-j", "2", "--out", str(out)],
        tmp_path,
    )
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads((out / "segfaulting" / "conformance.json").read_text())
    fixed = _fixed(doc)
    assert {c: v for c, v in fixed.items() if c in TAILS} == {c: "crash" for c in TAILS}
    assert sorted(v for c, v in fixed.items() if c not in TAILS) == ["pass"] * 20  # every other case ran
    ov = doc["overall"]
    assert ov["verdict"] == "fail" and [(c["case"], c["status"], c["signal"]) for c in ov["crashes"]] == [
        (c, "crash", "SIGSEGV") for c in TAILS
    ]
    for case in TAILS:
        assert f"CRASH case {case}: the kernel's process died on this case (killed by SIGSEGV); reproducer:" in r.stdout
    crash = next(c for c in doc["cases"] if c["case"] == TAILS[0])["crash"]
    assert any("in segfaulting_kernel" in ln for ln in crash["log_tail"])  # faulthandler's stack
    repro = out / "segfaulting" / "repro" / "synthetic_tails-s0"
    info = json.loads((repro / "case.json").read_text())
    assert (info["case"], info["kernel"]["name"], info["shape"]) == (TAILS[0], kernel, [5, 37, 23])
    md = (out / "segfaulting" / "conformance.md").read_text()
    assert "## Crashes and hangs" in md and "**CRASH case synthetic/tails-s0: the kernel's process died" in md
    again = subprocess.run(["sh", str(repro / "command.sh")], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode in (-11, 139) and "segfaulting_kernel" in again.stderr  # it segfaults again, alone


def test_check_hang_and_abort_in_one_process_timeout_named_property_contained(tmp_path):
    """-j 1: one child for every step. The tails cases hang (killed at --timeout 3, stack named); the property
    test's first example (K = 1) aborts: the property test fails with SIGABRT and a reproducer of its operands."""
    out = tmp_path / "r"
    args = ["check", "--kernel", "buggy_kernels:hanging_then_aborting_kernel", *QUICK, "--examples", "3"]
    r = _run(["-m", "conformance.cli", *args, "-j", "1", "--timeout", "3", "--out", str(out)], tmp_path)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads((out / "hanging-then-aborting" / "conformance.json").read_text())
    fixed = _fixed(doc)
    assert {c: v for c, v in fixed.items() if c in TAILS} == {c: "timeout" for c in TAILS}
    assert sorted(v for c, v in fixed.items() if c not in TAILS) == ["pass"] * 20
    crashes = doc["overall"]["crashes"]
    assert [(c["case"], c["status"], c["timeout_s"]) for c in crashes[:2]] == [(c, "timeout", 3.0) for c in TAILS]
    stack = next(c for c in doc["cases"] if c["case"] == TAILS[0])["crash"]["log_tail"]
    assert any("in hanging_then_aborting_kernel" in ln for ln in stack)  # the stack dumped before the kill
    assert "TIMEOUT case synthetic/tails-s0: no result within 3 s on this case" in r.stdout
    prop = [c for c in crashes if c["case"].startswith("property/")]
    assert [(c["status"], c["signal"]) for c in prop] == [("crash", "SIGABRT")]
    assert doc["property_tests"]["failed"] and doc["property_tests"]["falsifying_case"] == prop[0]["case"]
    repro = out / "hanging-then-aborting" / "repro" / reproducer_dirname(prop[0]["case"])
    shape = json.loads((repro / "case.json").read_text())["shape"]
    assert shape[1] % 2 == 1 and shape[1] != 37  # the odd-K example that aborted
    assert doc["overall"]["headline"].startswith("FAIL on a reduced suite: the shape sweep and case families, ")


def test_plugin_abort_and_hang_fail_their_items_and_the_session_writes_the_report(tmp_path):
    reports = tmp_path / "rep"
    args = ["-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "--kernel=buggy_kernels:aborting_then_hanging_kernel"]
    args += ["--int8conf-no-sweep", "--int8conf-no-captures", "--int8conf-no-model", "--int8conf-examples=3"]
    r = _run([*args, "--int8conf-timeout=3", f"--int8conf-reports={reports}"], tmp_path)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    for case in TAILS:
        assert f"FAILED int8conf-aborting-then-hanging::{case}" in r.stdout
        assert (
            f"{case} (aborting-then-hanging): CRASH: the kernel's process died on this case (killed by SIGABRT)"
            in r.stdout
        )
    assert "FAILED int8conf-aborting-then-hanging::property" in r.stdout
    assert "TIMEOUT: no result within 3 s on this case" in r.stdout and "in aborting_then_hanging_kernel" in r.stdout
    assert "3 failed, 21 passed" in r.stdout  # 20 other cases and C9
    doc = json.loads((reports / "aborting-then-hanging" / "conformance.json").read_text())
    fixed = _fixed(doc)
    assert sorted(v for c, v in fixed.items() if c not in TAILS) == ["pass"] * 20
    assert [c["status"] for c in doc["overall"]["crashes"]] == ["crash", "crash", "timeout"]
    assert (reports / "aborting-then-hanging" / "repro" / "synthetic_tails-s1" / "command.sh").is_file()
    assert "aborting-then-hanging: overall FAIL on a reduced suite: the shape sweep and case families," in r.stdout


def test_a_reduced_run_says_so_in_its_headline(tmp_path):
    res = run_conformance("cpu", include_captures=False, include_sweep=False, property_examples=5, model_checks=False)
    want = [
        "the shape sweep and case families",
        "layer-capture replay",
        "20 of 25 property examples",
        "the model-level checks (C7, E1)",
    ]
    assert (res.verdict, res.overall["reduced_suite"]) == ("pass", want)
    jp, mp = write_reports(res, tmp_path)
    assert (
        json.loads(jp.read_text())["overall"]["headline"] == "PASS on a reduced suite: " + ", ".join(want) + " skipped"
    )
    assert mp.read_text().split("\n")[2].startswith("**Overall verdict: PASS on a reduced suite: the shape sweep")


def test_plugin_interrupted_summary_says_partial_never_overall_pass(tmp_path):
    """A Ctrl-C after the first item (a conftest raises KeyboardInterrupt there): the terminal summary says PARTIAL
    RUN (the report does too)."""
    (tmp_path / "conftest.py").write_text(
        "def pytest_runtest_logfinish(nodeid, location):\n"
        "    if nodeid.endswith('ordinary-s0'):\n"
        "        raise KeyboardInterrupt\n"
    )
    args = ["-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "--kernel=cpu", "--int8conf-no-sweep"]
    args += ["--int8conf-no-captures", "--int8conf-no-model", "--int8conf-examples=0", "--int8conf-reports=rep"]
    r = _run([*args, str(tmp_path / "conftest.py")], tmp_path)
    assert r.returncode == pytest.ExitCode.INTERRUPTED, r.stdout[-3000:] + r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("cpu: "))
    assert line.startswith("cpu: PARTIAL RUN (partial run: 1 of 22 fixed cases ran (interrupted)"), line
    assert "overall PASS" not in r.stdout
    doc = json.loads((tmp_path / "rep" / "cpu" / "conformance.json").read_text())
    assert doc["partial"]["partial"] and _fixed(doc) == {"synthetic/ordinary-s0": "pass"}


def _abort_at_m17(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    if a.shape[0] == 17:  # one of C9's batch sizes; no fixed case below has M = 17
        os.abort()
    return get_kernel("cpu").scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)


def test_a_crash_during_c9_fails_c9_and_the_run_reports_it(tmp_path):
    spec = dataclasses.replace(get_kernel("cpu"), name="c9-aborting", scaled_mm=_abort_at_m17)
    cases = [make_case("ordinary", 0), make_case("bias", 0)]
    res = run_conformance(spec, cases=cases, property_examples=0, model_checks=False, timeout_s=60, repro_dir=tmp_path)
    c9 = res.check("C9")
    assert (c9.verdict, c9.evidence["crash"]["signal"]) == ("fail", "SIGABRT")
    assert c9.summary == "kernel failed (crash): the kernel's process died during C9 (killed by SIGABRT)"
    assert [cr.verdict for cr in res.cases] == ["pass", "pass"]
    assert res.verdict == "fail" and res.overall["crashes"][0]["check"] == "C9"
    assert res.overall["summary"].startswith("NOT conformant: the kernel's process died on 1 step (first: C9: SIGABRT)")


def test_plugin_k_selection_is_a_reduced_and_partial_run(tmp_path):
    args = ["-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "--kernel=cpu", "--int8conf-no-sweep"]
    args += ["--int8conf-no-captures", "--int8conf-no-model", "--int8conf-examples=0", "--int8conf-reports=rep"]
    r = _run([*args, "-k", "ordinary-s0"], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("cpu: "))
    assert line.startswith("cpu: PARTIAL RUN (partial run: 1 of 22 fixed cases ran (pytest selection or early stop)")
    assert (
        "PASS on a reduced suite: the shape sweep and case families, layer-capture replay, the property test, " in line
    )
    assert (
        "21 of 22 fixed cases (not selected or not reached), C9 batch_invariance (not selected or not reached)" in line
    )
    doc = json.loads((tmp_path / "rep" / "cpu" / "conformance.json").read_text())
    assert doc["overall"]["reduced_suite"][-2:] == [
        "21 of 22 fixed cases (not selected or not reached)",
        "C9 batch_invariance (not selected or not reached)",
    ]
