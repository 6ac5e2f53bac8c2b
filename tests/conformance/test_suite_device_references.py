"""A suite run with a reference device (``SuiteState.evaluate``: operands moved once, every
reference computed there, the case's questions read back together) gives the CaseResult of
the CPU path: same verdicts, summaries, evidence, coverage, pair and digests (``to_dict``
equal but for the kernel's wall time). The ``cpu`` parameters force the device branch on the
CPU, so CI runs its code; the ``cuda`` ones move the operands to a GPU."""

from __future__ import annotations

import functools

import pytest
import torch

from conformance.cases import CaptureReplay, families, make_case, synthetic_cases
from conformance.kernels.registry import get_kernel
from conformance.suite import evaluate
from conformance.suite.evaluate import evaluate_case, reference_device
from conformance.suite.plan import SuiteState, default_cases, mark_ownership_probes
from faults import inject

CUDA = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
#: Largest M * K * N of the CPU test's cases (two cores run it); the CUDA test takes every size.
CPU_MAX_MACS = 1 << 20
#: Cases per run: one per (family or source, out dtype, bias, scale mode) group, smallest first.
N_CASES = 40
#: Families the CPU test leaves out: the slowest to build (the CUDA test builds the whole suite).
CPU_SKIPPED_FAMILIES = ("regimes", "dispatch", "large_shapes")


@functools.lru_cache(maxsize=2)
def _suite(whole: bool) -> tuple:
    """The default suite's fixed cases (no captures), or for the CPU test its quick part."""
    if whole:
        cases, cap = default_cases(include_captures=False)
        return tuple(cases), cap
    names = [f for f in families.FAMILIES if f not in CPU_SKIPPED_FAMILIES]
    cases = mark_ownership_probes(list(synthetic_cases((0,))) + families.family_cases(names))
    return tuple(cases), CaptureReplay(note="no captures")


def _group(ops) -> tuple:
    meta = ops.meta or {}
    return (meta.get("family") or meta.get("source"), str(ops.out_dtype), ops.bias is not None, ops.scale_mode)


def representative_cases(max_macs=None, n=N_CASES, whole=True) -> tuple[list, object]:
    """``(cases, captures)``: up to ``n`` cases of :func:`_suite`, the smallest of each group
    (:func:`_group`), taken round-robin over the families so that each one is in; plus two
    precondition cases and, from the whole suite, each family's largest (within ``max_macs``)."""
    cases, cap = _suite(whole)
    ok = [c for c in cases if max_macs is None or c.m * c.k * c.n <= max_macs]
    best: dict = {}
    for c in sorted(ok, key=lambda c: c.m * c.k * c.n):
        best.setdefault(_group(c), c)
    by_family: dict = {}
    for g in sorted(best, key=str):
        by_family.setdefault(g[0], []).append(best[g])
    picked: list = []
    while len(picked) < n and any(by_family.values()):
        for fam in sorted(by_family, key=str):
            if by_family[fam] and len(picked) < n:
                picked.append(by_family[fam].pop(0))
    extra = [c for c in ok if (c.meta or {}).get("violates")][:2]
    if whole:
        largest: dict = {}
        for c in sorted(ok, key=lambda c: c.m * c.k * c.n):
            largest[_group(c)[0]] = c
        extra += [largest[f] for f in sorted(largest, key=str)]
    picked += [c for c in extra if all(c is not p for p in picked)]
    return picked, cap


def _comparable(cr) -> dict:
    d = cr.to_dict()
    d.pop("elapsed_s")  # the kernel's wall time
    return d


def _assert_same_results(spec, cases, cap, device, ref_device, against=None) -> list:
    """Each case's CaseResult through the suite's device branch equals the CPU path's; returns
    the verdicts."""
    state = SuiteState(spec, cases, cap, against, device, ref_device=ref_device)
    verdicts = []
    for i, ops in enumerate(cases):
        want = evaluate_case(spec, ops, against=against, device=device)
        got = state.evaluate(i)
        assert _comparable(got) == _comparable(want), ops.name
        assert ops.a.device.type == "cpu"  # the suite's own case is untouched
        verdicts.append(want.verdict)
    return verdicts


def _cover(cases) -> None:
    """The selection reaches what the test is for (else it would pass vacuously)."""
    fams = {(c.meta or {}).get("family") for c in cases}
    assert {"ties", "int32_overflow", "overflow_inf", "bias_cancel", "layouts", "subnormal"} <= fams
    assert {torch.bfloat16, torch.float16, torch.float32} <= {c.out_dtype for c in cases}
    assert any(c.bias is not None for c in cases) and any((c.meta or {}).get("violates") for c in cases)


def test_the_representative_cases_cover_the_suite():
    cases, _ = representative_cases(CPU_MAX_MACS, whole=False)
    _cover(cases)
    assert len(cases) >= N_CASES


def _edge_cases() -> tuple:
    """A case just below :data:`evaluate.DEVICE_REFERENCE_MIN_MACS` and one at it."""
    k = n = 256
    m = evaluate.DEVICE_REFERENCE_MIN_MACS // (k * n)
    return make_case("ordinary", m=m, k=k - 1, n=n), make_case("ordinary", m=m, k=k, n=n)


def test_small_cases_and_cpu_kernels_keep_cpu_references():
    small, big = _edge_cases()
    assert big.m * big.k * big.n == evaluate.DEVICE_REFERENCE_MIN_MACS > small.m * small.k * small.n
    assert reference_device(get_kernel("int_mm"), "cuda", small) is None
    assert reference_device(get_kernel("cpu"), None, big) is None  # the kernel runs on the CPU
    assert reference_device(get_kernel("int_mm"), "cpu", big) is None


@pytest.mark.parametrize("fault", [None, "F4"])
def test_the_device_branch_on_the_cpu_gives_the_cpu_results(fault):
    cases, cap = representative_cases(CPU_MAX_MACS, whole=False)
    spec = get_kernel("cpu") if fault is None else inject(get_kernel("cpu"), fault, "1%", 0)
    against = get_kernel("int_mm") if fault is None else None
    verdicts = _assert_same_results(spec, cases, cap, "cpu", "cpu", against)
    # not vacuous: the truncating kernel fails with full evidence, the clean one passes
    assert ("fail" in verdicts) == (fault is not None) and "pass" in verdicts


@pytest.mark.parametrize(
    "kernel, device, fault, against",
    [
        pytest.param("cpu", "cpu", None, None, id="cpu-kernel"),
        pytest.param("int_mm", "cuda", None, None, id="int_mm"),
        pytest.param("int_mm", "cuda", "F4", None, id="int_mm-F4"),
        pytest.param("int_mm", None, None, "cpu", id="int_mm-against-cpu"),
    ],
)
@pytest.mark.parametrize("ref_device", [pytest.param("cuda", marks=CUDA, id="cuda")])
def test_references_on_the_gpu_give_the_cpu_results(kernel, device, fault, against, ref_device):
    cases, cap = representative_cases(None if kernel != "cpu" else 1 << 26)
    _cover(cases)
    assert "regimes" in {(c.meta or {}).get("family") for c in cases}
    spec = get_kernel(kernel) if fault is None else inject(get_kernel(kernel), fault, "1%", 0)
    verdicts = _assert_same_results(spec, cases, cap, device, ref_device, get_kernel(against) if against else None)
    assert ("fail" in verdicts) == (fault is not None)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_suite_picks_the_gpu_for_large_cases_only():
    small, big = _edge_cases()
    spec = get_kernel("int_mm")
    assert reference_device(spec, None, big) == "cuda" and reference_device(spec, "cuda:0", big) == "cuda:0"
    assert reference_device(spec, None, small) is None
