"""``int8conf study pow2``: one-line errors for bad input, and the committed
report in reports/pow2/cpu-vs-triton/ is exactly what the report code renders from its JSON."""

import json
from pathlib import Path

import pytest
import torch

from conformance.cli import main

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "reports" / "pow2" / "cpu-vs-triton"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--kernels", "cpu"], "exactly two kernels"),
        (["--resamples", "500"], "below the minimum 10000"),
        (["--level", "1.5"], "not in (0, 1)"),
        (["--kernels", "cpu,no_such_kernel"], "no_such_kernel"),
        (["--windows", "1"], "at least 2 windows"),
        (["--kernels", "cpu,cpu"], "A and B are the same kernel"),
        (["--committed", "/nonexistent"], "--committed /nonexistent: not a directory"),
        (
            ["--kernels", "cpu,conformance.kernels.builtin_cpu:scaled_mm?contract=cutlass"],
            "A and B are the same function under the same declared contract",
        ),
        # sizes the model or corpus cannot hold: refused before the gate (new-user pass 2026-12-01e)
        (["--new-tokens", "600"], "--new-tokens (600): 616 tokens exceeds the model's context of 512"),
        (["--window-len", "100000"], "--window-len 100000: 100000 tokens exceeds"),
        (["--windows", "100000"], "--windows 100000 (--window-len 128): eval_windows"),
        (["--tokens", "100000000"], "--tokens 100000000 (1562500 capture windows of 128 tokens)"),
    ],
)
def test_bad_study_input_is_one_line_exit_2(argv, words, capsys, tmp_path):
    rc = main(["study", "pow2", "--out", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("int8conf: error:") and words in err[0]
    assert not (tmp_path / "r").exists()  # no empty report directory left behind


def test_too_many_prompts_is_refused_before_any_work(capsys, tmp_path):
    """New-user pass 2026-12-01c: ``--prompts 9`` used to be refused only after
    the gate, the layer agreement, the accuracy arms and the flips (195 s)."""
    with pytest.raises(SystemExit) as e:
        main(["study", "pow2", "--out", str(tmp_path / "r"), "--prompts", "9"])
    assert e.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .endswith("argument --prompts: expected an integer in [1, 8], got 9")
    )
    assert not (tmp_path / "r").exists()


def test_size_errors_come_before_any_part_is_computed(capsys, tmp_path):
    assert main(["study", "pow2", "--out", str(tmp_path / "r"), "--flip-windows", "5000"]) == 2
    assert "--flip-windows 5000" in capsys.readouterr().err
    assert not (tmp_path / "r" / ".parts").exists()


def test_an_out_that_is_a_file_is_named(capsys, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    assert main(["study", "pow2", "--out", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--out {f}: exists and is not a directory" in err[0]


def test_report_only_without_matching_parts_is_refused_and_writes_nothing(capsys, tmp_path):
    """New-user pass 2026-12-01e: it used to compute the gate and overwrite the
    report with one whose parts all read NOT RUN."""
    assert main(["study", "pow2", "--report-only", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--report-only: no finished part under" in err[0]
    assert not (tmp_path / "r").exists()


def test_a_part_is_reused_only_for_the_same_model_kernels_and_code(tmp_path):
    """New-user pass 2026-12-01e: parts were keyed on paths and kernel names, so a
    model edited in place or a kernel whose code changed reused stale numbers."""
    from dataclasses import replace

    from conformance.kernels.registry import get_kernel
    from conformance.study.run import StudySettings, _load_part, _save_part, input_identity

    s = StudySettings(model_dir="/m", kernels=("cpu", "triton"))
    cpu, tri = get_kernel("cpu"), get_kernel("triton")
    ident = input_identity("d" * 64, None, (cpu, tri))
    assert ident["kernels"] == [cpu.source_digest, tri.source_digest] and ident["model"] == "d" * 64
    _save_part(tmp_path, "flips", s.part_key("flips", ident), {"x": 1}, 1.0, "cpu")
    assert _load_part(tmp_path, "flips", s.part_key("flips", ident)) == {"x": 1}
    for other in (
        input_identity("e" * 64, None, (cpu, tri)),  # model changed
        input_identity("d" * 64, None, (replace(cpu, source_digest="0"), tri)),  # kernel code
        input_identity("d" * 64, str(tmp_path), (cpu, tri)),
    ):  # a committed dir
        assert _load_part(tmp_path, "flips", s.part_key("flips", other)) is None
    # a committed checkpoint is known by its contents: one byte changed with size and
    # mtime restored is another checkpoint
    import os

    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text("{}")
    (ck / "model.safetensors").write_bytes(b"\x00" * 64)
    before = input_identity("d" * 64, str(ck), (cpu, tri))["committed"]
    st = os.stat(ck / "model.safetensors")
    (ck / "model.safetensors").write_bytes(b"\x00" * 63 + b"\x01")
    os.utime(ck / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert input_identity("d" * 64, str(ck), (cpu, tri))["committed"] != before


def test_reproduce_line_names_every_setting_and_the_rows_used():
    from dataclasses import asdict

    from conformance.study.report import _cli_args
    from conformance.study.run import StudySettings

    s = asdict(
        StudySettings(
            model_dir="/big", kernels=("triton", "int_mm"), device="cuda", tokens=8, fresh_process="none", level=0.95
        )
    )
    got = " ".join(_cli_args({"settings": s, "layer_agreement": {"capture": {"tokens_per_layer": 64}}}))
    for want in (
        "--model /big",
        "--kernels triton,int_mm",
        "--device cuda",
        "--tokens 64",
        "--fresh-process none",
        "--level 0.95",
    ):
        assert want in got
    # a path the report writes as $TMPDIR/... still runs where TMPDIR is unset
    s["model_dir"] = "$TMPDIR/big"
    assert "--model ${TMPDIR:-/tmp}/big " in " ".join(_cli_args({"settings": s}))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_a_gpu_is_refused(capsys, tmp_path):
    assert main(["study", "pow2", "--device", "cuda", "--out", str(tmp_path / "r")]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_unknown_study_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["study", "pow3"])
    assert e.value.code == 2


@pytest.mark.parametrize(
    "where", [COMMITTED, COMMITTED / "h200", COMMITTED / "h200-1.7b"], ids=["cpu", "h200", "h200-1.7b"]
)
def test_committed_report_is_what_the_code_renders_from_its_json(where, tmp_path):
    import lzma

    from conformance.study.report import FIGURES, to_markdown, write_report

    if (where / "study.json").is_file():
        r = json.loads((where / "study.json").read_text())
    elif (where / "study.json.xz").is_file():  # large reports are committed xz-compressed
        r = json.loads(lzma.decompress((where / "study.json.xz").read_bytes()))
    else:
        pytest.skip(f"no committed report in {where}")
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
