"""Interface failures (issue 42, item 3): a scaled_mm whose signature cannot take the runner's call is refused at
load in one line; an output the contract refuses (None, wrong dtype, column-major, aliasing or writing an operand)
is one ``IF interface`` failure, and every other check of that case is ``-`` (not run), never ``pass``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import buggy_kernels
import pytest
import torch

from conformance.cases.synthetic import synthetic_cases
from conformance.checks.result import INTERFACE_ID
from conformance.kernels.loader import declare, spec_from_object
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import interface_violation, run_kernel
from conformance.suite.evaluate import NOT_RUN_ON_INTERFACE, evaluate_case
from conformance.suite.plan import given_cases
from conformance.suite.report import render_markdown, to_json_dict
from conformance.suite.run import build_result
from reference.errors import KernelLoadError

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
ROOT = Path(__file__).resolve().parents[2]


def _cases(n: int = 3) -> list:
    return synthetic_cases()[:n]


def test_a_scaled_mm_without_out_dtype_and_bias_is_refused_at_load_in_one_line():
    with pytest.raises(KernelLoadError) as e:
        spec_from_object(buggy_kernels.wrong_signature, "buggy_kernels:wrong_signature", "module")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(
        "kernel 'buggy_kernels:wrong_signature': scaled_mm cannot be called as "
        "(a, b, scale_a, scale_b, out_dtype=..., bias=None): its signature is (a, b, scale_a, scale_b)"
    )


def test_signatures_that_take_the_call_load():
    @declare(contract="cutlass", convention="vllm", name="v6")
    def vllm_six(a, b, scale_a, scale_b, out_dtype, bias):
        return None

    @declare(contract="cutlass", name="kw", int_mm=lambda a, b, *rest: None)
    def catch_all(*args, **kwargs):
        return None

    assert spec_from_object(vllm_six, "m:vllm_six", "module").name == "v6"
    assert spec_from_object(catch_all, "m:catch_all", "module").name == "kw"

    @declare(contract="cutlass", convention="vllm", name="v4")
    def vllm_four(a, b, scale_a, scale_b):
        return None

    with pytest.raises(KernelLoadError, match=r"scaled_mm cannot be called as \(a, b, scale_a, scale_b, out_dtype"):
        spec_from_object(vllm_four, "m:vllm_four", "module")

    @declare(contract="cutlass", name="im", int_mm=lambda a: None)
    def bad_int_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return None

    with pytest.raises(KernelLoadError, match=r"int_mm cannot be called as \(a, b\)"):
        spec_from_object(bad_int_mm, "m:bad_int_mm", "module")


def test_check_refuses_a_wrong_signature_with_exit_2_and_one_line(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "check", "--kernel", "buggy_kernels:wrong_signature"]
        + ["--no-model", "--no-tile-edges", "--no-captures", "-q", "--out", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{HELPERS}:{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert "scaled_mm cannot be called as (a, b, scale_a, scale_b, out_dtype=..., bias=None)" in p.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "fn,line",
    [
        (buggy_kernels.returns_none, "kernel returned None, expected a torch.Tensor [8,48] torch.bfloat16"),
        (buggy_kernels.float32_output, "kernel returned dtype torch.float32, expected torch.bfloat16"),
        (
            buggy_kernels.column_major_output,
            "kernel returned a column-major output (strides (1, 8)), expected a dense row-major [8,48] tensor",
        ),
        (buggy_kernels.scales_a_in_place, "kernel modified operand scale_a in place"),
    ],
    ids=["none", "dtype", "column-major", "in-place"],
)
def test_an_invalid_output_is_one_interface_failure_and_no_other_check_runs(fn, line):
    spec = spec_from_object(fn, f"buggy_kernels:{fn.__name__}", "module")
    ops = _cases(1)[0]
    assert (ops.m, ops.n) == (8, 48)
    cr = evaluate_case(spec, ops, device="cpu")
    assert cr.verdict == "fail" and cr.interface == line
    assert [r.check_id for r in cr.kernel_failures] == [INTERFACE_ID]
    assert cr.checks[INTERFACE_ID].summary == f"interface: {line}"
    others = {cid: (r.verdict, r.summary) for cid, r in cr.checks.items() if cid != INTERFACE_ID}
    assert set(others) >= {"C1", "C2", "C3", "C4", "C5", "C6", "C8", "C10"}
    assert set(others.values()) == {("n/a", NOT_RUN_ON_INTERFACE)}


def test_the_headline_and_the_case_row_name_the_interface_failure_and_c3_c4_do_not_pass():
    spec = get_kernel("buggy_kernels:returns_none")
    cases = _cases(3)
    res = build_result(spec, [evaluate_case(spec, c, device="cpu") for c in cases], given_cases(cases))
    first = cases[0].name
    assert res.verdict == "fail"
    assert res.overall["summary"] == (
        f"NOT conformant: interface: kernel returned None, expected a torch.Tensor [8,48] torch.bfloat16 on "
        f"{first} (3 of 3 cases)"
    )
    assert res.overall["failed_checks"] == [INTERFACE_ID]
    assert {c.check_id: c.verdict for c in res.checks if c.check_id in ("C3", "C4", "C5", "C6", "C8")} == dict.fromkeys(
        ("C3", "C4", "C5", "C6", "C8"), "n/a"
    )
    md = render_markdown(to_json_dict(res))
    row = next(x for x in md.splitlines() if x.startswith(f"| {first} "))
    assert "FAIL interface: kernel returned None" in row
    assert "| ok " not in row and "FAIL  " not in row.split("interface")[1]


def test_an_output_sharing_storage_with_an_operand_is_an_interface_violation():
    a = torch.zeros(1, 4, dtype=torch.bfloat16)
    assert interface_violation(a, 1, 4, torch.bfloat16, operands={"bias": a.view(4)}) == (
        "kernel returned an output that shares storage with operand bias (written in place)"
    )
    assert interface_violation(a.clone(), 1, 4, torch.bfloat16, operands={"bias": a.view(4)}) is None


def test_a_valid_output_has_no_interface_failure():
    spec = get_kernel("cpu")
    run = run_kernel(spec, _cases(1)[0])
    assert run.interface is None and run.error is None
    cr = evaluate_case(spec, _cases(1)[0], device="cpu")
    assert INTERFACE_ID not in cr.checks and cr.interface is None and cr.verdict == "pass"
