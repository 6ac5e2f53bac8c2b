"""``int8conf study pow2``: one-line errors for bad input, and the committed
report in reports/pow2/ is exactly what the report code renders from its JSON."""

import json
from pathlib import Path

import pytest
import torch

from conformance.cli import main

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "reports" / "pow2"


@pytest.mark.parametrize("argv, words", [
    (["--kernels", "cpu"], "exactly two kernels"),
    (["--resamples", "500"], "below the minimum 10000"),
    (["--level", "1.5"], "not in (0, 1)"),
    (["--kernels", "cpu,no_such_kernel"], "no_such_kernel"),
    (["--windows", "1"], "at least 2 windows"),
])
def test_bad_study_input_is_one_line_exit_2(argv, words, capsys, tmp_path):
    rc = main(["study", "pow2", "--out", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("int8conf: error:") and words in err[0]


def test_too_many_prompts_is_refused_before_any_work(capsys, tmp_path):
    """New-user pass 2026-12-01c: ``--prompts 9`` used to be refused only after
    the gate, the layer agreement, the accuracy arms and the flips (195 s)."""
    with pytest.raises(SystemExit) as e:
        main(["study", "pow2", "--out", str(tmp_path / "r"), "--prompts", "9"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "argument --prompts: expected an integer in [1, 8], got 9")
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_a_gpu_is_refused(capsys, tmp_path):
    assert main(["study", "pow2", "--device", "cuda", "--out", str(tmp_path / "r")]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_unknown_study_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["study", "pow3"])
    assert e.value.code == 2


@pytest.mark.parametrize("where", [COMMITTED, COMMITTED / "h200"], ids=["cpu", "h200"])
def test_committed_report_is_what_the_code_renders_from_its_json(where, tmp_path):
    from conformance.study.report import FIGURES, to_markdown, write_report

    if not (where / "study.json").is_file():
        pytest.skip(f"no committed report in {where}")
    r = json.loads((where / "study.json").read_text())
    assert r["schema"] == "int8conf.study.pow2" and r["version"] == 1
    assert to_markdown(r) == (where / "study.md").read_text()
    # limits stand next to the numbers, every figure of a finished part is referenced
    md = (where / "study.md").read_text()
    assert "## Limits" in md and all(f"]({FIGURES[k]})" in md for k in r["figures"])
    # the figures are re-drawn byte for byte from the same numbers
    write_report(dict(r), tmp_path / "a")
    write_report(dict(r), tmp_path / "b")
    for name in FIGURES.values():
        png = (tmp_path / "a" / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and png == (tmp_path / "b" / name).read_bytes()
