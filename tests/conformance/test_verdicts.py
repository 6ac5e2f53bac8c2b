"""verdicts and exit codes for kernels that never ran, one-line CLI
errors, argument validation, --model for captures, report additions."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from buggy_kernels import bias_tie_case, make_kernel, tie_case

from conformance.cases import synthetic_cases
from conformance.checks.result import Verdict
from conformance.cli import main
from conformance.kernels import registry
from conformance.kernels.runner import run_kernel
from conformance.kernels.spec import ShapeConstraints
from conformance.suite.report import pair_difference_line, render_markdown, to_json_dict
from conformance.suite.run import run_conformance
from reference.contract import CUTLASS_STYLE, TRITON_STYLE
from reference.errors import CaptureError

TESTS = Path(__file__).resolve().parents[1] / "helpers"  # holds buggy_kernels.py
FAST = ["--no-tile-edges", "--no-captures", "--no-model", "--examples", "0", "-q"]
N_SYNTHETIC = len(synthetic_cases())  # the cases FAST runs
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


def _err_lines(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


def _doc(out: Path, name: str) -> dict:
    return json.loads((out / name / "conformance.json").read_text())


# --- 1. a kernel that never ran ----------------------------------------------


@no_cuda
def test_cuda_only_kernel_is_not_run_exit_3(tmp_path, capsys):
    registry.register(make_kernel("fixb-cudaonly", devices=("cuda",)))
    assert main(["check", "--kernel", "fixb-cudaonly", "--out", str(tmp_path), *FAST]) == 3
    out = capsys.readouterr().out
    assert "fixb-cudaonly: overall NOT RUN" in out and "nothing was verified" in out
    ov = _doc(tmp_path, "fixb-cudaonly")["overall"]
    assert ov["verdict"] == Verdict.NOT_RUN == "not run"
    assert (ov["cases_total"], ov["cases_run"], ov["cases_not_run"]) == (N_SYNTHETIC, 0, N_SYNTHETIC)
    assert list(ov["not_run_reasons"].values()) == [N_SYNTHETIC]
    assert "supports devices ['cuda']" in next(iter(ov["not_run_reasons"]))
    top = (tmp_path / "fixb-cudaonly" / "conformance.md").read_text().splitlines()[2]
    assert top.startswith("**Overall verdict: NOT RUN (inconclusive")


def test_constraints_excluding_every_case_is_not_run(tmp_path):
    spec = dataclasses.replace(make_kernel("fixb-huge-m"), constraints=ShapeConstraints(min_m=100000))
    registry.register(spec)
    assert main(["check", "--kernel", "fixb-huge-m", "--out", str(tmp_path), *FAST]) == 3
    doc = _doc(tmp_path, "fixb-huge-m")
    assert doc["overall"]["cases_run"] == 0 and doc["overall"]["verdict"] == "not run"
    assert {c["verdict"] for c in doc["cases"]} == {"not run"}
    assert all(not c["produced_output"] for c in doc["cases"])


def test_some_cases_skipped_are_counted_and_named(tmp_path):
    cases = synthetic_cases()
    n_small = sum(1 for c in cases if c.m < 8)  # independent count of the skipped cases
    assert 0 < n_small < len(cases)
    spec = dataclasses.replace(make_kernel("fixb-min8"), constraints=ShapeConstraints(min_m=8))
    res = run_conformance(spec, cases=cases, property_examples=0, model_checks=False)
    ov = res.overall
    assert res.verdict == "pass"
    assert (ov["cases_run"], ov["cases_not_run"]) == (len(cases) - n_small, n_small)
    assert all("< min_m=8" in why for why in ov["not_run_reasons"])
    assert f"{n_small} of {len(cases)} cases not run" in ov["summary"]
    md = render_markdown(to_json_dict(res))
    assert f"**Cases not run: {n_small} of {len(cases)}**" in md


def test_kernel_that_raises_everywhere_fails_not_not_run(tmp_path):
    res = run_conformance(
        make_kernel("fixb-raises", raises=True), cases=[tie_case()], property_examples=0, model_checks=False
    )
    # the raise is the kernel's call failing (CALL), not a numeric check's failure (issue 42 walk, P1 / P5)
    assert res.verdict == "fail" and res.overall["failed_checks"] == ["CALL", "C9"]
    assert res.overall["cases_not_run"] == 0
    assert res.overall["raised"][0] == {
        "case": "tie",
        "exception": "RuntimeError: deliberate failure",
        "line": res.cases[0].error,
    }
    assert res.overall["summary"] == (
        "NOT conformant: the kernel raised on 1 case and C9 (first: tie: RuntimeError: deliberate failure)"
    )
    assert {cid: r.verdict for cid, r in res.cases[0].checks.items() if cid != "CALL"} == dict.fromkeys(
        ("C1", "C2", "C3", "C4", "C5", "C6", "C8", "C10"), "n/a"
    )


@no_cuda
def test_plugin_skips_not_runnable_and_summary_says_not_run(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--kernel=buggy_kernels:truncating_kernel?devices=cuda",
            "--kernel=cpu",
            "--against=triton",
            "--int8conf-no-tile-edges",
            "--int8conf-no-captures",
            "--int8conf-examples=0",
            "--int8conf-no-model",
            f"--int8conf-reports={tmp_path / 'r'}",
            "--junitxml=j.xml",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # every item passed or skipped, but one kernel never ran: the session fails
    assert r.returncode == 1, r.stdout[-3000:]
    assert " failed" not in r.stdout.splitlines()[-1]
    skipped: dict = {}
    for c in ET.parse(tmp_path / "j.xml").getroot().iter("testcase"):
        skipped.setdefault(c.get("classname"), []).append(c.find("skipped") is not None)
    # N_SYNTHETIC cases + as many pairwise items + C9 + C13-C15; every truncating item skipped, no cpu item but
    # C13-C15 (n/a on the CPU); the query overrides its declared devices: the name says so
    assert skipped["int8conf-truncating?devices=cuda"] == [True] * (2 * N_SYNTHETIC + 4)
    assert sorted(skipped["int8conf-cpu"]) == [False] * (2 * N_SYNTHETIC + 1) + [True] * 3
    assert "truncating?devices=cuda: overall NOT RUN" in r.stdout
    doc = _doc(tmp_path / "r", "cpu")
    n_exp = doc["pairwise"]["counts"]["differ-expected"]
    assert n_exp > 0
    assert f"cpu and triton are NOT bit-interchangeable: they differ on {n_exp} of {N_SYNTHETIC} cases" in r.stdout


# --- device strings -------------------------------------------------------------


@no_cuda
def test_device_cuda_unavailable_is_one_line(tmp_path, capsys):
    assert main(["check", "--kernel", "cpu", "--device", "cuda", "--out", str(tmp_path), *FAST]) == 2
    assert _err_lines(capsys) == [
        "int8conf: error: --device 'cuda': CUDA requested but torch.cuda.is_available() is False"
    ]
    assert not (tmp_path / "cpu").exists()


def test_unknown_device_is_one_line(tmp_path, capsys):
    assert main(["check", "--kernel", "cpu", "--device", "tpu", "--out", str(tmp_path), *FAST]) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and err[0].startswith("int8conf: error: --device 'tpu': ")


# --- 2. unusable --out / OSError ---------------------------------------------------


def test_out_is_a_file(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    for out in (f, f / "sub"):
        assert main(["check", "--kernel", "cpu", "--out", str(out), *FAST]) == 2
        err = _err_lines(capsys)
        assert len(err) == 1 and err[0].startswith(f"int8conf: error: --out {out}: ")
    assert f.read_text() == "x"


def test_oserror_writing_report_is_one_line(tmp_path, capsys, monkeypatch):
    import conformance.suite.report as report

    def deny(path, text):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(report, "atomic_write_text", deny)
    assert main(["check", "--kernel", "cpu", "--out", str(tmp_path), *FAST]) == 2
    assert _err_lines(capsys) == [
        f"int8conf: error: cannot write report under {tmp_path}: Permission denied "
        f"({tmp_path / 'cpu' / 'conformance.json'})"
    ]


def test_an_out_folder_lost_during_the_run_keeps_the_reports_elsewhere(tmp_path, capsys, monkeypatch):
    """--out unwritable when the reports are written (a disk full, a folder removed or made read-only meanwhile):
    the finished run's reports go to a temporary folder, and the one error line names both places."""
    import conformance.suite.report as report

    out, real = tmp_path / "out", report.atomic_write_text

    def deny_under_out(path, text):
        if str(path).startswith(str(out)):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, text)

    monkeypatch.setattr(report, "atomic_write_text", deny_under_out)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", None)  # TMPDIR is read again
    assert main(["check", "--kernel", "cpu", "--out", str(out), *FAST]) == 2
    (kept,) = (tmp_path / "tmp").glob("int8conf-reports-*")
    jp, mp = kept / "cpu" / "conformance.json", kept / "cpu" / "conformance.md"
    assert _err_lines(capsys) == [
        f"int8conf: error: cannot write report under {out}: Permission denied ({out / 'cpu' / 'conformance.json'}); "
        f"the run's reports were written to {jp} and {mp} instead"
    ]
    assert json.loads(jp.read_text())["overall"]["verdict"] == "pass"


def test_raw_oserror_reaches_main_as_one_line(tmp_path, capsys, monkeypatch):
    import conformance.suite.setup as setup

    def boom(out, *_):
        raise IsADirectoryError(21, "Is a directory", str(out))

    monkeypatch.setattr(setup, "ensure_out_dir", boom)
    assert main(["check", "--kernel", "cpu", "--out", str(tmp_path), *FAST]) == 2
    assert _err_lines(capsys) == [f"int8conf: error: {tmp_path}: Is a directory (IsADirectoryError)"]


def _tree(root: Path) -> list:
    """Every path under ``root`` (what a refused command must leave as it was)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def suite_never_runs(monkeypatch):
    """Fails the test if ``check`` gets as far as running the suite (``check.run`` imports
    ``run_suite`` from its module when it runs)."""
    import conformance.suite.run as suite_run

    def ran(*a, **k):
        raise AssertionError("the suite ran before --out was refused")

    monkeypatch.setattr(suite_run, "run_suite", ran)


def _make(root: Path, layout: str) -> None:
    """``layout``: ``a/b/`` makes a folder, ``a/b`` a file."""
    p = root / layout.rstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    if layout.endswith("/"):
        p.mkdir()
    else:
        p.write_text("x")


@pytest.mark.parametrize(
    "layout,kernels,out,bad,problem",
    [
        # a file where the kernel's report folder goes
        ("o/cpu", ["cpu"], "o", "o/cpu", "exists and is not a directory"),
        # a report file that is a folder (an atomic rename cannot replace it)
        ("o/cpu/conformance.json/", ["cpu"], "o", "o/cpu", "conformance.json is a directory, not a file"),
        ("o/cpu/conformance.md/", ["cpu"], "o", "o/cpu", "conformance.md is a directory, not a file"),
        # --out ending in the kernel's name is the report folder itself
        ("o/cpu/conformance.md/", ["cpu"], "o/cpu", "o/cpu", "conformance.md is a directory, not a file"),
        # the second kernel's folder is refused: the first one's, just made, is removed again
        ("o/int_mm", ["cpu", "int_mm"], "o", "o/int_mm", "exists and is not a directory"),
    ],
)
def test_unusable_kernel_report_folder_is_refused_before_any_case(
    tmp_path, capsys, suite_never_runs, layout, kernels, out, bad, problem
):
    _make(tmp_path, layout)
    before = _tree(tmp_path)
    argv = ["check", *(a for k in kernels for a in ("--kernel", k)), "--out", str(tmp_path / out)]
    assert main([*argv, *FAST[:-1]]) == 2  # without -q: no progress line may appear either
    assert _err_lines(capsys) == [f"int8conf: error: --out {tmp_path / bad}: {problem}"]
    assert _tree(tmp_path) == before  # no report, no folder made


def test_refused_check_removes_the_out_folder_it_made(tmp_path, capsys, suite_never_runs):
    out = tmp_path / "new" / "reports"
    assert main(["check", "--kernel", "cpu", "--against", "fixb_no_such_mod:fn", "--out", str(out), *FAST]) == 2
    assert "fixb_no_such_mod" in _err_lines(capsys)[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_read_only_kernel_report_folder_is_refused_before_any_case(tmp_path, capsys, suite_never_runs):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu").chmod(0o555)
    try:
        assert main(["check", "--kernel", "cpu", "--out", str(tmp_path), *FAST]) == 2
    finally:
        (tmp_path / "cpu").chmod(0o755)
    assert _err_lines(capsys) == [f"int8conf: error: --out {tmp_path / 'cpu'}: not writable"]
    assert _tree(tmp_path) == ["cpu"]


# --- 3. argument validation -----------------------------------------------------


@pytest.mark.parametrize(
    "argv,opt",
    [
        (["check", "--kernel", "cpu", "--examples", "-5"], "--examples"),
        (["check", "--kernel", "cpu", "--examples", "two"], "--examples"),
        (["bench", "--reps", "0"], "--reps"),
        (["bench", "--reps", "-1"], "--reps"),
    ],
)
def test_bad_counts_are_usage_errors(argv, opt, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert f"error: argument {opt}: expected an integer" in capsys.readouterr().err


# --- 4. module not found hint -------------------------------------------------------


def test_missing_module_hint_only_when_module_itself_missing(tmp_path, capsys, monkeypatch):
    hint = "(is its directory on PYTHONPATH? run from it or set PYTHONPATH)"
    assert main(["check", "--kernel", "fixb_no_such_mod.sub:fn", *FAST]) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and err[0].endswith(hint) and "fixb_no_such_mod" in err[0]
    (tmp_path / "fixb_broken_mod.py").write_text("import fixb_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["check", "--kernel", "fixb_broken_mod:fn", *FAST]) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and "fixb_missing_dependency" in err[0] and hint not in err[0]


# --- 5. --model for captures ---------------------------------------------------------


def test_model_option_reaches_capture_loading(tmp_path, capsys, monkeypatch):
    import reference.model.capture as capture

    seen = []

    def fake_load(capture_dir, model_dir=None, cache=None, verify=True):
        seen.append((str(capture_dir), None if model_dir is None else str(model_dir)))
        raise CaptureError(
            f"{capture_dir}/manifest.json: parent model '/gone' not found; pass model_dir to load_capture_set"
        )

    monkeypatch.setattr(capture, "load_capture_set", fake_load)
    caps = tmp_path / "caps"  # a manifest check() accepts before it makes folders; the layers are load_capture_set's
    caps.mkdir()
    head = {"format": capture.FORMAT, "model": {"dir": "/gone"}, "settings": {}, "checkpoints": {}, "layers": {}}
    (caps / capture.MANIFEST).write_text(json.dumps(head))
    base = [
        "check",
        "--kernel",
        "cpu",
        "--no-model",
        "--examples",
        "0",
        "-q",
        "--out",
        str(tmp_path / "out"),
        "--captures",
        str(caps),
    ]
    assert main(base) == 2
    err = _err_lines(capsys)
    assert err == [
        f"int8conf: error: {caps}/manifest.json: parent model '/gone' not found; "
        "pass --model DIR (the parent model the captures were taken from)"
    ]
    assert main(base + ["--model", "/moved/model"]) == 2
    _err_lines(capsys)
    assert seen == [(str(caps), None), (str(caps), "/moved/model")]
    # --model alone: the model is captured into the shared cache (reference.model.capture.cached_capture)
    # and that capture replayed; a missing directory is one line
    caught = []
    monkeypatch.setattr(
        "reference.model.capture.cached_capture",
        lambda model, device, progress: caught.append((model, device)) or type("CS", (), {"dir": "/cache/caps"}),
    )
    assert main(base[:-2] + ["--model", "/some/model"]) == 2
    _err_lines(capsys)
    assert caught == [("/some/model", "cpu")] and seen[-1] == ("/cache/caps", "/some/model")
    monkeypatch.undo()
    assert main(["check", "--kernel", "cpu", "--model", "/m", "--no-tile-edges", "--no-model", "--examples", "0"]) == 2
    assert _err_lines(capsys) == ["int8conf: error: /m: not a model directory"]


# --- 6. report additions --------------------------------------------------------------


def test_interpreter_semantics_subsection():
    from conformance.kernels.triton_probe import probe

    md = render_markdown(
        to_json_dict(run_conformance("triton", cases=[tie_case()], property_examples=0, model_checks=False))
    )
    assert "### Interpreter semantics" in md
    sem = probe()
    for step in ("int32_to_fp32", "fp32_to_bf16", "fp32_to_fp16"):
        assert f"| {step}" in md and sem[step] in md.split(f"| {step}")[1].split("\n")[0]
    md_cpu = render_markdown(
        to_json_dict(run_conformance("cpu", cases=[tie_case()], property_examples=0, model_checks=False))
    )
    assert "Interpreter semantics" not in md_cpu
    # C7's reference is the kernel's own declared contract
    assert "C7's reference arm" in md_cpu and "emulating the kernel's declared contract" in md_cpu


def test_differ_expected_says_not_bit_interchangeable():
    cut, tri = make_kernel("fixb-cut", CUTLASS_STYLE), make_kernel("fixb-tri", TRITON_STYLE)
    ops = [bias_tie_case(), tie_case()]
    # independent count: elements whose bits differ between the two runs
    n_diff = sum(
        int((run_kernel(cut, o).output.view(torch.int16) != run_kernel(tri, o).output.view(torch.int16)).sum())
        for o in ops
    )
    assert n_diff == 1  # bias-tie: 0x3B80 vs 0x0000; tie: identical
    res = run_conformance(cut, against=tri, cases=ops, property_examples=0, model_checks=False)
    assert res.verdict == "pass" and res.pairwise["counts"] == {"differ-expected": 1, "identical": 1}
    line = pair_difference_line(res.pairwise)
    assert line == (
        "`fixb-cut` and `fixb-tri` are NOT bit-interchangeable: they differ on 1 of "
        "2 cases (1/1 elements of those cases) where their declared contracts allow "
        "it (differ-expected); not a failure, but swapping one for the other changes "
        "output bits."
    )
    assert line in render_markdown(to_json_dict(res))
    same = run_conformance(
        cut, against=make_kernel("fixb-cut2", CUTLASS_STYLE), cases=ops, property_examples=0, model_checks=False
    )
    assert pair_difference_line(same.pairwise) == (
        "`fixb-cut` and `fixb-cut2` are bit-interchangeable on all 2 cases compared."
    )


@no_cuda
def test_property_examples_not_run_are_reported(tmp_path):
    spec = make_kernel("fixb-cuda-prop", devices=("cuda",))
    res = run_conformance(spec, cases=[tie_case()], property_examples=3, model_checks=False)
    assert res.verdict == "not run" and res.overall["cases_total"] == 4
    md = render_markdown(to_json_dict(res))
    assert "no shrinking); NOT RUN." in md
    assert "The kernel did not run on 3 of 3 examples" in md
