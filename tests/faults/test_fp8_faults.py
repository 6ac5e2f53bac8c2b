"""Faults on FP8 (e4m3) kernels (faults/README.md, "FP8 (e4m3) kernels"): which faults apply, F1-F5 start from the
kernel's own float32 accumulator, F10 narrow_accumulator keeps fewer bits than declared and C11 catches it."""

from __future__ import annotations

import functools

import pytest
import torch
from fp8_kernels import emulated_accumulator, fp8_kernel

from conformance.cases.fp8 import fp8_family_cases
from conformance.checks.fp8_accumulator import check_fp8_accumulator
from conformance.kernels import trace
from conformance.kernels.registry import get_kernel
from conformance.kernels.spec import KernelSpec
from conformance.suite.evaluate import CaseEvaluation
from conformance.suite.plan import mark_ownership_probes
from faults import FaultError, inject, make_injection, parse_injection
from faults.accumulator import EXACT_FP8, KERNEL_UNIT_SCALES, fp8_kernel_accumulator, narrowed_model
from faults.catalogue import faults_for, not_applicable
from faults.describe import fault_rows
from faults.mask import case_key, element_mask
from faults.postprocessing import faulty_epilogue
from faults.truth import ask_ground_truth
from reference.bits import spacing_distance
from reference.contract import TRITON_STYLE
from reference.epilogue import apply_epilogue
from reference.fp8 import E4M3, AccumulatorModel, exact_sum_fp32


def emulated_spec(model: str, name: str = "emu-fp8") -> KernelSpec:
    """An e4m3 KernelSpec whose accumulator obeys ``model`` and declares it (epilogue ``(acc*s_a)*s_w + bias``,
    rounded once: TRITON_STYLE without bias)."""
    return KernelSpec(name, fp8_kernel(model), TRITON_STYLE, operands="e4m3", accumulator=model)


def real_operands(m: int = 6, k: int = 256, n: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=g) * 8).to(E4M3)
    b = (torch.randn(n, k, generator=g) * 0.5).to(E4M3)
    sa = torch.rand(m, generator=g) / 100 + 1e-3
    sb = torch.rand(n, generator=g) / 100 + 1e-3
    return a, b, sa, sb


def test_applicable_faults_per_operand_dtype():
    assert [f.id for f in faults_for("int8")] == [f"F{i}" for i in range(1, 10)]
    assert [f.id for f in faults_for("e4m3")] == ["F1", "F2", "F3", "F4", "F5", "F8", "F9", "F10"]
    for fid in ("F6", "F7"):
        assert not_applicable(fid, "e4m3") and not_applicable(fid, "int8") is None
        with pytest.raises(FaultError, match=f"{fid} .* does not apply to e4m3 kernel 'fp8-cpu'"):
            inject("fp8-cpu", fid)
    with pytest.raises(FaultError, match="F10 narrow_accumulator does not apply to int8 kernel 'cpu'"):
        inject("cpu", "F10")
    assert [r["id"] for r in fault_rows(TRITON_STYLE, "e4m3")][-1] == "F10"


def test_f10_variants_and_names():
    assert make_injection("F10").variant == "d10" and inject("fp8-cpu", "F10").name == "fp8-cpu+F10@all#s0"
    inj = parse_injection("narrow_accumulator.d4:1%:3")
    assert (inj.fault, inj.variant, inj.coverage, inj.seed) == ("F10", "d4", "1%", 3)
    spec = get_kernel("fp8-cpu+F10.d4@1%#s3")
    assert spec.name == "fp8-cpu+F10.d4@1%#s3" and spec.accumulator.label() == "exact"
    for bad in ("F10.d0", "F10.d23", "F10.x"):
        with pytest.raises(FaultError, match="unknown F10 variant"):
            make_injection(bad)


def test_narrowed_model():
    assert narrowed_model("exact", 10) == AccumulatorModel("fp32", 14, "truncate", None)
    assert narrowed_model("fp32", 1) == AccumulatorModel("fp32", 23, "truncate", None)
    assert narrowed_model("fp32 bits=14 truncate promote=128", 4).label() == "fp32 bits=10 truncate promote=128"
    assert narrowed_model("fp32 bits=14 rne promote=128", 20).bits == 2


def test_fp8_accumulator_is_the_kernels_own_and_leaves_no_trace():
    a, b, sa, sb = real_operands()
    spec = emulated_spec("fp32 bits=12 truncate")
    with trace.capture() as t:
        acc, src = fp8_kernel_accumulator(spec, a, b, sa, sb)
    assert src == KERNEL_UNIT_SCALES and t.paths == [] and t.received_digests == {}
    assert torch.equal(acc, emulated_accumulator(a, b, "fp32 bits=12 truncate"))
    assert not torch.equal(acc, exact_sum_fp32(a, b))  # real operands: 12 bits lose something

    def no_float32(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        raise ValueError("bf16 output only")

    bad = KernelSpec("bf16-only", no_float32, TRITON_STYLE, operands="e4m3", accumulator="exact")
    acc, src = fp8_kernel_accumulator(bad, a, b, sa, sb)
    assert src == EXACT_FP8 + " (kernel scaled_mm at unit scales raised ValueError)"
    assert torch.equal(acc, exact_sum_fp32(a, b))


@pytest.mark.parametrize("fault", ["F1", "F2", "F3", "F4", "F5"])
def test_postprocessing_faults_start_from_the_kernels_accumulator(fault):
    a, b, sa, sb = real_operands()
    model = "fp32 bits=12 truncate"
    spec = emulated_spec(model)
    out = inject(spec, fault, "all").scaled_mm(a, b, sa, sb)
    # every element: the faulty epilogue of the kernel's own (12-bit) accumulator, not of the exact sum
    want = faulty_epilogue(emulated_accumulator(a, b, model), sa, sb, TRITON_STYLE, fault)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))


def test_f10_outputs_are_the_declared_epilogue_of_the_narrow_accumulator():
    a, b, sa, sb = real_operands(m=5, k=300, n=7)
    spec = emulated_spec("fp32")
    clean = spec.scaled_mm(a, b, sa, sb)
    for cov in ("one", "1%", "all"):
        faulty = inject(spec, "F10", cov, 2)
        with trace.capture() as t:
            out = faulty.scaled_mm(a, b, sa, sb)
        mask = element_mask(5, 7, case_key(a, b, sa, sb, None), "F10", cov, 2)
        narrow = apply_epilogue(emulated_accumulator(a, b, "fp32 bits=14 truncate"), sa, sb, TRITON_STYLE)
        want = torch.where(mask, narrow, clean)
        assert torch.equal(out.view(torch.int16), want.view(torch.int16))
        assert t.extra["accumulator_source"] == "emulated narrow accumulator 'fp32 bits=14 truncate'"
        assert t.extra["fault_selected"] == int(mask.sum())
    assert int((spacing_distance(inject(spec, "F10", "all").scaled_mm(a, b, sa, sb), clean) > 0).sum()) > 0


@pytest.mark.parametrize(
    "declared, variant, measured",
    [
        ("fp32", "d10", "fp32 bits=14 truncate"),
        ("exact", "d4", "fp32 bits=20 truncate"),
        ("fp32 bits=14 truncate promote=128", "d10", "fp32 bits=4 truncate promote=128"),
    ],
)
def test_f10_is_caught_by_c11_on_an_emulated_fp8_kernel(declared, variant, measured):
    spec = emulated_spec(declared)
    assert check_fp8_accumulator(spec).verdict == "pass"
    r = check_fp8_accumulator(inject(spec, f"F10.{variant}", "all"))
    assert r.verdict == "fail" and r.evidence["measured"] == measured
    assert r.evidence["declared"] == declared and r.evidence["shortfall"]


#: The Hopper-like emulated control kernel of the FP8 suite's tests (14 bits, truncating, promoted every 128).
HOPPER_LIKE_KERNEL = "buggy_fp8_kernels:fp8_emulated_good"


@functools.lru_cache(maxsize=1)
def _safe_cases() -> tuple:
    """Accumulator-safe FP8 cases, C10 probing them as the suite's plan does (the first of each size class)."""
    cases = fp8_family_cases(["small_int", "narrow_span"])[::15] + fp8_family_cases(["scale_order_ties"])
    return tuple(mark_ownership_probes(cases))


def _caught_bit_exactly(kernel: str, fault: str, device=None) -> None:
    """On accumulator-safe cases C4 passes (the declared accumulator provably keeps the exact sum), C8 fails exactly
    where the fault changed an output and counts exactly the elements it changed (0 ulp), C5 likewise under
    power-of-two scales, and C12 leaves these cases to them (n/a)."""
    faulty = inject(get_kernel(kernel), fault, "all")
    cases = _safe_cases()
    changed = 0
    for ops in cases:
        case = CaseEvaluation(faulty, ops, device=device)
        res = case.result(coverage=False)
        gt = ask_ground_truth(faulty, ops, device=device, faulty_run=case.run).get()
        c = res.checks
        assert c["C4"].verdict == "pass" and c["C12"].verdict == "n/a", ops.name
        assert (c["C8"].verdict == "fail") == (gt.changed > 0), ops.name
        if gt.changed:
            assert c["C8"].evidence["n_differ"] == gt.changed and gt.max_spacing >= 1, ops.name
        if ops.scale_mode == "pow2":
            assert (c["C5"].verdict == "fail") == (gt.changed > 0), ops.name
        changed += gt.changed
    assert changed > 0  # every fault changes outputs on some case, and each time C8 names exactly those


@pytest.mark.parametrize("fault", ["F1", "F2", "F3", "F4", "F5"])
def test_postprocessing_faults_are_caught_bit_exactly_on_accumulator_safe_families(fault):
    _caught_bit_exactly(HOPPER_LIKE_KERNEL, fault)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kernel", ["torch-fp8", "triton-fp8"])
@pytest.mark.parametrize("fault", ["F1", "F2", "F3", "F4", "F5"])
def test_postprocessing_faults_on_native_fp8_kernels_are_caught_bit_exactly(kernel, fault):
    _caught_bit_exactly(kernel, fault, "cuda")
