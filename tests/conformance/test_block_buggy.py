"""The default plan fails every buggy block-scaled kernel (``tests/helpers/buggy_block_kernels.py``) and every buggy
zero-point kernel (``buggy_azp_kernels.py``), each on the check and the case that reach its bug, and passes the
correct control. A block case is looked up by id in the block plan's own case list (``suite.plan.default_cases``,
the list ``int8conf check`` runs) and evaluated through the suite's per-case evaluation; the zero-point plan runs
whole (C17, under a second)."""

from __future__ import annotations

import pytest

from conformance.cases import case_id
from conformance.checks.block_accumulation import check_block_accumulation
from conformance.kernels.registry import get_kernel
from conformance.suite.evaluate import evaluate_fixed
from conformance.suite.plan import default_cases
from conformance.suite.run import run_conformance

#: kernel -> (the first failing case of the default block plan, smallest first, and its failing checks)
CAUGHT = {
    "scale_a_prev_kblock": ("block/1x128/prefill128-kmul-fp32", {"C8"}),
    "scale_b_next_kblock": ("block/1x128/decode1-kmul-bf16", {"C8"}),
    "tail_scale_prev_kblock": ("block/1x128/huge-fp16", {"C8"}),
    "tail_dropped_fp16": ("block/1x128/huge-fp16", {"C8"}),
    "weight_block_by_block_k": ("block/1x128/decode1-kmul-bf16", {"C8"}),
    "k_rounded_down_to_128": ("block/1x128/huge-fp16", {"C8"}),
    "per_channel_read_as_block": ("block/1x128/decode1-kmul-bf16", {"C8"}),
    "fma_where_add": ("block/1x128/decode1-kmul-bf16", {"C8"}),
    "scale_product_first_large_m": ("block/1x128/prefill128-kmul-fp32", {"C8"}),
    "split_k_long_k": ("block/1x128/decode2-longk-fp32", {"C8"}),
    "scale_a_strides_ignored": ("block/1x128/pow2-kmul-fp32", {"C5", "C8"}),
    "subnormal_scale_ftz": ("block/1x128/subnormal-a-fp32", {"C8"}),
    "fp8_clamped_to_240": ("block/1x128/fp8-max-bf16", {"C8"}),
    "fp8_operands_ftz": ("block/1x128/fp8-wide-sum-fp32", {"C8"}),
    "fp8_float32_partial_declared_exact": ("block/1x128/fp8-wide-sum-fp32", {"C8"}),
    "bf16_partial_deep_k": ("block/1x128/decode2-deepk-bf16", {"C8"}),
    # gated on two attributes: a covering row (conformance.cases.block_covering) holds both
    "scale_product_fp16_column_major": (
        "block/128x128/cov040-M3-multiple-partial-k_uniform-int-sa_col-b_dense-a_dense-fp16",
        {"C8"},
    ),
    "ue8m0_exponent_bits": (
        "block/128x128/cov030-M1-multiple-partial-pow2_tiny-int-sa_row-b_dense-a_dense-fp16",
        {"C5", "C8"},
    ),
    "k_uniform_per_token_bf16": (
        "block/128x128/cov045-M1-multiple-partial-k_uniform-int-sa_row-b_dense-a_dense-bf16",
        {"C8"},
    ),
    "fp8_seeded_running_sum_decode": (
        "block/128x128/cov036-M1-tailbk1-partial-subnormal_a-fp8negzero-sa_row-b_dense-a_dense-bf16",
        {"C8"},
    ),
    # a new user's kernels (2026-12-07): every scaled partial underflowing to -0; a strided bias
    "seeded_running_sum": ("block/128x128/underflow-bf16", {"C8"}),
    "strided_bias_read_dense": ("block/128x128/layouts-fp32", {"C8"}),
}
#: the buggy kernels C16's probe names a measured form for (it measures the accumulation, not the indexing)
C16_CAUGHT = ("scale_a_prev_kblock", "fma_where_add", "scale_product_first_large_m", "split_k_long_k")


def _plan_case(spec, cid: str):
    cases, _ = default_cases(operands=spec.operands, block_sizes=spec.block.sizes)
    return next(c for c in cases if case_id(c) == cid)


@pytest.mark.parametrize("name", sorted(CAUGHT))
def test_the_default_block_plan_fails_each_buggy_block_kernel_on_its_case(name):
    spec = get_kernel(f"buggy_block_kernels:{name}")
    cid, checks = CAUGHT[name]
    res = evaluate_fixed(spec, _plan_case(spec, cid), None)
    assert {k for k, v in res.checks.items() if v.verdict == "fail"} == checks
    control = get_kernel("block-fp8-cpu" if spec.is_fp8 else "buggy_block_kernels:good_block")
    good = evaluate_fixed(control, _plan_case(spec, cid), None)
    assert not [k for k, v in good.checks.items() if v.verdict == "fail"]


@pytest.mark.parametrize("name", C16_CAUGHT)
def test_c16_names_the_measured_accumulation(name):
    r = check_block_accumulation(get_kernel(f"buggy_block_kernels:{name}"))
    assert r.verdict == "fail" and ("measured" in r.summary or "no legal form matches" in r.summary)


@pytest.mark.parametrize(
    "name",
    [
        "azp_bias_first_past_m16",
        "azp_wrong_sign",
        "azp_float_after_scale",
        "azp_ignored_per_token",
        "azp_cached_colsum",
        "azp_int32_product_overflow",
    ],
)
def test_the_zero_point_plan_fails_each_buggy_azp_kernel_on_c17(name):
    res = run_conformance(get_kernel(f"buggy_azp_kernels:{name}"), model_checks=False, property_examples=0)
    assert res.verdict == "fail"
    assert [c.check_id for c in res.checks if c.verdict == "fail"] == ["C17"]


def test_the_zero_point_plan_passes_azp_cpu_with_the_other_checks_n_a():
    res = run_conformance(get_kernel("azp-cpu"), model_checks=False, property_examples=0)
    verdicts = {c.check_id: c.verdict for c in res.checks}
    assert res.verdict == "pass" and verdicts["C17"] == "pass" and verdicts["C9"] == "n/a"
