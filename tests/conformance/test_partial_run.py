"""The ``partial`` record of conformance.json / gate.json
(``conformance.runtime.partial_run``): present and false on a complete run, true with
its reason, counts and stage on a stopped or partly selected one; the notes
and the Markdown heading are built from it."""

from __future__ import annotations

import pytest

from conformance.cases import make_case
from conformance.kernels.registry import get_kernel
from conformance.runtime.partial_run import complete_run, is_partial, partial_note, partial_run
from conformance.suite.evaluate import evaluate_case
from conformance.suite.plan import given_cases
from conformance.suite.report import render_markdown, to_json_dict
from conformance.suite.run import build_result, run_conformance


def test_records_and_their_notes():
    assert complete_run(22) == {
        "partial": False,
        "reason": None,
        "cases_ran": 22,
        "cases_total": 22,
        "stage": None,
        "note": None,
    }
    assert partial_run(3, 22, interrupted=True, stage="fixed cases") == {
        "partial": True,
        "reason": "interrupted",
        "cases_ran": 3,
        "cases_total": 22,
        "stage": "fixed cases",
        "note": "partial run: interrupted after 3 of 22 fixed cases; the verdict covers only what finished",
    }
    assert partial_run(22, 22, interrupted=True, stage="C9")["note"] == (
        "partial run: interrupted after 22 of 22 fixed cases, during C9; the verdict covers only what finished"
    )
    assert partial_run(5, 22, kind="plugin") == {
        "partial": True,
        "reason": "subset",
        "cases_ran": 5,
        "cases_total": 22,
        "stage": None,
        "note": "partial run: 5 of 22 fixed cases ran (pytest selection or early stop); the verdict covers only those",
    }
    assert partial_run(5, 22, kind="plugin", interrupted=True)["note"] == (
        "partial run: 5 of 22 fixed cases ran (interrupted); the verdict covers only those"
    )
    assert partial_run(4, 22, kind="gate", interrupted=True, stage="cases")["note"] == (
        "partial run: 4 of 22 cases decided (interrupted)"
    )
    assert partial_run(22, 22, kind="gate", interrupted=True, stage="C7")["note"] == (
        "partial run: 22 of 22 cases decided (interrupted during C7)"
    )
    assert partial_run(4, 22, kind="gate")["note"] == (
        "partial run: 4 of 22 cases decided (pytest selection or early stop)"
    )
    # a stage without a stop is meaningless: dropped
    assert partial_run(22, 22, stage="C9") == complete_run(22)
    with pytest.raises(ValueError, match="kind must be one of"):
        partial_run(1, 2, kind="sweep")


def test_is_partial_reads_the_record_and_older_reports_notes():
    rec = partial_run(1, 2, interrupted=True, stage="fixed cases")
    assert is_partial({"partial": rec, "notes": []}) and partial_note({"partial": rec}) == rec["note"]
    assert not is_partial({"partial": complete_run(2), "notes": ["other"]})
    assert partial_note({"partial": complete_run(2)}) is None
    old = {"notes": ["x", "partial run: 3 of 5 fixed cases ran"]}  # written before the record
    assert is_partial(old) and partial_note(old) == "partial run: 3 of 5 fixed cases ran"


def test_a_complete_run_says_partial_false_in_its_json():
    cases = [make_case("ordinary", 0), make_case("tails", 0)]
    res = run_conformance("cpu", cases=cases, property_examples=2, model_checks=False)
    doc = to_json_dict(res)
    # the property examples join the cases but are not counted: 2 fixed cases
    assert len(doc["cases"]) == 4
    assert doc["partial"] == {
        "partial": False,
        "reason": None,
        "cases_ran": 2,
        "cases_total": 2,
        "stage": None,
        "note": None,
    }
    assert doc["notes"] == [] and "PARTIAL RUN" not in render_markdown(doc)


@pytest.mark.parametrize("kind", ["suite", "plugin"])
def test_an_interrupted_record_makes_a_passing_overall_incomplete_and_a_subset_does_not(kind):
    cases = [make_case("ordinary", 0), make_case("tails", 0)]
    spec = get_kernel("cpu")
    results = [evaluate_case(spec, c, device="cpu") for c in cases]
    stopped = build_result(spec, results, given_cases(cases), partial=partial_run(2, 5, interrupted=True, kind=kind))
    assert stopped.overall["headline"] == "INCOMPLETE (interrupted, not a PASS)"
    assert stopped.overall["verdict"] == "incomplete"  # a JSON reader never sees "pass"
    assert stopped.overall["summary"] == (
        "not a verdict: interrupted after 2 of 5 fixed cases; no check failed on what ran"
    )
    assert (stopped.overall["cases_total"], stopped.overall["cases_planned"]) == (2, 5)
    subset = build_result(spec, results, given_cases(cases), partial=partial_run(2, 5, kind=kind))
    assert subset.overall["headline"] == "PASS" and "cases_planned" not in subset.overall
    assert subset.overall["verdict"] == "pass"
