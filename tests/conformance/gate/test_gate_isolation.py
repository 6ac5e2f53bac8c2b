"""Crash isolation: a segfaulting, an aborting and a hanging kernel each end
with their own status (crash / timeout), the other cases still run and pass,
the report is written, and the saved reproducer re-runs the case."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cases import make_case
from conformance.gate.policy import parse_policy
from conformance.gate.report import to_json_dict, write_gate_reports
from conformance.gate.run import GateOptions, run_gate
from conformance.runtime.pool import KernelRef
from conformance.runtime.repro import load_reproducer

ROOT = Path(__file__).resolve().parents[3]
HELPERS = ROOT / "tests" / "helpers"
#: the "tails" case has K = 37 = buggy_kernels.HOSTILE_K; the others do not
CASES = [make_case("ordinary", 0), make_case("tails", 0), make_case("pow2", 0)]
POLICY = parse_policy({"name": "bit", "require": "bit_identical"})


def _gate(tmp_path, kernel, timeout_s=60.0):
    res = run_gate(
        KernelRef(f"buggy_kernels:{kernel}"),
        KernelRef("cpu"),
        policy=POLICY,
        cases=CASES,
        out_dir=tmp_path,
        options=GateOptions(model_checks=False, timeout_s=timeout_s),
    )
    paths = write_gate_reports(to_json_dict(res), tmp_path)
    return res, json.loads(paths["json"].read_text()), paths


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HELPERS)])
    return env


def _check_survivors(res, status):
    assert [d.status for d in res.cases] == ["pass", status, "pass"]
    assert res.overall["verdict"] == "blocked" and res.overall["blocking"] == ["synthetic/tails-s0"]


def test_segfaulting_kernel_is_a_crash_and_its_reproducer_segfaults_again(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])  # recorded in command.sh
    res, doc, paths = _gate(tmp_path, "segfaulting_kernel")
    _check_survivors(res, "crash")
    ev = res.cases[1].evidence
    assert ev["signal"] == "SIGSEGV" and ev["exitcode"] == -11
    assert any("segfaulting_kernel" in ln for ln in ev["log_tail"])  # faulthandler's stack
    assert doc["overall"]["counts"]["crash"] == 1 and "CRASH" in paths["md"].read_text()
    assert '<error type="crash"' in paths["junit"].read_text()
    repro = Path(ev["repro"])
    ops, info = load_reproducer(repro)
    assert ops.digests() == CASES[1].digests() and info["kernel"]["name"].endswith("segfaulting_kernel")
    run = subprocess.run(["sh", str(repro / "command.sh")], capture_output=True, text=True, timeout=300, env=_env())
    assert run.returncode in (-11, 139), run.stderr[-2000:]
    assert "Segmentation fault" in run.stderr and "segfaulting_kernel" in run.stderr


def test_a_reproducer_finds_a_kernel_module_of_the_gate_s_working_directory_from_anywhere(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "mykern_abort.py").write_text(
        "import os\n"
        "from conformance.kernels.loader import declare\n"
        "@declare('cutlass')\n"
        "def k(a, b, scale_a, scale_b, out_dtype=None, bias=None):\n"
        "    if a.shape[0] == CASE_M:\n"
        "        os.abort()\n"
        "    from conformance.kernels.registry import get_kernel\n"
        "    return get_kernel('cpu').scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)\n".replace(
            "CASE_M", str(CASES[1].m)
        )
    )
    monkeypatch.chdir(work)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setattr(sys, "path", list(sys.path))
    from conformance.kernels.loader import cwd_on_sys_path

    cwd_on_sys_path()  # what the int8conf command does first
    res = run_gate(
        KernelRef("mykern_abort:k"),
        KernelRef("cpu"),
        policy=POLICY,
        cases=CASES,
        out_dir=tmp_path / "out",
        options=GateOptions(model_checks=False, timeout_s=60.0),
    )
    assert [d.status for d in res.cases][1] == "crash"
    repro = Path(res.cases[1].evidence["repro"])
    run = subprocess.run(
        ["sh", str(repro / "command.sh")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert "No module named" not in run.stderr, run.stderr[-1000:]
    assert run.returncode in (-6, 134), run.stderr[-2000:]


def test_aborting_kernel_is_a_crash_with_sigabrt(tmp_path):
    res, _, _ = _gate(tmp_path, "aborting_kernel")
    _check_survivors(res, "crash")
    assert res.cases[1].evidence["signal"] == "SIGABRT"


def _repro_main(directory, log):
    fd = os.open(log, os.O_WRONLY | os.O_CREAT)
    os.dup2(fd, 2)
    sys.stdout = sys.stderr = os.fdopen(2, "w", buffering=1)  # not pytest's capture
    from conformance.runtime.repro import main

    sys.exit(main([directory, "--timeout", "1"]))


def test_hanging_kernel_times_out_and_its_reproducer_shows_where_it_hangs(tmp_path):
    res, doc, paths = _gate(tmp_path, "hanging_kernel", timeout_s=5.0)  # ample for the other cases on a loaded machine
    _check_survivors(res, "timeout")
    ev = res.cases[1].evidence
    assert ev["signal"] == "SIGKILL" and ev["elapsed_s"] >= 5.0  # killed at the limit, never before
    assert any("hanging_kernel" in ln for ln in ev["log_tail"])  # the stack dumped before the kill
    assert '<error type="timeout"' in paths["junit"].read_text()
    assert "conformance.runtime.repro" in (Path(ev["repro"]) / "command.sh").read_text()
    # the reproducer's entry point (what command.sh execs), in a forked child to spare a
    # torch import: --timeout 1 dumps the hanging stack and exits with status 1
    import multiprocessing as mp

    log = tmp_path / "repro.err"
    p = mp.get_context("fork").Process(target=_repro_main, args=(ev["repro"], str(log)))
    p.start()
    p.join(300)  # a hang never ends; a loaded machine may take long
    assert p.exitcode == 1 and "in hanging_kernel" in log.read_text(), log.read_text()[-2000:]


def test_a_stop_while_the_children_shut_down_still_carries_every_decision(tmp_path, monkeypatch):
    """Ctrl-C / SIGTERM after the last case, while the gate stops its child
    processes: GateInterrupted still carries the result (it used to escape as
    a bare KeyboardInterrupt, and the CLI wrote no report)."""
    from conformance.gate.run import GateInterrupted, GateSession

    close = GateSession.close
    stops = [KeyboardInterrupt]

    def interrupted_close(self):
        close(self)
        if stops:
            raise stops.pop()

    monkeypatch.setattr(GateSession, "close", interrupted_close)
    with pytest.raises(GateInterrupted) as e:
        run_gate(
            KernelRef("int_mm"),
            KernelRef("cpu"),
            policy=POLICY,
            cases=CASES,
            out_dir=tmp_path,
            options=GateOptions(model_checks=False),
        )
    res = e.value.result
    assert len(res.cases) == len(CASES) and all(d.status == "pass" for d in res.cases)
    assert not any(str(n).startswith("partial run") for n in res.notes)  # every case decided
    assert to_json_dict(res)["partial"] == {
        "partial": False,
        "reason": None,
        "cases_ran": 3,
        "cases_total": 3,
        "stage": None,
        "note": None,
    }


def test_a_stop_between_cases_marks_gate_json_partial(tmp_path, monkeypatch):
    """Ctrl-C / SIGTERM after the first decided case: gate.json's ``partial``
    record says interrupted, 1 of 3 cases, and its note heads gate.md."""
    from conformance.gate.run import GateInterrupted, GateSession

    run_case = GateSession.run_case

    def stop_at_second(self, i):
        if i == 1:
            raise KeyboardInterrupt
        return run_case(self, i)

    monkeypatch.setattr(GateSession, "run_case", stop_at_second)
    with pytest.raises(GateInterrupted) as e:
        run_gate(
            KernelRef("int_mm"),
            KernelRef("cpu"),
            policy=POLICY,
            cases=CASES,
            out_dir=tmp_path,
            options=GateOptions(model_checks=False),
        )
    paths = write_gate_reports(to_json_dict(e.value.result), tmp_path)
    doc = json.loads(paths["json"].read_text())
    note = "partial run: 1 of 3 cases decided (interrupted)"
    assert doc["partial"] == {
        "partial": True,
        "reason": "interrupted",
        "cases_ran": 1,
        "cases_total": 3,
        "stage": "cases",
        "note": note,
    }
    assert note in doc["notes"]
    assert paths["md"].read_text().split("\n")[0] == (
        "## int8conf gate: `int_mm` replacing `cpu` -- **PASS on a reduced suite: the default cases (an explicit case "
        "list replaced them), the model-level checks (C7, E1) skipped (PARTIAL RUN: not every case was decided)**"
    )


def test_a_stop_during_a_model_check_marks_gate_json_partial(tmp_path, monkeypatch):
    """Every case decided, then the stop lands in C7: still a partial run (the
    verdict lacks the model-level checks), with the stage named."""
    from conformance.gate.run import GateInterrupted, GateSession

    def stopped(self, check_id):
        raise KeyboardInterrupt

    monkeypatch.setattr(GateSession, "run_model", stopped)
    with pytest.raises(GateInterrupted) as e:
        run_gate(
            KernelRef("int_mm"),
            KernelRef("cpu"),
            policy=POLICY,
            cases=CASES,
            out_dir=tmp_path,
            options=GateOptions(model_checks=True),
        )
    doc = to_json_dict(e.value.result)
    assert doc["partial"] == {
        "partial": True,
        "reason": "interrupted",
        "cases_ran": 3,
        "cases_total": 3,
        "stage": "C7",
        "note": "partial run: 3 of 3 cases decided (interrupted during C7)",
    }
    from conformance.gate.report import render_markdown

    assert render_markdown(doc).split("\n")[0] == (
        "## int8conf gate: `int_mm` replacing `cpu` -- **PASS on a reduced suite: the default cases (an explicit case "
        "list replaced them) skipped (PARTIAL RUN: stopped during C7)**"
    )
