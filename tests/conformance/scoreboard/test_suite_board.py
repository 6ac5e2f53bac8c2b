"""The full-suite scoreboard (``int8conf scoreboard --from-checks``): rows read from check reports, throughput
beside them, one-line errors; the throughput of a real kernel natively (CUDA only)."""

import json

import pytest
import torch

from conformance.bench.throughput import SHAPES, kernel_throughput
from conformance.cli import main
from conformance.kernels.registry import get_kernel
from conformance.scoreboard import suite


def _report(name, verdict, failed, fp8=None):
    checks = [
        {"check_id": "C1", "verdict": "pass", "label": "pass", "summary": "ok"},
        {"check_id": "C3", "verdict": "fail", "label": "precondition case (2)", "summary": "pre"},
        {"check_id": "C8", "verdict": "fail" if failed else "pass", "label": "", "summary": "C8 on 3/10 cases"},
    ]
    return {
        "schema": "int8conf.conformance",
        "kernel": {"name": name, "operands": "e4m3" if fp8 else "int8", "description": "d", "version": "1"},
        "environment": {"devices_used": ["cuda"], "cuda_device": "NVIDIA H200", "paths_used": {"gemv": 7}},
        "overall": {
            "verdict": verdict,
            "failed_checks": failed,
            "cases_total": 12,
            "cases_run": 10,
            "not_run_reasons": {"not runnable here: outside declared constraints: a bias: the kernel takes none": 2},
        },
        "checks": checks,
        "fp8": fp8,
    }


def _write(root, name, doc):
    (root / name).mkdir(parents=True)
    (root / name / "conformance.json").write_text(json.dumps(doc))


def test_rows_hold_each_report_verdict_refusals_accumulator_and_throughput(tmp_path):
    _write(tmp_path, "a", _report("k-int8", "fail", ["C8"]))
    _write(tmp_path, "b", _report("k-fp8", "pass", [], {"c11_declared": "fp32 bits=14", "measured": "fp32 bits=13"}))
    timed = []
    doc = suite.build([tmp_path], lambda name: timed.append(name) or [{"tops": 100.0, "ratio": 0.5, **_T}] * 3)
    assert timed == ["k-int8", "k-fp8"]  # sorted by path: a, b
    a, b = doc["rows"]
    assert a["failed_checks"] == ["C8"] and a["check_summaries"] == {"C8": "C8 on 3/10 cases"}
    assert a["checks"] == {"C1": "pass", "C3": "precondition case (2)", "C8": "fail"}
    assert b["accumulator"] == {"declared": "fp32 bits=14", "measured": "fp32 bits=13"} and a["accumulator"] is None
    md = suite.render(doc)
    assert "| k-int8 | int8 | NVIDIA H200 | **fail** | C8 | 10/12 | int32 (exact) | 100 (0.50x) / 100 (0.50x)" in md
    assert "- not run (2 cases): not runnable here: outside declared constraints: a bias: the kernel takes none" in md
    suite.write(doc, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "suite.json").read_text())["schema"] == suite.SCHEMA


_T = {"M": 16, "K": 4096, "N": 4096, "label": "decode", "us": 1.0, "baseline": "torch._int_mm", "baseline_us": 2.0}


def test_bad_directories_are_one_line_errors(tmp_path, capsys):
    assert main(["scoreboard", "--from-checks", str(tmp_path)]) == 2
    assert "no conformance.json under it" in capsys.readouterr().err
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "conformance.json").write_text('{"schema": "other"}')
    assert main(["scoreboard", "--from-checks", str(tmp_path)]) == 2
    assert "is not int8conf.conformance" in capsys.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="throughput is timed on CUDA only")
def test_throughput_of_the_builtin_triton_kernel_natively():
    rows = kernel_throughput(get_kernel("triton"))
    assert [(r["M"], r["K"], r["N"]) for r in rows] == [s[:3] for s in SHAPES]
    assert all(r["tops"] > 0 and r["ratio"] > 0 for r in rows)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="throughput is timed on CUDA only")
def test_throughput_of_a_block_scaled_kernel_natively():
    rows = kernel_throughput(get_kernel("triton-block"))
    assert [r["block"] for r in rows] == ["128x128"] * len(SHAPES)
    assert all(r["tops"] > 0 and r["baseline"] == "torch._int_mm" for r in rows)


def test_a_report_that_is_not_an_object_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "conformance.json").write_text("[1, 2]")
    assert main(["scoreboard", "--from-checks", str(tmp_path)]) == 2
    assert "schema None is not int8conf.conformance" in capsys.readouterr().err


def test_an_internal_error_exits_4_with_its_traceback(tmp_path, monkeypatch, capsys):
    from conformance.scoreboard import suite as board

    def broken(dirs, timer=None):
        raise AttributeError("a bug of int8conf's own")

    monkeypatch.setattr(board, "build", broken)
    assert main(["scoreboard", "--from-checks", str(tmp_path)]) == 4
    err = capsys.readouterr().err
    assert "Traceback" in err and "AttributeError: a bug of int8conf's own" in err
    assert err.rstrip().endswith("please report it with the traceback above)")
