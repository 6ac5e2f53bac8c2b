"""Verdicts that are true (issue 8, deliverable 2): declared int32-overflow
behaviour, bit identity on bits (sign of zero, canonical NaN), dtype errors,
n/a without output, the worst case, per-function digests.

Expected bit patterns are derived by hand in the comments (and, for the
overflow case, from Python integers), never by the code under test.
"""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
from buggy_kernels import (
    bf16_when_fp16,
    const_case,
    good_cutlass,
    saturating_declared,
    saturating_declares_wrap,
    signed_zero_lost,
)

from conformance.checks.compare import compare_bits
from conformance.checks.overflow import declared_accumulator, wrap32
from conformance.checks.result import CheckResult, aggregate
from conformance.kernels.digest import callable_digest
from conformance.kernels.loader import declare, load_module_function, spec_from_object
from conformance.kernels.registry import get_kernel
from conformance.kernels.spec import KernelSpec
from conformance.suite.evaluate import evaluate_case
from reference.bits import bits_of
from reference.contract import CUTLASS_STYLE
from reference.errors import ContractError, KernelLoadError
from reference.operands import GemmOperands

K_OVER = 131_073  # 131,073 * (-128)**2 = 2**31 + 2**14 > INT32_MAX


def _spec(fn, name):
    return spec_from_object(fn, name, f"module:buggy_kernels:{name}")


def _bits(t):
    return [f"0x{int(v):04X}" for v in bits_of(t).reshape(-1)]


# ------------------------------------------------------------ int32 overflow


def test_wrapped_accumulator_is_a_precondition_not_a_fault():
    # M = N = 1, K = 131,073, all -128: exact acc = 2**31 + 2**14 = 2147500032;
    # wrap32 = 2147500032 - 2**32 = -2147467264 = -(2**31 - 2**14), 17 significant
    # bits, exact in float32; * 2**-10 * 2**-20 = -(2 - 2**-16) -> bf16 RNE -2.0 = 0xC000
    ops = const_case(K_OVER)
    assert int(wrap32(torch.tensor([2**31 + 2**14]))[0]) == -2147467264
    for name in ("cpu", "int_mm"):
        cr = evaluate_case(get_kernel(name), ops, device="cpu")
        v = {c: r.verdict for c, r in cr.checks.items()}
        assert v["C6"] == v["C8"] == "pass" and cr.verdict == "pass", (name, v)
        c3 = cr.checks["C3"]
        assert c3.is_precondition_violation and c3.evidence["n_acc_mismatch"] == 0
        assert cr.checks["C8"].evidence["overflow_at_risk"] == 1
        assert cr.checks["C8"].evidence["n_compared"] == 1


def test_saturating_kernel_that_declares_wrap_fails_and_is_diagnosed():
    # float32 output, same operands: wrap -> -(2**31 - 2**14) * 2**-30 = -(2 - 2**-16)
    # = 0xBFFFFF80; exact (an int64 accumulator, also accepted under wrap)
    # (2**31 + 2**14) * 2**-30 = 2 + 2**-16 = 0x40000040; saturated 2**31 - 1 ->
    # float32 RNE 2**31 -> 2.0 = 0x40000000: neither, 64 ulp from the exact one
    ops = dataclasses.replace(const_case(K_OVER), out_dtype=torch.float32)
    cr = evaluate_case(get_kernel("cpu"), ops, device="cpu")
    assert cr.verdict == "pass" and cr.checks["C8"].verdict == "pass"
    exact64 = KernelSpec("exact64", _exact_kernel, CUTLASS_STYLE, source_digest="1" * 64, origin="test")
    assert evaluate_case(exact64, ops, device="cpu").checks["C8"].verdict == "pass"
    cr = evaluate_case(_spec(saturating_declares_wrap, "sat"), ops, device="cpu")
    c8 = cr.checks["C8"]
    assert c8.verdict == "fail" and c8.evidence["worst"]["out_bits"] == "0x40000000"
    assert c8.evidence["worst"]["ref_bits"] == "0x40000040" and c8.evidence["max_ulp"] == 64
    assert c8.evidence["overflow_diagnosis"] == {
        "over_tolerance_at_risk": 1,
        "matches_wrap": 0,
        "matches_saturate": 1,
        "matches_exact_int64": 0,
    }
    c3 = cr.checks["C3"]  # its int_mm saturates: 2147483647 vs the declared -2147467264
    assert c3.is_kernel_failure
    assert c3.evidence["first_acc_mismatch"] == {
        "index": [0, 0],
        "observed": 2**31 - 1,
        "declared": -2147467264,
        "exact": 2**31 + 2**14,
    }


def _exact_kernel(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    from reference.epilogue import reference_scaled_mm  # exact int64 accumulator

    return reference_scaled_mm(a, b, scale_a, scale_b, CUTLASS_STYLE, bias, out_dtype)


def test_saturating_kernel_declared_saturate_passes_and_undefined_is_excluded():
    ops = const_case(K_OVER)
    cr = evaluate_case(_spec(saturating_declared, "satd"), ops, device="cpu")
    assert cr.verdict == "pass" and cr.checks["C8"].verdict == "pass"
    undef = KernelSpec(
        "u", saturating_declared, CUTLASS_STYLE, source_digest="1" * 64, origin="test", overflow="undefined"
    )
    cr = evaluate_case(undef, ops, device="cpu")
    assert cr.checks["C8"].verdict == "n/a" and cr.checks["C8"].evidence["overflow_excluded"] == 1
    assert cr.verdict == "pass"


def test_declared_accumulator_mixed_signs():
    # a = 131,073 x (-128) then 10 x 127; b all -128: positive products sum
    # P = 131,073 * 16384 = 2147500032 > INT32_MAX, negatives Q = 10 * 16256 = 162560,
    # exact = P - Q = 2147337472 (fits). wrap: order-free -> exact; saturate:
    # depends on the order (positives first clamp at INT32_MAX) -> undefined.
    a = torch.tensor([[-128] * K_OVER + [127] * 10], dtype=torch.int8)
    b = torch.full((1, K_OVER + 10), -128, dtype=torch.int8)
    ops = GemmOperands(a, b, torch.ones(1), torch.ones(1))
    exact = torch.tensor([[2147337472]], dtype=torch.int64)
    w = declared_accumulator(ops, exact, "wrap")
    assert w.at_risk.tolist() == [[True]] and w.defined.tolist() == [[True]]
    assert w.acc.tolist() == [[2147337472]]
    s = declared_accumulator(ops, exact, "saturate")
    assert s.defined.tolist() == [[False]] and s.n_undefined == 1
    assert declared_accumulator(ops, exact, "undefined").n_undefined == 1


def test_overflow_declaration_is_validated():
    # a bad declare() is reported when the kernel is loaded (the module still imports)
    clamp = declare(contract="cutlass", overflow="clamp")(lambda *a: None)
    with pytest.raises(KernelLoadError, match="overflow='clamp' is not one of"):
        spec_from_object(clamp, "m:clamp", "test")
    with pytest.raises(ContractError, match="overflow"):
        KernelSpec("x", good_cutlass, CUTLASS_STYLE, overflow="sometimes")
    s = load_module_function("buggy_kernels:good_cutlass?overflow=saturate")
    assert s.overflow == "saturate" and s.manifest()["overflow"] == "saturate"
    assert load_module_function("buggy_kernels:good_cutlass").overflow == "wrap"
    assert get_kernel("cpu").overflow == "wrap"
    for name in ("int_mm", "triton"):  # wrap in int32 on the CPU, no promise on CUDA
        spec = get_kernel(name)
        assert [spec.overflow_on(d) for d in ("cpu", "cuda", "cuda:1", None)] == [
            "wrap",
            "undefined",
            "undefined",
            "wrap",
        ]
        assert spec.manifest()["overflow"] == {"cpu": "wrap", "cuda": "undefined"}
    with pytest.raises(ContractError, match="'clamp' is not one of"):
        KernelSpec("x", good_cutlass, CUTLASS_STYLE, overflow={"cuda": "clamp"})


def test_overflow_declaration_follows_the_device_the_kernel_ran_on():
    # the saturating kernel's output on the K_OVER case (float32: 2**31 - 1 ->
    # 2.0 = 0x40000000) against a declaration {"cpu": wrap, "cuda": undefined}:
    # a CPU run is held to wrap (fails, 64 ulp as above); a CUDA run promises
    # nothing at the one at-risk element (excluded: n/a, never a failure)
    from conformance.checks.output_bits import check_declared_contract
    from conformance.kernels.runner import KernelRun

    ops = dataclasses.replace(const_case(K_OVER), out_dtype=torch.float32)
    spec = KernelSpec(
        "percase",
        saturating_declares_wrap,
        CUTLASS_STYLE,
        source_digest="1" * 64,
        origin="test",
        overflow={"cpu": "wrap", "cuda": "undefined"},
    )
    out = saturating_declares_wrap(ops.a, ops.b, ops.scale_a, ops.scale_b, torch.float32)
    assert _bits(out) == ["0x40000000"]
    on_cpu = check_declared_contract(spec, ops, KernelRun(out, None, {"device": "cpu"}))
    assert on_cpu.verdict == "fail" and on_cpu.evidence["max_ulp"] == 64
    on_cuda = check_declared_contract(spec, ops, KernelRun(out, None, {"device": "cuda"}))
    assert on_cuda.verdict == "n/a" and on_cuda.evidence["overflow_excluded"] == 1
    assert on_cuda.evidence["overflow_behaviour"] == "undefined"


def test_pairwise_expects_identity_only_where_both_overflow_declarations_force_it():
    from conformance.suite.pairwise import expected_agreement

    # power-of-two scales, no bias: every legal contract gives the same bits barring overflow
    ops = dataclasses.replace(const_case(K_OVER), scale_mode="pow2")
    cpu, tri = get_kernel("cpu"), get_kernel("triton")
    assert expected_agreement(cpu, tri, ops, "cpu", "cpu")[0] is True  # wrap and wrap
    expect, why = expected_agreement(cpu, tri, ops, "cpu", "cuda")
    assert expect is False and why == (
        "an accumulator can leave int32 at 1 elements and the "
        "declared overflow behaviours are wrap (cpu) and "
        "undefined (triton)"
    )
    small = dataclasses.replace(
        const_case(16), scale_mode="pow2"
    )  # no element can leave int32: the devices do not matter
    assert expected_agreement(cpu, tri, small, "cpu", "cuda")[0] is True


# ------------------------------------------------------------ bits, not values


def _zero_case():
    # acc = 1*0 + 0*1 = 0; s_a = -1.0: out = (0 * 1.0) * -1.0 = -0.0 -> bf16 0x8000
    a = torch.tensor([[1, 0]], dtype=torch.int8)
    b = torch.tensor([[0, 1]], dtype=torch.int8)
    return GemmOperands(a, b, torch.tensor([-1.0]), torch.tensor([1.0]), name="neg-zero")


def test_lost_sign_of_zero_fails_bit_identity_as_its_own_category():
    ops = _zero_case()
    good = evaluate_case(_spec(good_cutlass, "good"), ops, device="cpu")
    assert good.verdict == "pass"
    cr = evaluate_case(_spec(signed_zero_lost, "sz"), ops, device="cpu")
    c8 = cr.checks["C8"]
    assert c8.verdict == "fail" and c8.evidence["n_signed_zero"] == 1
    assert c8.evidence["max_ulp"] == 0  # same value, different bits
    assert (c8.evidence["worst"]["out_bits"], c8.evidence["worst"]["ref_bits"]) == ("0x0000", "0x8000")
    assert c8.evidence["worst"]["kind"] == "signed zero" and "sign of zero" in c8.summary
    c6 = cr.checks["C6"]  # 1-spacing tolerance: within, but counted
    assert c6.verdict == "pass" and c6.evidence["n_signed_zero"] == 1


def test_nan_payloads_are_canonical_and_signed_zero_counted():
    # bf16 0x7FC0 (qNaN) vs 0x7FC1 (NaN, other payload) vs 0xFFC0 (-qNaN): all equal
    a = torch.tensor([0x7FC0, 0x0000, 0x3F80], dtype=torch.int16).view(torch.bfloat16)
    b = torch.tensor([0x7FC1, 0x0000, 0x3F80], dtype=torch.int16).view(torch.bfloat16)
    c = torch.tensor([-64, -32768, 0x3F81], dtype=torch.int16).view(torch.bfloat16)  # 0xFFC0, 0x8000
    n, ev = compare_bits(a.reshape(1, 3), b.reshape(1, 3), 0)
    assert n == 0 and ev["n_bits_differ"] == 0
    n, ev = compare_bits(a.reshape(1, 3), c.reshape(1, 3), 0)
    assert n == 2 and ev["n_signed_zero"] == 1 and ev["max_ulp"] == 1
    assert _bits(c) == ["0xFFC0", "0x8000", "0x3F81"]


def test_wrong_output_dtype_is_an_interface_failure_not_a_spacing_failure():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (3, 16), generator=g, dtype=torch.int16).to(torch.int8)
    ops = GemmOperands(
        a, a.clone(), torch.full((3,), 0.01), torch.full((3,), 0.02), out_dtype=torch.float16, name="fp16"
    )
    cr = evaluate_case(_spec(bf16_when_fp16, "bf16fp16"), ops, device="cpu")
    assert cr.interface == "kernel returned dtype torch.bfloat16, expected torch.float16"
    assert [r.check_id for r in cr.kernel_failures] == ["IF"]
    # no valid output: no other check certifies or fails anything
    assert {r.verdict for cid, r in cr.checks.items() if cid != "IF"} == {"n/a"}


# ------------------------------------------------------------ aggregation, digests


def test_worst_case_is_the_worst_not_the_first():
    def c3(mx, kind="precondition"):
        return CheckResult(
            "C3", "int32_headroom", "fail", f"{mx}", {"failure_kind": kind, "exact_max_abs": mx, "bound_tight_max": mx}
        )

    agg = aggregate("C3", [("a", c3(2**31)), ("b", c3(2**33)), ("c", c3(2**32))])
    assert agg.evidence["worst_case"]["case"] == "b"
    c4 = [
        (n, CheckResult("C4", "fp32_exact_accumulator", "pass", "", {"max_abs": v}))
        for n, v in (("x", 5), ("y", 900), ("z", 7))
    ]
    assert aggregate("C4", c4).evidence["worst_case"]["case"] == "y"
    u = [
        (n, CheckResult("C8", "declared_contract", "fail", "", {"max_ulp": u, "n_bits_differ": d}))
        for n, u, d in (("p", 0, 3), ("q", 2, 1), ("r", 0, 9))
    ]
    assert aggregate("C8", u).evidence["worst_case"]["case"] == "q"


def test_three_kernels_in_one_module_have_three_digests(tmp_path):
    mod = types.ModuleType("three_kernels_mod")
    src = tmp_path / "three_kernels_mod.py"
    src.write_text(
        "def k1(a, b, sa, sb, out_dtype=None, bias=None):\n    return None\n\n"
        "def k2(a, b, sa, sb, out_dtype=None, bias=None):\n    return None\n\n"
        "def k3(a, b, sa, sb, out_dtype=None, bias=None):\n    return None\n"
    )
    code = compile(src.read_text(), str(src), "exec")
    exec(code, mod.__dict__)
    for f in ("k1", "k2", "k3"):
        mod.__dict__[f].__module__ = "three_kernels_mod"
    d = {callable_digest(mod.__dict__[f]) for f in ("k1", "k2", "k3")}
    assert len(d) == 3
    assert callable_digest(mod.k1) == callable_digest(mod.k1)


def test_failing_kernel_gets_na_not_pass_for_c1_c2():
    def boom(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        raise RuntimeError("no")

    spec = KernelSpec("boom", boom, CUTLASS_STYLE, source_digest="1" * 64, origin="test")
    cr = evaluate_case(spec, _zero_case(), device="cpu")
    assert cr.checks["C1"].verdict == cr.checks["C2"].verdict == "n/a"
    # the raise fails the kernel's call (CALL), not the output checks, which had no output to judge
    assert cr.checks["CALL"].verdict == "fail" and cr.checks["CALL"].evidence["failure_kind"] == "raised"
    assert cr.checks["C8"].verdict == "n/a"
    with pytest.raises(KernelLoadError):
        load_module_function("buggy_kernels:good_cutlass?overflow=wraps")


def test_may_leave_int32_boundary_is_k_131072():
    """(-128)^2 = 16384 per product: 131071 products reach at most 2^31 - 16384,
    131072 all-(-128) products reach exactly 2^31, one past int32."""
    from conformance.checks.overflow import may_leave_int32

    assert not may_leave_int32(131071)
    assert may_leave_int32(131072)
    assert 131072 * 16384 == 2**31


def test_a_wraps_wrapper_is_digested_with_what_it_wraps(tmp_path):
    """New-user pass 2026-12-01e: a ``functools.wraps`` wrapper was digested as the
    function it wraps, so editing the wrapper (x 1.5 on the output) left C1's
    digest, the study's and the sweep's store identity unchanged."""
    import hashlib
    import importlib.util

    def load(src: str, name: str):
        f = tmp_path / f"{name}.py"
        f.write_text(src)
        spec = importlib.util.spec_from_file_location(name, f)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod, f

    base, bf = load("def inner(a, b):\n    return a\n", "w_inner")
    src = (
        "import functools\nimport w_inner\n\n@functools.wraps(w_inner.inner)\n"
        "def fn(a, b):\n    return w_inner.inner(a, b) * {}\n"
    )
    import sys

    sys.modules["w_inner"] = base
    try:
        one, f1 = load(src.format(1.0), "w_outer1")
        two, _ = load(src.format(1.5), "w_outer2")
        assert callable_digest(one.fn) != callable_digest(two.fn)

        # what it is, written out: SHA-256 over the chain's single digests (the
        # wrapper's own file, under the name functools.wraps copied onto it)
        def single(path, qual):
            return hashlib.sha256(path.read_bytes() + b"\0" + qual.encode()).hexdigest()

        want = hashlib.sha256(",".join([single(f1, "w_inner.inner"), single(bf, "w_inner.inner")]).encode()).hexdigest()
        assert callable_digest(one.fn) == want
        # a plain function keeps the single-level digest
        assert callable_digest(base.inner) == single(bf, "w_inner.inner")
    finally:
        sys.modules.pop("w_inner", None)
