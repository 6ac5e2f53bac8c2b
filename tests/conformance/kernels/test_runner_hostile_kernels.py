"""Fixes found by the new-user test: C1 for third-party kernels that
record no path, kernels writing into their operands, kernels raising
SystemExit, and the Triton interpreter's benign overflow warnings."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch

from conformance.checks.manifest import UNREPORTED_PATH, check_kernel_manifest
from conformance.checks.operand_sharing import check_operand_sharing
from conformance.kernels import trace
from conformance.kernels.loader import declare, spec_from_object
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import run_int_mm, run_kernel
from conformance.kernels.spec import KernelSpec
from conformance.suite.evaluate import evaluate_case
from reference.accumulate import exact_int_mm
from reference.bits import bits_of
from reference.contract import CUTLASS_STYLE, TRITON_STYLE
from reference.epilogue import reference_scaled_mm
from reference.operands import GemmOperands


def _ops(m=4, k=8, n=3, bias=None):
    g = torch.Generator().manual_seed(7)
    return GemmOperands(
        torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g),
        torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g),
        torch.rand(m, generator=g) + 0.5,
        torch.rand(n, generator=g) + 0.5,
        bias,
        name="fix",
    )


def _good(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
    return reference_scaled_mm(a, b, sa, sb, CUTLASS_STYLE, bias, out_dtype)


def _acc32(a, b):
    return exact_int_mm(a, b).to(torch.int32)


# --- third-party kernels as a user writes them (no conformance.kernels.trace) ---


@declare(contract="cutlass", name="userkern", version="1.0")
def user_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Exactly the README's @declare form; never calls trace.record_path."""
    return reference_scaled_mm(a, b, scale_a, scale_b, CUTLASS_STYLE, bias, out_dtype)


@declare(contract="cutlass", convention="vllm", name="vllmkern")
def vllm_kernel(a, b_kn, scale_a, scale_b, out_dtype, bias):
    """vLLM convention: b [K,N] column-major view, scales [M,1] / [N,1]."""
    assert b_kn.shape == (a.shape[1], scale_b.shape[0]) and scale_a.shape[1] == 1
    return reference_scaled_mm(a, b_kn.t(), scale_a.reshape(-1), scale_b.reshape(-1), CUTLASS_STYLE, bias, out_dtype)


@pytest.mark.parametrize("obj,name", [(user_kernel, "userkern"), (vllm_kernel, "vllmkern")])
def test_c1_third_party_kernel_without_path_passes(obj, name):
    spec = spec_from_object(obj, f"hostile_kernels:{obj.__name__}", f"module:hostile_kernels:{obj.__name__}")
    assert spec.origin != "builtin" and spec.name == name
    ops = _ops()
    run = run_kernel(spec, ops)
    assert run.error is None and run.manifest["path"] == "unreported"
    r = check_kernel_manifest(spec, ops, run)
    assert r.verdict == "pass", r.summary
    assert r.evidence["observed"]["path"] == UNREPORTED_PATH
    assert UNREPORTED_PATH == "not reported by kernel (runner-observed call)"
    assert r.evidence["observed"]["path_reported"] is False
    assert r.evidence["mismatches"] == []
    assert (
        r.summary
        == f"{name} ran as declared on cpu (its code path not reported by the kernel; the runner saw the call)"
    )
    # the whole case passes too (C8 against CUTLASS_STYLE, C2 by the runner's digests)
    cr = evaluate_case(spec, ops)
    assert cr.verdict == "pass" and cr.checks["C8"].verdict == "pass"
    # name / digest / device are still compared for such kernels
    for other, needle in (
        (replace(spec, name="other"), f"ran name {name!r}, declared 'other'"),
        (replace(spec, source_digest="0" * 64), "ran source digest"),
        (replace(spec, devices=("cuda",)), "ran on device 'cpu'"),
    ):
        r2 = check_kernel_manifest(other, ops, run)
        assert r2.verdict == "fail" and len(r2.evidence["mismatches"]) == 1
        assert r2.evidence["mismatches"][0].startswith(needle)


def test_c1_builtin_still_requires_a_path():
    ops = _ops()
    spec = KernelSpec(name="t", scaled_mm=_good, contract=CUTLASS_STYLE, source_digest="d" * 64)
    assert spec.origin == "builtin"
    r = check_kernel_manifest(spec, ops, run_kernel(spec, ops))
    assert r.verdict == "fail"
    assert r.evidence["mismatches"] == ["kernel recorded no code path (conformance.kernels.trace.record_path)"]
    # the real built-ins record theirs
    cpu = get_kernel("cpu")
    r = check_kernel_manifest(cpu, ops, run_kernel(cpu, ops))
    assert r.verdict == "pass" and r.evidence["observed"]["path"] == "cpu-exact"
    assert r.evidence["observed"]["path_reported"] is True


# --- kernels that write into their operands ---


def _spec(fn, int_mm=None):
    return KernelSpec(
        name="t", scaled_mm=fn, contract=CUTLASS_STYLE, source_digest="d" * 64, origin="test", int_mm=int_mm
    )


def test_kernel_writing_into_a_is_an_error_and_ops_stay_pristine():
    def zeroes_a(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
        out = _good(a, b, sa, sb, out_dtype, bias)
        a.zero_()
        return out

    ops = _ops()
    before = ops.digests()
    a_copy = ops.a.clone()
    run = run_kernel(_spec(zeroes_a), ops)
    assert run.error == "kernel modified operand a in place"
    assert run.manifest["extra"]["modified_operands"] == ["a"]
    assert ops.digests() == before and torch.equal(ops.a, a_copy)  # caller's tensors untouched
    # received_digests: what the runner handed over (before the write), = the reference's
    assert run.manifest["operands_recorded_by"] == "runner"
    assert run.received_digests == before
    # an interface failure: the output is not judged, no other check runs
    assert run.output is None and run.interface == "kernel modified operand a in place"
    cr = evaluate_case(_spec(zeroes_a), ops)
    assert cr.checks["IF"].summary == "interface: kernel modified operand a in place"
    assert {r.verdict for cid, r in cr.checks.items() if cid != "IF"} == {"n/a"}


def test_several_operands_and_sign_of_zero_detected():
    def scribbles(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
        trace.record_operands(a, b, sa, sb, bias)  # recorded before the writes
        out = _good(a, b, sa, sb, out_dtype, bias)
        sb.mul_(2.0)
        bias.neg_()  # +0.0 -> -0.0: equal as numbers, different bits
        return out

    ops = _ops(bias=torch.zeros(3, dtype=torch.bfloat16))
    want = ops.digests()
    run = run_kernel(_spec(scribbles), ops)
    assert run.error == "kernel modified operand scale_b, bias in place"
    assert run.manifest["extra"]["modified_operands"] == ["scale_b", "bias"]
    assert run.manifest["operands_recorded_by"] == "kernel" and run.received_digests == want
    assert int(bits_of(ops.bias).max()) == 0  # still +0.0 in the caller's bias
    # an interface failure: C2 verifies nothing on a run with no valid output
    assert run.output is None and run.interface == run.error
    assert check_operand_sharing(_spec(scribbles), ops, run).verdict == "n/a"


def test_clean_kernel_gets_clones_not_the_callers_tensors():
    seen = {}

    def spy(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
        seen["ptrs"] = [t.data_ptr() for t in (a, b, sa, sb)]
        return _good(a, b, sa, sb, out_dtype, bias)

    ops = _ops()
    run = run_kernel(_spec(spy), ops)
    assert run.error is None and "modified_operands" not in run.manifest["extra"]
    assert not set(seen["ptrs"]) & {t.data_ptr() for t in (ops.a, ops.b, ops.scale_a, ops.scale_b)}
    assert run.received_digests == ops.digests()


def test_int_mm_writing_into_b_is_an_error():
    def int_mm(a, b):
        acc = _acc32(a, b)
        b.fill_(1)
        return acc

    ops = _ops()
    b_copy = ops.b.clone()
    r = run_int_mm(_spec(_good, int_mm=int_mm), ops.a, ops.b)
    assert r.error == "kernel modified operand b in place"
    assert r.manifest["extra"]["modified_operands"] == ["b"]
    assert torch.equal(ops.b, b_copy)
    assert torch.equal(r.acc, _acc32(ops.a, ops.b))  # kept: computed before the write


# --- SystemExit and other BaseExceptions ---


class _Custom(BaseException):
    pass


@pytest.mark.parametrize(
    "exc,line",
    [
        (SystemExit(3), "kernel raised SystemExit: 3"),
        (_Custom("odd"), "kernel raised _Custom: odd"),
        (GeneratorExit(), "kernel raised GeneratorExit: "),
    ],
)
def test_base_exceptions_are_kernel_failures(exc, line):
    def raiser(*args, **kw):
        raise exc

    ops = _ops()
    run = run_kernel(_spec(raiser, int_mm=raiser), ops)
    assert run.output is None and run.error.startswith(line + " (at test_runner_hostile_kernels.py:")
    assert run.manifest["extra"]["exception"] == type(exc).__name__
    acc = run_int_mm(_spec(raiser, int_mm=raiser), ops.a, ops.b)
    assert acc.acc is None and acc.error.startswith(line)
    cr = evaluate_case(_spec(raiser, int_mm=raiser), ops)
    assert cr.checks["CALL"].verdict == "fail" and cr.error.startswith(line)
    assert cr.checks["C8"].verdict == "n/a"  # no output: nothing numeric judged


def test_keyboard_interrupt_still_propagates():
    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_kernel(_spec(interrupted), _ops())
    with pytest.raises(KeyboardInterrupt):
        run_int_mm(_spec(_good, int_mm=interrupted), _ops().a, _ops().b)


def test_cli_check_survives_sys_exit_kernel(tmp_path):
    from conformance.cli import main

    rc = main(
        [
            "check",
            "--kernel",
            "buggy_kernels:exiting_kernel",
            "--out",
            str(tmp_path),
            "--examples",
            "0",
            "--no-model",
            "--no-tile-edges",
            "--no-captures",
            "-q",
        ]
    )
    assert rc == 1  # not conformant; before the fix: SystemExit(3), no report
    reports = sorted(tmp_path.rglob("conformance.*"))
    assert [p.name for p in reports] == ["conformance.json", "conformance.md"]
    doc = json.loads(reports[0].read_text())
    assert "CALL" in doc["overall"]["failed_checks"] and "C8" not in doc["overall"]["failed_checks"]
    assert doc["overall"]["summary"].startswith("NOT conformant: the kernel raised on 22 cases and C9 (first: ")
    errors = {c["error"].split(" (at ")[0] for c in doc["cases"]}
    assert errors == {"kernel raised SystemExit: 3"}


# --- Triton interpreter: IEEE overflow to inf is intended, numpy's warning is not shown ---


@pytest.mark.parametrize("scale,out_dtype", [(1e30, torch.bfloat16), (1.0, torch.float16)])
def test_triton_interpreter_overflow_is_quiet_and_correct(scale, out_dtype):
    pytest.importorskip("triton")
    m = k = n = 16
    ops = GemmOperands(
        torch.full((m, k), 127, dtype=torch.int8),
        torch.full((n, k), 127, dtype=torch.int8),
        torch.full((m,), scale),
        torch.full((n,), scale),
        out_dtype=out_dtype,
    )
    ref = reference_scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, TRITON_STYLE, out_dtype=out_dtype)
    assert bool(torch.isinf(ref).all())  # acc 258064: fp32 product 6.5e65 / fp16 > 65504
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        run = run_kernel(get_kernel("triton"), ops, device="cpu")
    assert run.error is None and run.manifest["path"] == "triton-interpreter"
    assert [str(w.message) for w in rec if issubclass(w.category, RuntimeWarning)] == []
    assert torch.equal(bits_of(run.output), bits_of(ref))
    # the filter was scoped to the interpreter call: numpy overflow warns again here
    with pytest.warns(RuntimeWarning, match="overflow encountered in multiply"):
        np.multiply(np.float32(3e38), np.float32(10.0))


def test_a_meta_output_or_an_unprintable_exception_is_a_kernel_error_not_a_crash():
    """New-user pass 2026-12-01c: both crashed ``int8conf check`` with a torch
    traceback (``.item()`` on a meta tensor; ``str(e)`` raising)."""

    def meta_out(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
        return torch.empty(a.shape[0], b.shape[0], dtype=out_dtype, device="meta")

    class Unprintable(Exception):
        def __str__(self):
            raise ValueError("no")

    def weird(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
        raise Unprintable()

    def spec(fn):
        return spec_from_object(declare(contract="cutlass")(fn), f"m:{fn.__name__}", f"module:m:{fn.__name__}")

    ops = _ops()
    run = run_kernel(spec(meta_out), ops)
    assert run.output is None and run.error == (
        "kernel returned a tensor on device 'meta', expected one on 'cpu' or 'cuda' holding its values"
    )
    run = run_kernel(spec(weird), ops)
    assert run.output is None and run.error.startswith(
        "kernel raised Unprintable: <its message could not be printed: ValueError> (at "
    )
    res = evaluate_case(spec(meta_out), ops)
    assert res.checks["IF"].verdict == "fail" and res.checks["C8"].verdict == "n/a"
