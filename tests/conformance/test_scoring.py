"""Scoring against a matrix and the fault signatures, on constructed rows."""

from pathlib import Path

import torch

from conformance.suite.signatures import FailureFeatures, features_of_cell, match_signatures
from conformance.sweep.scoring import observations, totals
from predictions.lock import verify_matrix

V1 = Path(__file__).resolve().parents[2] / "predictions" / "v1.yaml"


def _f4_line(ops, failed: str = "C8") -> str:
    """the F4 signature line for ``ops``, its count derived independently: the elements whose bits differ
    between the F4-injected and the clean CPU kernel's outputs; ``failed``: the checks the failing case fails."""
    from conformance.kernels.registry import get_kernel
    from conformance.kernels.runner import run_kernel
    from faults import inject

    good = get_kernel("cpu")
    a, b = run_kernel(inject(good, "F4", "all", 0), ops).output, run_kernel(good, ops).output
    as_int = {2: torch.int16, 4: torch.int32}[a.element_size()]
    n = int((a.view(as_int) != b.view(as_int)).sum())
    assert n > 0
    return (
        "consistent with F4 output truncation: final conversion rounds toward zero instead of to nearest-even: its "
        f"epilogue reproduces {n} of the {n} differing elements (score 1.00; 1 of 1 cases failing {failed})"
    )


def _rows(fault, mode, verdicts, gt=None):
    gt = gt or {"changed": 5, "max_spacing": 1, "no_op": False, "selected": 5}
    return [
        {
            "layer": "L",
            "fault": fault,
            "coverage": "all",
            "scale_mode": mode,
            "seed": 0,
            "check_id": c,
            "verdict": v,
            "failure_kind": "kernel" if v == "fail" else None,
            "summary": "",
            "evidence": {"max_ulp": 1 if v == "fail" else 0},
            "ground_truth": gt,
        }
        for c, v in verdicts.items()
    ]


def test_false_positives_and_negatives_against_v1_and_na_is_not_scored():
    m = verify_matrix(V1)
    # F4 under own scales: C8 fired (predicted fire: TP), C6 fired (predicted silent: FP),
    # C5 n/a by scale mode (not scored); F2 under pow2: C5 silent (predicted fire: FN) in a no-op cell
    rows = _rows("F4", "own", {"C8": "fail", "C6": "fail", "C5": "n/a", "C1": "pass"})
    rows += _rows("F2", "pow2", {"C5": "pass"}, gt={"changed": 0, "max_spacing": 0, "no_op": True})
    t = totals(observations(rows), m, "v1")["all"]
    assert (t["TP"], t["FP"], t["FN"], t["TN"], t["FN_no_op"], t["scored"]) == (1, 1, 1, 1, 1, 4)


def test_headlines_table_and_totals_count_cells_with_model_rows_interleaved():
    from conformance.sweep.scoring import headlines, observations, predicted, table, tag_totals

    m = verify_matrix(V1)
    model_gt = {"model_level": True}
    rows = _rows("F4", "own", {"C8": "fail", "C5": "n/a", "C6": "pass"})  # C8 alone: counted
    rows += [dict(r, layer="*model*") for r in _rows("F4", "own", {"C7": "fail", "E1": "pass"}, gt=model_gt)]
    rows += [dict(r, layer="M") for r in _rows("F4", "own", {"C8": "fail", "C6": "fail"})]  # C6 fired too
    rows += [dict(r, layer="N") for r in _rows("F2", "own", {"C8": "fail", "C1": "pass"})]  # another fault
    obs = observations(rows)
    h = headlines(obs)
    assert h["c8_adds"] == {"F2": 1, "F4": 1} and h["e1_adds"] == {}
    assert h["per_fault"]["F4"]["layer_cells"] == 2 and h["per_fault"]["F4"]["model_cells"] == 1
    assert h["per_fault"]["F4"]["detected_by"] == {"C6": 1, "C7": 1, "C8": 2}
    scored = predicted(obs, {"v1": m})
    card = table(scored, ["v1"], by_mode=False).set_index(["fault", "check_id"])
    assert card.loc[("F4", "C8"), ["cells", "fired", "silent", "na"]].tolist() == [2, 2, 0, 0]
    assert card.loc[("F4", "C6"), ["fired", "silent", "fp_v1"]].tolist() == [1, 1, 1]
    assert card.loc[("F4", "C5"), "na"] == 1
    t = tag_totals(scored, "v1")
    # v1, scale mode own: C8 fire under F2 / F4 (TP x3), C5 fire (n/a observed: not scored), C6 / C7 / E1
    # silent under F4 (C6 TN and FP, C7 FP, E1 TN), C1 silent under F2 (TN)
    assert t == {
        "core": {"TP": 0, "TN": 2, "FP": 2, "FN": 0, "FN_no_op": 0, "unexpected_applicable": 0, "scored": 4},
        "all": {"TP": 3, "TN": 3, "FP": 2, "FN": 0, "FN_no_op": 0, "unexpected_applicable": 0, "scored": 8},
    }


def test_truncation_signature_names_f4_and_a_clean_run_names_nothing():
    rows = _rows(
        "F4",
        "own",
        {"C8": "fail", "C6": "pass"},
        gt={"direction_vs_declared": {"toward_zero": 7, "away_from_zero": 0, "sign_change": 0}},
    )
    ids = [f for f, _ in match_signatures(features_of_cell(rows))]
    assert "F4" in ids and "F3" not in ids and "F6" not in ids
    line = dict(match_signatures(features_of_cell(rows)))["F4"]
    assert line == "consistent with F4 output truncation: 1-spacing errors, all toward zero"
    assert match_signatures(FailureFeatures()) == []
    pre = FailureFeatures(failed={"C3", "C4", "C8"}, precondition={"C3", "C4"}, max_ulp=30000)
    assert [f for f, _ in match_signatures(pre)] == ["F6"]
    # a kernel that only loses the sign of zero (max spacing 0) matches no post-processing fault
    assert match_signatures(FailureFeatures(failed={"C5", "C8"}, max_ulp=0)) == []
    assert [f for f, _ in match_signatures(FailureFeatures(failed={"C8"}, max_ulp=1))] == ["F1", "F2", "F3", "F5"]


def test_failing_conformance_report_names_the_truncation_signature():
    import pytest

    from conformance.cases import CaptureReplay, make_case
    from conformance.kernels.registry import get_kernel
    from conformance.suite.evaluate import evaluate_case
    from conformance.suite.report import render_markdown, to_json_dict
    from conformance.suite.run import build_result
    from faults import inject

    try:
        ops = make_case("ordinary", seed=0)
    except TypeError:
        pytest.skip("make_case signature changed")
    bad = inject(get_kernel("cpu"), "F4", "all", 0)
    res = build_result(bad, [evaluate_case(bad, ops)], CaptureReplay())
    assert res.verdict == "fail"
    doc = to_json_dict(res)
    assert doc["fault_signatures"] == [_f4_line(ops)]
    assert not any(x.startswith("consistent with F6") for x in doc["fault_signatures"])
    assert "consistent with F4 output truncation" in render_markdown(doc)
    clean = build_result(get_kernel("cpu"), [evaluate_case(get_kernel("cpu"), ops)], CaptureReplay())
    assert to_json_dict(clean)["fault_signatures"] == []


def test_precondition_only_cases_do_not_count_as_failing_cases_in_the_signature_lines():
    import torch

    from conformance.cases import CaptureReplay, make_case
    from conformance.cases.accumulator import large_acc_case
    from conformance.kernels.registry import get_kernel
    from conformance.suite.evaluate import evaluate_case
    from conformance.suite.report import to_json_dict
    from conformance.suite.run import build_result
    from faults import inject

    good = get_kernel("cpu")
    pre = evaluate_case(good, large_acc_case("own", torch.bfloat16))
    # the correct kernel's own large-accumulator case: C4 fires as a precondition only
    assert {c for c, r in pre.checks.items() if r.verdict == "fail"} == {"C4"}
    assert all(r.is_precondition_violation for r in pre.checks.values() if r.verdict == "fail")
    bad = inject(good, "F4", "all", 0)
    res = build_result(bad, [evaluate_case(bad, make_case("ordinary", seed=0)), pre], CaptureReplay())
    sig = to_json_dict(res)["fault_signatures"]
    assert sig == [
        "all failing cases: synthetic cases, M >= 8, K <= 64, N >= 48",  # beside the precondition case (family)
        _f4_line(make_case("ordinary", seed=0)),
    ]
    assert not any(x.startswith(("consistent with F6", "consistent with F7")) for x in sig)


def test_no_signature_line_counts_the_failing_cases():
    from conformance.suite.signatures import no_signature_line

    assert no_signature_line(6) == "the failures match no fault class of the catalogue (6 failing cases)"
    assert no_signature_line(1) == "the failures match no fault class of the catalogue (1 failing case)"


def test_a_kernel_accumulator_off_the_exact_sum_is_named_and_not_called_a_rounding_fault():
    """New-user pass 2026-12-02: a kernel dropping the last K column (or padding K
    with ones) was reported "consistent with F1 ... in-range accumulators" and F7,
    although C3 had found its accumulator off the exact sum."""
    from dataclasses import replace

    from conformance.cases import CaptureReplay, make_case
    from conformance.kernels.registry import get_kernel
    from conformance.suite.evaluate import evaluate_case
    from conformance.suite.report import to_json_dict
    from conformance.suite.run import build_result
    from conformance.suite.signatures import accumulator_line

    assert match_signatures(FailureFeatures(failed={"C3", "C8"}, max_ulp=1, acc_mismatch=True)) == []
    assert match_signatures(FailureFeatures(failed={"C3", "C4"}, precondition={"C4"}, acc_mismatch=True)) == []
    good = get_kernel("cpu")

    def drop_last_k(a, b, scale_a, scale_b, out_dtype=None, bias=None):
        return good.scaled_mm(a[:, :-1], b[:, :-1], scale_a, scale_b, out_dtype, bias)

    def drop_last_k_acc(a, b):
        return good.int_mm(a[:, :-1], b[:, :-1])

    bad = replace(
        good, name="drop_last_k", scaled_mm=drop_last_k, int_mm=drop_last_k_acc, source_digest="", origin="test"
    )
    cr = evaluate_case(bad, make_case("ordinary", seed=0))
    assert cr.checks["C3"].verdict == "fail" and not cr.checks["C3"].is_precondition_violation
    sig = to_json_dict(build_result(bad, [cr], CaptureReplay()))["fault_signatures"]
    assert (
        sig[0]
        == accumulator_line(1, 1)
        == (
            "the kernel's accumulator differs from the exact integer sum (C3) in 1 of 1 failing "
            "cases: a main-loop bug, not a post-processing fault"
        )
    )
    assert not any(
        x.startswith(
            (
                "consistent with F1",
                "consistent with F2",
                "consistent with F3",
                "consistent with F4",
                "consistent with F5",
                "consistent with F7",
            )
        )
        for x in sig
    )


def test_an_accumulator_entry_that_raises_is_not_an_accumulator_mismatch():
    """Re-check pass 2026-12-02: an ``int_mm`` entry that raised counted as "the kernel's
    accumulator differs from the exact sum" and hid the F4 hint of a truncating
    epilogue."""
    from dataclasses import replace

    from conformance.cases import CaptureReplay, make_case
    from conformance.kernels.registry import get_kernel
    from conformance.suite.evaluate import evaluate_case
    from conformance.suite.report import to_json_dict
    from conformance.suite.run import build_result
    from faults import inject

    def refuses(a, b):
        raise NotImplementedError("no accumulator entry for this K")

    bad = replace(inject(get_kernel("cpu"), "F4", "all", 0), int_mm=refuses)
    cr = evaluate_case(bad, make_case("ordinary", seed=0))
    assert cr.checks["C3"].verdict == "fail" and "entry failed" in cr.checks["C3"].summary
    sig = to_json_dict(build_result(bad, [cr], CaptureReplay()))["fault_signatures"]
    assert sig == [_f4_line(make_case("ordinary", seed=0), "C3 or C8")]  # C3: the entry's harness failure


def _signatures(kernel: str, cases) -> list:
    from conformance.kernels.loader import load_module_function
    from conformance.suite.report import fault_signatures
    from conformance.suite.run import run_conformance

    spec = load_module_function(f"buggy_kernels:{kernel}")
    return fault_signatures(run_conformance(spec, cases=cases, property_examples=0, model_checks=False))


def test_a_hint_names_no_fault_class_the_evidence_contradicts():
    """Weight scales cached by N: on the large_acc cases (|acc| >= 2^24, C4 a
    precondition case) the outputs are off by the scale ratio (435 bf16
    spacings), far beyond what a float32 accumulator over K = 2085 can move
    them, so F7 is contradicted; so is F7 where a failing element has
    |acc| < 2^24 (partial_sums: final |acc| < 400)."""
    import buggy_kernels

    from conformance.cases.families import family_cases

    buggy_kernels._SCALES_BY_N.clear()
    cases = family_cases(["large_acc", "partial_sums"])
    assert _signatures("scales_cached_by_n", cases) == [
        "the failures match no fault class of the catalogue (15 failing cases)"
    ]


def _differing(kernel: str, ops) -> int:
    """Elements whose bits differ between buggy_kernels.<kernel> and its declared contract's reference on ``ops``."""
    import buggy_kernels

    from conformance.kernels.declared import declared_reference
    from conformance.kernels.loader import load_module_function
    from reference.bits import bits_of

    out = getattr(buggy_kernels, kernel)(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.out_dtype, ops.bias)
    ref = declared_reference(load_module_function(f"buggy_kernels:{kernel}"), ops, "cpu").output
    return int((bits_of(out) != bits_of(ref)).sum())


def test_a_float32_accumulator_is_still_consistent_with_f7():
    """The control: a kernel accumulating in float32 (BLOCK_K = 32 tiles) on a large_acc case (|acc| >= 2^24)
    keeps its F7 hint, now with F7's emulation reproducing every differing element."""
    from conformance.cases.accumulator import large_acc_case

    ops = large_acc_case("pow2", torch.float32)
    n = _differing("fp32_accumulator_no_int_mm", ops)
    assert n > 0
    assert _signatures("fp32_accumulator_no_int_mm", [ops]) == [
        "consistent with F7 fp32 inexact accumulator: an accumulator reaches |acc| >= 2^24, so int32->float32 is no "
        f"longer exact: its emulation reproduces {n} of the {n} differing elements (score 1.00; 1 of 1 cases "
        "failing C5 or C8)"
    ]


def test_partial_sums_past_2_24_name_f7_by_its_emulation_and_a_dropped_k_tail_does_not():
    """partial_sums cases: every final |acc| < 2^24 (C4 passes), partial sums past it. A float32 running sum rounds
    there; F7's emulation (float32 running sum over 32-deep tiles) reproduces every differing element, where the
    predicate alone (C4 a precondition) could not name it. A kernel dropping the K tail fails the same cases with
    an error no float32 sum gives: no class."""
    from conformance.cases.families import family_cases

    cases = family_cases(["partial_sums"])
    n = sum(_differing("fp32_accumulator_no_int_mm", ops) for ops in cases)
    failing = sum(_differing("fp32_accumulator_no_int_mm", ops) > 0 for ops in cases)
    assert n > 0 and failing > 0
    assert _signatures("fp32_accumulator_no_int_mm", cases) == [
        "consistent with F7 fp32 inexact accumulator: an accumulator reaches |acc| >= 2^24, so int32->float32 is no "
        f"longer exact: its emulation reproduces {n} of the {n} differing elements (score 1.00; {failing} of "
        f"{failing} cases failing C5, C6 or C8)"
    ]
    dropped = sum(_differing("k_tail_dropped", ops) > 0 for ops in cases)
    assert _signatures("k_tail_dropped", cases) == [
        f"the failures match no fault class of the catalogue ({dropped} failing cases)"
    ]


def test_an_fp8_accumulator_failure_names_f10():
    ids = [f for f, _ in match_signatures(FailureFeatures(failed={"C11", "C12"}))]
    assert ids == ["F10"]
    assert [f for f, _ in match_signatures(FailureFeatures(failed={"C12", "C8"}, max_ulp=3))] == ["F10"]
    # a one-spacing epilogue fault also leaves C12's bound when the accumulator is exact: not F10
    assert "F10" not in [f for f, _ in match_signatures(FailureFeatures(failed={"C12", "C8"}, max_ulp=1))]
    assert "F10" not in [f for f, _ in match_signatures(FailureFeatures(failed={"C2", "C12"}))]


def test_f7_is_contradicted_only_where_no_float32_partial_sum_reaches_2_24():
    from conformance.suite.signatures import contradicted_classes

    worst = {"acc": 300, "out": 300.0, "ref": 296.0}  # a small final sum, 4 units off
    assert "F7" in contradicted_classes(worst, 4096, "torch.float32", False)  # sum |a*b| unknown
    assert "F7" in contradicted_classes(worst, 4096, "torch.float32", False, 2**24 - 1)
    assert "F7" not in contradicted_classes(worst, 4096, "torch.float32", False, 2**24)
    # the float32 bound (k-1) u / (1 - (k-1) u) * S / |acc| reads S = sum |a*b| where known: for S = 2^26 and
    # |acc| = 2^25 it allows 4.88e-4 relative (+ the epilogue's), one 2^14 step; S = 2^25 allows half that
    big = {"acc": 2**25, "out": float(2**25 + 2**14), "ref": float(2**25)}
    assert "F7" not in contradicted_classes(big, 4096, "torch.float32", False, 2**26)
    assert "F7" in contradicted_classes(big, 4096, "torch.float32", False, 2**25)
