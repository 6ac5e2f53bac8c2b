"""``run_suite(jobs=N)`` / ``int8conf check --jobs``: fixed cases answered by forked workers give the results
the in-process plan gives, and a case whose worker dies is answered in-process."""

from __future__ import annotations

import json

from buggy_kernels import dies_in_workers, make_kernel

from conformance.cases import make_case
from conformance.kernels.loader import spec_from_object
from conformance.suite.plan import SuiteState, given_cases
from conformance.suite.run import run_suite
from conformance.suite.workers import evaluate_in_workers, parallel_ok

KINDS = ("ordinary", "extreme", "pow2", "fp16_out", "m1", "tails")


def _cases():
    return [make_case(k, seed=s) for k in KINDS for s in (0, 1)]


def _state(spec, cases):
    return SuiteState(spec, cases, given_cases(cases), None, "cpu")


def _rows(res) -> list:
    drop = ("elapsed_s", "t_kernel_s")
    return [{k: v for k, v in cr.to_dict().items() if k not in drop} for cr in res.cases]


def test_workers_give_the_in_process_results_of_a_buggy_kernel():
    spec = make_kernel("order-bug", order="a_then_w")  # declares w_then_a: C8 fails on the tie cases
    cases = _cases()
    one = run_suite(_state(spec, cases), property_examples=0, model_checks=False, jobs=1)
    st = _state(spec, cases)
    assert parallel_ok(st) is None
    assert evaluate_in_workers(st, 2) == len(cases)
    two = run_suite(st, property_examples=0, model_checks=False, jobs=2)
    assert json.dumps(_rows(one), sort_keys=True) == json.dumps(_rows(two), sort_keys=True)
    assert [c.verdict for c in one.checks] == [c.verdict for c in two.checks]
    assert not one.conformant and one.overall == two.overall


def test_a_case_whose_worker_dies_is_answered_in_process():
    spec = spec_from_object(dies_in_workers, "dies", "test", {"contract": "cutlass"})
    cases = _cases()[:4]
    st = _state(spec, cases)
    assert evaluate_in_workers(st, 2) == 0 and not st.results
    res = run_suite(st, property_examples=0, model_checks=False, jobs=2)
    assert len(res.cases) == 4 and res.conformant


def test_pairwise_runs_in_process():
    spec = make_kernel("a", order=None)
    st = SuiteState(spec, _cases()[:2], given_cases([]), make_kernel("b"), "cpu")
    assert "in-process" in parallel_ok(st)
