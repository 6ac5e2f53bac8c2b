"""The conformance suite and the gate under pytest-xdist: ``-n 2`` writes the
same conformance report and the same gate report as a serial run (timings
and timestamps aside), and each is written once, by the controller."""

import json
import re
import signal
import sys
from pathlib import Path

import pytest
import torch  # noqa: F401 -- imported before pytester's in-process run (a second import would crash)
from holding import Hold, interrupt_when_held
from subprocesses import run_python

import conformance.gate.run  # noqa: F401 -- same: keep the gate's modules loaded across the inner run

pytest.importorskip("xdist")
pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[3]


def _strip(x):
    if isinstance(x, dict):
        return {
            k: _strip(v) for k, v in x.items() if k not in ("generated_at", "elapsed_s", "log_tail", "invocation")
        }  # the command line differs by -n 2
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _args(out: Path):
    return [
        "-p",
        "no:cacheprovider",
        "-q",
        "--kernel=cpu",
        "--int8conf-no-captures",
        "--int8conf-no-tile-edges",
        "--int8conf-no-model",
        "--int8conf-examples=0",
        f"--int8conf-reports={out}/suite",
        "--gate-candidate=cpu",
        "--gate-inject=F4",
        "--gate-incumbent=cpu",
        "--gate-no-captures",
        "--gate-no-tile-edges",
        "--gate-no-model",
        f"--gate-out={out}/gate",
        f"--gate-policy={ROOT}/examples/policies/one-spacing-everywhere.yaml",
    ]


def _reports(out: Path):
    return (
        json.loads((out / "suite" / "cpu" / "conformance.json").read_text()),
        json.loads((out / "gate" / "gate.json").read_text()),
    )


@pytest.mark.slow
def test_xdist_two_workers_write_the_serial_reports(tmp_path, pytester):
    serial = pytester.runpytest_inprocess(*_args(tmp_path / "serial"))  # serial, this process
    assert serial.ret == 0, serial.stdout.str()[-3000:]
    suite_1, gate_1 = _reports(tmp_path / "serial")
    r = run_python(["-m", "pytest", "-n", "2", *_args(tmp_path / "xdist")], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    suite_2, gate_2 = _reports(tmp_path / "xdist")
    out = r.stdout
    assert "45 passed" in out  # 22 suite cases + C9 + 22 gate cases, spread over 2 workers
    assert _strip(suite_2) == _strip(suite_1)
    assert _strip(gate_2) == _strip(gate_1)
    assert suite_1["overall"]["cases_total"] == 22 and not suite_1["notes"]
    assert suite_1["partial"]["partial"] is False and gate_1["partial"] == {
        "partial": False,
        "reason": None,
        "cases_ran": 22,
        "cases_total": 22,
        "stage": None,
        "note": None,
    }
    assert gate_1["overall"]["counts"]["warn"] == 22 and gate_1["overall"]["verdict"] == "pass"
    assert [c["item"] for c in gate_2["cases"]] == [c["item"] for c in gate_1["cases"]]


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_interrupted_xdist_run_reports_every_finished_item(tmp_path, sig):
    """SIGINT or SIGTERM (what a time limit sends) to the controller mid-run, while one case's
    kernel call is held: the report still holds every item that passed before it, because each
    item ships its result on its own report instead of at worker shutdown, and SIGTERM stops the
    run like Ctrl-C."""
    cmd = [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-v", "--kernel=holding:spec"]
    cmd += ["--int8conf-no-captures", "--int8conf-no-model", "--int8conf-examples=0"]
    cmd += [f"--int8conf-reports={tmp_path}/rep"]
    rc, out = interrupt_when_held(
        cmd, ROOT, Hold(tmp_path / "hold", "xdist"), getattr(signal, sig), r" PASSED ", tmp_path
    )
    assert rc == 2, out[-3000:]  # pytest's INTERRUPTED
    passed = len(re.findall(r" PASSED ", out))
    rep = json.loads((tmp_path / "rep" / "stopper" / "conformance.json").read_text())
    c9 = any(c["check_id"] == "C9" and c["verdict"] != "n/a" for c in rep["checks"])
    items = int(re.search(r"workers \[(\d+) items\]", out).group(1))
    assert 0 < passed and len(rep["cases"]) < items, out[-2000:]  # the held item never finished
    assert len(rep["cases"]) + int(c9) >= passed, (len(rep["cases"]), c9, passed)
    assert "partial run" in " ".join(rep["notes"])
    assert (rep["partial"]["partial"], rep["partial"]["reason"]) == (True, "interrupted")


@pytest.mark.slow
def test_interrupted_xdist_gate_reports_every_decided_case(tmp_path):
    """SIGINT to the controller while one candidate call is held, after a decided case (as a CI
    time limit would): gate.json lists every case whose item finished, and says it is a partial run."""
    args = [a for a in _args(tmp_path / "g") if a.startswith("--gate") or a.startswith("-p") or a == "no:cacheprovider"]
    args = ["--gate-candidate=holding:spec" if a == "--gate-candidate=cpu" else a for a in args]
    cmd = [sys.executable, "-m", "pytest", "-n", "2", "-v", *args]
    rc, out = interrupt_when_held(cmd, ROOT, Hold(tmp_path / "hold", "xdist"), signal.SIGINT, r" PASSED ", tmp_path)
    assert rc == 2, out[-3000:]
    passed = {m.group(1) for m in re.finditer(r"PASSED .*?::(gate/\S+)", out)}
    gate = json.loads((tmp_path / "g" / "gate" / "gate.json").read_text())
    decided = {f"gate/{c['item']}" if not c["item"].startswith("gate/") else c["item"] for c in gate["cases"]}
    assert passed and passed <= decided, (sorted(passed - decided), out[-2000:])
    assert len(decided) < 22 and any("partial run" in n for n in gate["notes"]), gate["notes"]
    assert {k: gate["partial"][k] for k in ("partial", "reason", "cases_ran", "cases_total")} == {
        "partial": True,
        "reason": "interrupted",
        "cases_ran": len(gate["cases"]),
        "cases_total": 22,
    }


@pytest.mark.slow
def test_gate_cli_stopped_by_sigterm_writes_the_decided_cases(tmp_path):
    """``int8conf gate`` stopped part-way (SIGTERM, as a CI time limit sends) while a candidate
    call is held after a decided case: exit 130, and gate.json holds the decided cases with the
    partial-run note (before, nothing was written and a previous run's report stayed)."""
    out = tmp_path / "g"
    out.mkdir()
    (out / "gate.json").write_text('{"stale": true}')
    cmd = [sys.executable, "-m", "conformance.cli", "gate", "--candidate", "holding:spec", "--incumbent", "cpu"]
    cmd += ["--no-model", "--no-tile-edges", "--no-captures", "--out", str(out)]
    rc, log = interrupt_when_held(cmd, ROOT, Hold(tmp_path / "hold"), signal.SIGTERM, r": pass", tmp_path)
    assert rc == 130, log[-3000:]
    gate = json.loads((out / "gate.json").read_text())
    assert 1 <= len(gate["cases"]) < 22, len(gate["cases"])
    assert any(n.startswith(f"partial run: {len(gate['cases'])} of 22 cases decided") for n in gate["notes"]), gate[
        "notes"
    ]
    assert gate["partial"] == {
        "partial": True,
        "reason": "interrupted",
        "cases_ran": len(gate["cases"]),
        "cases_total": 22,
        "stage": "cases",
        "note": f"partial run: {len(gate['cases'])} of 22 cases decided (interrupted)",
    }
    assert "int8conf gate: partial run" in log and "int8conf: interrupted" in log
    assert "(PARTIAL RUN: not every case was decided)" in (out / "gate.md").read_text().split("\n")[0]


def test_an_unusable_gate_out_is_a_usage_error_before_any_item(tmp_path):
    """A file where ``--gate-out`` should be: refused at configure time (exit 4,
    one line naming the option and the path), not at the session's end after
    every gate case ran (the CLI's ``check_out_dir``, shared)."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    args = [a if not a.startswith("--gate-out=") else f"--gate-out={blocker}/gate" for a in _args(tmp_path / "o")]
    r = run_python(["-m", "pytest", *args], tmp_path, timeout=300)
    assert r.returncode == 4, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"int8conf gate: --gate-out {blocker}/gate: cannot create reports directory" in r.stderr, r.stderr[-2000:]
    assert "passed" not in r.stdout and "Traceback" not in r.stderr
