"""The fast path of the suite (memoized references, deferred read-backs) gives C8 exactly as its eager
specification (``conformance.checks.specification``) on every case family, for a conforming kernel and two wrong
ones."""

import functools

import pytest
import torch

from conformance.cases.families import FAMILIES
from conformance.checks.specification import c8_differing
from conformance.kernels.registry import get_kernel
from conformance.suite.evaluate import evaluate_case
from conformance.suite.plan import default_cases
from reference.accumulate import INT32_MAX

#: the exact built-in, the same with F4 (truncation: a one-spacing error on every inexact element), and a kernel
#: whose decode path (M = 1) takes the other scale order
KERNELS = ("cpu", "cpu+F4@all#s0", "buggy_kernels:decode_path_order")
#: cases per family compared (spread over the family), up to this many multiply-accumulates each
PER_FAMILY, MAX_MACS = 8, 1 << 21


@functools.lru_cache(maxsize=1)
def _default_int8() -> dict:
    """The default int8 cases (the case cache), by family (``synthetic`` and ``tile_edges`` for the others)."""
    out: dict = {}
    for c in default_cases(include_captures=False)[0]:
        out.setdefault((c.meta or {}).get("family") or c.name.split("/")[0], []).append(c)
    return out


def _sample(cases) -> list:
    small = [
        c
        for c in cases
        if c.m * c.n * c.k <= MAX_MACS and int((c.a.to(torch.int64) @ c.b.to(torch.int64).T).abs().max()) <= INT32_MAX
    ]
    step = max(1, len(small) // PER_FAMILY)
    return small[::step][:PER_FAMILY]


#: every family but int32_overflow, whose accumulators leave int32 by construction (beyond the specification)
SOURCES = ["synthetic", "tile_edges", *(f for f in FAMILIES if f != "int32_overflow")]


@pytest.mark.parametrize("source", SOURCES)
def test_the_fast_path_gives_the_eager_c8(source):
    import faults  # noqa: F401 -- resolves the injected name cpu+F4@all#s0

    cases = _sample(_default_int8()[source])
    assert cases, source
    differing = 0
    for name in KERNELS:
        spec = get_kernel(name)
        for ops in cases:
            eager = c8_differing(spec, ops)
            c8 = evaluate_case(spec, ops, device="cpu").checks["C8"]
            assert c8.evidence["n_over_tol"] == int(eager.sum()), (name, ops.name)
            assert (c8.verdict == "fail") == bool(eager.any()), (name, ops.name, c8.summary)
            differing += int(eager.sum())
    assert differing > 0  # the wrong kernels differ somewhere in every source's sample
