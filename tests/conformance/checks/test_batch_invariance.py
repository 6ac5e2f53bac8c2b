"""C9 batch_invariance: a row's bits do not depend on the batch or the call."""

from __future__ import annotations

import torch
from buggy_kernels import (
    decode_path_order,
    decode_returns_bias,
    emulate,
    exact_acc32,
    good_cutlass,
    raises_past_m16,
    stale_accumulator,
)

from conformance.checks.batch_invariance import check_batch_invariance, probe_cases
from conformance.kernels.loader import spec_from_object
from conformance.kernels.registry import get_kernel
from reference.bits import bits_of


def _spec(fn, name):
    return spec_from_object(fn, name, f"module:buggy_kernels:{name}")


def test_builtin_and_correct_kernels_are_batch_invariant():
    for spec in (get_kernel("cpu"), get_kernel("int_mm"), _spec(good_cutlass, "good")):
        r = check_batch_invariance(spec, [])
        assert (r.check_id, r.name, r.verdict) == ("C9", "batch_invariance", "pass"), r.summary
        ev = r.evidence
        # 3 probes x (2 calls + 2 rows alone + 5 batch sizes)
        assert ev["n_calls"] == 27 and ev["n_differences"] == 0
        assert [c["sizes_run"] for c in ev["cases"]] == [[2, 5, 16, 17, 64]] * 3
        # repeat: every row of every probe (6 + 5 + 4) + 2 rows x (1 alone + 5 batches) x 3
        assert ev["n_comparisons"] == 15 + 36


def test_m1_decode_path_with_another_scale_order_is_caught():
    r = check_batch_invariance(_spec(decode_path_order, "decode"), [])
    assert r.verdict == "fail"
    diffs = r.evidence["differences"]
    assert diffs and all(d["context"] == "alone (M=1)" for d in diffs)
    d = diffs[0]
    # the reported bits are those of s_a-first (the M=1 path) vs s_w-first (the batch)
    probe = {p.name: p for p in probe_cases(0)}[d["case"]]
    row, col = d["row"], d["columns"][0]["col"]
    acc = exact_acc32(probe.a, probe.b)
    want = {}
    for order in ("a_then_w", "w_then_a"):
        out = emulate(acc, probe.scale_a, probe.scale_b, order, "fp32_before_round", probe.bias, probe.out_dtype)
        width = 8 if probe.out_dtype == torch.float32 else 4
        want[order] = f"0x{int(bits_of(out[row : row + 1, col : col + 1])[0, 0]):0{width}X}"
    assert d["columns"][0]["bits"] == want["a_then_w"]
    assert d["columns"][0]["reference_call_bits"] == want["w_then_a"]
    assert want["a_then_w"] != want["w_then_a"]


def test_stale_accumulator_between_calls_is_caught():
    r = check_batch_invariance(_spec(stale_accumulator, "stale"), [])
    assert r.verdict == "fail"
    assert r.evidence["differences"][0]["context"] == "repeat (same inputs, second call)"
    assert "repeat" in r.summary


def test_kernel_that_cannot_run_is_na():
    from conformance.kernels.spec import KernelSpec
    from reference.contract import CUTLASS_STYLE

    spec = KernelSpec("gpu", good_cutlass, CUTLASS_STYLE, devices=("cuda",), source_digest="1" * 64)
    if not torch.cuda.is_available():
        r = check_batch_invariance(spec, [])
        assert r.verdict == "n/a" and len(r.evidence["cases_not_run"]) == 3


def test_an_interface_error_on_a_c9_call_is_an_interface_failure_not_batch_dependence():
    """an M == 1 call returning the bias's storage breaks the interface (the same judgement as
    a case's IF); C9 says so, and the run's headline names the interface, not C9."""
    from conformance.cases import make_case
    from conformance.suite.run import run_conformance

    spec = _spec(decode_returns_bias, "decode_returns_bias")
    r = check_batch_invariance(spec, [])
    line = "kernel returned an output that shares storage with operand bias (written in place)"
    assert r.verdict == "fail" and r.evidence["failure_kind"] == "interface" and r.evidence["interface"] == line
    assert r.summary.startswith(f"interface: {line}; on C9's call c9/probe-bf16-bias row ")  # before: "row bits depend"
    assert "row bits depend" not in r.summary and r.evidence["n_differences"] == 0
    res = run_conformance(spec, cases=[make_case("ordinary", 0)], property_examples=0, model_checks=False)
    assert res.overall["summary"].startswith(f"NOT conformant: interface: {line}; on C9's call ")
    assert "C9 batch_invariance failed" not in res.overall["summary"]


def test_a_c9_call_that_raises_is_the_kernel_raising_not_batch_dependence():
    """rows C9 could not compare because the kernel raised are no batch dependence."""
    r = check_batch_invariance(_spec(raises_past_m16, "raises"), [])
    assert r.verdict == "fail" and r.evidence["failure_kind"] == "raised"
    assert r.evidence["raised"]["exception"] == "RuntimeError: no tile for M=17"
    assert r.summary.startswith("the kernel gave no output on 6 of 27 C9 calls; first: c9/probe-fp32 rows ")
