"""FP8 kernels through the suite's front doors (DESIGN.md 3b): the plan for an e4m3 kernel, ``int8conf check`` and
``pytest --kernel`` with no new flags, reports naming the declared and measured accumulator, and one buggy kernel
per FP8 trigger (tests/helpers/buggy_fp8_kernels.py) failed by the default suite.

The default suite fails a kernel when any of its cases or run-level checks fails, so a kernel failed on cases of the
default FP8 plan (taken from ``default_cases(operands="e4m3")`` itself) is failed by ``int8conf check``; two tests
run the whole default check in process (fp8-cpu passes, a saturating kernel fails)."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from buggy_fp8_kernels import HOPPER_LIKE, PROMOTE_180

from conformance.cases.fp8 import PAPER_NOT_AFFORDED
from conformance.checks.fp8_accumulator import allowed_values, check_fp8_accumulator, regime_rows
from conformance.checks.result import bound_line
from conformance.cli import main
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import run_kernel
from conformance.suite.plan import CHECK, PAIR, PROPERTY, default_cases, suite_steps
from conformance.suite.run import run_conformance
from reference.contract import CUTLASS_STYLE
from reference.errors import OperandError
from reference.fp8 import E4M3, parse_accumulator, reference_fp8_scaled_mm

TESTS = Path(__file__).resolve().parents[1] / "helpers"

#: the serving checks' plan steps (issue 45), after C9 / C11
SERVING_STEPS = ("C13-graph_replay", "C14-compile", "C15-streams_devices")


@functools.lru_cache(maxsize=1)
def _default() -> tuple:
    cases, cap = default_cases(operands="e4m3")
    return tuple(cases), cap


def _cases(family=None, variants=(), captures=()) -> list:
    """Cases of the default FP8 plan: a family (optionally some variants), and block 0's captured layers ``captures``
    (``self_attn.q_proj`` ...) in both activation scale modes."""
    out = []
    for c in _default()[0]:
        meta = c.meta or {}
        if family and meta.get("family") == family and (not variants or meta.get("variant") in variants):
            out.append(c)
        elif meta.get("source") == "capture" and c.name in {f"model.layers.0.{x}" for x in captures}:
            out.append(c)
    assert out
    return out


def test_the_plan_of_an_e4m3_kernel():
    cases, cap = _default()
    fams = {c.meta.get("family") for c in cases if c.meta.get("source") == "family"}
    assert fams == {
        "small_int",
        "narrow_span",
        "overflow_inf",
        "scale_order_ties",
        "special_values",
        "signed_zero",
        "subnormal",
        "scale_values",
        "paper_layers",
    } and all(c.a.dtype == E4M3 for c in cases)
    captured = [c for c in cases if c.meta.get("source") == "capture"]
    assert cap.available and len(captured) == 56 and {c.scale_mode for c in captured} == {"fp8-token", "fp8-tensor"}
    steps = suite_steps(cases, 25, True, True, "e4m3")
    assert not any(s.kind == PROPERTY for s in steps) and sum(s.kind == PAIR for s in steps) == len(cases)
    assert [s.name for s in steps if s.kind == CHECK] == [
        "C9-batch_invariance",
        "C11-fp8_accumulator",
        "C7-token_flip",
        "E1-engine_hash",
        *SERVING_STEPS,
    ]
    int8 = [s for s in suite_steps(cases[:2], 25, True, False) if s.kind != "case"]
    assert [s.name for s in int8] == [
        "property",
        "C9-batch_invariance",
        "C7-token_flip",
        "E1-engine_hash",
        *SERVING_STEPS,
    ]


def test_default_fp8_cases_hold_subnormal_operands_and_reach_inf():
    cases = _default()[0]
    bytes_ = [x.view(torch.uint8) for c in cases if c.meta.get("family") == "narrow_span" for x in (c.a, c.b)]
    subnormal = sum(int((((u & 0x78) == 0) & ((u & 0x07) != 0)).sum()) for u in bytes_)
    assert subnormal > 1000
    for c in _cases("overflow_inf"):
        ref = reference_fp8_scaled_mm(c.a, c.b, c.scale_a, c.scale_b, CUTLASS_STYLE, c.bias, c.out_dtype)
        big = torch.finfo(c.out_dtype).max
        assert bool(torch.isinf(ref).any()) and bool((ref.abs() == big).any() or (ref.abs() > big / 2).any()), c.name


def test_the_runner_takes_the_operands_a_kernel_declares():
    fp8_ops, cpu, fp8 = _cases("small_int", ("k_tail",))[0], get_kernel("cpu"), get_kernel("fp8-cpu")
    assert run_kernel(fp8, fp8_ops).error is None
    with pytest.raises(OperandError, match="dtype torch.float8_e4m3fn; expected torch.int8"):
        run_kernel(cpu, fp8_ops)


def test_int8conf_check_passes_fp8_cpu_on_the_default_suite(tmp_path, capsys):
    assert main(["check", "--kernel", "fp8-cpu", "--out", str(tmp_path), "-q"]) == 0
    doc = json.loads((tmp_path / "fp8-cpu" / "conformance.json").read_text())
    checks = {c["check_id"]: c for c in doc["checks"]}
    assert doc["overall"]["verdict"] == "pass" and len(doc["cases"]) == len(_default()[0])
    assert [c for c, v in checks.items() if v["verdict"] == "pass"] == [
        "C1",
        "C2",
        "C4",
        "C5",
        "C6",
        "C8",
        "C9",
        "C10",
        "C11",
        "C12",
    ]
    assert checks["C3"]["verdict"] == checks["C7"]["verdict"] == checks["E1"]["verdict"] == "n/a"
    assert checks["C7"]["summary"].startswith("int8-engine check") and doc["property_tests"] is None
    fp8 = doc["fp8"]
    assert fp8["declared"] == fp8["measured"] == "exact" and fp8["c11"]["verdict"] == "pass"
    assert fp8["c12_bound"]["max_abs_err"] == 0.0 and fp8["c12_bound"]["n_bound_over"] == 0
    out = capsys.readouterr().out
    assert "accumulator declared: 'exact'" in out and "accumulator measured (C11): 'exact' - pass" in out
    assert "C12 fp8_error_bound (pass): max |err| 0 beside its bound 0" in out
    assert fp8["not_afforded"] == PAPER_NOT_AFFORDED and f"C12 regimes not afforded here: {PAPER_NOT_AFFORDED}" in out
    md = (tmp_path / "fp8-cpu" / "conformance.md").read_text()
    assert "## FP8 accumulator" in md and "accumulator measured (C11): 'exact'" in md


def test_an_emulated_kernel_declaring_what_it_does_passes_with_the_fp8_cpu_pairwise():
    """The Hopper-like emulated kernel (14 bits, truncation, promotion every 128) on the default FP8 families (the
    paper-size layers included) and one captured layer (not all captures: the C12 bound holds for every kernel obeying the model); pairwise against
    fp8-cpu: identical where both accumulators are provably exact, free elsewhere."""
    spec = get_kernel("buggy_fp8_kernels:fp8_emulated_good")
    cases = [c for c in _default()[0] if c.meta.get("source") == "family"]
    cases += _cases(captures=("mlp.down_proj",))
    res = run_conformance(spec, "fp8-cpu", cases=cases, property_examples=0, model_checks=False)
    assert res.verdict == "pass", res.overall["summary"]
    assert res.fp8["declared"] == res.fp8["measured"] == HOPPER_LIKE
    b = res.fp8["c12_bound"]
    assert 0 < b["max_abs_err"] <= b["bound_at_max_err"] and b["max_ratio"] <= 1 and b["n_bound_over"] == 0
    counts = res.pairwise["counts"]
    paper = sum(c.meta.get("family") == "paper_layers" for c in cases)  # real operands, as the captures
    assert counts.get("differ-unexpected", 0) == 0 and counts["identical"] >= len(cases) - 4 - paper
    free = [p for p in res.pairwise["per_case"] if not p["expected_identical"]]
    assert free and all("not provably exact" in p["reason"] for p in free)


#: buggy kernel -> (default-plan cases that reach its trigger, the failed checks)
BUGS = {
    "fp8_ignores_scale_b": (dict(family="small_int", variants=("k_tail", "k_515")), ["C6", "C5", "C8"]),
    # scale_a[n mod M]: a row's bits depend on M too (C9)
    "fp8_scale_axis": (dict(family="small_int", variants=("k_tail", "prefill")), ["C6", "C5", "C8", "C9"]),
    "fp8_narrow_accumulator": (dict(captures=("self_attn.q_proj",)), ["C11", "C12"]),
    "fp8_bias_after_round": (dict(family="small_int", variants=("k_515", "prefill")), ["C6", "C5", "C8"]),
    "fp8_saturate_to_finite": (dict(family="overflow_inf"), ["C5", "C8"]),
    "fp8_scale_order": (dict(family="scale_order_ties"), ["C8"]),  # within one spacing: C6 holds
    "fp8_subnormal_flush": (dict(family="narrow_span", variants=("sparse_deep",)), ["C6", "C5", "C8", "C11"]),
    "fp8_ignores_0d_scale_a": (dict(family="small_int", variants=("scale_a_0d",)), ["C6", "C5", "C8"]),
    # row 0's scale for every row: a row's bits depend on the batch (C9)
    "fp8_column_scale_a_first_row": (dict(family="small_int", variants=("scales_column",)), ["C6", "C5", "C8", "C9"]),
    "fp8_ignores_one_element_scale_b": (dict(family="small_int", variants=("scale_b_1",)), ["C6", "C5", "C8"]),
    "fp8_scale_order_above_m64": (dict(family="scale_order_ties", variants=("ties_prefill",)), ["C8"]),
    "fp8_scale_order_fp32_output": (dict(family="scale_order_ties"), ["C8"]),
    "fp8_n_tail_tile_scale_shift": (dict(family="small_int", variants=("wide_n_tail",)), ["C6", "C5", "C8"]),
    "fp8_bias_after_round_wide_n": (dict(family="small_int", variants=("wide_n_tail",)), ["C6", "C5", "C8"]),
    # the M = 1 path only: a row's bits alone differ from its bits in a batch (C9)
    "fp8_decode_ignores_0d_scale_a": (
        dict(family="small_int", variants=("decode_scale_a_0d",)),
        ["C6", "C5", "C8", "C9"],
    ),
    "fp8_abs_scale_b": (dict(family="small_int", variants=("signed_zero_scales",)), ["C6", "C5", "C8"]),
    "fp8_zero_scale_means_one": (dict(family="small_int", variants=("signed_zero_scales",)), ["C6", "C5", "C8"]),
    "fp8_column_major_b_wide_bias_after_round": (
        dict(family="small_int", variants=("b_transposed_wide",)),
        ["C6", "C5", "C8"],
    ),
    "fp8_scale_order_above_n256": (dict(family="scale_order_ties", variants=("ties_wide",)), ["C8"]),
    # issue 41: special e4m3 values under one scale form, N past 32,768, padded column-major b
    "fp8_negative_zero_nan_scale_b_1": (dict(family="special_values", variants=("scale_b_1",)), ["C6", "C8"]),
    "fp8_subnormal_flush_column_scales": (
        dict(family="special_values", variants=("scales_column",)),
        ["C5", "C6", "C8"],
    ),
    "fp8_wide_n_scale_wrap": (dict(family="small_int", variants=("wide_n_32k",)), ["C6", "C8"]),
    "fp8_padded_column_major_b": (dict(family="small_int", variants=("b_transposed_padded",)), ["C6", "C8"]),
}


@pytest.mark.parametrize("kernel", sorted(BUGS))
def test_buggy_fp8_kernel_fails_the_default_suite(kernel):
    where, failed = BUGS[kernel]
    spec = get_kernel(f"buggy_fp8_kernels:{kernel}")
    res = run_conformance(spec, cases=_cases(**where), property_examples=0, model_checks=False)
    assert res.verdict == "fail" and sorted(res.overall["failed_checks"]) == sorted(failed), res.overall
    if "C12" in failed:
        b = res.check("C12").evidence["bound"]
        assert b["n_bound_over"] > 0 and b["max_ratio"] > 1


#: The new-user trial of issue 41 (epilogue value classes, layouts at prefill M, bias values at wide N): kernel ->
#: (cases of the default FP8 plan, the checks failed, a case C8 fails).
VALUE_CLASS_BUGS = {
    "fp8_per_tensor_satfinite": (
        dict(family="overflow_inf", variants=("boundary_scale_a_0d", "boundary_scale_b_1")),
        ["C8"],
        "fp8/overflow_inf/boundary_scale_a_0d-real-fp16",
    ),
    "fp8_fp32_store_drops_zero_sign": (dict(family="signed_zero"), ["C5", "C8"], "fp8/signed_zero/zeros-real-fp32"),
    "fp8_prefill_flushes_subnormal_outputs": (
        dict(family="subnormal", variants=("spread_prefill",)),
        ["C6", "C8", "C9"],
        "fp8/subnormal/spread_prefill-real-fp16",
    ),
    "fp8_prefill_strided_scale_a_dense": (
        dict(family="small_int", variants=("prefill_scales_strided", "prefill_all")),
        ["C5", "C6", "C8", "C9"],
        "fp8/small_int/prefill_all-real-bf16",
    ),
    "fp8_wide_n_bias_via_fp16": (
        dict(family="small_int", variants=("bias_values_wide", "bias_values_32k")),
        ["C6", "C8"],
        "fp8/small_int/bias_values_32k-real-bf16",
    ),
    # a later new user's kernels (2026-12-07): each passed the plan before its value class met its scale form / bias
    "fp8_satfinite_0d_scale_b": (
        dict(family="overflow_inf", variants=("boundary_scale_b_0d",)),
        ["C8"],
        "fp8/overflow_inf/boundary_scale_b_0d-real-bf16",
    ),
    "fp8_satfinite_with_bias": (
        dict(family="overflow_inf", variants=("boundary_bias",)),
        ["C8"],
        "fp8/overflow_inf/boundary_bias-real-fp16",
    ),
    "fp8_zero_sign_0d_scale_b": (
        dict(family="signed_zero", variants=("zeros_scale_b_0d",)),
        ["C8"],
        "fp8/signed_zero/zeros_scale_b_0d-real-bf16",
    ),
    "fp8_scales_daz": (
        dict(family="scale_values"),
        ["C5", "C6", "C8"],
        "fp8/scale_values/subnormal_token_m1-real-bf16",
    ),
    "fp8_zero_scale_positive_zero": (dict(family="scale_values"), ["C8"], "fp8/scale_values/zero_scales-real-fp16"),
    "fp8_fused_uniform_scale_a": (
        dict(family="scale_order_ties", variants=("ties_uniform_a",)),
        ["C8", "C9"],
        "fp8/scale_order_ties/ties_uniform_a-real-bf16",
    ),
}


@pytest.mark.parametrize("kernel", sorted(VALUE_CLASS_BUGS))
def test_an_epilogue_value_or_prefill_layout_bug_fails_the_default_suite(kernel):
    """Each bug sits on one path (a scale form, the float32 store, prefill M, wide N) and one value class (past the
    output's range, signed zeros, subnormal outputs, a bias whose bits change through another 16-bit format) or
    layout (strided scales at M >= 128): the default FP8 plan reaches it."""
    where, failed, case = VALUE_CLASS_BUGS[kernel]
    spec = get_kernel(f"buggy_fp8_kernels:{kernel}")
    res = run_conformance(spec, cases=_cases(**where), property_examples=0, model_checks=False)
    assert res.verdict == "fail" and sorted(res.overall["failed_checks"]) == sorted(failed), res.overall
    assert case in res.check("C8").evidence["failed_cases"], res.check("C8").evidence["failed_cases"]


def test_int8conf_check_fails_a_saturating_fp8_kernel_on_the_default_suite(tmp_path, capsys):
    assert main(["check", "--kernel", "buggy_fp8_kernels:fp8_saturate_to_finite", "--out", str(tmp_path), "-q"]) == 1
    doc = json.loads((tmp_path / "fp8_saturate_to_finite" / "conformance.json").read_text())
    assert doc["overall"]["failed_checks"] == ["C5", "C8"]
    assert {c["case"].split("/")[1] for c in doc["cases"] if c["verdict"] == "fail"} == {"overflow_inf"}


def test_pytest_kernel_takes_an_fp8_kernel(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = ["--kernel=fp8-cpu", "--kernel=buggy_fp8_kernels:fp8_saturate_to_finite", "-k", "overflow_inf or C11"]
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, f"--int8conf-reports={tmp_path}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1, r.stdout[-2000:]
    n = len(_cases("overflow_inf"))  # every overflow case fails the saturating kernel; both kernels pass C11
    assert f"{n} failed, {n + 2} passed" in r.stdout.splitlines()[-1], r.stdout[-1000:]
    good = json.loads((tmp_path / "fp8-cpu" / "conformance.json").read_text())
    assert good["overall"]["verdict"] == "pass" and good["fp8"]["measured"] == "exact"
    assert len(good["cases"]) == n and good["partial"]["partial"]


def test_triton_fp8_under_the_interpreter_keeps_its_cpu_declaration():
    """On the CPU the Triton interpreter computes the e4m3 ``tl.dot`` in numpy float32 (exact products, float32
    sums): not an exact accumulator, and triton-fp8 declares ``fp32`` there. C11 measures exactly that, and on the
    accumulator-safe cases (exact at 24 bits) its fused epilogue is judged bit-exactly; the Hopper declaration
    (``fp32 bits=14 truncate promote=128``) is for CUDA and is checked natively (``pytest -m cuda`` elsewhere)."""
    pytest.importorskip("triton")
    spec = get_kernel("triton-fp8")
    cases = _cases("narrow_span", ("prefill", "all_layouts")) + _cases("overflow_inf")
    cases += _cases(captures=("self_attn.v_proj",))
    res = run_conformance(spec, cases=cases, property_examples=0, model_checks=False, device="cpu")
    assert res.verdict == "pass", res.overall["summary"]
    assert res.fp8["c11_declared"] == res.fp8["measured"] == "fp32" and res.environment["execution"] == "interpreter"
    assert res.check("C8").evidence["cases"]["pass"] == len(cases) - 2 and res.check("C12").verdict == "pass"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kernel", ["fp8-cpu", "torch-fp8", "triton-fp8"])
def test_fp8_kernels_pass_the_default_suite_on_cuda(tmp_path, kernel):
    """On CUDA (sm_89+ for torch-fp8 / triton-fp8): the whole default FP8 check under each kernel's CUDA
    declaration, references on the device for the large cases; C11 reports the measured model."""
    assert main(["check", "--kernel", kernel, "--device", "cuda", "--out", str(tmp_path), "-q"]) == 0
    doc = json.loads((tmp_path / kernel / "conformance.json").read_text())
    assert doc["overall"]["verdict"] == "pass" and doc["fp8"]["measured"] and doc["fp8"]["c11"]["verdict"] == "pass"
    assert doc["environment"]["devices_used"] == ["cuda"] and doc["fp8"]["c12_bound"]["n_bound_over"] == 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_torchao_fp8_fails_only_on_a_padded_activation_row_stride(tmp_path):
    """torchao's Float8Tensor linear hands a row-major activation to torch._scaled_mm as it is; with a row stride
    that is not a multiple of 16 cuBLASLt raises CUBLAS_STATUS_NOT_SUPPORTED (seen on the H200, torchao 0.18.0,
    torch 2.11). Every other case it accepts passes bit-exactly; C11 measures its declared (torchao-default fast)
    accumulator and the captures stay inside C12's bound."""
    pytest.importorskip("torchao")
    assert main(["check", "--kernel", "torchao-fp8", "--device", "cuda", "--out", str(tmp_path), "-q"]) == 1
    doc = json.loads((tmp_path / "torchao-fp8" / "conformance.json").read_text())
    failed = [c for c in doc["cases"] if c["verdict"] == "fail"]
    assert failed and all(("a_padded" in c["case"] or "all_layouts" in c["case"]) for c in failed)
    assert all("CUBLAS_STATUS_NOT_SUPPORTED" in c["checks"]["C8"]["summary"] for c in failed)
    assert set(doc["overall"]["failed_checks"]) <= {"C5", "C6", "C8"}
    assert doc["fp8"]["c11"]["verdict"] == "pass" and doc["fp8"]["c12_bound"]["n_bound_over"] == 0


def test_int8conf_check_reports_a_kernel_outside_a_zero_width_bound(tmp_path):
    """An exact-declared kernel that ignores a scale leaves C12's zero-width bound on the captures (ratio inf): the
    whole default check fails it with exit 1 and prints C12's line (found by a new user: the line crashed)."""
    assert main(["check", "--kernel", "buggy_fp8_kernels:fp8_ignores_scale_b", "--out", str(tmp_path), "-q"]) == 1
    doc = json.loads((tmp_path / "fp8_ignores_scale_b" / "conformance.json").read_text())
    assert "C12" in doc["overall"]["failed_checks"] and doc["fp8"]["c12_bound"]["n_bound_over"] > 0
    line = bound_line(doc["fp8"]["c12_bound"])  # the JSON round trip keeps inf as text
    assert (
        "ratio inf" in line
        and "C12 fp8_error_bound (fail)" in (tmp_path / "fp8_ignores_scale_b" / "conformance.md").read_text()
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA-only kernel runs here")
def test_a_cuda_only_fp8_kernel_here_says_its_cases_did_not_run():
    """On a machine without CUDA the e4m3 checks' n/a reason is that the case ran nowhere, not a missing declaration
    (found by a new-user trial with torchao-fp8 on a CPU machine)."""
    cpu = get_kernel("fp8-cpu")
    spec = dataclasses.replace(cpu, name="cuda-only-fp8", devices=("cuda",), accumulator={"cuda": "exact"})
    res = run_conformance(spec, cases=_cases("small_int", ("k_tail",)), property_examples=0, model_checks=False)
    assert res.verdict == "not run"
    for cid in ("C4", "C5", "C6", "C8"):
        assert "did not run on any device here" in res.check(cid).summary, (cid, res.check(cid).summary)
    assert "none available here" in res.check("C12").summary


#: accumulator bug -> what the default suite's C11 says (the regime whose rows it fails, or the measured shortfall)
ACCUMULATOR_BUGS = {
    "fp8_k_tail_narrow_accumulator": "regime k_tail (M=16, K=1104, N=16)",
    "fp8_decode_fp32_at_large_k": "regime decode (M=16, K=8272, N=16)",
    "fp8_wide_n_narrow_accumulator": "regime wide_n (M=8, K=144, N=65536)",
    "fp8_promotion_180": "promotes every 130 products, declared every 128",
    "fp8_promotion_180_decode": "regime k_tail (M=16, K=1104, N=16): row 'promotion 129 + k=126,129'",
}


@pytest.mark.parametrize("kernel", sorted(ACCUMULATOR_BUGS))
def test_an_accumulator_wrong_at_one_regime_fails_c11(kernel):
    """The default suite's C11 (``check_fp8_accumulator`` with its defaults, as ``run_fp8_accumulator``) fails an
    accumulator that misbehaves only on a K tail, only on the decode path at large K, only at N >= 65,536, or
    promotes 1.4x less often than declared; the other checks see nothing on the plan's accumulator-safe cases."""
    r = check_fp8_accumulator(get_kernel(f"buggy_fp8_kernels:{kernel}"))
    assert r.verdict == "fail" and ACCUMULATOR_BUGS[kernel] in r.summary, r.summary


def test_c11_reads_the_accumulator_through_a_declared_bf16_step():
    """A correct kernel (exact accumulator, a bf16 step in its declared epilogue) passes C11: the rows the bf16
    step hides are not measured; C8 judges its declared epilogue bit-exactly (C5 / C6 compare with the
    interchangeable reference, which the declaration is not)."""
    spec = get_kernel("buggy_fp8_kernels:fp8_exact_bf16_step")
    res = run_conformance(spec, cases=_cases("small_int", ("k_tail",)), property_examples=0, model_checks=False)
    c11 = res.check("C11")
    assert c11.verdict == "pass" and c11.evidence["measured"] == "exact", c11.summary
    assert c11.evidence["hidden_by_epilogue"] > 0 and res.check("C8").verdict == "pass"
    assert sorted(res.overall["failed_checks"]) == ["C5", "C6"]


def test_c11_regime_rows_exact_where_fixed_and_bounded_elsewhere():
    """Under HOPPER_LIKE a row of B - 1 bits is fixed for every order; a rounding row at B is not (a split may
    keep it exactly): two allowed values, the truncated and the exact one."""
    model = parse_accumulator(HOPPER_LIKE)
    rows = regime_rows(model, 1104)
    fixed = [p for p in rows if p.kind == "bits"]
    assert fixed and all(len(allowed_values(p, model)) == 1 for p in fixed)
    rnd = next(p for p in rows if p.kind == "rounding" and p.sign > 0)
    big, small = rnd.products[0][1], rnd.products[1][1]
    assert allowed_values(rnd, model) == [big, big + small]
    assert allowed_values(next(p for p in rows if p.kind == "promotion"), model) == [2.0**16 + 2.0**-7]
    assert allowed_values(next(p for p in rows if p.kind == "promotion"), parse_accumulator(PROMOTE_180)) == [
        2.0**16,
        2.0**16 + 2.0**-7,
    ]
