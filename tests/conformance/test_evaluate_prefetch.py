"""evaluate_case's output-comparison prefetch (``prefetch_output_comparisons``,
the sweep's one read-back for C5/C6 and C8): an exception in it is warned
and kept on the case, never silently dropped, and changes no verdict; a stop
(KeyboardInterrupt) still propagates."""

from __future__ import annotations

import pytest
from buggy_kernels import make_kernel

from conformance.cases import make_case
from conformance.suite import prefetch as compare
from conformance.suite.evaluate import PrefetchWarning, evaluate_case
from reference import memo


def _checks(cr) -> dict:
    return cr.to_dict()["checks"]


@pytest.mark.parametrize("kind", ["pow2", "ordinary"])  # C5 + C8, C6 + C8
def test_a_failing_prefetch_is_reported_and_changes_no_verdict(monkeypatch, kind):
    ops = make_case(kind, 0)
    trunc = make_kernel("trunc", rounding="rtz")  # F4: C8 fails, with evidence to compare
    real, calls = compare.prefetch_comparisons, []

    def counted(triples):
        calls.append(len(triples))
        return real(triples)

    monkeypatch.setattr(compare, "prefetch_comparisons", counted)
    with memo.scope():
        clean = evaluate_case(trunc, ops, device="cpu")
    assert calls == [2]  # C8 and C5 (pow2) / C6 (own scales) went through the prefetch
    assert clean.prefetch_error is None and "prefetch_error" not in clean.to_dict()
    assert clean.checks["C8"].verdict == "fail"

    def boom(triples):
        raise RuntimeError("device lost\nsecond line")

    monkeypatch.setattr(compare, "prefetch_comparisons", boom)
    with memo.scope(), pytest.warns(PrefetchWarning) as warned:
        cr = evaluate_case(trunc, ops, device="cpu")
    line = "prefetch_output_comparisons raised RuntimeError: device lost"
    assert cr.prefetch_error == line and cr.to_dict()["prefetch_error"] == line
    assert [str(w.message) for w in warned] == [
        f"trunc {cr.case}: {line}; the checks computed their comparisons themselves"
    ]
    # the checks fell back to their own comparisons: same verdicts, summaries, evidence
    assert _checks(cr) == _checks(clean) and cr.verdict == clean.verdict == "fail"


def test_a_stop_inside_the_prefetch_is_not_swallowed(monkeypatch):
    def stop(triples):
        raise KeyboardInterrupt

    monkeypatch.setattr(compare, "prefetch_comparisons", stop)
    with memo.scope(), pytest.raises(KeyboardInterrupt):
        evaluate_case(make_kernel("good"), make_case("ordinary", 0), device="cpu")
