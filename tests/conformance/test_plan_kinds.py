"""The kernel kind (``KernelSpec.kind``) keys the plan-kind table (``suite.plan.PLANS``) and gives the fault
catalogue's kernel kind; a reduced suite names only what the kernel's plan kind has."""

from __future__ import annotations

import types

from conformance.kernels.registry import get_kernel
from conformance.kernels.spec import BLOCK, FP8_KIND, PER_TOKEN, ZERO_POINT
from conformance.suite.plan import PLANS, afforded_cases, reduced_suite
from faults.catalogue import kernel_kind

SERVING = "the serving checks (C13, C14, C15)"


def test_each_builtin_family_has_its_kind_for_the_plan_and_the_fault_catalogue():
    specs = [get_kernel(n) for n in ("cpu", "fp8-cpu", "block-cpu", "block-fp8-cpu", "azp-cpu")]
    assert [s.kind for s in specs] == [PER_TOKEN, FP8_KIND, BLOCK, BLOCK, ZERO_POINT]
    assert list(PLANS) == [PER_TOKEN, FP8_KIND, BLOCK, ZERO_POINT]
    assert [kernel_kind(s) for s in specs] == ["per-channel", "per-channel", "block", "block", "zero-point"]


def test_reduced_suite_names_only_what_the_plan_kind_has():
    # captures off, tile edges off, no property examples, no serving, no model checks
    args = (False, False, 0, False, "int8")
    assert reduced_suite(*args, serving_checks=False) == [
        "the tile-edge shapes and case families",
        "layer-capture replay",
        "the property test",
        SERVING,
        "the model-level checks (C7, E1)",
    ]
    assert reduced_suite(*args, serving_checks=False, kind=BLOCK) == [SERVING]  # C13-C15 run on a block sample
    assert reduced_suite(*args, serving_checks=False, kind=ZERO_POINT) == []  # every other check n/a there


def test_the_gate_and_check_leave_out_the_same_native_only_cases_on_the_cpu():
    """check (SuiteState) and the gate both take their CPU case set from plan.afforded_cases: a stored check report
    and a gate run then hold the same cases (a full check baseline was refused: 'N only in this run')."""
    case = lambda name, native: types.SimpleNamespace(name=name, meta={"native_only": True} if native else {})  # noqa: E731
    cases = [case("a", False), case("big", True), case("b", False)]
    kept, out = afforded_cases(get_kernel("int_mm"), "cpu", cases)  # declares cuda: not native on the CPU
    assert [c.name for c in kept] == ["a", "b"] and [c.name for c in out] == ["big"]
    kept, out = afforded_cases(get_kernel("cpu"), "cpu", cases)  # CPU-only: the CPU is where it runs natively
    assert [c.name for c in kept] == ["a", "big", "b"] and out == []
    kept, out = afforded_cases(get_kernel("cpu"), "cpu", cases, large=False)  # --no-large-cases
    assert [c.name for c in kept] == ["a", "b"] and [c.name for c in out] == ["big"]


def test_a_run_leaving_large_cases_out_says_so_in_its_headline():
    """A GPU kernel on the CPU (int_mm) and --no-large-cases (cpu) both name the left-out cases in the reduced
    suite; a CPU-only kernel (cpu) runs them: nothing left out."""
    from conformance.suite.plan import SuiteState, given_cases, large_cases_left_out

    case = lambda name, native: types.SimpleNamespace(name=name, meta={"native_only": True} if native else {})  # noqa: E731
    cases = [case("a", False), case("big", True)]
    gpu = SuiteState(get_kernel("int_mm"), cases, given_cases(cases), device="cpu")
    assert (
        gpu.skipped
        == [large_cases_left_out(1)]
        == ["1 large case (native only: they run where the kernel runs on a GPU)"]
    )
    assert SuiteState(get_kernel("cpu"), cases, given_cases(cases), device="cpu").skipped == []
    asked = SuiteState(get_kernel("cpu"), cases, given_cases(cases), device="cpu", large_cases=False)
    assert asked.skipped == ["1 large case (--no-large-cases)"] and asked.cases == cases[:1]


def test_the_cpu_note_names_each_native_only_case_by_its_regime():
    """A covering row by its M / N / K regimes, the regimes family's large output by M*N (both left out on the CPU)."""
    from conformance.cases.covering import covering_case, covering_rows
    from conformance.cases.regimes import CPU_OUTPUTS, OUTPUTS, regime_case
    from conformance.suite.plan import native_regime

    m, k, n = OUTPUTS[-1]
    big = regime_case("MN", m, k, n, 1)
    assert big.meta["native_only"] and m * n > CPU_OUTPUTS
    assert native_regime(big) == f"M*N {m * n} (4097 x 4096)"
    row = next(i for i, r in enumerate(covering_rows()) if (r["m"], r["n"], r["k"]) == ("large", "wide", "deep"))
    assert native_regime(covering_case(covering_rows()[row], row)) == "M large / N wide / K deep"
