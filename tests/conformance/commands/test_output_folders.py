"""Every command's default output folder follows one rule,
``int8conf-reports/<command>/<label>`` (``conformance.runtime.output_dirs``; issue 31 item 7):
two kernels, or two pairs, never share a folder; no default writes where a committed report lives
(``reports/``, issue 42 item 6), and a partial run never replaces a complete report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import build_parser, main
from faults.spec import make_injection

FAST = ["--no-tile-edges", "--no-captures", "--no-model", "--examples", "0", "-q"]
MYGEMM = "buggy_kernels:truncating_kernel?name=mygemm"  # a user kernel declaring its name


def _args(*argv):
    return build_parser().parse_args(list(argv))


def test_kernel_labels_are_one_function_of_the_name_and_the_fault():
    import faults
    from conformance.kernels.registry import get_kernel
    from conformance.runtime.output_dirs import kernel_label, pair_label, selection_label

    assert kernel_label("cpu") == "cpu"
    assert kernel_label("mypkg.gemm:scaled_mm") == "mypkg.gemm_scaled_mm"
    assert kernel_label("mygemm", make_injection("F3", "1%", 7)) == "mygemm_F3_1_s7"
    assert kernel_label("cpu", make_injection("output_truncation")) == "cpu_F4_all_s0"
    # the name `check --inject F3:1%:7` gives the injected kernel has the same label
    assert kernel_label(faults.inject(get_kernel("cpu"), "F3", "1%", 7).name) == "cpu_F3_1_s7"
    assert pair_label("cpu", "triton") == "cpu-vs-triton"
    assert selection_label(["torchao", "cpu"], ["cpu"]) == "torchao+cpu@cpu"
    assert selection_label(["torchao"]) == "torchao" and selection_label() == ""


def test_check_and_sweep_write_under_reports_command_kernel_label(tmp_path, monkeypatch):
    from reference.model.capture import default_capture_set

    monkeypatch.chdir(tmp_path)
    assert main(["check", "--kernel", "cpu", *FAST]) == 0
    assert main(["check", "--kernel", "cpu", "--inject", "F8:one:3", *FAST]) == 0
    assert main(["check", "--kernel", MYGEMM, *FAST]) == 1
    assert sorted(p.parent.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("conformance.json")) == [
        "int8conf-reports/check/cpu",
        "int8conf-reports/check/cpu_F8_one_s3",
        "int8conf-reports/check/mygemm",
    ]
    if default_capture_set() is None:
        pytest.skip("default captures not built")
    assert (
        main(
            [
                "sweep",
                "--kernel",
                MYGEMM,
                "--linears",
                "1",
                "--inject",
                "F8",
                "--coverages",
                "one",
                "--scale-modes",
                "own",
                "--no-model",
                "--workers",
                "1",
                "--quiet",
                "--no-score",
            ]
        )
        == 0
    )
    assert (tmp_path / "int8conf-reports" / "sweep" / "mygemm" / "sweep.sqlite").is_file()


def test_gate_default_folder_is_its_pair(tmp_path):
    from conformance.commands.gate import out_dir
    from conformance.suite.report import write_reports
    from conformance.suite.run import run_conformance

    assert out_dir(_args("gate", "--candidate", "triton", "--incumbent", "cpu")) == Path(
        "int8conf-reports/gate/triton-vs-cpu"
    )
    assert out_dir(_args("gate", "--candidate", "cpu", "--incumbent", "int_mm", "--inject", "F4:1%:7")) == Path(
        "int8conf-reports/gate/cpu_F4_1_s7-vs-int_mm"
    )
    res = run_conformance(
        "int_mm", include_captures=False, include_tile_edges=False, property_examples=0, model_checks=False
    )
    jp, _ = write_reports(res, tmp_path)
    assert out_dir(_args("gate", "--candidate", "cpu", "--baseline", str(jp))) == Path(
        "int8conf-reports/gate/cpu-vs-int_mm"
    )
    assert out_dir(_args("gate", "--candidate", "cpu", "--incumbent", "int_mm", "--out", "x/y")) == Path("x/y")


def test_study_and_scoreboard_default_folders():
    from conformance.commands import scoreboard, study

    assert study.out_dir(_args("study", "pow2")) == Path("int8conf-reports/pow2/cpu-vs-triton")
    assert study.out_dir(_args("study", "pow2", "--kernels", "triton,int_mm")) == Path(
        "int8conf-reports/pow2/triton-vs-int_mm"
    )
    assert study.out_dir(_args("study", "pow2", "--out", "o")) == Path("o")
    assert scoreboard.out_dir(_args("scoreboard")) == Path("int8conf-reports/scoreboard")
    assert scoreboard.out_dir(_args("scoreboard", "--kernel", "torchao", "--device", "cpu")) == Path(
        "int8conf-reports/scoreboard/torchao@cpu"
    )
    assert scoreboard.out_dir(_args("scoreboard", "--out", "o")) == Path("o")


def test_the_committed_examples_are_where_the_rule_puts_them():
    root = Path(__file__).resolve().parents[3]
    for k in ("cpu", "int_mm", "triton"):
        doc = json.loads((root / "reports" / "check" / k / "conformance.json").read_text())
        assert doc["kernel"]["name"] == k
    assert (root / "reports" / "pow2" / "cpu-vs-triton" / "study.md").is_file()
    assert (root / "reports" / "sweep" / "cpu" / "scorecard.md").is_file()
    assert (root / "reports" / "scoreboard" / "scoreboard.md").is_file()


def test_no_default_output_folder_holds_a_committed_file():
    import subprocess

    from conformance.runtime.output_dirs import REPORTS, command_root

    root = Path(__file__).resolve().parents[3]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    git = lambda *a: subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True)
    assert git("ls-files", str(REPORTS)).stdout == ""
    for cmd in ("check", "sweep", "gate", "pow2", "scoreboard", "bench"):
        probe = command_root(cmd) / "cpu" / "conformance.json"
        assert git("check-ignore", "-q", str(probe)).returncode == 0, probe  # ignored: a run leaves git clean


def test_a_partial_run_never_replaces_a_complete_report(tmp_path):
    from conformance.runtime.partial_run import partial_run
    from conformance.suite.report import write_reports
    from conformance.suite.run import run_conformance

    res = run_conformance(
        "int_mm", include_captures=False, include_tile_edges=False, property_examples=0, model_checks=False
    )
    full_json, _ = write_reports(res, tmp_path)
    full = full_json.read_text()
    res.partial = partial_run(1, len(res.cases))  # pytest -k: one case of the suite
    jp, mp = write_reports(res, tmp_path)
    assert (jp.name, mp.name) == ("conformance.partial.json", "conformance.partial.md")
    assert full_json.read_text() == full and json.loads(jp.read_text())["partial"]["cases_ran"] == 1
    res.partial = partial_run(len(res.cases), len(res.cases))  # a complete run again: the stale partial goes
    assert write_reports(res, tmp_path)[0] == full_json and not jp.exists()


def test_check_refuses_a_missing_capture_directory_before_making_a_folder(tmp_path, capsys):
    out = tmp_path / "out"
    assert (
        main(["check", "--kernel", "cpu", "--captures", str(tmp_path / "nowhere"), *FAST[:1], "--out", str(out)]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("int8conf: error: ") and "nowhere: no such directory" in err[0]
    assert not out.exists()
