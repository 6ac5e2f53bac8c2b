"""The covering array over the declared attribute space (conformance.cases.covering, issue 41): every legal
triple of the strong attributes and every legal pair of all of them met, every row legal, each attribute
value's discriminator planted, and one buggy kernel per attribute-interaction class
(tests/helpers/buggy_kernels.py) failed on a pinned covering case of the default suite (the built-in
``cpu`` kernel passes the same case)."""

from __future__ import annotations

import functools

import pytest
import torch

from conformance.cases.covering import (
    ATTRIBUTES,
    CPU_MACS,
    DEEP_ALL_LARGE_K,
    SPACE,
    all_large,
    covering_case,
    covering_rows,
    shape_of,
)
from conformance.cases.families import FAMILIES
from conformance.kernels.registry import get_kernel
from conformance.suite.evaluate import evaluate_case
from reference.bits import bits_of


@functools.lru_cache(maxsize=None)
def _case(i: int):
    return covering_case(covering_rows()[i], i)


def test_the_array_meets_every_legal_triple_and_pair_and_only_legal_rows():
    rows = covering_rows()
    assert len(rows) == 181
    assert all(SPACE.legal(r) and set(r) == set(ATTRIBUTES) for r in rows)
    assert SPACE.t_wise_coverage(rows) == {"3-wise": [4328, 4328], "2-wise": [1027, 1027]}
    # a row less loses triples: the array is not padded with rows that add nothing
    assert SPACE.t_wise_coverage(rows[1:])["3-wise"][0] < 4328
    assert "covering" in FAMILIES


def test_rows_past_the_cpu_budget_are_native_only():
    rows = covering_rows()
    big = [i for i, r in enumerate(rows) if torch.tensor(shape_of(r, i)).prod() > CPU_MACS]
    assert len(big) == 31
    all_large = [i for i, r in enumerate(rows) if (r["m"], r["n"], r["k"]) == ("large", "wide", "deep")]
    assert all_large and set(all_large) <= set(big)  # M >= 512, N >= 4096, K >= 1024 together: native only


def test_planted_values_discriminate_their_attribute():
    # bias_value: a bf16 bias outside fp16's range; every probe row reads it (zero accumulators)
    ops = _case(7)
    assert ops.meta["attributes"]["bias_value"] == "other_range" and ops.out_dtype == torch.bfloat16
    assert ops.meta["planted"]["bias_value"] == 5  # M = 5: five probe rows
    col = [c for c, kind in ops.meta["probes"]["cols"] if kind == "bias_value"][0]
    bias = ops.bias[col]
    assert bits_of(bias.to(torch.float16).to(torch.bfloat16)) != bits_of(bias)
    # subnormal_scale: float32-subnormal per-token scales whose outputs are nonzero
    ops = _case(33)
    assert ops.meta["attributes"]["magnitude"] == "subnormal"
    tiny = [r for r, kind in zip(ops.meta["probes"]["rows"], ops.meta["probes"]["row_kinds"]) if kind == "tiny"]
    assert all(0 < abs(float(ops.scale_a.reshape(-1)[r])) < 2.0**-126 for r in tiny)
    assert ops.meta["planted"]["subnormal_scale"] == 1  # M = 1: its one probe row made tiny


#: buggy kernel -> (covering row, the check that fails): each case is in the default suite and affordable on the CPU
BUGS = {
    "scalar_weight_scale_order_past_m_32": (98, "C8"),  # M = 512, 0-d s_w: scale-order ties at that scale
    "bias_through_fp16_wide_n_bf16": (7, "C8"),  # N = 4096, bf16, bias 2^20-scaled: inf through fp16
    "transposed_padded_b_misread": (3, "C8"),  # b = w.t() of a [K, N + 5] buffer
    "column_scales_subtile_shift_large_mn": (4, "C8"),  # M = 512, N = 129, distinct pow2 s_w at offset 32
    "decode_subnormal_token_scale_ftz": (33, "C8"),  # M = 1, subnormal s_a
    "pow2_scalar_weight_scale_folded": (55, "C8"),  # s_w = 2^-10 (0-d), subnormal s_a: s_a * s_w flushed
    # escapes of a new user's kernels (h-esc8): the value classes planted beside the probes (README.md, Planting)
    "pow2_weight_scale_as_int32_shift": (15, "C8"),  # pow2 0-d s_w lifted to 2^20: |acc| * s_w past 2^31
    "zero_bias_elements_skipped": (17, "C8"),  # fp32, odd row: +0.0 bias on the signed_zero column's -0 products
    "zero_weight_scale_column_positive_zero": (111, "C8"),  # no bias, N >= 64: the s_w = 0 column's -0.0
}


@pytest.mark.parametrize("kernel", sorted(BUGS))
def test_buggy_kernel_fails_its_pinned_covering_case(kernel):
    i, check = BUGS[kernel]
    ops = _case(i)
    m, k, n = shape_of(covering_rows()[i], i)
    assert m * k * n <= CPU_MACS and not ops.meta.get("native_only")
    bad = evaluate_case(get_kernel(f"buggy_kernels:{kernel}"), ops, coverage=False)
    assert bad.verdict == "fail" and bad.checks[check].verdict == "fail", bad.case
    good = evaluate_case(get_kernel("cpu"), ops, coverage=False)
    assert good.verdict == "pass", good.case


def test_every_all_large_row_carries_float32_inexact_partial_sums():
    """M, N and K all large (native only): K = 1024 bounds |acc| by 2^24, so those rows take K = 4608 and plant
    ``partial_sums`` (running sums past 2^24) and, where C6's premise allows, ``big_acc`` (|acc| > 2^24)."""
    rows = covering_rows()
    big = [i for i, r in enumerate(rows) if all_large(r)]
    assert big and all(shape_of(rows[i], i)[1] == DEEP_ALL_LARGE_K for i in big)
    planted = {i: _case(i).meta["planted"] for i in big}
    # row 141: float32 output with a real scalar s_w: neither (two roundings per order, C6's premise)
    assert all(planted[i]["partial_sums"] > 0 for i in big if i != 141), planted
    assert planted[158]["big_acc"] > 0 and planted[68]["big_acc"] > 0, planted


@pytest.mark.slow
def test_a_float32_split_k_at_all_large_shapes_fails_the_native_only_row():
    """Row 158 (512 x 4608 x 4096, bf16) is native only; evaluated here on the CPU (~1-2 min on 2 cores)."""
    ops = _case(158)
    assert ops.meta.get("native_only")
    bad = evaluate_case(get_kernel("buggy_kernels:splitk_float32_partials_all_large"), ops, coverage=False)
    assert bad.verdict == "fail" and bad.checks["C8"].verdict == "fail", bad.case


def test_fp32_ties_with_a_bias_fail_a_contracted_fma_and_leave_c6_out():
    from conformance.cases.dispatch import FP32_TIES_BIAS_M, fp32_ties_case

    for m in FP32_TIES_BIAS_M:
        ops = fp32_ties_case(m)
        assert ops.bias is not None and ops.k >= 512 and ops.meta["c6_not_applicable"]
        good = evaluate_case(get_kernel("cpu"), ops, coverage=False)
        assert good.verdict == "pass" and good.checks["C6"].verdict == "n/a", good.case
        bad = evaluate_case(get_kernel("buggy_kernels:fp32_bias_fma_contracted"), ops, coverage=False)
        assert bad.checks["C8"].verdict == "fail" and bad.checks["C6"].verdict == "n/a", bad.case
