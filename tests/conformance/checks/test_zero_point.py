"""C17 zero_point: the built-in passes, each buggy asymmetric kernel is first shown wrong on a legal case, then failed."""

from __future__ import annotations

import dataclasses

import buggy_azp_kernels as bug
import pytest
import torch

from conformance.cases.asymmetric import asymmetric_cases, stale_pair
from conformance.checks.zero_point import check_zero_point
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import run_kernel
from reference.asymmetric import reference_azp_scaled_mm


def _case(family: str, kind: str = "per-token"):
    return next(c for c in asymmetric_cases() if c.meta["family"] == family and c.zero_point == kind)


def _call(fn, ops):
    return fn(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.out_dtype, ops.bias, azp_adj=ops.azp_adj, azp=ops.azp)


def _ref(ops):
    return reference_azp_scaled_mm(
        ops.a, ops.b, ops.scale_a, ops.scale_b, ops.out_dtype, ops.bias, ops.azp_adj, ops.azp
    )


def test_builtin_passes_and_a_symmetric_kernel_is_not_applicable():
    r = check_zero_point(get_kernel("azp-cpu"))
    assert r.verdict == "pass", r.summary
    assert r.check_id == "C17" and r.name == "zero_point"
    # per form: 9 quantized + near-zero-point + the headroom cases (3 per-token, 2 per-tensor)
    assert len(r.evidence["cases"]) == 2 * (9 + 1) + 3 + 2 and r.evidence["not_run"] == []
    assert [s["verdict"] for s in r.evidence["stale"]] == ["pass", "pass"]
    assert check_zero_point(get_kernel("cpu")).verdict == "n/a"


def test_undefined_overflow_excludes_the_corrected_values_past_int32():
    spec = dataclasses.replace(get_kernel("azp-cpu"), overflow="undefined", name="azp-cpu-undefined")
    r = check_zero_point(spec)
    assert r.verdict == "pass"
    excluded = {c["case"]: c["n_excluded"] for c in r.evidence["cases"]}
    assert excluded["azp-per-token-corrected-outside"] == 8 and excluded["azp-per-tensor-corrected-outside"] == 4


@pytest.mark.parametrize(
    "name, family, kind",
    [
        ("azp_wrong_sign", "quantized", "per-tensor"),
        ("azp_float_after_scale", "near-zero-point", "per-token"),
        ("azp_ignored_per_token", "quantized", "per-token"),
        ("azp_int32_product_overflow", "product-outside", "per-token"),
    ],
)
def test_buggy_kernel_wrong_on_a_legal_case_then_failed(name, family, kind):
    ops = _case(family, kind)
    ref = _ref(ops)
    assert ops.a.to(torch.int64).matmul(ops.b.to(torch.int64).T).abs().max() < 2**31  # the accumulator fits
    assert not torch.equal(_call(getattr(bug, name), ops), ref)
    assert torch.equal(_call(get_kernel("azp-cpu").scaled_mm, ops), ref)
    r = check_zero_point(get_kernel(f"buggy_azp_kernels:{name}"))
    assert r.verdict == "fail"
    assert any(c["case"] == ops.name and c["n_bad"] for c in r.evidence["cases"]), r.summary


def test_cached_colsum_wrong_after_an_in_place_update_then_failed():
    bug._CACHE.clear()
    first, second = stale_pair("per-token")
    fn = bug.azp_cached_colsum
    assert torch.equal(_call(fn, first), _ref(first))
    assert not torch.equal(_call(fn, second), _ref(second))  # the first call's colsum kept
    bug._CACHE.clear()
    r = check_zero_point(get_kernel("buggy_azp_kernels:azp_cached_colsum"))
    assert r.verdict == "fail"
    assert [s["verdict"] for s in r.evidence["stale"]] == ["fail", "fail"]
    # the stale probe fails both forms; the kernel's cache also serves other cases of the same (N, K) shape
    assert r.evidence["n_failed"] >= 2 and r.summary.startswith(f"{r.evidence['n_failed']} failure(s): ")


def test_runner_records_undeclared_calls_as_not_run():
    ops = _case("quantized", "per-token")
    run = run_kernel(get_kernel("cpu"), ops)
    assert run.manifest["skipped"] and "declares none (azp=)" in run.error
    spec = dataclasses.replace(get_kernel("azp-cpu"), azp="per-tensor", name="azp-cpu-tensor")
    run = run_kernel(spec, ops)
    assert run.manifest["skipped"] and "per-token zero point: the kernel declares per-tensor only" in run.error
    sym = dataclasses.replace(ops, azp_adj=None, azp=None)
    run = run_kernel(get_kernel("azp-cpu"), sym)
    assert run.manifest["skipped"] and "symmetric activations" in run.error
    r = check_zero_point(spec)
    assert r.verdict == "pass" and {c["case"] for c in r.evidence["not_run"]} == set()  # per-tensor cases only
