"""Every shipped example policy (examples/policies/) does what its comment
says, on a legal swap between two declared contracts and on a faulty
candidate (issue 31, item 1)."""

from pathlib import Path

import pytest
import torch

from conformance.cases import make_case
from conformance.cases.tile_edges import tile_edge_cases
from conformance.gate.policy import load_policy
from conformance.gate.run import GateOptions, run_gate
from conformance.kernels.runner import run_kernel
from conformance.runtime.pool import KernelRef
from faults.spec import make_injection

POLICIES = Path(__file__).resolve().parents[3] / "examples" / "policies"
#: pow2_bias: power-of-two scales with a bias (the bias point still differs);
#: tile_edges/M127xK127xN127: the bias cancels the product (planted, max 15334 spacings);
#: ordinary-s0: planted scale-order ties (the contracts' scale orders differ there).
CASES = [make_case(n, 0) for n in ("ordinary", "pow2", "bias", "pow2_bias", "fp16_out", "epilogue_ties")] + [
    tile_edge_cases()[9]
]
NAMES = [
    "synthetic/ordinary-s0",
    "synthetic/pow2-s0",
    "synthetic/bias-s0",
    "synthetic/pow2_bias-s0",
    "synthetic/fp16_out-s0",
    "synthetic/epilogue_ties-s0",
    "tile_edges/M127xK127xN127",
]
#: good_triton: exact emulation of the triton contract (a_then_w, bias after the rounding).
LEGAL = KernelRef("buggy_kernels:good_triton")
FAULTY = KernelRef("cpu", make_injection("F4"))  # truncation instead of RNE: one spacing, off its contract


def _gate(tmp_path, cand, policy, cases=CASES):
    return run_gate(
        cand,
        KernelRef("cpu"),
        policy=load_policy(POLICIES / f"{policy}.yaml"),
        cases=cases,
        out_dir=tmp_path,
        options=GateOptions(model_checks=False),
    )


def _statuses(res):
    return {d.item: d.status for d in res.cases}


def test_every_example_policy_is_tested_here():
    assert sorted(p.stem for p in POLICIES.glob("*.yaml")) == sorted(EXPECTED)
    reduced_ok = {p.stem for p in POLICIES.glob("*.yaml") if load_policy(p).allow_reduced_baseline}
    assert reduced_ok == {"bit-identity-quick-baseline"}


P, W, F = "pass", "warn", "fail"
#: policy -> (legal swap: statuses, exit code), (faulty candidate: statuses, exit code)
EXPECTED = {
    # same contract only: the legal swap is blocked wherever the two contracts give other bits
    "bit-identity": (([F, P, F, F, F, F, F], 1), ([F] * 7, 1)),
    # the same rules; only a reduced --baseline is accepted too (test_gate_baseline)
    "bit-identity-quick-baseline": (([F, P, F, F, F, F, F], 1), ([F] * 7, 1)),
    # one spacing, whatever the contracts: bias cancellation (> 1 spacing) blocks
    "one-spacing-everywhere": (([W, P, F, F, F, W, F], 1), ([W] * 7, 0)),
    # different legal contracts: every contract difference warns; F4 blocks on pow2 scales
    "one-spacing": (([W, P, W, W, W, W, W], 0), ([W, F, W, F, W, W, W], 1)),
    # the same, with expectation 0 accepting the pow2_bias case
    "with-expectations": (([W, P, W, W, W, W, W], 0), ([W, F, W, W, W, W, W], 1)),
}


@pytest.mark.parametrize("policy", sorted(EXPECTED))
def test_example_policy_on_a_legal_swap_and_on_a_faulty_candidate(tmp_path, policy):
    (legal, legal_rc), (faulty, faulty_rc) = EXPECTED[policy]
    res = _gate(tmp_path / "legal", LEGAL, policy)
    assert (_statuses(res), res.exit_code) == (dict(zip(NAMES, legal)), legal_rc)
    res_f = _gate(tmp_path / "faulty", FAULTY, policy)
    assert (_statuses(res_f), res_f.exit_code) == (dict(zip(NAMES, faulty)), faulty_rc)
    if policy == "with-expectations":
        assert [e["index"] for e in res.overall["unused_expectations"]] == [0, 1]
        assert res_f.decision("synthetic/pow2_bias-s0").expectations_used == [0]
        assert [e["index"] for e in res_f.overall["unused_expectations"]] == [1]


def test_a_legal_difference_is_reported_truthfully_under_every_policy(tmp_path):
    """The reason gives the measured difference and says the two declared
    contracts allow it, whether the policy accepts it or not."""
    edge = [CASES[-1]]
    incumbent = run_kernel(KernelRef("cpu").resolve(), edge[0]).output
    candidate = run_kernel(LEGAL.resolve(), edge[0]).output
    n = int((incumbent.view(torch.int16) != candidate.view(torch.int16)).sum())  # bf16 out: bits as int16
    text = f"{n}/16129 elements differ from the incumbent's output (max 15334 spacings)"
    legal = "a difference the two declared contracts allow (C8 passes for both kernels)"
    ok = _gate(tmp_path / "ok", LEGAL, "one-spacing", edge).cases[0].reasons
    assert ok == [
        {
            "check": "output",
            "blocking": False,
            "expected": None,
            "text": f"{text}; {legal}: allowed by the policy (contract_difference)",
        }
    ]
    no = _gate(tmp_path / "no", LEGAL, "one-spacing-everywhere", edge).cases[0].reasons
    assert no == [
        {
            "check": "output",
            "blocking": True,
            "expected": None,
            "text": f"{text}: more than one spacing; {legal}, but the policy has no contract_difference rule",
        }
    ]


def test_same_contract_swap_passes_bit_identity(tmp_path):
    res = _gate(tmp_path, KernelRef("int_mm"), "bit-identity")
    assert (set(_statuses(res).values()), res.exit_code) == ({P}, 0)


def test_builtin_triton_replaces_cpu_under_one_spacing(tmp_path):
    """The built-in triton (under the interpreter on a CPU) on the two bias cases."""
    res = _gate(tmp_path, KernelRef("triton"), "one-spacing", CASES[2:4])
    assert (_statuses(res), res.exit_code) == ({"synthetic/bias-s0": W, "synthetic/pow2_bias-s0": W}, 0)
    assert [d.delta["max_ulp"] for d in res.cases] == [15468, 15208]  # planted cancellation
