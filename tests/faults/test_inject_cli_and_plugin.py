"""``int8conf check --inject`` (in process) and ``pytest --inject`` (subprocess), end to end
on the cheap synthetic cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch  # noqa: F401 -- imported before pytester's in-process runs: a second import of torch's C extension would crash

import faults  # noqa: F401 -- likewise kept across in-process runs (registers the name resolver)
from conformance.cli import main

pytest_plugins = ["pytester"]

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
FAST = ["--no-tile-edges", "--no-captures", "--no-model", "--examples", "0", "-q"]


def test_check_inject_names_the_fault_and_exits_1_when_caught(tmp_path, capsys):
    assert (
        main(["check", "--kernel", "cpu", "--inject", "F4:all", "--inject", "null:1%:3", "--out", str(tmp_path), *FAST])
        == 1
    )
    out = capsys.readouterr().out
    assert "fault injected: F4 output_truncation (post-processing), coverage all, seed 0" in out
    doc = json.loads((tmp_path / "cpu_F4_all_s0" / "conformance.json").read_text())
    assert doc["kernel"]["name"] == "cpu+F4@all#s0"
    inj = doc["kernel"]["injection"]
    assert (inj["fault"], inj["name"], inj["coverage"], inj["seed"], inj["wrapped"]) == (
        "F4",
        "output_truncation",
        "all",
        0,
        "cpu",
    )
    assert doc["notes"][0].startswith("fault injected: F4 output_truncation")
    assert doc["overall"]["verdict"] == "fail" and "C8" in doc["overall"]["failed_checks"]
    md = (tmp_path / "cpu_F4_all_s0" / "conformance.md").read_text()
    assert "fault injected: F4 output_truncation" in md
    # the run's failure signature (every failing case) ranks F4 first; triage: every element truncated, so no shape
    # passes, and F4 explains the minimal case (how far the minimal case shrinks depends on triage's time share, and
    # on a tiny case another class may tie or lead: its rank there is not pinned)
    assert doc["fault_signatures"] and "F4" in str(doc["fault_signatures"][0]), doc["fault_signatures"][:2]
    t = doc["triage"]["C8"]
    assert all(b["passes_at"] is None for b in t["boundaries"].values()), t["boundaries"]
    assert t["minimal"]["fails"] and "F4" in t["minimal"]["fault_classes"], t["minimal"]
    assert "--kernel 'cpu+F4@all#s0' --check C8" in t["replay"] and "## Where the bug lives" in md
    null = json.loads((tmp_path / "cpu_F8_1_s3" / "conformance.json").read_text())
    assert null["overall"]["verdict"] == "pass" and null["kernel"]["injection"]["seed"] == 3


def test_check_inject_precondition_fault_prepares_the_cases(tmp_path):
    # an injected name works as --kernel too; F7 cases are prepared (C4 fires, a precondition)
    assert main(["check", "--kernel", "cpu+F7@one#s0", "--out", str(tmp_path), *FAST]) == 0
    doc = json.loads((tmp_path / "cpu_F7_one_s0" / "conformance.json").read_text())
    c4 = [c for c in doc["checks"] if c["check_id"] == "C4"][0]
    assert c4["verdict"] == "fail" and doc["overall"]["verdict"] == "pass"
    assert doc["kernel"]["injection"]["fault"] == "F7"
    assert "fixed cases prepared by faults.prepare_case" in doc["notes"][0]


def test_check_bad_inject_is_one_line_exit_2(capsys):
    for bad in ("F4:2%", "F16", "F4.stale"):
        assert main(["check", "--kernel", "cpu", "--inject", bad, *FAST]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("int8conf: error: --inject"), err
    assert main(["check", "--kernel", "cpu", "--inject", "F11", *FAST]) == 2  # a block fault on a per-token kernel
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "int8conf: error: F11 k_block_scale_shift does not apply to int8 kernel 'cpu': block-scaled kernels only: a "
        "per-token x per-channel kernel has no K-blocks or block scales"
    ]


def _pytest(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=str(HELPERS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_pytest_inject_end_to_end(tmp_path):
    rep = tmp_path / "r"
    r = _pytest(
        tmp_path,
        "--kernel=cpu",
        "--inject=output_truncation:1%",
        "--int8conf-no-tile-edges",
        "--int8conf-no-captures",
        "--int8conf-examples=0",
        "--int8conf-no-model",
        f"--int8conf-reports={rep}",
        "--junitxml=j.xml",
    )
    assert r.returncode == 1, r.stdout[-3000:]
    res: dict = {}
    for c in ET.parse(tmp_path / "j.xml").getroot().iter("testcase"):
        res.setdefault(c.get("classname"), {})[c.get("name")] = c.find("failure") is not None
    assert set(res) == {"int8conf-cpu+F4@1%#s0"}  # F8 end to end: the CLI and fixture tests
    items = res["int8conf-cpu+F4@1%#s0"]
    assert len(items) == 26 and any(items.values())  # 22 cases, property, C9, C13-C15 and not all(items.values())
    assert "fault injected: F4 output_truncation (post-processing), coverage 1%, seed 0" in r.stdout
    doc = json.loads((rep / "cpu_F4_1_s0" / "conformance.json").read_text())
    assert doc["kernel"]["injection"]["coverage"] == "1%"


def test_pytest_bad_inject_is_a_usage_error(pytester):
    # in process: the int8conf plugin is already registered through its pytest11 entry point
    r = pytester.runpytest_inprocess("--kernel=cpu", "--inject=F4:sometimes")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    text = "\n".join(r.outlines + r.errlines)
    assert "int8conf: --inject 'F4:sometimes': unknown coverage" in text and "Traceback" not in text
    r = pytester.runpytest_inprocess("--inject=F4")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "--inject needs --kernel" in "\n".join(r.outlines + r.errlines)
    # --against alone was ignored: the project's own tests ran instead
    r = pytester.runpytest_inprocess("--against=cpu")
    assert r.ret == pytest.ExitCode.USAGE_ERROR and "--against needs --kernel" in "\n".join(r.outlines + r.errlines)


USER_TEST = """
import torch

def test_tie_rounds_to_nearest_even(int8conf_kernel):
    # 1 + 3 * 2**-8 is a bf16 tie: RNE gives 0x3F82
    one = torch.ones((1, 1), dtype=torch.int8)
    out = int8conf_kernel.scaled_mm(one, one.clone(), torch.tensor([1.0]),
                                    torch.tensor([1.0 + 3 * 2.0 ** -8]))
    assert int(out.view(torch.int16)[0, 0]) == 0x3F82
"""


def test_user_tests_get_the_injected_kernel_through_a_fixture(pytester):
    pytester.makepyfile(test_user=USER_TEST)
    fast = [
        "--int8conf-no-tile-edges",
        "--int8conf-no-captures",
        "--int8conf-examples=0",
        "--int8conf-no-model",
        f"--int8conf-reports={pytester.path / 'r'}",
    ]
    r = pytester.runpytest_inprocess(
        "test_user.py", "--kernel=cpu", "--inject=F4:all", "--inject=F8:all", "-k", "test_user", *fast
    )
    r.assert_outcomes(passed=1, failed=1)  # F4 caught by the user's test, F8 not
    assert any(
        ln.startswith("FAILED test_user.py::test_tie_rounds_to_nearest_even[cpu+F4@all#s0]") for ln in r.outlines
    )
    r = pytester.runpytest_inprocess("test_user.py")  # no --kernel: skipped
    r.assert_outcomes(skipped=1)
