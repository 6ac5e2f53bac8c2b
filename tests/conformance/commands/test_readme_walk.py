"""A new user's first ``int8conf check`` runs (the README walk): a capture directory that is not there says so, a
kernel named by a file path (with or without its function) gets the accepted form spelled out, and a failing run
prints its verdict line once."""

from __future__ import annotations

from conformance.cases.captures import NO_CAPTURE_DIR
from conformance.cli import main as int8conf_main


def _int8conf(capfd, *argv):
    rc = int8conf_main([str(a) for a in argv])
    out = capfd.readouterr()
    return rc, out.out, out.err


def test_check_names_a_missing_capture_directory_not_its_manifest(capfd, tmp_path):
    missing = tmp_path / "no-such-captures"
    rc, _, err = _int8conf(capfd, "check", "--kernel", "cpu", "--captures", missing, "--out", tmp_path / "r")
    assert rc == 2
    assert err.strip().splitlines() == [f"int8conf: error: {NO_CAPTURE_DIR.format(missing)}"]
    assert not (tmp_path / "r").exists()  # refused before any folder is made


def test_a_kernel_named_by_file_path_gets_the_accepted_form(capfd, tmp_path):
    path = tmp_path / "mykern.py"
    path.write_text("def scaled_mm(a, b, scale_a, scale_b, out_dtype=None, bias=None):\n    return None\n")
    rc, _, err = _int8conf(capfd, "check", "--kernel", f"{path}:scaled_mm", "--out", tmp_path / "r")
    assert rc == 2
    assert err.strip().splitlines() == [
        f"int8conf: error: --kernel '{path}:scaled_mm': a file path is not a kernel name: give 'module:function' "
        f"with the module's directory on PYTHONPATH (here: PYTHONPATH={tmp_path} ... --kernel mykern:scaled_mm)"
    ]


def test_a_kernel_named_by_file_path_without_a_function_gets_the_accepted_form(capfd, tmp_path):
    path = tmp_path / "mykern.py"
    path.write_text("def scaled_mm(a, b, scale_a, scale_b, out_dtype=None, bias=None):\n    return None\n")
    rc, _, err = _int8conf(capfd, "check", f"--kernel={path}", "--out", tmp_path / "r")
    assert rc == 2
    assert err.strip().splitlines() == [
        f"int8conf: error: --kernel '{path}': a file path is not a kernel name: give 'module:function' "
        f"with the module's directory on PYTHONPATH (here: PYTHONPATH={tmp_path} ... --kernel mykern:FUNCTION)"
    ]


def test_a_failing_check_prints_its_verdict_line_once(capfd, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend("tests/helpers")
    argv = ["check", "--kernel", "buggy_kernels:truncating_kernel", "--out", tmp_path, "--no-triage", "--quiet"]
    argv += ["--no-model", "--no-captures", "--no-tile-edges", "--no-serving", "--examples", "0", "--jobs", "1"]
    rc, out, _ = _int8conf(capfd, *argv)
    assert rc == 1
    verdicts = [line for line in out.splitlines() if "overall FAIL" in line]
    assert len(verdicts) == 1 and verdicts[0].startswith("truncating: overall FAIL on a reduced suite: ")
