"""One buggy kernel per trigger condition of the case families (issue 8,
tests/helpers/buggy_kernels.py), each failed by the default suite, while the
built-ins pass every family case.

The default suite's verdict fails when any of its cases fails, and every
family is in the default suite (``conformance.suite.run.default_cases``), so a
kernel failed on its family is failed by ``int8conf check``: most tests run
the family that reaches the bug (the whole default suite costs ~20-40 s per
kernel on 2 cores); one test runs ``int8conf check --no-model`` in process on
the cases of its default plan where the bug can show, and the cases beside them
it must pass (captures, the property test and the plan's other cases left out
for time: they only add cases, so they cannot turn the FAIL into a PASS).
"""

from __future__ import annotations

import functools
import json
import warnings
from collections import Counter

import pytest

from conformance.cases import case_id
from conformance.cases.families import family_cases
from conformance.cli import main
from conformance.kernels.registry import get_kernel
from conformance.suite.evaluate import evaluate_case
from conformance.suite.run import run_conformance
from conformance.suite.setup import CaseSource, RunCases


@functools.lru_cache(maxsize=None)
def _fam(name: str) -> tuple:
    return tuple(family_cases([name]))


#: buggy kernel -> (its family, failing check that must fire, cases of the family it fails)
BUGS = {
    "fp32_accumulator": ("partial_sums", "C8", 12),
    "subnormal_ftz": ("subnormal", "C8", 6),
    "k_tail_dropped": ("k_residues", "C8", 131),  # K % 32 == 0 (4 of 135) are fine
    "k_padded_with_ones": ("k_residues", "C8", 127),  # K % 16 != 0 (8 of 135 are fine)
    "pair_saturation_int16": ("extreme_pairs", "C8", 6),
    "ignores_lda": ("layouts", "C8", 4),  # a_padded, all (both modes)
    "b_as_contiguous": ("layouts", "C8", 6),  # b_transposed, b_padded, all
    "zero_bias_vector": ("signed_zero", "C8", 3),  # the real-mode cases (no bias)
    "abs_scales": ("negative_scales", "C8", 6),
    "saturate_to_finite": ("overflow_inf", "C8", 6),
    "zero_scale_as_one": ("zero_scales", "C8", 6),
    "m_tail_scale_shift": ("m_n_edges", "C8", 1),  # M = 17
    "bias_rounded_first": ("bias_cancel", "C8", 3),
    "decode_path_order": ("ties", "C8", 2),  # M = 1 in bf16 and fp16
    "prefill_scale_order": ("large_shapes", "C8", 4),  # M = 129, 257 (bf16, fp16); not 128
    "wide_n_tail_tile_dropped": ("large_shapes", "C8", 6),  # the six wide-N cases
    "bias_cache_wraps": ("large_shapes", "C8", 4),  # the four wide-N cases with bias
    "splitk_float32_reduce": ("large_shapes", "C8", 6),  # the six split-K cases
    # dispatch paths (family ``dispatch``; each passed the whole suite before it existed;
    # the deep-K, split-K and wide-N ones are pinned on family ``regimes``: test_regimes.py)
    "splitk_bias_after_round": ("dispatch", "C8", 5),  # deep_k_bias at K >= 4096
    "mid_m_bucket_order": ("dispatch", "C8", 4),  # m_gap M = 40, 48, 56, 63 in bf16
    "small_acc_fast_path": ("dispatch", "C8", 4),  # small_acc (deep_k_bias: orders agree)
    "fp32_output_scale_order": ("dispatch", "C8", 3),  # the three fp32_ties cases
    "fp32_bias_fma_contracted": ("dispatch", "C8", 2),  # fp32_ties M = 16, 64: real s_a and a bias (h-esc8)
}


@pytest.mark.parametrize("kernel", sorted(BUGS))
def test_buggy_kernel_fails_on_its_family(kernel):
    family, check, n_fail = BUGS[kernel]
    spec = get_kernel(f"buggy_kernels:{kernel}")
    res = run_conformance(spec, cases=list(_fam(family)), property_examples=0, model_checks=False)
    assert res.verdict == "fail"
    failed = [cr for cr in res.cases if cr.verdict == "fail"]
    assert len(failed) == n_fail, [cr.case for cr in failed]
    assert all(cr.checks[check].verdict == "fail" for cr in failed)


def test_the_correct_control_passes_every_family():
    spec = get_kernel("buggy_kernels:good_cutlass")
    for fam in (
        "partial_sums",
        "subnormal",
        "extreme_pairs",
        "layouts",
        "signed_zero",
        "overflow_inf",
        "bias_cancel",
        "ties",
        "dispatch",
    ):
        assert all(evaluate_case(spec, c).verdict == "pass" for c in _fam(fam)), fam


def test_default_check_fails_a_kernel_that_ignores_lda(tmp_path, monkeypatch):
    """``int8conf check --kernel=buggy_kernels:ignores_lda --no-model --no-captures`` (in process) fails on
    exactly the padded-``a`` cases (M > 1) of its default plan, and the report's coverage table shows the padded
    layout was exercised. The plan is the command's own (``RunCases``, the same call as the command's): its padded
    cases are 4 of ``layouts``, 33 of ``regimes`` and 36 of ``covering``. The command runs them, and beside them the
    cases it must not fail (every other case of ``a`` with a leading stride above K: M = 1 reads the same either way,
    the native-only ones ``--no-large-cases`` leaves out; the unpadded ``layouts`` cases), through the suite's own per-case
    evaluation; the rest of the plan is left out for time (the kernel reads every other ``a`` as the exact CUTLASS
    control does, and a case only adds a verdict, so the rest cannot turn the FAIL into a PASS)."""
    spec = get_kernel("buggy_kernels:ignores_lda")
    plan, _ = RunCases(CaseSource(captures=False)).for_kernel(spec)

    def lda_matters(c) -> bool:
        return c.a.stride(0) > c.k or c.meta.get("family") == "layouts"

    def padded_part(self, spec, inj=None):
        cases, cap = for_kernel(self, spec, inj)
        return [c for c in cases if lda_matters(c)], cap

    for_kernel = RunCases.for_kernel
    monkeypatch.setattr(RunCases, "for_kernel", padded_part)
    padded = sorted(
        case_id(c) for c in plan if c.a.stride(0) > c.k and c.m > 1 and not c.meta.get("native_only")
    )  # --no-large-cases leaves the native-only cases out
    assert Counter(c.meta["family"] for c in plan if case_id(c) in padded) == {
        "layouts": 4,
        "regimes": 33,
        "covering": 36,
    }
    rc = main(
        [
            "check",
            "--kernel=buggy_kernels:ignores_lda",
            "--no-model",
            "--no-captures",
            "--no-large-cases",
            "--examples",
            "0",
            "-q",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 1
    doc = json.loads(next(tmp_path.rglob("conformance.json")).read_text())
    assert doc["overall"]["verdict"] == "fail"
    assert len(doc["cases"]) == sum(lda_matters(c) and not c.meta.get("native_only") for c in plan) == 83
    failed = sorted(c["case"] for c in doc["cases"] if c["verdict"] == "fail")
    assert failed == padded and len(failed) == 37 + 36  # layouts and regimes, covering
    rows = {r["condition"]: r for r in doc["coverage"]}
    assert "row-major padded" in rows["layout of a"]["reached"]
    assert doc["invocation"]["command"].startswith("int8conf check --kernel buggy_kernels:")


def test_a_column_major_output_is_an_error_on_every_case_with_m_and_n_above_1():
    import buggy_kernels

    spec = get_kernel("buggy_kernels:column_major_output")
    assert buggy_kernels.column_major_output is not None
    cases = _fam("m_n_edges")
    res = {c.name: evaluate_case(spec, c, device="cpu") for c in cases}
    wide = [c.name for c in cases if c.m > 1 and c.n > 1]
    assert wide and all(res[n].verdict == "fail" for n in wide)
    assert all(res[c.name].verdict == "pass" for c in cases if not (c.m > 1 and c.n > 1))
    bad = next(r for r in res.values() if r.verdict == "fail")
    assert "column-major output (strides (1, " in bad.interface and "row-major" in bad.interface
    assert [r.check_id for r in bad.kernel_failures] == ["IF"]


@pytest.mark.parametrize("name", ["cpu", "int_mm"])
def test_exact_builtins_pass_every_family_case(name):
    spec = get_kernel(name)
    fams = [
        "partial_sums",
        "large_acc",
        "int32_overflow",
        "subnormal",
        "overflow_inf",
        "signed_zero",
        "negative_scales",
        "zero_scales",
        "bias_cancel",
        "extreme_pairs",
        "m_n_edges",
        "ties",
        "layouts",
    ] + (["k_residues"] if name == "cpu" else [])
    # large_shapes: tests/conformance/test_cases_large_shapes.py (cpu, int_mm, triton)
    bad = [c.name for f in fams for c in _fam(f) if evaluate_case(spec, c, device="cpu").verdict != "pass"]
    assert bad == []


def test_triton_passes_the_output_and_layout_families():
    """The Triton interpreter on the cheaper families (the rest are in the
    default-suite timing runs; see the README)."""
    pytest.importorskip("triton")
    spec = get_kernel("triton")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bad = [
            c.name
            for f in (
                "subnormal",
                "overflow_inf",
                "signed_zero",
                "negative_scales",
                "zero_scales",
                "bias_cancel",
                "extreme_pairs",
                "layouts",
            )
            for c in _fam(f)
            if evaluate_case(spec, c, device="cpu").verdict != "pass"
        ]
    assert bad == []
