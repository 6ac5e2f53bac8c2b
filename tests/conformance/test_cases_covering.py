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
    covering_case,
    covering_rows,
    legal,
    shape_of,
    t_wise_coverage,
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
    assert all(legal(r) and set(r) == set(ATTRIBUTES) for r in rows)
    assert t_wise_coverage(rows) == {"3-wise": [4328, 4328], "2-wise": [1027, 1027]}
    # a row less loses triples: the array is not padded with rows that add nothing
    assert t_wise_coverage(rows[1:])["3-wise"][0] < 4328
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
