"""The failure signature ranks the consistent fault classes by how well each explains the evidence (issue 42, item 4):
every fault class the sweep injects into the cpu kernel comes out first, and so does the class of three realistic
bugs (round-toward-zero above an M, fused scales, an injected F3), with the pattern the failing cases share."""

from __future__ import annotations

import pytest

from conformance.cases.synthetic import synthetic_cases
from conformance.checks.result import CheckResult
from conformance.kernels.registry import get_kernel
from conformance.suite.evaluate import evaluate_case
from conformance.suite.plan import given_cases
from conformance.suite.run import build_result
from conformance.suite.signatures import ClassRank, failing_pattern, interface_line, rank_classes, signature_lines
from faults import faults_for, inject, prepare_case


def _result(spec, cases):
    return build_result(spec, [evaluate_case(spec, c, device="cpu") for c in cases], given_cases(cases))


def _failing(res):
    return [cr for cr in res.cases if cr.kernel_failures]


#: one seed of every synthetic kind: bias and none, power-of-two and real scales, bf16 and fp16 out (11 cases)
CASES = synthetic_cases(seeds=(0,))
#: the int8 classes the sweep injects that a run can detect (F8 changes nothing; F10 is e4m3-only)
DETECTABLE = [f.id for f in faults_for("int8") if f.id != "F8"]


def test_every_detectable_int8_class_is_listed():
    assert DETECTABLE == ["F1", "F2", "F3", "F4", "F5", "F6", "F7", "F9"]


@pytest.mark.parametrize("fault", DETECTABLE)
def test_an_injected_fault_is_ranked_first(fault):
    spec = inject(get_kernel("cpu"), fault, "all", 0)
    if fault in ("F6", "F7"):  # precondition faults run on cases prepared for them (two suffice)
        res = _result(spec, [prepare_case(c, fault, "all", 0) for c in CASES[:2]])
        # the kernel is right (C8 0 ulp): only the operands leave the precondition, which C3 / C4 flag, and the
        # cases rank the fault first (C6 once failed these runs: a standard contract judged against a_then_w alone)
        assert res.verdict == "pass" and res.overall["precondition_violations"] == {"F6": ["C3", "C4"]}.get(
            fault, ["C4"]
        )
        ranks = rank_classes(res.cases)
        assert ranks[0].fault == fault and ranks[0].score == 1.0
        return
    res = _result(spec, CASES)
    assert res.verdict == "fail"
    ranks = rank_classes(_failing(res))
    assert ranks[0].fault == fault, [(r.fault, round(r.score, 3)) for r in ranks]
    assert ranks[0].score == 1.0
    assert all(r.score < 1.0 for r in ranks[1:])
    line = next(x for x in signature_lines(res) if x.startswith("consistent with"))
    assert line.startswith(f"consistent with {fault} ")


@pytest.mark.parametrize("fault", ["F1", "F3", "F4", "F5"])
def test_a_fault_on_one_percent_of_the_elements_is_ranked_first_too(fault):
    res = _result(inject(get_kernel("cpu"), fault, "1%", 0), CASES)
    assert rank_classes(_failing(res))[0].fault == fault


def test_round_toward_zero_above_an_m_is_f4_first_with_its_pattern():
    import buggy_kernels

    assert buggy_kernels.truncates_from_m32 is not None
    res = _result(get_kernel("buggy_kernels:truncates_from_m32"), synthetic_cases())
    failing = _failing(res)
    assert sorted(cr.case for cr in failing) == ["synthetic/epilogue_ties-s0", "synthetic/epilogue_ties-s1"]
    sig = signature_lines(res)
    assert sig[0] == ("all failing cases: bf16 out, no bias, real (not power-of-two) scales, M >= 32, K >= 1024")
    n = sum(cr.fault_explanation["n_differ"] for cr in failing)
    assert sig[1] == (
        "consistent with F4 output truncation: final conversion rounds toward zero instead of to nearest-even: its "
        f"epilogue reproduces {n} of the {n} differing elements (score 1.00; 2 of 2 cases failing C8)"
    )


def test_fused_scales_are_f5_first():
    res = _result(get_kernel("buggy_kernels:fused_scales"), CASES)
    ranks = rank_classes(_failing(res))
    assert ranks[0].fault == "F5" and ranks[0].score > ranks[1].score


def test_interface_failures_are_named_not_offered_a_fault_class():
    cases = CASES[:3]
    res = _result(get_kernel("buggy_kernels:returns_none"), cases)
    assert signature_lines(res) == [interface_line(3)]
    assert interface_line(3) == (
        "interface failure on 3 cases (check IF): the kernel's call broke the interface there (its output or an "
        "operand; IF says which), so no numeric fault class is offered for them"
    )


def test_a_class_line_names_the_checks_its_failing_cases_fail():
    """The case count of a class line says what it counts: a case failing only C10 (no numeric difference) is one
    of the failing cases, named among the checks they fail, and one the class does not explain."""
    f4 = inject(get_kernel("cpu"), "F4", "all", 0)
    crs = [evaluate_case(f4, c, device="cpu") for c in CASES[:2]] + [evaluate_case(get_kernel("cpu"), CASES[2])]
    assert [sorted(r.check_id for r in cr.kernel_failures) for cr in crs] == [["C8"], ["C5", "C8"], []]
    crs[2].checks["C10"] = CheckResult("C10", "call_independence", "fail", "differs after another call")
    res = build_result(f4, crs, given_cases(CASES[:3]))
    line = next(x for x in signature_lines(res) if x.startswith("consistent with F4 "))
    assert line.endswith("(score 0.67; 2 of 3 cases failing C5, C8 or C10)")


def test_a_class_explaining_at_most_half_of_the_failing_cases_is_named_partly_consistent():
    few, most = ClassRank("F4", 0.08, 0.08, 1), ClassRank("F4", 0.6, 0.6, 5)
    assert few.line(8, ["C8"]).startswith("partly consistent with F4 ")
    assert few.line(8, ["C8"]).endswith("(score 0.08; 1 of 8 cases failing C8)")
    assert most.line(8, ["C8"]).startswith("consistent with F4 ")


def test_a_class_whose_epilogue_leaves_differing_elements_unexplained_is_partly_consistent():
    """New-user trial 14: an fp16 overflow threshold off by one read "consistent with F2 double rounding (score
    0.62)": F2's epilogue reproduced 62 % of the differing elements, so it is at most part of the story."""
    some = ClassRank("F2", 0.62, 0.62, 8, explained=62, differ=100)
    every = ClassRank("F2", 1.0, 1.0, 8, explained=100, differ=100)
    assert some.line(8, ["C8"]).startswith("partly consistent with F2 double rounding: ")
    assert "reproduces 62 of the 100 differing elements (score 0.62; 8 of 8 cases failing C8)" in some.line(8, ["C8"])
    assert every.line(8, ["C8"]).startswith("consistent with F2 ")


def test_a_bound_that_holds_only_with_one_scale_form_is_named_with_that_form():
    """A per-token-scale bug past M = 64: per-tensor-scale cases pass at M = 128, so M >= 100 is no bound alone;
    among the dense-scale_a cases it is, and the pattern names the conjunction."""
    import types

    import torch

    def case(form: str, m: int, scale_b: str = "dense", bias: str = "none"):
        lay = {"a": "dense", "b": "dense", "scale_a": form, "scale_b": scale_b, "bias": bias}
        return types.SimpleNamespace(
            out_dtype=torch.bfloat16,
            bias=bias != "none",
            scale_mode="real",
            source="family",
            shape=(m, 64, 32),
            run_manifest={"extra": {"operand_layouts": lay}},
        )

    passing = [case("scalar", 128), case("scalar", 8), case("dense", 8)]
    failing = [case("dense", 100), case("dense", 128)]
    assert failing_pattern(passing + failing, failing) == "all failing cases: scale_a dense, M >= 100"
    passing.append(case("dense", 256))  # a dense case past the failing ones passes: no bound, no form named
    assert failing_pattern(passing + failing, failing) is None
    # second trial of session 14: a per-tensor weight scale and a strided bias were never named
    passing, failing = [case("dense", 8), case("dense", 8, bias="dense")], [case("dense", 8, "scalar", "strided")]
    assert failing_pattern(passing + failing, failing) == "all failing cases: with bias, scale_b scalar, bias strided"
    # trial of session 15: every failing case had both scales strided, no passing one did; only "planted-family"
    failing = [case("strided", 8, "strided"), case("strided", 64, "strided")]
    passing = [case("dense", 8), case("strided", 8), case("dense", 64, "strided")]
    assert failing_pattern(passing + failing, failing) == "all failing cases: scale_a strided, scale_b strided"


def test_an_output_size_bug_is_bounded_by_m_times_n_where_no_dimension_alone_is():
    """A path taken past 2^23 output elements (helper trial of session 15): M = 8191 and N = 65536 pass with the
    other dimension small, so neither M nor N bounds the failing case; M*N does."""
    import types

    import torch

    def case(m: int, k: int, n: int):
        lay = {"a": "dense", "b": "dense", "scale_a": "dense", "scale_b": "dense", "bias": "none"}
        return types.SimpleNamespace(
            out_dtype=torch.float16,
            bias=False,
            scale_mode="real",
            source="family",
            shape=(m, k, n),
            run_manifest={"extra": {"operand_layouts": lay}},
        )

    passing = [case(8191, 32, 16), case(3, 32, 65536), case(2049, 32, 2048), case(16, 4096, 16)]
    failing = [case(4097, 32, 4096)]
    assert failing_pattern(passing + failing, failing) == f"all failing cases: M*N >= {4097 * 4096}"
    passing.append(case(4096, 32, 4097))  # as large an output passes: no bound
    assert failing_pattern(passing + failing, failing) is None


def test_f10_by_its_predicate_alone_is_not_named_where_c11_measured_the_accumulator_exact():
    """An e4m3 decode bug (448 read as 416) fails C12 by many spacings, which F10's predicate reads as a narrow
    accumulator; C11 measured every declared bit kept, so F10 is not named. An emulated F10 (elements reproduced)
    and a failing C11 keep it."""
    import types

    from conformance.checks.result import CheckResult, Verdict
    from conformance.suite.signatures import withdrawn

    def result(c11: str):
        return types.SimpleNamespace(checks=[CheckResult("C11", "fp8_accumulator", c11, "", {})])

    predicate_only, emulated = ClassRank("F10", 1.0, 1.0, 3), ClassRank("F10", 1.0, 1.0, 3, explained=9, differ=9)
    assert withdrawn(predicate_only, result(Verdict.PASS))
    assert not withdrawn(predicate_only, result(Verdict.FAIL))
    assert not withdrawn(emulated, result(Verdict.PASS))
    assert not withdrawn(ClassRank("F2", 1.0, 1.0, 3), result(Verdict.PASS))
    # trial of session 15: "partly consistent with F7 ... reproduces 0 of 19514641 differing elements"
    assert withdrawn(ClassRank("F7", 0.04, 0.0, 2, explained=0, differ=19514641), result(Verdict.FAIL))
    assert not withdrawn(ClassRank("F7", 0.04, 0.01, 2, explained=5, differ=19514641), result(Verdict.FAIL))
