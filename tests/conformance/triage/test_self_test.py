"""Triage's self-test (issue 43, item 4): every shape-, layout- and value-gated buggy kernel of
``tests/helpers/buggy_kernels.py`` gets the gate it was written with back from ``find_boundaries`` - the exact
boundary of the gated dimension (both sides verified), a bucket's far edge, and the flips that make it pass - from a
case of the project's builders that fails. The kernels' gates are read off their code (the docstring beside each).
The other gated kernels are pinned in ``test_boundary.py`` (prefill, wide-N, bias cache, long prefill, fp16 prefill,
split-K, the M*N*K product)."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch

from conformance.cases.common import generator
from conformance.cases.layouts import with_forms
from conformance.cases.planting import planted_case
from conformance.cases.synthetic import synthetic_cases
from conformance.kernels.registry import get_kernel
from conformance.triage.boundary import find_boundaries

FP16, FP32 = torch.float16, torch.float32


@functools.lru_cache(maxsize=None)
def _kernel(name: str):
    return get_kernel(f"buggy_kernels:{name}")


def _forms(ops, **forms):
    return with_forms(ops, forms, generator("triage-self-test", ops.name, 0))


def _subnormal_token_scales(ops):
    return dataclasses.replace(ops, scale_a=ops.scale_a * 2.0**-130)  # float32 subnormal s_a, every row


def _synthetic(name: str):
    return next(c for c in synthetic_cases() if c.name == name)


# (kernel, start case, check, {dimension: (passes_at, fails_at[, upper_fails_at, upper_passes_at])}, flips that pass)
GATES = [
    # M = 1 (decode) takes a_then_w
    ("decode_path_order", lambda: _synthetic("synthetic/m1-s0"), "C8", {"m": (2, 1)}, None),
    # 33 <= M <= 63 with bf16 output: a bucket, both edges; fp16 / fp32 outputs pass
    (
        "mid_m_bucket_order",
        lambda: planted_case(40, 64, 40),
        "C8",
        {"m": (32, 33, 63, 64)},
        {("out_dtype", "fp16"), ("out_dtype", "fp32")},
    ),
    # M >= 32 with bf16 output rounds toward zero
    (
        "truncates_from_m32",
        lambda: planted_case(40, 64, 40),
        "C8",
        {"m": (31, 32)},
        {("out_dtype", "fp16"), ("out_dtype", "fp32")},
    ),
    # K >= 2048 takes a_then_w
    ("deep_k_scale_order", lambda: planted_case(8, 2500, 17), "C8", {"k": (2047, 2048)}, None),
    # N >= 4096 fuses the scales
    ("wide_n_fused_epilogue", lambda: planted_case(4, 64, 4096), "C8", {"n": (4095, 4096)}, None),
    # N >= 4096, bf16 out, a bias outside fp16's range: the bias goes through fp16
    (
        "bias_through_fp16_wide_n_bf16",
        lambda: planted_case(2, 64, 4100, bias=True, bias_value="other_range"),
        "C8",
        {"n": (4095, 4096)},
        {("bias", "absent"), ("out_dtype", "fp32")},
    ),
    # M >= 128 and N >= 128 read the second 32-wide sub-tile's scales from the first's
    (
        "column_scales_subtile_shift_large_mn",
        lambda: planted_case(130, 64, 130),
        "C8",
        {"m": (127, 128), "n": (127, 128)},
        {("scale_form:scale_b", "scalar")},
    ),
    # M <= 16 flushes a subnormal s_a: fails below 17; typical / pow2 scales pass
    (
        "decode_subnormal_token_scale_ftz",
        lambda: _subnormal_token_scales(planted_case(8, 64, 40)),
        "C8",
        {"m": (17, 16)},
        {("magnitude:scale_a", "typical"), ("magnitude:scale_a", "pow2")},
    ),
    # M > 16 raises: the call's own pseudo-check
    ("raises_past_m16", lambda: planted_case(40, 64, 40), "CALL", {"m": (16, 17)}, None),
    # a transposed padded b read with a dense leading stride: every other layout of b passes
    (
        "transposed_padded_b_misread",
        lambda: _forms(planted_case(8, 64, 40), b="transposed_padded"),
        "C8",
        {},
        {("layout:b", "dense"), ("layout:b", "transposed"), ("layout:b", "padded")},
    ),
    # an [M, 1] s_a read as its first element: a dense [M] or a scalar passes; M = 1 cannot show it
    (
        "column_scale_a_first_row",
        lambda: _forms(planted_case(8, 64, 40), scale_a="column"),
        "C8",
        {"m": (1, 2)},
        {("scale_form:scale_a", "scalar"), ("scale_form:scale_a", "vector")},
    ),
    # fp16 requests get bf16: the interface pseudo-check; a bf16 request passes
    ("bf16_when_fp16", lambda: planted_case(8, 64, 40, FP16), "IF", {}, {("out_dtype", "bf16")}),
    # fp32 output takes a_then_w: bf16 / fp16 outputs pass
    (
        "fp32_output_scale_order",
        lambda: planted_case(8, 64, 40, FP32),
        "C8",
        {},
        {("out_dtype", "bf16"), ("out_dtype", "fp16")},
    ),
]


@pytest.mark.parametrize("kernel, make, check, dims, passing", GATES, ids=[g[0] for g in GATES])
def test_the_gate_each_buggy_kernel_was_written_with_is_found(kernel, make, check, dims, passing):
    spec, ops = _kernel(kernel), make()
    s = find_boundaries(spec, ops, check, dims=tuple(dims), categorical=passing is not None, product=False)
    for d, want in dims.items():
        b = s.boundaries[d]
        got = (b.passes_at, b.fails_at) + (() if len(want) == 2 else (b.upper_fails_at, b.upper_passes_at))
        assert got == want and b.monotone, (d, b)
    if passing is not None:  # the gate's attributes pass; besides them only value flips may (pow2 scales make
        # every scale order exact; a subnormal scale may flush the case's differing elements away)
        got = {(f.attribute, f.value) for f in s.flips if not f.fails}
        assert passing <= got and all(a.startswith("magnitude:") for a, _ in got - passing), s.flips


def test_a_periodic_gate_is_reported_as_points_not_as_a_bucket():
    # m_tail_scale_shift: wrong for M > 16 with M % 16 != 0; doubling up from 17 reaches 272 (passes), 273 fails
    s = find_boundaries(_kernel("m_tail_scale_shift"), planted_case(17, 64, 40), "C8", dims=("m",), categorical=False)
    b = s.boundaries["m"]
    assert (b.passes_at, b.fails_at, b.monotone, b.upper_passes_at) == (16, 17, False, None)
    assert {(272, False), (273, True)} <= set(b.points)


def test_a_layout_that_cannot_exist_at_size_one_stops_the_search_there():
    # a transposed padded b reads as dense at N = 1 or K = 1: the search stops at 2 instead of passing there
    ops = _forms(planted_case(8, 64, 40), b="transposed_padded")
    s = find_boundaries(_kernel("transposed_padded_b_misread"), ops, "C8", categorical=False, product=False)
    assert [(s.boundaries[d].passes_at, s.boundaries[d].fails_at, s.boundaries[d].form_floor) for d in "nk"] == [
        (None, 2, 1),
        (None, 2, 1),
    ]
    assert (s.boundaries["m"].passes_at, s.boundaries["m"].fails_at, s.boundaries["m"].form_floor) == (None, 1, None)
