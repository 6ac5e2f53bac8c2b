"""``run_gate`` on real kernels: an exact swap passes, every post-processing
fault (F1-F5, ``faults.inject``) is blocked under bit identity and warns
under a one-spacing policy exactly where the data says it stays within one
spacing, an operand mismatch (F9) is blocked under every policy.

Expected statuses are derived here independently of the gate: the injected
kernel and the incumbent are called in this process and their outputs
compared with numpy on the bf16 bit patterns (ordered encoding).
"""

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from conformance.cases import make_case
from conformance.gate.policy import parse_policy
from conformance.gate.report import to_json_dict, write_gate_reports
from conformance.gate.run import run_gate
from conformance.kernels.registry import get_kernel
from conformance.runtime.pool import KernelRef
from faults.inject import inject
from faults.spec import make_injection

BIT = parse_policy({"name": "bit", "require": "bit_identical"})
ONE = parse_policy({"name": "one", "allow": "within_one_spacing"})
LENIENT = parse_policy(
    {
        "name": "lenient",
        "allow": "within_one_spacing",
        "not_supported": "allow",
        "max_token_flips_above_threshold": None,
        "allow_engine_hash_change": True,
    }
)
#: Small, varied cases: real and pow2 scales, tails, bias, the scale-order ties.
CASES = [
    make_case("ordinary", 0),
    make_case("pow2", 0),
    make_case("tails", 0),
    make_case("bias", 0),
    make_case("epilogue_ties", 0),
]


def _ordered(t: torch.Tensor) -> np.ndarray:
    """Ordered integer of 16-bit float bit patterns (sign-magnitude -> two's order)."""
    u = t.contiguous().view(torch.int16).numpy().astype(np.int64) & 0xFFFF
    mag = u & 0x7FFF
    return np.where(u & 0x8000, -mag, mag)


def _max_spacings(spec, other, ops) -> int:
    kw = dict(out_dtype=ops.out_dtype, bias=ops.bias)
    x = spec.scaled_mm(ops.a.clone(), ops.b.clone(), ops.scale_a.clone(), ops.scale_b.clone(), **kw)
    y = other.scaled_mm(ops.a.clone(), ops.b.clone(), ops.scale_a.clone(), ops.scale_b.clone(), **kw)
    return int(np.abs(_ordered(x) - _ordered(y)).max())


def _expected(dist: int, policy) -> str:
    if dist == 0:
        return "pass"
    if dist == 1 and policy is ONE:
        return "warn"
    return "fail"


def _gate(tmp_path, cand, inc, policy, cases=CASES, **kw):
    from conformance.gate.run import GateOptions

    return run_gate(
        cand,
        inc,
        policy=policy,
        cases=cases,
        out_dir=tmp_path,
        options=GateOptions(model_checks=False, timeout_s=60, **kw),
    )


def test_exact_swap_passes_bit_identity_and_writes_all_three_reports(tmp_path):
    res = _gate(tmp_path, KernelRef("int_mm"), KernelRef("cpu"), BIT)
    assert [d.status for d in res.cases] == ["pass"] * len(CASES)
    assert res.overall["verdict"] == "pass" and res.exit_code == 0
    assert all(d.delta["class"] == "identical" and d.delta["n_differ"] == 0 for d in res.cases)
    paths = write_gate_reports(to_json_dict(res), tmp_path)
    doc = json.loads(paths["json"].read_text())
    assert doc["schema"] == "int8conf.gate" and doc["overall"]["counts"]["pass"] == len(CASES)
    # an explicit case list without C7 / E1 is a reduced suite: the title says so, as check's report does
    head = "PASS on a reduced suite: the default cases (an explicit case list replaced them), the model-level checks"
    assert doc["overall"]["headline"] == head + " (C7, E1) skipped"
    assert f"**{doc['overall']['headline']}**" in paths["md"].read_text()
    suite = ET.parse(paths["junit"]).getroot().find("testsuite")
    # a testcase per case and per serving check (C13-C15: n/a on the CPU, skipped)
    assert suite.get("tests") == str(len(CASES) + 3) and suite.get("failures") == "0"


@pytest.mark.parametrize("fault", ["F1", "F2", "F3", "F4", "F5"])
def test_post_processing_fault_blocked_under_bit_identity_warns_within_one_spacing(tmp_path, fault):
    cpu = get_kernel("cpu")
    faulty = inject(cpu, fault, coverage="all", seed=0)
    dist = [_max_spacings(faulty, cpu, ops) for ops in CASES]
    # the data: every fault is visible on this case set, and somewhere within one spacing
    assert max(dist) >= 1 and 1 in dist, dist
    for policy in (BIT, ONE):
        res = _gate(tmp_path / policy.name, KernelRef("cpu", make_injection(fault)), KernelRef("cpu"), policy)
        want = [_expected(d, policy) for d in dist]
        assert [d.status for d in res.cases] == want, (policy.name, dist)
        assert [d.delta["max_ulp"] for d in res.cases] == dist
        blocked = any(s == "fail" for s in want)
        assert res.overall["verdict"] == ("blocked" if blocked else "pass")
        assert res.exit_code == (1 if blocked else 0)
        if policy is BIT:
            assert blocked
        for d, w in zip(res.cases, want):
            if w == "warn":  # one spacing, allowed: not bit-identical, not blocking
                assert not d.blocking and d.delta["class"] == "within_one_spacing"


@pytest.mark.parametrize("policy", [BIT, ONE, LENIENT], ids=lambda p: p.name)
def test_operand_mismatch_is_blocked_under_every_policy(tmp_path, policy):
    # F9's default variant rewrites the weight scales to powers of two without
    # requantizing: a mismatch on every real-scale case (on a pow2 case it is none)
    real = [c for c in CASES if c.scale_mode != "pow2"]
    res = _gate(tmp_path, KernelRef("cpu", make_injection("F9")), KernelRef("cpu"), policy, cases=real)
    assert res.overall["verdict"] == "blocked" and res.exit_code == 1
    for d in res.cases:
        assert d.status == "fail" and d.blocking
        assert "C2" in [r["check"] for r in d.reasons if r["blocking"]]
        assert {"check": "C2", "incumbent": "pass", "candidate": "fail", "change": "regression"} in d.changes


def test_stale_operand_is_blocked_even_by_the_most_lenient_policy(tmp_path):
    res = _gate(tmp_path, KernelRef("cpu", make_injection("F9.stale")), KernelRef("cpu"), LENIENT, cases=CASES[:2])
    assert [d.status for d in res.cases] == ["fail", "fail"] and res.exit_code == 1


def test_expectations_accept_a_deviation_and_unused_ones_are_reported(tmp_path):
    exps = [
        {"case": "synthetic/epilogue_ties-*", "check": "output", "reason": "known", "owner": "@a"},
        {"layer": "model.layers.0.*", "check": "C8", "reason": "stale", "owner": "@b"},
    ]
    pol = parse_policy({"require": "bit_identical", "expectations": exps})
    # F3 (scale order) changes bits only on the ties case: a plain random case beside it
    cases = [make_case("ordinary", 0, plant=False), CASES[4]]
    res = _gate(tmp_path, KernelRef("cpu", make_injection("F3")), KernelRef("cpu"), pol, cases=cases)
    ties = res.decision("synthetic/epilogue_ties-s0")
    assert ties.status == "warn" and not ties.blocking and ties.expectations_used == [0]
    assert res.overall["verdict"] == "pass"
    assert [e["owner"] for e in res.overall["unused_expectations"]] == ["@b"]
    strict = parse_policy({"require": "bit_identical", "fail_on_unused_expectations": True, "expectations": exps})
    assert (
        _gate(tmp_path, KernelRef("cpu", make_injection("F3")), KernelRef("cpu"), strict, cases=cases).overall[
            "verdict"
        ]
        == "blocked"
    )


def test_declined_case_is_not_supported_and_blocks_only_if_the_policy_says_so(tmp_path):
    cases = [CASES[0], CASES[2]]  # K = 64 runs, K = 37 is declined (k_multiple=8)
    for policy, blocked in ((BIT, True), (LENIENT, False)):
        res = _gate(tmp_path, KernelRef("buggy_kernels:declining_kernel"), KernelRef("cpu"), policy, cases=cases)
        assert [d.status for d in res.cases] == ["pass", "not-supported"]
        assert res.cases[1].blocking is blocked
