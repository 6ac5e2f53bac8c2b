"""The serving checks C13 graph_replay, C14 compile, C15 streams_devices in the gate: run in each kernel's child by
the suite's kernel-level check runner, decided by ``compare.SERVING_RULE`` (a candidate failing one blocks unless the
incumbent fails it too: "both fail"; n/a never blocks), shown in gate.json / gate.md / junit.xml and as
``gate/C13`` .. ``gate/C15`` items of the pytest gate; ``--no-serving`` / ``--gate-no-serving`` leave them out."""

import json
import xml.etree.ElementTree as ET

import pytest
import torch

import conformance.gate.run  # noqa: F401 -- loaded before pytester's in-process run (a re-import crashes)
from conformance.cases import make_case
from conformance.checks.result import CHECK_NAMES, CheckResult, Verdict, not_applicable
from conformance.gate.compare import BOTH_FAIL, decide_serving
from conformance.gate.report import to_json_dict, write_gate_reports
from conformance.gate.run import GateOptions, run_gate
from conformance.runtime.pool import KernelRef
from conformance.suite import workers

pytest_plugins = ["pytester"]
CASES = [make_case("ordinary", 0)]
NO_CUDA = "no CUDA device here (torch.cuda.is_available() is False)"
C14_CPU = (
    "not compiled on the CPU: a plain Python kernel (no custom op) is compiled only on CUDA, where it would run in "
    "serving (inductor tracing a CPU kernel costs minutes); a registered custom op gets one tiny CPU case"
)


def _res(verdict):
    """A C13 result dict of ``verdict`` (None: absent, as in a baseline written before the serving checks)."""
    if verdict is None:
        return None
    return {"check_id": "C13", "name": "graph_replay", "verdict": verdict, "summary": f"C13 {verdict} here"}


@pytest.mark.parametrize(
    "cand, inc, status, blocking, outcome",
    [
        ("pass", "pass", "pass", False, "pass"),
        ("pass", "fail", "pass", False, "pass"),  # an improvement: said, never blocking
        ("pass", "n/a", "pass", False, "pass"),
        ("fail", "pass", "fail", True, "fail"),
        ("fail", "n/a", "fail", True, "fail"),  # an incumbent that could not run it does not excuse the candidate
        ("fail", None, "fail", True, "fail"),  # nor does an unknown one
        ("fail", "fail", "warn", False, BOTH_FAIL),
        ("n/a", "pass", "not-supported", False, "n/a"),
        ("n/a", "fail", "not-supported", False, "n/a"),
        ("n/a", "n/a", "not-supported", False, "n/a"),
    ],
)
def test_the_serving_rule_on_constructed_results(cand, inc, status, blocking, outcome):
    d = decide_serving("C13", _res(cand), _res(inc))
    assert (d.item, d.status, d.blocking, d.evidence["outcome"]) == ("C13", status, blocking, outcome)
    assert [r["blocking"] for r in d.reasons] == ([True] if blocking else [False] * len(d.reasons))
    if outcome == BOTH_FAIL:
        assert d.reasons[0]["text"] == (
            "C13 graph_replay fails, as it does for the incumbent (both fail): C13 fail here; incumbent: C13 fail here"
        )


def test_the_serving_rule_when_the_candidate_s_child_dies_or_the_gate_cannot_run_it():
    crash = decide_serving("C14", None, _res("pass"), "crash", "killed by SIGSEGV")
    assert (crash.status, crash.blocking) == ("crash", True)
    assert crash.reasons[0]["text"] == "C14 compile: incumbent pass -> candidate fail: crash: killed by SIGSEGV"
    both = decide_serving("C14", None, _res("fail"), "timeout", "no result within 600 s")
    assert (both.status, both.blocking, both.evidence["outcome"]) == ("warn", False, BOTH_FAIL)
    harness = decide_serving("C15", None, _res("fail"), "harness-error", "pickling failed")
    assert (harness.status, harness.blocking) == ("fail", True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="pins the CPU's n/a reasons")
def test_on_the_cpu_the_serving_checks_are_n_a_with_their_reasons_and_do_not_block(tmp_path):
    res = run_gate(
        KernelRef("int_mm"), KernelRef("cpu"), cases=CASES, out_dir=tmp_path, options=GateOptions(model_checks=False)
    )
    assert res.exit_code == 0 and res.overall["blocking"] == []
    paths = write_gate_reports(to_json_dict(res), tmp_path)
    doc = json.loads(paths["json"].read_text())
    reasons = {
        "C13": f"CUDA graphs need a CUDA device: {NO_CUDA}",
        "C14": C14_CPU,
        "C15": f"streams and devices are CUDA's: {NO_CUDA}",
    }
    assert [(d["item"], d["status"], d["blocking"], d["evidence"]["outcome"]) for d in doc["serving"]] == [
        (cid, "not-supported", False, "n/a") for cid in ("C13", "C14", "C15")
    ]
    for d in doc["serving"]:
        cid = d["item"]
        assert d["reasons"] == [
            {"check": cid, "text": f"{cid} {CHECK_NAMES[cid]} n/a: {reasons[cid]}", "blocking": False, "expected": None}
        ]
        assert d["evidence"]["candidate"]["verdict"] == d["evidence"]["incumbent"]["verdict"] == "n/a"
    assert doc["overall"]["serving_counts"]["not-supported"] == 3
    assert doc["overall"]["summary"].endswith("; serving: C13 not-supported, C14 not-supported, C15 not-supported")
    md = paths["md"].read_text()
    assert f"- **C14** not-supported: C14 compile n/a: {C14_CPU}" in md
    suite = ET.parse(paths["junit"]).getroot().find("testsuite")
    serving = [tc for tc in suite.iter("testcase") if tc.get("classname") == "gate.serving"]
    assert [tc.get("name") for tc in serving] == ["C13", "C14", "C15"]
    assert all(tc.find("skipped") is not None for tc in serving) and suite.get("failures") == "0"


def _fake_serving(verdicts: dict):
    """A ``run_kernel_check`` whose C13 is ``verdicts[kernel name]`` (C14 / C15 n/a): forked children inherit it."""

    def run(check_id, spec, cases, device=None):
        v = verdicts[spec.name] if check_id == "C13" else Verdict.NOT_APPLICABLE
        if v == Verdict.NOT_APPLICABLE:
            return not_applicable(check_id, "constructed n/a")
        return CheckResult(check_id, CHECK_NAMES[check_id], v, f"constructed {v} of {spec.name}", {})

    return run


@pytest.mark.parametrize(
    "inc_verdict, exit_code, status", [(Verdict.PASS, 1, "fail"), (Verdict.FAIL, 0, "warn"), ("n/a", 1, "fail")]
)
def test_a_candidate_failing_a_serving_check_blocks_the_swap_unless_the_incumbent_fails_it_too(
    tmp_path, monkeypatch, inc_verdict, exit_code, status
):
    monkeypatch.setattr(workers, "run_kernel_check", _fake_serving({"int_mm": Verdict.FAIL, "cpu": inc_verdict}))
    res = run_gate(
        KernelRef("int_mm"), KernelRef("cpu"), cases=CASES, out_dir=tmp_path, options=GateOptions(model_checks=False)
    )
    c13 = res.decision("C13")
    assert (res.exit_code, c13.status, c13.blocking) == (exit_code, status, exit_code == 1)
    assert res.overall["blocking"] == (["C13"] if exit_code else [])
    assert [res.decision(c).status for c in ("C14", "C15")] == ["not-supported"] * 2


def _collect(pytester, *extra):
    r = pytester.runpytest_inprocess(
        "-p",
        "no:cacheprovider",
        "--collect-only",
        "-q",
        "--gate-candidate=cpu",
        "--gate-incumbent=cpu",
        "--gate-no-captures",
        "--gate-no-tile-edges",
        f"--gate-out={pytester.path}/gate",
        *extra,
    )
    assert r.ret == 0, r.stdout.str()[-2000:]
    return [ln.split("::")[-1] for ln in r.stdout.lines if "::gate/" in ln]


def test_the_pytest_gate_has_an_item_per_serving_check_unless_gate_no_serving(pytester):
    ids = _collect(pytester)
    assert ids[-5:] == ["gate/C7", "gate/E1", "gate/C13", "gate/C14", "gate/C15"]  # after the cases, suite order
    assert len(ids) == 22 + 5
    assert _collect(pytester, "--gate-no-serving") == ids[:-3]
