"""Triage through the pytest front doors (issue 43): after a failing ``pytest --kernel=...`` session the controller
triages the failing kernel's run as ``int8conf check`` does (its conformance.json's ``triage``, a line in the terminal
summary), and a blocked ``--gate-candidate`` carries the same in gate.json; ``--int8conf-no-triage`` /
``--gate-no-triage`` leave both out. ``buggy_kernels:decode_path_order`` is wrong on its M = 1 path only."""

from __future__ import annotations

import json
from pathlib import Path

import torch  # noqa: F401 -- imported before pytester's in-process run (a second import would crash)

import conformance.gate.run  # noqa: F401 -- same: keep the gate's modules loaded across the inner run

pytest_plugins = ["pytester"]
KERNEL = "buggy_kernels:decode_path_order"
M1 = "synthetic/m1-s0"


def _args(out: Path) -> list[str]:
    return [
        "-p",
        "no:cacheprovider",
        "-q",
        f"--kernel={KERNEL}",
        "--int8conf-no-captures",
        "--int8conf-no-tile-edges",
        "--int8conf-no-model",
        "--int8conf-examples=0",
        f"--int8conf-reports={out}/suite",
        f"--gate-candidate={KERNEL}",
        "--gate-incumbent=cpu",
        "--gate-no-captures",
        "--gate-no-tile-edges",
        "--gate-no-model",
        f"--gate-out={out}/gate",
    ]


def _reports(out: Path) -> tuple[dict, dict]:
    return (
        json.loads((out / "suite" / "decode_path_order" / "conformance.json").read_text()),
        json.loads((out / "gate" / "gate.json").read_text()),
    )


def test_a_failing_session_s_reports_carry_the_triage(tmp_path, pytester):
    r = pytester.runpytest_inprocess(*_args(tmp_path))
    assert r.ret == 1, r.stdout.str()[-3000:]
    suite, gate = _reports(tmp_path)
    for tri in (suite["triage"], gate["candidate"]["triage"]):
        m = tri["C8"]["boundaries"]["m"]
        assert tri["C8"]["case"] == M1 and (m["passes_at"], m["fails_at"], m["exact"]) == (2, 1, True)
    assert (tmp_path / "suite" / "decode_path_order" / "repro" / "triage-C8-synthetic_m1-s0" / "command.sh").is_file()
    md = (tmp_path / "suite" / "decode_path_order" / "conformance.md").read_text()
    assert "## Where the bug lives" in md and "### C8 declared_contract" in md
    # one line per triaged check, under the kernel's report line and under the gate's summary
    lines = [ln for ln in r.outlines if ln.startswith(f"  where C8 lives (case {M1}): M passes at 2, fails at 1;")]
    assert len(lines) == 2, r.stdout.str()[-3000:]


def test_no_triage_options_leave_it_out(tmp_path, pytester):
    r = pytester.runpytest_inprocess(*_args(tmp_path), "--int8conf-no-triage", "--gate-no-triage")
    assert r.ret == 1, r.stdout.str()[-3000:]
    suite, gate = _reports(tmp_path)
    assert suite["overall"]["verdict"] == "fail" and gate["overall"]["verdict"] == "blocked"
    assert "triage" not in suite and "triage" not in gate["candidate"]
    assert "where C8 lives" not in r.stdout.str()
    assert not (tmp_path / "suite" / "decode_path_order" / "repro").exists()
    assert not (tmp_path / "gate" / "repro").exists()
