"""Every launch configuration the built-in Triton kernel's tuner may pick (each bucket's candidates, and the
Gluon ones on sm_90) runs default-suite cases of its bucket bit-exactly: whichever configuration a tuned
production call takes, the conformance suite has certified its bits. Skipped without CUDA. With
``INT8CONF_CONFIG_REPORT=PATH`` the configurations and the cases each ran are written there as JSON."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import replace

import pytest
import torch

from conformance.cases import families
from conformance.cases.cache import cached_cases
from conformance.cases.regimes import regimes_family
from conformance.kernels import builtin_triton as bt
from conformance.kernels.registry import get_kernel
from conformance.suite.evaluate import evaluate_case

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

#: default-suite families whose cases span the three buckets (regimes: both sides of every tile edge)
FAMILIES = ("regimes", "large_shapes", "dispatch", "ties")
#: cases per configuration (spread over the bucket's cases: first, last, evenly between)
PER_CONFIG = 3
#: the largest case a configuration runs here (M * N * K): the references of larger ones cost CPU seconds each
MAX_MACS = 1 << 26

#: (bucket, configuration) pairs: every candidate the tuner may try
CANDIDATES = list(
    dict.fromkeys(
        [(bk, c) for bk, cs in bt.BUCKET_CONFIGS.items() for c in cs]
        + [(bk, c) for bk, cs in bt.GLUON_CONFIGS.items() for c in cs]
        + [(bk, c) for bk, cs in bt.GLUON_WS_CONFIGS.items() for c in cs]
    )
)


@functools.lru_cache(maxsize=1)
def _cases() -> list:
    """The families' cases up to :data:`MAX_MACS` (the regimes family builds only those: planting its
    10^9-MAC cases costs minutes on one thread per xdist worker), built once through the case cache."""

    def build():
        rest = [c for f in FAMILIES if f != "regimes" for c in families.FAMILIES[f][0](0)]
        return regimes_family(0, max_macs=MAX_MACS) + rest

    return cached_cases(f"config-test/{','.join(FAMILIES)}/{MAX_MACS}", build)  # one xdist worker builds


def _fits(cfg, ops) -> bool:
    """The configuration accepts these operands (TMA / Gluon: K-contiguous, 16-byte rows, M > 16, no int64)."""
    if cfg.kernel == "ptr":
        return True
    a, b = ops.a, ops.b
    aligned = (a.stride(0) | b.stride(0) | ops.k) % 16 == 0 and a.stride(1) == 1 and b.stride(1) == 1
    return aligned and ops.m > 16 and not bt._need_int64(a, b, ops.m, ops.n, ops.k)


def _pick(bucket: str, cfg) -> list:
    pool = [c for c in _cases() if bt.bucket(c.m) == bucket and _fits(cfg, c) and c.m * c.n * c.k <= MAX_MACS]
    if len(pool) <= PER_CONFIG:
        return pool
    return [pool[round(i * (len(pool) - 1) / (PER_CONFIG - 1))] for i in range(PER_CONFIG)]


def _spec_with(cfg):
    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        return bt.scaled_mm_config(cfg, a, b, scale_a, scale_b, out_dtype, bias)

    def int_mm(a, b):
        return bt.scaled_mm_config(cfg, a, b, None, None, None)

    return replace(get_kernel("triton"), scaled_mm=scaled_mm, int_mm=int_mm)


@pytest.mark.parametrize("bucket,cfg", CANDIDATES, ids=[f"{b}-{c.label().replace(' ', '_')}" for b, c in CANDIDATES])
def test_every_candidate_configuration_is_bit_exact_on_suite_cases(bucket, cfg):
    if cfg.kernel == "gluon" and not bt._gluon_enabled(torch.device("cuda")):
        pytest.skip("Gluon configurations need sm_90 and Triton's Gluon Hopper API")
    cases = _pick(bucket, cfg)
    assert cases, f"no default-suite case of bucket {bucket} fits {cfg.label()}"
    ran = []
    for ops in cases:
        cr = evaluate_case(_spec_with(cfg), ops, device="cuda")
        said = [cr.error or ""] + [r.summary for r in cr.checks.values()]
        if any("OutOfResources" in x for x in said):
            continue  # does not fit this dtype's epilogue in shared memory: the tuner drops it here too
        bad = {r.check_id: r.summary for r in cr.kernel_failures}  # the suite's verdict: not precondition cases
        assert not bad, f"{cfg.label()} on {cr.case}: {bad}"
        assert cr.checks["C8"].verdict == "pass"
        assert cr.run_manifest["extra"]["config"] == cfg.label()
        ran.append(cr.case)
    if not ran:
        pytest.skip(f"{cfg.label()} compiles for none of these cases here (out of shared memory): never picked")
    path = os.environ.get("INT8CONF_CONFIG_REPORT")
    if path:  # one JSON line per configuration (xdist workers append)
        with open(path, "a") as f:
            f.write(json.dumps({"bucket": bucket, "config": cfg.label(), "cases": ran}) + "\n")
