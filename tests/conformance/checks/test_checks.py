"""Checks C1-C6 and C8 pass on right kernels and fail on wrong ones, with
known evidence (bit patterns, counts, indices, digests)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from buggy_kernels import TEST_DIGEST, bias_tie_case, const_case, make_kernel, order_case, sha_int8, tie_case

from conformance.checks.accumulator import check_fp32_exact_accumulator, check_int32_headroom, observe_accumulator
from conformance.checks.manifest import check_kernel_manifest
from conformance.checks.operand_sharing import check_operand_sharing
from conformance.checks.output_bits import (
    C6_TOL_ULP,
    check_declared_contract,
    check_pow2_bit_identity,
    check_real_scale_spacing,
)
from conformance.checks.result import CheckResult, aggregate
from conformance.kernels.runner import run_kernel
from conformance.suite.evaluate import evaluate_case
from reference.contract import CUTLASS_STYLE, TRITON_STYLE


def _run(spec, ops):
    return run_kernel(spec, ops, device="cpu")


def test_c8_c6_truncation_on_rne_tie():
    ops = tie_case()
    good, trunc = make_kernel("good"), make_kernel("trunc", rounding="rtz")
    assert check_declared_contract(good, ops, _run(good, ops)).verdict == "pass"
    r = check_declared_contract(trunc, ops, _run(trunc, ops))
    assert r.verdict == "fail"
    w = r.evidence["worst"]
    assert (w["index"], w["out_bits"], w["ref_bits"], w["ulp"]) == ([0, 0], "0x3F81", "0x3F82", 1)
    assert r.evidence["n_over_tol"] == 1 and r.evidence["ulp_histogram"]["1"] == 1
    # one spacing is inside C6's tolerance: the published check cannot see it
    assert check_real_scale_spacing(trunc, ops, _run(trunc, ops)).verdict == "pass"
    assert check_pow2_bit_identity(trunc, ops, _run(trunc, ops)).verdict == "n/a"


def test_c5_pow2_truncation_fails_and_c6_na():
    ops = tie_case(pow2=True)
    good, trunc = make_kernel("good"), make_kernel("trunc", rounding="rtz")
    g = check_pow2_bit_identity(good, ops, _run(good, ops))
    assert g.verdict == "pass" and g.evidence["scale_b_all_pow2"] is True
    assert g.evidence["premise_violations"] == 0
    r = check_pow2_bit_identity(trunc, ops, _run(trunc, ops))
    assert r.verdict == "fail"
    assert (r.evidence["worst"]["out_bits"], r.evidence["worst"]["ref_bits"]) == ("0x3F81", "0x3F82")
    assert check_real_scale_spacing(trunc, ops, _run(trunc, ops)).verdict == "n/a"


def test_c8_sees_scale_order_c6_does_not():
    ops = order_case()
    # declares w_then_a (CUTLASS) but multiplies a_then_w: fault F3
    f3 = make_kernel("f3", CUTLASS_STYLE, order="a_then_w")
    r = check_declared_contract(f3, ops, _run(f3, ops))
    assert r.verdict == "fail"
    assert (r.evidence["worst"]["out_bits"], r.evidence["worst"]["ref_bits"]) == ("0x3C31", "0x3C32")
    assert r.evidence["worst"]["acc"] == 545
    assert check_real_scale_spacing(f3, ops, _run(f3, ops)).verdict == "pass"
    # the same arithmetic declared honestly (TRITON_STYLE is a_then_w) conforms
    honest = make_kernel("honest", TRITON_STYLE)
    assert check_declared_contract(honest, ops, _run(honest, ops)).verdict == "pass"


def test_c6_fails_when_bias_enters_elsewhere():
    ops = bias_tie_case()
    # declares bias after the rounding (TRITON_STYLE) but adds it in float32 before: fault F5
    f5 = make_kernel("f5", TRITON_STYLE, bias_point="fp32_before_round")
    r = check_real_scale_spacing(f5, ops, _run(f5, ops))
    assert r.verdict == "fail" and r.evidence["max_ulp"] == 0x3B80 == 15232
    assert (r.evidence["worst"]["out_bits"], r.evidence["worst"]["ref_bits"]) == ("0x3B80", "0x0000")
    assert r.evidence["ulp_histogram"][">256"] == 1
    assert check_declared_contract(f5, ops, _run(f5, ops)).verdict == "fail"
    honest = make_kernel("honest", TRITON_STYLE)
    assert check_real_scale_spacing(honest, ops, _run(honest, ops)).verdict == "pass"


@pytest.mark.parametrize("off, verdict", [(C6_TOL_ULP, "pass"), (C6_TOL_ULP + 1, "fail")])
def test_c6_tolerance_boundary(off, verdict):
    """C6 allows ``C6_TOL_ULP`` spacings: one element exactly that many spacings off passes, one more fails."""
    ops = tie_case()  # reference 0x3F82 (1 + 2**-6), well inside its binade: +n bits is n spacings
    good = make_kernel("good", TRITON_STYLE)

    def shifted(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        out = good.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)
        out.view(torch.int16)[0, 0] += off
        return out

    spec = dataclasses.replace(good, name=f"off{off}", scaled_mm=shifted)
    r = check_real_scale_spacing(spec, ops, _run(spec, ops))
    assert r.verdict == verdict, r.summary
    assert r.evidence["max_ulp"] == off and r.evidence["tol_ulp"] == C6_TOL_ULP
    assert r.evidence["worst"]["ref_bits"] == "0x3F82"


def test_c2_transposed_operand():
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-128, 128, (4, 8), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-128, 128, (8, 8), generator=g, dtype=torch.int16).to(torch.int8)
    from reference.operands import GemmOperands

    ops = GemmOperands(a, b, torch.full((4,), 0.01), torch.full((8,), 0.002))
    spec = make_kernel("transposed", transpose_b=True)
    res = check_operand_sharing(spec, ops, _run(spec, ops))
    assert res.verdict == "fail" and res.evidence["mismatched"] == ["b"]
    assert res.evidence["received"]["b"] == sha_int8(b.t().contiguous())
    assert res.evidence["expected"]["b"] == sha_int8(b)
    good = make_kernel("good")
    assert check_operand_sharing(good, ops, _run(good, ops)).verdict == "pass"


def test_c3_int32_bound_edges():
    spec = make_kernel("good")
    ok = const_case(131071)  # 131071 * 128 * 128 = 2**31 - 16384 fits
    r = check_int32_headroom(spec, ok, None, acc=observe_accumulator(spec, ok))
    assert r.verdict == "pass" and r.evidence["bound_tight_max"] == 2**31 - 16384
    over = const_case(131072)  # exactly 2**31: one past INT32_MAX
    r = check_int32_headroom(spec, over, None, acc=observe_accumulator(spec, over))
    assert r.verdict == "fail" and r.evidence["failure_kind"] == "precondition"
    assert r.evidence["exact_max_abs"] == 2**31 and r.evidence["n_exact_over"] == 1
    # the int_mm entry wraps 2**31 to -2**31, as its declared overflow ("wrap") says:
    # a precondition, not a mismatch
    assert "first_acc_mismatch" not in r.evidence and r.evidence["n_acc_mismatch"] == 0
    assert r.evidence["observed_max_abs"] == 2**31 and r.evidence["overflow_at_risk"] == 1
    assert r.is_precondition_violation and not r.is_kernel_failure


def test_c4_fp32_exact_edges():
    spec = make_kernel("good")
    below = const_case(1023)  # 1023 * 16384 = 2**24 - 16384
    r = check_fp32_exact_accumulator(spec, below, None, acc=observe_accumulator(spec, below))
    assert r.verdict == "pass" and r.evidence["max_abs"] == 2**24 - 16384
    at = const_case(1024)  # 2**24 exactly
    r = check_fp32_exact_accumulator(spec, at, None, acc=observe_accumulator(spec, at))
    assert r.verdict == "fail" and r.evidence["n_at_or_over"] == 1
    assert r.evidence["max_abs"] == 2**24 and r.evidence["acc_source"] == "kernel int_mm"
    assert r.is_precondition_violation
    # the kernel itself is fine there: C8 still passes and the case verdict too
    cr = evaluate_case(spec, at, device="cpu")
    assert cr.checks["C8"].verdict == "pass" and cr.verdict == "pass"
    assert [c.check_id for c in cr.precondition_violations] == ["C4"]


def test_c3_wrong_kernel_accumulator():
    spec = make_kernel("offbyone", acc_off_by_one=True)
    ops = const_case(16, value=3)  # acc = 16 * 9 = 144
    r = check_int32_headroom(spec, ops, None, acc=observe_accumulator(spec, ops))
    assert r.verdict == "fail" and r.evidence["failure_kind"] == "kernel" and r.is_kernel_failure
    assert r.evidence["first_acc_mismatch"] == {"index": [0, 0], "observed": 145, "declared": 144, "exact": 144}


def test_c1_manifest():
    ops = tie_case()
    good = make_kernel("good")
    r = check_kernel_manifest(good, ops, _run(good, ops))
    assert r.verdict == "pass" and r.evidence["observed"]["path"] == "test-emulation"
    stale = make_kernel("stale", ran_digest="f" * 64)
    r = check_kernel_manifest(stale, ops, _run(stale, ops))
    assert r.verdict == "fail"
    assert r.evidence["mismatches"] == [f"ran source digest {'f' * 12}..., declared {TEST_DIGEST[:12]}..."]
    # A third-party kernel need not report its path; a built-in must.
    silent = make_kernel("silent", record_path=False)
    r = check_kernel_manifest(silent, ops, _run(silent, ops))
    assert r.verdict == "pass"
    assert r.evidence["observed"]["path"] == "not reported by kernel (runner-observed call)"
    silent_builtin = dataclasses.replace(silent, origin="builtin")
    r = check_kernel_manifest(silent_builtin, ops, _run(silent_builtin, ops))
    assert r.verdict == "fail" and "recorded no code path" in r.summary


def test_c1_a_wrapper_around_a_builtin_keeps_its_own_identity():
    """The built-in ``cpu`` records its own module digest (``digest_of="cpu"``);
    called inside a user's kernel, that digest is the inner kernel's, so the
    wrapper's C1 compares its own declared digest (it used to fail on every case)."""
    from conformance.kernels import builtin_cpu

    def wrapper(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return builtin_cpu.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)

    spec = dataclasses.replace(make_kernel("good"), name="mine", scaled_mm=wrapper, source_digest="ab" * 32)
    ops = tie_case()
    run = _run(spec, ops)
    r = check_kernel_manifest(spec, ops, run)
    assert r.verdict == "pass", r.summary
    assert run.manifest["source_digest"] == "ab" * 32 and run.manifest["path"] == "cpu-exact"
    assert "refused_digest_claims" not in run.manifest["extra"]
    from conformance.kernels import trace

    def stale(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        trace.record_path("mine", source_digest="f" * 64)  # before the inner kernel's record
        return builtin_cpu.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)

    stale_spec = dataclasses.replace(spec, scaled_mm=stale)
    r = check_kernel_manifest(stale_spec, ops, _run(stale_spec, ops))
    assert r.verdict == "fail" and r.evidence["mismatches"] == [
        f"ran source digest {'f' * 12}..., declared {'ab' * 6}..."
    ]
    cpu = dataclasses.replace(spec, name="cpu", source_digest="ab" * 32)  # the built-in itself
    r = check_kernel_manifest(cpu, ops, _run(cpu, ops))  # its run-time digest is promoted
    assert r.verdict == "fail" and r.evidence["mismatches"] == [
        f"ran source digest {builtin_cpu.SOURCE_DIGEST[:12]}..., declared {'ab' * 6}..."
    ]


@pytest.mark.parametrize("inner", ["int_mm", "triton"])
def test_c1_a_wrapper_around_int_mm_or_triton_keeps_its_own_identity(inner):
    """Every built-in records its run-time digest with ``digest_of`` its own
    name, so a user's wrapper around ``int_mm`` or ``triton`` (interpreter
    here) is judged on its own declared digest, and the built-in alone on
    the digest it recorded."""
    from conformance.kernels.registry import get_kernel

    builtin = get_kernel(inner)

    def wrapper(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return builtin.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)

    spec = dataclasses.replace(builtin, name="mine", scaled_mm=wrapper, source_digest="cd" * 32)
    ops = tie_case()
    run = _run(spec, ops)
    assert run.error is None, run.error
    r = check_kernel_manifest(spec, ops, run)
    assert r.verdict == "pass", r.summary
    assert run.manifest["source_digest"] == "cd" * 32
    assert "refused_digest_claims" not in run.manifest["extra"]
    itself = _run(builtin, ops)
    assert itself.manifest["source_digest"] == builtin.source_digest


def test_c1_a_kernel_cannot_hide_its_digest_under_a_builtins_name():
    """``digest_of`` is a free argument: a user kernel that records its own
    (stale) digest as the built-in ``cpu``'s must not pass C1 with it. The
    claim is refused (the digest is not cpu's source digest), counted as the
    kernel's own, and the manifest says why; a wrapper whose inner ``cpu``
    records cpu's real digest still keeps its own identity."""
    from conformance.kernels import builtin_cpu, trace

    def spoof(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        trace.record_path("mine", source_digest="f" * 64, digest_of="cpu")
        return builtin_cpu.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)

    spec = dataclasses.replace(make_kernel("good"), name="mine", scaled_mm=spoof, source_digest="ab" * 32)
    ops = tie_case()
    run = _run(spec, ops)
    assert run.manifest["source_digest"] == "f" * 64
    why = (
        f"digest {'f' * 12}... recorded with digest_of='cpu' counted as 'mine''s own: "
        f"built-in 'cpu' has source digest {builtin_cpu.SOURCE_DIGEST[:12]}..."
    )
    assert run.manifest["extra"]["refused_digest_claims"] == [why]
    r = check_kernel_manifest(spec, ops, run)
    assert r.verdict == "fail" and r.evidence["mismatches"] == [
        f"ran source digest {'f' * 12}..., declared {'ab' * 6}..."
    ]

    def other_name(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        trace.record_path("mine", source_digest="e" * 64, digest_of="not-a-builtin")
        return builtin_cpu.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)

    run = _run(dataclasses.replace(spec, scaled_mm=other_name), ops)
    assert run.manifest["source_digest"] == "e" * 64
    assert run.manifest["extra"]["refused_digest_claims"] == [
        f"digest {'e' * 12}... recorded with digest_of='not-a-builtin' counted as 'mine''s own: "
        f"'not-a-builtin' is not a built-in kernel"
    ]
    # the built-in's own record (its real digest) is set aside, with nothing refused
    from conformance.kernels.runner import own_digests

    assert own_digests("mine", [("ab" * 32, None), (builtin_cpu.SOURCE_DIGEST, "cpu")]) == (["ab" * 32], [])
    assert own_digests("cpu", [(builtin_cpu.SOURCE_DIGEST, "cpu")]) == ([builtin_cpu.SOURCE_DIGEST], [])


def test_kernel_errors_fail_output_checks():
    ops = tie_case(pow2=True)
    boom = make_kernel("boom", raises=True)
    cr = evaluate_case(boom, ops, device="cpu")
    # the call gave no output: the kernel-call failure carries the exception, the output checks did not run
    assert cr.checks["CALL"].verdict == "fail" and cr.verdict == "fail"
    assert "kernel raised RuntimeError: deliberate failure" in cr.checks["CALL"].summary
    assert cr.raised == "RuntimeError: deliberate failure"
    for cid in ("C5", "C8"):
        assert cr.checks[cid].verdict == "n/a"
    nan = make_kernel("nan", nan=True)
    cr = evaluate_case(nan, ops, device="cpu")
    assert cr.checks["C8"].verdict == "fail" and "NaN" in cr.checks["C8"].summary


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_kernel_not_runnable_here_is_na():
    # C3/C4 too: passing on the reference's accumulator alone would certify nothing
    spec = make_kernel("gpu-only", devices=("cuda",))
    cr = evaluate_case(spec, tie_case(), device=None)
    assert {c: r.verdict for c, r in cr.checks.items()} == {
        "C1": "n/a",
        "C2": "n/a",
        "C3": "n/a",
        "C4": "n/a",
        "C5": "n/a",
        "C6": "n/a",
        "C8": "n/a",
        "C10": "n/a",
    }


def test_aggregate_verdicts_and_kinds():
    p = CheckResult("C4", "fp32_exact_accumulator", "pass", "ok", {})
    na = CheckResult("C4", "fp32_exact_accumulator", "n/a", "why", {})
    pre = CheckResult("C4", "fp32_exact_accumulator", "fail", "big", {"failure_kind": "precondition"})
    ker = CheckResult("C4", "fp32_exact_accumulator", "fail", "bad", {"failure_kind": "kernel"})
    assert aggregate("C4", [("x", na)]).verdict == "n/a"
    assert aggregate("C4", [("x", na), ("y", p)]).verdict == "pass"
    a = aggregate("C4", [("x", p), ("y", pre)])
    assert a.verdict == "fail" and a.is_precondition_violation and a.evidence["failed_cases"] == ["y"]
    b = aggregate("C4", [("x", pre), ("y", ker)])
    assert b.is_kernel_failure and b.evidence["n_failed_cases"] == 2
    assert aggregate("C8", [("x", p)]).name == "declared_contract"
