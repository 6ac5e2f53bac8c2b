"""``int8conf check`` stopped part-way (Ctrl-C, or SIGTERM from a time limit):
the report of what finished is written, says "partial run", and the exit code
is 130; ``run_conformance`` carries that partial result on SuiteInterrupted."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest
from holding import Hold, interrupt_when_held

from conformance.kernels.registry import get_kernel
from conformance.suite.run import SuiteInterrupted, run_conformance

ROOT = Path(__file__).resolve().parents[3]


#: the fixed cases finished before the stop, and the case it cuts short: the first of the synthetic set whose
#: weight shape (N, K) = (40, 96) is new (conformance.cases.synthetic order)
STOP_AFTER, STOP_CASE, STOP_SHAPE = 8, "synthetic/m1-s0", (40, 96)


def _stopping_kernel():
    """The cpu kernel raising KeyboardInterrupt (as Ctrl-C would) at its first call with ``b`` of STOP_SHAPE. The
    stop is by shape, not by a call count: each case's calls run in a child forked from the run (a count would
    restart there), and every call of a case (C9's row subsets, C10's other values) keeps its N and K."""
    cpu = get_kernel("cpu")

    def scaled_mm(a, b, scale_a, scale_b, out_dtype, bias=None):
        if tuple(b.shape) == STOP_SHAPE:
            raise KeyboardInterrupt
        return cpu.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)

    return dataclasses.replace(cpu, name="stopper", scaled_mm=scaled_mm)


def test_run_conformance_interrupted_carries_the_finished_cases():
    spec = _stopping_kernel()
    with pytest.raises(SuiteInterrupted) as e:
        run_conformance(spec, include_captures=False, include_tile_edges=False, property_examples=0, model_checks=False)
    res = e.value.result
    done = len(res.cases)
    assert done == STOP_AFTER
    m = re.fullmatch(
        r"partial run: interrupted after (\d+) of (\d+) fixed cases, during case (\S+); "
        r"the verdict covers only what finished",
        res.notes[0],
    )
    assert m and int(m.group(1)) == done and int(m.group(2)) == 22, res.notes  # the synthetic set
    assert m.group(3) == STOP_CASE and STOP_CASE not in {c.case for c in res.cases}  # the case cut short is named
    assert all(c.verdict == "pass" for c in res.cases)
    ov = res.overall  # no failure in what ran is no PASS (a new user read "Overall verdict: PASS" in the report)
    assert (ov["cases_total"], ov["cases_planned"]) == (done, 22)
    assert ov["headline"].startswith("INCOMPLETE (interrupted, not a PASS) on a reduced suite: ")
    assert f", {22 - done} of 22 fixed cases not reached (interrupted), " in ov["headline"]
    assert ov["summary"] == f"not a verdict: interrupted after {done} of 22 fixed cases; no check failed on what ran"


@pytest.mark.slow
def test_check_cli_sigterm_writes_the_partial_report_and_exits_130(tmp_path):
    """SIGTERM to ``int8conf check`` while one case's kernel call is held (after a finished case):
    exit 130 and the partial report of what finished."""
    cmd = [sys.executable, "-m", "conformance.cli", "check", "--kernel", "holding:spec", "--no-model"]
    cmd += ["--no-captures", "--out", str(tmp_path / "rep")]
    rc, out = interrupt_when_held(
        cmd, ROOT, Hold(tmp_path / "hold"), signal.SIGTERM, r"stopper: [1-9]\d*/\d+ fixed cases", tmp_path
    )
    assert rc == 130, out[-3000:]
    rep = json.loads((tmp_path / "rep" / "stopper" / "conformance.json").read_text())
    assert rep["notes"][0].startswith("partial run: interrupted after ")
    total = int(re.search(r"stopper: (\d+) fixed cases", out).group(1))
    assert 0 < len(rep["cases"]) < total  # the held case never finished
    assert (rep["partial"]["partial"], rep["partial"]["reason"], rep["partial"]["note"]) == (
        True,
        "interrupted",
        rep["notes"][0],
    )
    assert "int8conf: interrupted" in out and "report: " in out
    assert "stopper: so far: no failure yet (not a PASS)" in out  # it read like a pass (new-user trial 14)


def test_a_stop_whose_raise_was_discarded_is_raised_at_the_next_case():
    """Python discards an exception raised in a garbage-collector callback
    (hypothesis installs one): SIGTERM's KeyboardInterrupt can be lost there.
    The request is remembered and raised again before the next case."""
    import signal

    from conformance.runtime.graceful_stop import restore_sigterm, sigterm_as_interrupt

    cpu = get_kernel("cpu")
    calls = [0]

    def scaled_mm(a, b, scale_a, scale_b, out_dtype, bias=None):
        calls[0] += 1
        if calls[0] == 2:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
            except KeyboardInterrupt:
                pass  # as if raised where Python drops it
        return cpu.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)

    spec = dataclasses.replace(cpu, name="swallower", scaled_mm=scaled_mm)
    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        assert sigterm_as_interrupt()
        with pytest.raises(SuiteInterrupted) as e:
            run_conformance(
                spec, include_captures=False, include_tile_edges=False, property_examples=0, model_checks=False
            )
    finally:
        restore_sigterm()
        signal.signal(signal.SIGTERM, before)
    res = e.value.result
    assert 1 <= len(res.cases) <= 2 and res.notes[0].startswith("partial run: interrupted after ")
    c9 = next(c for c in res.checks if c.check_id == "C9")
    assert c9.verdict == "n/a" and c9.summary == "not run: the run was interrupted"


def test_interrupted_during_the_property_test_says_so():
    cpu = get_kernel("cpu")
    calls = [0]

    def scaled_mm(a, b, scale_a, scale_b, out_dtype, bias=None):
        calls[0] += 1
        if calls[0] > 60:  # the 22 synthetic cases are done by then
            raise KeyboardInterrupt
        return cpu.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)

    spec = dataclasses.replace(cpu, name="late", scaled_mm=scaled_mm)
    with pytest.raises(SuiteInterrupted) as e:
        run_conformance(
            spec, include_captures=False, include_tile_edges=False, property_examples=200, model_checks=False
        )
    assert e.value.result.notes[0] == (
        "partial run: interrupted after 22 of 22 fixed cases, "
        "during the property test; the verdict covers only "
        "what finished"
    )
    # every fixed case ran, yet the run is partial, with the stage named
    from conformance.suite.report import to_json_dict

    part = to_json_dict(e.value.result)["partial"]
    assert {k: part[k] for k in ("partial", "reason", "cases_ran", "cases_total", "stage")} == {
        "partial": True,
        "reason": "interrupted",
        "cases_ran": 22,
        "cases_total": 22,
        "stage": "the property test",
    }


def test_a_partial_report_says_so_before_its_verdict(tmp_path):
    from conformance.suite.report import render_markdown, to_json_dict

    with pytest.raises(SuiteInterrupted) as e:
        run_conformance(
            _stopping_kernel(),
            include_captures=False,
            include_tile_edges=False,
            property_examples=0,
            model_checks=False,
        )
    md = render_markdown(to_json_dict(e.value.result))
    head = md.split("\n")[2]
    assert head.startswith("**PARTIAL RUN** (partial run: interrupted after "), head
    verdict = md.split("\n")[4]  # never a bare PASS
    assert verdict.startswith("**Overall verdict: INCOMPLETE (interrupted, not a PASS) on a reduced suite: ") and (
        " skipped (PARTIAL RUN: only what finished)**" in verdict
    ), verdict


def test_a_stopped_run_marks_its_json_partial(tmp_path):
    """conformance.json carries the machine-readable mark the Markdown
    heading is built from: ``partial`` with reason, counts and stage."""
    import json

    from conformance.suite.report import write_reports

    with pytest.raises(SuiteInterrupted) as e:
        run_conformance(
            _stopping_kernel(),
            include_captures=False,
            include_tile_edges=False,
            property_examples=0,
            model_checks=False,
        )
    res = e.value.result
    jp, mp = write_reports(res, tmp_path)
    doc = json.loads(jp.read_text())
    done = len(res.cases)
    cut = STOP_CASE
    assert done == STOP_AFTER
    note = (
        f"partial run: interrupted after {done} of 22 fixed cases, during case {cut}; the verdict covers only "
        "what finished"
    )
    assert doc["partial"] == {
        "partial": True,
        "reason": "interrupted",
        "cases_ran": done,
        "cases_total": 22,
        "stage": f"case {cut}",
        "note": note,
    }
    assert doc["notes"] == [note]  # one source: the note is the record's
    assert mp.read_text().split("\n")[2] == f"**PARTIAL RUN** ({note})"
