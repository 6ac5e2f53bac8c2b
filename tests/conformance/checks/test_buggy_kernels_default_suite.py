"""One buggy kernel per bug class the verdict checks and C9 exist to catch,
each failed by the DEFAULT suite; the correct control and the exact built-ins
pass.

The default suite (``int8conf check``) is every synthetic case, the shape
sweep and every trigger-condition family (``conformance.cases.families``),
plus C9 over those cases. Its verdict fails when any case fails, so a kernel
the default suite's own trigger family fails is failed by the default suite:
these tests evaluate each kernel on the default family that reaches its bug
(the whole default suite takes about a minute per kernel on 2 cores; its
full runs are recorded in the README section "True verdicts, overflow
declaration, C9 batch invariance"). C9 runs on the full default case list.
"""

from __future__ import annotations

import functools

import pytest

from conformance.cases.families import FAMILIES, family_cases
from conformance.checks.batch_invariance import check_batch_invariance
from conformance.kernels.loader import load_module_function
from conformance.kernels.registry import get_kernel
from conformance.suite.run import run_conformance


@functools.lru_cache(maxsize=None)
def _family(name: str) -> tuple:
    assert name in FAMILIES  # a default family (suite.default_cases takes every one)
    return tuple(family_cases([name]))


def _verdict(kernel: str, family: str):
    spec = load_module_function(f"buggy_kernels:{kernel}")
    return run_conformance(spec, cases=list(_family(family)), property_examples=0, model_checks=False)


@pytest.mark.parametrize(
    "kernel, family, failing",
    [
        ("signed_zero_lost", "signed_zero", {"C8"}),  # +0 where -0 = 0 * (negative scale)
        ("saturating_declares_wrap", "int32_overflow", {"C3", "C8"}),  # clamps, declares wrap
        ("bf16_when_fp16", "subnormal", {"IF"}),  # an interface failure (dtype) on the fp16 cases
        ("decode_path_order", "ties", {"C8", "C9"}),  # M = 1 path: other scale order
        ("stale_accumulator", "ties", {"C8", "C9"}),  # workspace not reset between calls
    ],
)
def test_default_suite_fails_the_buggy_kernel(kernel, family, failing):
    res = _verdict(kernel, family)
    assert res.verdict == "fail"
    assert failing <= set(res.overall["failed_checks"]), res.overall["summary"]


def test_dtype_bug_is_reported_as_an_interface_failure():
    res = _verdict("bf16_when_fp16", "subnormal")
    r = res.check("IF")
    assert r.verdict == "fail" and r.evidence["failure_kind"] == "interface"
    assert r.summary.startswith("interface: kernel returned dtype torch.bfloat16, expected torch.float16 on ")
    # the numeric checks did not run on those cases; C9's own calls of its fp16 / fp32 probes broke the interface too,
    # and C9 says so as an interface failure, not as batch dependence
    assert res.overall["failed_checks"] == ["IF", "C9"]
    c9 = res.check("C9")
    assert c9.evidence["failure_kind"] == "interface" and c9.evidence["n_differences"] == 0


@pytest.mark.parametrize(
    "kernel, families", [("saturating_declared", ("int32_overflow",)), ("good_cutlass", ("signed_zero", "ties"))]
)
def test_correct_kernels_pass_the_trigger_families(kernel, families):
    for family in families:
        res = _verdict(kernel, family)
        assert res.verdict == "pass", (family, res.overall["summary"])


@pytest.mark.parametrize("name", ["cpu", "int_mm"])
def test_exact_builtins_pass_the_int32_overflow_family(name):
    # before: C6/C8 compared their wrapped accumulator with the unwrapped sum and failed
    res = run_conformance(
        get_kernel(name), cases=list(_family("int32_overflow")), property_examples=0, model_checks=False
    )
    assert res.verdict == "pass", (name, res.overall["summary"])
    assert res.overall["precondition_violations"] == []  # built to violate them:
    assert res.overall["precondition_cases"] == {"C3": 2, "C4": 2}  # precondition cases
    assert res.check("C8").verdict == res.check("C9").verdict == "pass"


def test_c9_on_the_default_cases_catches_decode_path_and_stale_accumulator():
    cases = [c for f in ("ties", "m_n_edges", "k_residues") for c in _family(f)]
    for kernel, context in (
        ("decode_path_order", "alone (M=1)"),
        ("stale_accumulator", "repeat (same inputs, second call)"),
    ):
        r = check_batch_invariance(load_module_function(f"buggy_kernels:{kernel}"), cases)
        assert r.verdict == "fail" and r.evidence["differences"][0]["context"] == context
        # the fault shows on a default case, not only on C9's own probes
        assert any(not d["case"].startswith("c9/") for d in r.evidence["differences"])
