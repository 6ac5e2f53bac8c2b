"""issue 42, item 1: a kernel that kills its process or hangs fails the case it does it on, under ``int8conf
check`` and under ``pytest --kernel``, and the run goes on: exit code 1, the case named with its signal or its
stack, a reproducer, the other cases' results in the report. Item 2: such runs say "on a reduced suite", and a
stopped plugin run says PARTIAL, never "overall PASS". Every hang is ended by the ``--timeout`` the test passes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from subprocesses import run_python

from conformance.cases import make_case
from conformance.kernels.loader import load_module_function
from conformance.kernels.registry import get_kernel
from conformance.runtime.repro import reproducer_dirname
from conformance.suite import workers
from conformance.suite.report import write_reports
from conformance.suite.run import run_conformance

REPO = Path(__file__).resolve().parents[2]
HELPERS = REPO / "tests" / "helpers"
#: the two fixed cases with K == buggy_kernels.HOSTILE_K among the 22 of --no-tile-edges --no-captures
TAILS = ["synthetic/tails-s0", "synthetic/tails-s1"]
QUICK = ["--no-model", "--no-captures", "--no-tile-edges"]


def _fixed(doc: dict) -> dict:
    return {c["case"]: c["verdict"] for c in doc["cases"] if c["source"] != "property"}


def test_check_segfault_in_a_worker_fails_that_case_and_the_run_goes_on(tmp_path):
    out = tmp_path / "r"
    kernel = "buggy_kernels:segfaulting_kernel"
    r = run_python(
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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU path's containment: no CUDA here")
def test_check_segfault_on_cuda_fails_that_case_and_the_run_goes_on(tmp_path):
    """On CUDA too a segfault costs one case: the workers and the containment child can use CUDA (nothing in the
    run poisons fork before them), so no kernel call runs in the suite's own process."""
    out = tmp_path / "r"
    args = ["--kernel", "buggy_kernels:segfaulting_cuda", "--device", "cuda", "--no-serving", "--no-triage"]
    r = run_python(
        ["-m", "conformance.cli", "check", *args, *QUICK, "--examples", "0", "-j", "2", "--out", str(out)], tmp_path
    )
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads((out / "segfaulting_cuda" / "conformance.json").read_text())
    fixed = _fixed(doc)
    assert {c: v for c, v in fixed.items() if c in TAILS} == {c: "crash" for c in TAILS}
    assert len(fixed) == 22 and "crash" not in {v for c, v in fixed.items() if c not in TAILS}
    assert not [n for n in doc["notes"] if "not contained" in n], doc["notes"]
    assert "fixed cases run in this process" not in r.stderr


def test_check_hang_and_abort_in_one_process_timeout_named_property_contained(tmp_path):
    """-j 1: one child for every step. The tails cases hang (killed at --timeout 3, stack named); the property
    test's first example (K = 1) aborts: the property test fails with SIGABRT and a reproducer of its operands."""
    out = tmp_path / "r"
    args = ["check", "--kernel", "buggy_kernels:hanging_then_aborting_kernel", *QUICK, "--examples", "3"]
    r = run_python(["-m", "conformance.cli", *args, "-j", "1", "--timeout", "3", "--out", str(out)], tmp_path)
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
    assert doc["overall"]["headline"].startswith("FAIL on a reduced suite: the tile-edge shapes and case families, ")


def test_plugin_abort_and_hang_fail_their_items_and_the_session_writes_the_report(tmp_path):
    reports = tmp_path / "rep"
    args = ["-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "--kernel=buggy_kernels:aborting_then_hanging_kernel"]
    args += ["--int8conf-no-tile-edges", "--int8conf-no-captures", "--int8conf-no-model", "--int8conf-examples=3"]
    r = run_python([*args, "--int8conf-timeout=3", f"--int8conf-reports={reports}"], tmp_path)
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
    assert "aborting-then-hanging: overall FAIL on a reduced suite: the tile-edge shapes and case families," in r.stdout


def test_a_reduced_run_says_so_in_its_headline(tmp_path):
    res = run_conformance(
        "cpu", include_captures=False, include_tile_edges=False, property_examples=5, model_checks=False
    )
    want = [
        "the tile-edge shapes and case families",
        "layer-capture replay",
        "20 of 25 property examples",
        "the model-level checks (C7, E1)",
    ]
    assert (res.verdict, res.overall["reduced_suite"]) == ("pass", want)
    jp, mp = write_reports(res, tmp_path)
    assert (
        json.loads(jp.read_text())["overall"]["headline"] == "PASS on a reduced suite: " + ", ".join(want) + " skipped"
    )
    assert mp.read_text().split("\n")[2].startswith("**Overall verdict: PASS on a reduced suite: the tile-edge shapes")


def test_plugin_interrupted_summary_says_partial_never_overall_pass(tmp_path):
    """A Ctrl-C after the first item (a conftest raises KeyboardInterrupt there): the terminal summary says PARTIAL
    RUN (the report does too)."""
    (tmp_path / "conftest.py").write_text(
        "def pytest_runtest_logfinish(nodeid, location):\n"
        "    if nodeid.endswith('ordinary-s0'):\n"
        "        raise KeyboardInterrupt\n"
    )
    args = ["-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "--kernel=cpu", "--int8conf-no-tile-edges"]
    args += ["--int8conf-no-captures", "--int8conf-no-model", "--int8conf-examples=0", "--int8conf-reports=rep"]
    r = run_python([*args, str(tmp_path / "conftest.py")], tmp_path)
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


def test_after_a_hang_each_later_case_gets_the_hang_budget_and_the_report_says_so(monkeypatch):
    # the budget at its floor (factor 0): the first hang costs --timeout, the second the floor, whatever the load
    monkeypatch.setattr(workers, "HANG_FLOOR_S", 1.0)
    monkeypatch.setattr(workers, "HANG_FACTOR", 0.0)
    spec = load_module_function("buggy_kernels:hanging_kernel")
    cases = [make_case("tails", 0), make_case("ordinary", 0), make_case("tails", 1)]  # the tails: K == HOSTILE_K
    res = run_conformance(spec, cases=cases, property_examples=0, model_checks=False, timeout_s=4)
    assert [cr.verdict for cr in res.cases] == ["timeout", "pass", "timeout"]
    assert res.cases[0].elapsed_s >= 4.0 and res.cases[2].elapsed_s >= 1.0  # until the kill, not 0
    got = [(c.get("case", c.get("check")), c["timeout_s"]) for c in res.overall["crashes"]]
    assert got == [(TAILS[0], 4.0), (TAILS[1], 1.0), ("C9", 4.0)]  # a check keeps --timeout (C9's probes hang too)
    assert "hang budget: after the first case that hung (--timeout 4 s) each later case had 1 s" in res.notes[-1]


def test_plugin_k_selection_is_a_reduced_and_partialrun_python(tmp_path):
    args = ["-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "--kernel=cpu", "--int8conf-no-tile-edges"]
    args += ["--int8conf-no-captures", "--int8conf-no-model", "--int8conf-examples=0", "--int8conf-reports=rep"]
    r = run_python([*args, "-k", "ordinary-s0"], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("cpu: "))
    assert line.startswith("cpu: PARTIAL RUN (partial run: 1 of 22 fixed cases ran (pytest selection or early stop)")
    assert (
        "PASS on a reduced suite: the tile-edge shapes and case families, layer-capture replay, the property test, "
        in line
    )
    assert (
        "21 of 22 fixed cases (not selected or not reached), C9 batch_invariance (not selected or not reached), "
        "C13 graph_replay (not selected or not reached)" in line
    )
    doc = json.loads((tmp_path / "rep" / "cpu" / "conformance.json").read_text())
    assert doc["overall"]["reduced_suite"][-5:] == [
        "21 of 22 fixed cases (not selected or not reached)",
        "C9 batch_invariance (not selected or not reached)",
        *(f"{c} (not selected or not reached)" for c in ("C13 graph_replay", "C14 compile", "C15 streams_devices")),
    ]


# --- issue 42 walk: a kernel that raises, crashes everywhere, interrupts itself; an interrupted run's skips ---


def _quick_check(kernel: str, out: Path) -> int:
    from conformance.cli import main

    return main(["check", "--kernel", kernel, *QUICK, "--examples", "0", "--out", str(out), "-q"])


def test_a_kernel_that_raises_is_named_as_raising_not_as_failing_numerics(tmp_path, capsys):
    """the headline leads with the raise; the raised cases feed no check's failure and no fault signature."""
    rc = _quick_check("buggy_kernels:raises_past_m16", tmp_path)
    out = capsys.readouterr().out
    assert rc == 1
    doc = json.loads((tmp_path / "raises_past_m16" / "conformance.json").read_text())
    ov = doc["overall"]
    want = (
        "NOT conformant: the kernel raised on 2 cases and C9 (first: synthetic/epilogue_ties-s0: RuntimeError: no "
        "tile for M=32)"
    )
    assert ov["summary"] == want and want in out  # before: "C5 pow2_bit_identity failed; C6 ...; C8 ... failed"
    assert ov["failed_checks"] == ["CALL", "C9"] and [r["case"] for r in ov["raised"][:2]] == [
        "synthetic/epilogue_ties-s0",
        "synthetic/epilogue_ties-s1",
    ]
    assert doc["fault_signatures"] == [] and "failure signature" not in out
    raised = next(c for c in doc["cases"] if c["case"] == "synthetic/epilogue_ties-s0")
    assert raised["verdict"] == "fail" and raised["raised"] == "RuntimeError: no tile for M=32"
    assert {cid: c["verdict"] for cid, c in raised["checks"].items() if cid != "CALL"} == dict.fromkeys(
        ("C1", "C2", "C3", "C4", "C5", "C6", "C8", "C10"), "n/a"
    )
    c9 = next(c for c in doc["checks"] if c["check_id"] == "C9")
    assert c9["evidence"]["failure_kind"] == "raised" and "row bits depend" not in c9["summary"]
    md = (tmp_path / "raises_past_m16" / "conformance.md").read_text()
    assert "| FAIL raised: RuntimeError: no tile for M=32 |" in md


def test_a_kernel_that_crashes_on_every_case_fails_no_numeric_check(tmp_path, capsys):
    """a case whose process died has no output: its checks are not run (-), C8 does not fail, the run fails
    (exit 1) with the crashes in its headline. P11: the kernel's own prints are in no report."""
    from buggy_kernels import SEGFAULT_PRINT

    rc = _quick_check("buggy_kernels:segfaults_always", tmp_path)
    out = capsys.readouterr().out
    assert rc == 1
    doc = json.loads((tmp_path / "segfaults_always" / "conformance.json").read_text())
    ov = doc["overall"]
    want = "NOT conformant: the kernel's process died on 22 cases and C9 (first: synthetic/ordinary-s0: SIGSEGV)"
    assert ov["summary"] == want and want in out  # before: "...; C8 declared_contract failed"
    assert ov["failed_checks"] == ["CALL", "C9"]
    checks = {c["check_id"]: c for c in doc["checks"]}
    assert checks["C8"]["verdict"] == "n/a"  # before: "fail ... failed on 22/22 cases"
    assert checks["CALL"]["summary"].startswith("no output on 22 of 22 cases; first: synthetic/ordinary-s0: ")
    assert {c["verdict"] for c in doc["cases"]} == {"crash"}
    assert {v["verdict"] for c in doc["cases"] for cid, v in c["checks"].items() if cid != "CALL"} == {"n/a"}
    assert SEGFAULT_PRINT not in (tmp_path / "segfaults_always" / "conformance.json").read_text() + out


def test_a_keyboard_interrupt_the_kernel_raises_is_its_failure_under_check(tmp_path, capsys):
    """no SIGINT / SIGTERM came: the kernel's own KeyboardInterrupt fails its cases; the run is complete."""
    rc = _quick_check("buggy_kernels:raises_keyboard_interrupt", tmp_path)
    assert rc == 1  # before: 130, a PARTIAL RUN report headed PASS
    doc = json.loads((tmp_path / "raises_keyboard_interrupt" / "conformance.json").read_text())
    assert not doc["partial"]["partial"] and len([c for c in doc["cases"] if c["source"] != "property"]) == 22
    assert doc["overall"]["summary"].startswith(
        "NOT conformant: the kernel raised on 2 cases and C9 (first: synthetic/epilogue_ties-s0: KeyboardInterrupt: "
    )


def test_a_keyboard_interrupt_the_kernel_raises_is_its_failure_under_the_plugin(tmp_path):
    args = ["-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "--kernel=buggy_kernels:raises_keyboard_interrupt"]
    args += ["--int8conf-no-tile-edges", "--int8conf-no-captures", "--int8conf-no-model", "--int8conf-examples=0"]
    r = run_python([*args, "--int8conf-reports=rep"], tmp_path)
    assert r.returncode == pytest.ExitCode.TESTS_FAILED, r.stdout[-3000:] + r.stderr[-3000:]  # before: INTERRUPTED
    assert "3 failed, 20 passed" in r.stdout and "PARTIAL RUN" not in r.stdout
    assert "kernel raised KeyboardInterrupt: the kernel's own KeyboardInterrupt" in r.stdout


def test_a_real_ctrl_c_during_a_kernel_call_still_stops():
    """with SIGINT remembered (as check and pytest --kernel do), a Ctrl-C inside the kernel call is a stop."""
    import signal

    from conformance.kernels.runner import run_kernel
    from conformance.runtime.graceful_stop import record_interrupts, restore_interrupts

    def own(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        raise KeyboardInterrupt("mine")

    def ctrl_c(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        signal.raise_signal(signal.SIGINT)

    ops = make_case("ordinary", 0)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert record_interrupts()
        run = run_kernel(dataclasses.replace(get_kernel("cpu"), scaled_mm=own), ops)
        assert run.output is None and run.raised == "KeyboardInterrupt: mine"
        with pytest.raises(KeyboardInterrupt):
            run_kernel(dataclasses.replace(get_kernel("cpu"), scaled_mm=ctrl_c), ops)
    finally:
        restore_interrupts()
        signal.signal(signal.SIGINT, before)


def test_a_second_sigint_is_ignored_so_the_partial_report_is_written_and_a_third_stops():
    """``timeout -s INT`` signals the process and then its group: two SIGINTs. The first stops the run, the second
    arrives while the partial report is written and must not interrupt that; a third Ctrl-C stops at once."""
    import signal

    from conformance.runtime.graceful_stop import record_interrupts, restore_interrupts, stop_requested

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert record_interrupts()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)  # the report is being written: ignored
        assert stop_requested()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    finally:
        restore_interrupts()
        signal.signal(signal.SIGINT, before)


def test_an_interrupted_check_lists_what_it_did_not_reach(monkeypatch):
    """the cases and steps a stop cut off are in ``reduced_suite``, so the headline is never a bare PASS."""
    from conformance.suite.plan import SuiteState
    from conformance.suite.run import SuiteInterrupted

    evaluate = SuiteState.evaluate

    def stop_at_second(self, index):
        if index == 1:
            raise KeyboardInterrupt
        return evaluate(self, index)

    monkeypatch.setattr(SuiteState, "evaluate", stop_at_second)
    cases = [make_case("ordinary", 0), make_case("bias", 0), make_case("tails", 0)]
    with pytest.raises(SuiteInterrupted) as e:
        run_conformance("cpu", cases=cases, property_examples=3, model_checks=False)
    ov = e.value.result.overall
    assert ov["reduced_suite"][-6:] == [
        "2 of 3 fixed cases not reached (interrupted)",
        "the property test not reached (interrupted)",
        "C9 batch_invariance not reached (interrupted)",
        *(f"{c} not reached (interrupted)" for c in ("C13 graph_replay", "C14 compile", "C15 streams_devices")),
    ]
    assert ov["headline"].startswith("INCOMPLETE (interrupted, not a PASS) on a reduced suite: ")
    assert (ov["cases_total"], ov["cases_planned"]) == (1, 3)


def test_an_interrupted_plugin_run_lists_what_it_did_not_reach(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "def pytest_runtest_logfinish(nodeid, location):\n"
        "    if nodeid.endswith('ordinary-s0'):\n"
        "        raise KeyboardInterrupt\n"
    )
    args = ["-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "--kernel=cpu", "--int8conf-no-tile-edges"]
    args += ["--int8conf-no-captures", "--int8conf-no-model", "--int8conf-examples=0", "--int8conf-reports=rep"]
    r = run_python([*args, str(tmp_path / "conftest.py")], tmp_path)
    assert r.returncode == pytest.ExitCode.INTERRUPTED, r.stdout[-3000:] + r.stderr[-3000:]
    ov = json.loads((tmp_path / "rep" / "cpu" / "conformance.json").read_text())["overall"]
    serving = [f"{c} not reached (interrupted)" for c in ("C13 graph_replay", "C14 compile", "C15 streams_devices")]
    assert ov["reduced_suite"][-5:] == [  # before: nothing of the cut-off steps listed
        "21 of 22 fixed cases not reached (interrupted)",
        "C9 batch_invariance not reached (interrupted)",
        *serving,
    ]
    assert ov["headline"].endswith(
        "21 of 22 fixed cases not reached (interrupted), C9 batch_invariance not reached (interrupted), "
        + ", ".join(serving)
        + " skipped"
    )


def test_the_console_lists_the_first_crashes_and_counts_the_rest():
    """A kernel that dies on 54 cases printed 54 CRASH lines: the terminal gets CONSOLE_CRASHES of them and one line
    counting the rest (the report keeps every one)."""
    from conformance.suite.report import CONSOLE_CRASHES, crash_lines

    ov = {"crashes": [{"status": "crash", "case": f"c{i}", "line": "died"} for i in range(CONSOLE_CRASHES + 3)]}
    got = crash_lines(ov, CONSOLE_CRASHES)
    assert got[:2] == ["CRASH case c0: died", "CRASH case c1: died"] and len(got) == CONSOLE_CRASHES + 1
    assert got[-1] == "... and 3 more crashes / timeouts (conformance.md: Crashes and hangs)"
    assert len(crash_lines(ov)) == CONSOLE_CRASHES + 3
