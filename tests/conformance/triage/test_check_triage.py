"""``int8conf check``'s triage (conformance.triage.run, issue 43): a failing run's report carries "Where the bug
lives" (conformance.json's ``triage``, the md section, a reproducer of the minimal case); a passing run's does not;
``--no-triage`` leaves it out. ``prefill_scale_order`` pins M 128 / 129 from the run's first failing case. A search
runs in a child: a kernel that segfaults or hangs on a probe costs that check's search (``skipped``), not the run."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import buggy_kernels
import torch
from subprocesses import run_python

from conformance.cases import by_case_id, case_id
from conformance.cases.planting import planted_case
from conformance.cli import main
from conformance.kernels.registry import get_kernel
from conformance.suite.evaluate import evaluate_case
from conformance.suite.report import render_markdown, triage_lines, triage_summary
from conformance.triage import run
from conformance.triage.boundary import PRODUCT_CALLS
from conformance.triage.minimal import ZERO_BUDGET
from conformance.triage.reshape import at_shape
from conformance.triage.run import triage_result

QUICK = ["--no-model", "--no-captures", "--no-large-cases", "--examples", "0", "--quiet"]


def _check(tmp_path: Path, kernel: str, *extra: str) -> tuple[dict, str, Path]:
    out = tmp_path / "reports"
    main(["check", "--kernel", kernel, *QUICK, *extra, "--out", str(out)])
    kdir = out / kernel.split(":")[-1]
    doc = json.loads((kdir / "conformance.json").read_text())
    return doc, (kdir / "conformance.md").read_text(), kdir


def test_prefill_scale_order_report_names_m_128_129(tmp_path):
    out = tmp_path / "r"
    args = ["-m", "conformance.cli", "check", "--kernel", "buggy_kernels:prefill_scale_order", *QUICK, "--out", out]
    proc = run_python(args, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "prefill_scale_order: where C8 lives (case " in proc.stdout
    kdir = out / "prefill_scale_order"
    doc = json.loads((kdir / "conformance.json").read_text())
    t = doc["triage"]["C8"]
    m = t["boundaries"]["m"]
    # the search has 10 % of this run's seconds: a loaded machine may stop the bisection short of adjacent values
    # (test_boundary.py pins 128 / 129 exactly, without a time share)
    assert m["passes_at"] <= 128 < m["fails_at"] and (not m["exact"] or (m["passes_at"], m["fails_at"]) == (128, 129))
    assert f"M passes at {m['passes_at']}, fails at {m['fails_at']}" in proc.stdout
    assert t["minimal"]["fails"] and t["minimal"]["shape"][0] == m["fails_at"]
    # at most 24 values a dimension, 3 calls a value (a K value below the case's: cropped, planted, reseeded), 3 a
    # flip, and the fixed, product and non-zero calls
    bound = 3 * 24 * 3 + 3 * len(t["flips"]) + run.FIXED_CALLS + PRODUCT_CALLS + ZERO_BUDGET + 3
    assert t["calls"] <= bound
    md = (kdir / "conformance.md").read_text()
    assert md == render_markdown(doc)  # the triage added in place is what a full rendering would write
    section = md.split("## Where the bug lives")[1].split("\n## ")[0]
    assert "### C8 declared_contract" in section and f"`{t['case']}`" in section
    assert any(line.replace(" ", "").startswith(f"|M|{m['passes_at']}") for line in section.splitlines())
    repro = Path(t["repro"])  # written portably (${TMPDIR:-/tmp}/...): its name is what counts
    assert t["replay"].startswith("int8conf replay ") and t["replay"] in section
    assert t["replay"].endswith(f"{repro.name} --kernel buggy_kernels:prefill_scale_order --check C8")
    assert (kdir / "repro" / repro.name / "command.sh").is_file()
    case = json.loads((kdir / "repro" / repro.name / "case.json").read_text())
    assert case["shape"] == t["minimal"]["shape"] and case["what_happened"]["check"] == "C8"


def test_a_passing_run_has_no_triage(tmp_path):
    doc, md, kdir = _check(tmp_path, "cpu", "--no-tile-edges")
    assert doc["overall"]["verdict"] == "pass"
    assert "triage" not in doc and "Where the bug lives" not in md and not (kdir / "repro").exists()


def test_no_triage_leaves_it_out_of_a_failing_report(tmp_path):
    on, md_on, _ = _check(tmp_path / "on", "buggy_kernels:decode_path_order", "--no-tile-edges")
    assert on["overall"]["verdict"] == "fail"
    t = on["triage"]["C8"]
    assert t["boundaries"]["m"]["passes_at"] == 2 and t["boundaries"]["m"]["fails_at"] == 1  # the M = 1 path
    assert t["budget"] >= 4 and "## Where the bug lives" in md_on
    off, md_off, kdir = _check(tmp_path / "off", "buggy_kernels:decode_path_order", "--no-tile-edges", "--no-triage")
    assert off["overall"]["verdict"] == "fail"
    assert "triage" not in off and "Where the bug lives" not in md_off and not (kdir / "repro").exists()


def test_triage_lines_render_points_and_skips():
    doc = {
        "checks": [{"check_id": "C8", "name": "declared_contract"}],
        "triage": {
            "C8": {
                "case": "x",
                "shape": [4, 8, 2],
                "boundaries": {
                    "k": {
                        "passes_at": 4,
                        "fails_at": 8,
                        "calls": 3,
                        "monotone": False,
                        "exact": False,
                        "points": [[2, True], [4, False], [8, True]],
                    }
                },
                "flips": [{"attribute": "bias", "value": "absent", "fails": False}],
                "minimal": {"shape": [4, 2, 2], "fails": True, "calls": 1},
                "calls": 5,
                "seconds": 0.1,
                "budget": 4,
            },
            "C5": {"case": "y", "skipped": "not among the run's fixed cases"},
        },
    }
    text = "\n".join(triage_lines(doc))
    assert "| K " in text and "4 (not monotone)" in text and "2, 8" in text
    assert "`bias absent`" in text and "M,K,N 4,2,2" in text and "not triaged (not among" in text
    assert triage_lines({"checks": []}) == []


def _one_failing_case(ops, *check_ids: str, run_s: float = 10.0):
    """A failing ConformanceResult's stand-in: ``ops`` failed ``check_ids`` as the kernel's failure in a run of
    ``run_s`` seconds (triage's time share: 10 % of it)."""
    checks = {cid: SimpleNamespace(is_kernel_failure=True) for cid in check_ids}
    cr = SimpleNamespace(case=case_id(ops), crash=None, elapsed_s=0.01, checks=checks)
    return SimpleNamespace(conformant=False, overall={"crashes": [{"case": "y"}]}, elapsed_s=run_s, cases=[cr])


def test_a_search_whose_kernel_segfaults_is_skipped_and_the_next_goes_on():
    # the kernel segfaults on every probe at K = 37: each search's child dies, this process does not
    ops = at_shape(buggy_kernels.tie_case(), m=4, n=4, k=buggy_kernels.HOSTILE_K)
    out = triage_result(get_kernel("buggy_kernels:segfaulting_kernel"), _one_failing_case(ops, "C5", "C8"), [ops])
    assert set(out) == {"C5", "C8"}
    for rec in out.values():
        assert rec["case"] == case_id(ops) and rec["shape"] == [4, buggy_kernels.HOSTILE_K, 4]
        assert rec["skipped"] == "the kernel's process died during the boundary search (killed by SIGSEGV)"


def test_a_search_that_dies_on_its_k_probes_keeps_its_m_and_n_findings_and_names_the_probe():
    # wrong for M > 64, SIGSEGV for K < 8: M and N are searched before K, whose halving reaches K < 8
    ops = planted_case(100, 32, 16)
    # a run of 600 s: a time share no loaded machine runs out of before the M bisection ends (the pin is exact)
    out = triage_result(get_kernel("buggy_kernels:short_k_segfault"), _one_failing_case(ops, "C8", run_s=600), [ops])
    rec = out["C8"]
    assert rec["skipped"] == "the kernel's process died during the boundary search (killed by SIGSEGV)"
    m = rec["boundaries"]["m"]
    assert (m["passes_at"], m["fails_at"], m["exact"]) == (buggy_kernels.MID_M, buggy_kernels.MID_M + 1, True)
    assert rec["boundaries"]["n"]["passes_at"] is None and set(rec["boundaries"]) == {"m", "n"}
    probe, (pm, pk, pn) = rec["died_on"]["probe"], rec["died_on"]["shape"]
    assert probe == f"K={pk}" and pk < buggy_kernels.SEGFAULT_BELOW_K and (pm, pn) == (100, 16)
    text = "\n".join(triage_lines({"checks": [], "triage": out}))
    assert f"It was probing K={pk} (M,K,N 100,{pk},16)" in text and "| M " in text


def test_a_search_whose_kernel_hangs_is_killed_and_skipped(monkeypatch):
    monkeypatch.setattr(run, "MIN_SEARCH_TIMEOUT_S", 2.0)
    monkeypatch.setattr(run, "SEARCH_TIMEOUT_FACTOR", 1.0)
    ops = at_shape(buggy_kernels.tie_case(), m=4, n=4, k=buggy_kernels.HOSTILE_K)
    t0 = time.perf_counter()
    out = triage_result(get_kernel("buggy_kernels:hanging_kernel"), _one_failing_case(ops, "C8"), [ops])
    assert time.perf_counter() - t0 < 30
    why = out["C8"]["skipped"]
    assert why.startswith("the kernel's process hung during the boundary search (killed after ") and why.endswith(" s)")
    assert out["C8"]["died_on"]["probe"] == "the case"  # the first call, verifying the case, hangs


def test_check_of_a_kernel_that_segfaults_past_m_128_finishes_with_its_triage(tmp_path):
    # correct for M <= 64, wrong for 64 < M <= 128, SIGSEGV for M > 128: the suite's large cases crash (contained),
    # the triage runs all the same, in its own children, and the command ends with exit 1 and its report
    out = tmp_path / "r"
    args = ["-m", "conformance.cli", "check", "--kernel", "buggy_kernels:prefill_segfault", *QUICK, "--out", out]
    proc = run_python(args, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    doc = json.loads((out / "prefill_segfault" / "conformance.json").read_text())
    assert doc["overall"]["crashes"] and doc["triage"]
    # the crash itself is triaged (CALL, each probe in a child of its own): it switches on past M = 128; the wrong
    # bits (C5 / C6 / C8) past M = 64, their searches' crashing probes failing probes, not the end of the search
    assert "CALL" in doc["triage"] and not any("skipped" in t for t in doc["triage"].values()), doc["triage"]
    for cid, t in doc["triage"].items():
        # the time budget (the run's 10 %) may stop the bisection short of adjacent values on a loaded machine
        m = t["boundaries"]["m"]
        edge = buggy_kernels.SEGFAULT_M if cid == "CALL" else buggy_kernels.MID_M
        assert m["passes_at"] <= edge < m["fails_at"], (cid, m)
        assert not m["exact"] or (m["passes_at"], m["fails_at"]) == (edge, edge + 1)
        assert cid == "CALL" or m["fails_at"] <= buggy_kernels.SEGFAULT_M
        assert f"where {cid} lives" in proc.stdout


def test_a_bucket_a_layout_floor_and_a_blind_k_are_rendered():
    b = {"monotone": True, "exact": True, "calls": 9}
    tri = {
        "C8": {
            "case": "x",
            "shape": [40, 64, 40],
            "boundaries": {
                "m": b | {"passes_at": 32, "fails_at": 33, "upper_fails_at": 63, "upper_passes_at": 64},
                "n": b | {"passes_at": None, "fails_at": 2, "form_floor": 1},
                "k": b | {"passes_at": 31, "fails_at": 32, "blind": True},
            },
            "flips": [
                {"attribute": "out_dtype", "value": "fp16", "fails": False, "from": "bf16", "unverified": True},
                {"attribute": "bias", "value": "present", "fails": False, "from": "absent"},
            ],
        },
        "C5": {
            "case": "y",
            "shape": [20, 9, 1],
            "boundaries": {"m": b | {"passes_at": 16, "fails_at": 17, "upper_fails_at": 40, "upper_passes_at": 80}},
        },
        "C6": {  # one failing value between two passing ones; a bucket whose end was not bisected at all
            "case": "z",
            "shape": [20, 9, 17],
            "boundaries": {
                "n": b | {"passes_at": 16, "fails_at": 17, "upper_fails_at": 17, "upper_passes_at": 18},
                "m": b | {"passes_at": 2, "fails_at": 3, "upper_fails_at": 3, "upper_passes_at": 6},
            },
        },
    }
    line = triage_summary(tri)
    assert "M passes at 32, fails at 33 to 63, passes again at 64" in line[0]
    assert "N fails at every probe down to 2 (its layout cannot be held at 1)" in line[0]
    assert "K passes at 31 (values-limited), fails at 32" in line[0]
    assert "fails at 17 to at least 40 (41 to 79 not probed), passes again at 80" in line[1]
    assert "N passes at 16, fails at 17, passes again at 18" in line[2]
    assert "M passes at 2, fails at 3 (4 to 5 not probed), passes again at 6" in line[2]
    assert line[0].endswith("passes with out_dtype bf16 -> fp16 (on the case's values only), bias absent -> present")
    text = "\n".join(triage_lines({"checks": [], "triage": tri}))
    assert "| 32 and 64" in text and "| 33 to 63" in text and "cannot be held" in text


def test_a_passing_flip_a_failing_case_of_the_run_contradicts_is_marked_here_only():
    """decode_path_order fails C8 on the ties family's M = 1 cases in bf16 and fp16: a flip bf16 -> fp16 that passed
    on the triaged case is contradicted by the fp16 case (the helper's decode kernel read "passes with out_dtype
    bf16 -> fp16"); a flip no failing case holds stays plain."""
    from conformance.cases.families import family_cases
    from conformance.suite.run import run_conformance

    spec = get_kernel("buggy_kernels:decode_path_order")
    cases = list(family_cases(["ties"]))
    res = run_conformance(spec, cases=cases, property_examples=0, model_checks=False)
    failing = sorted(cr.case for cr in res.cases if cr.checks["C8"].is_kernel_failure)
    assert failing == ["family/ties/M1-real-bf16", "family/ties/M1-real-fp16"]
    rec = {
        "C8": {
            "flips": [
                {"attribute": "out_dtype", "value": "fp16", "fails": False, "from": "bf16"},
                {"attribute": "out_dtype", "value": "fp32", "fails": False, "from": "bf16"},
                {"attribute": "bias", "value": "present", "fails": True, "from": "absent"},
            ]
        }
    }
    got = run.contradicted_flips(rec, res, by_case_id(cases))["C8"]["flips"]
    assert [f.get("contradicted_by") for f in got] == ["family/ties/M1-real-fp16", None, None]
    line = triage_summary({"C8": {"case": failing[0], "flips": got}})[0]
    assert "out_dtype bf16 -> fp16 (here only: case family/ties/M1-real-fp16 with it fails)" in line
    assert "out_dtype bf16 -> fp32, " not in line and line.endswith("out_dtype bf16 -> fp32")


def test_a_search_without_a_smaller_failing_shape_saves_the_case_itself_and_says_so(monkeypatch, tmp_path):
    """The helper's contract-mismatch run printed "Minimal failing shape" and saved no reproducer when no smaller
    shape failed: the case itself is now the reproducer, and the line says "no smaller failing shape than"."""
    from conformance.runtime.pool import KernelRef, Served
    from conformance.triage.minimal import MinimalCase

    spec = get_kernel("buggy_kernels:decode_path_order")
    ops = planted_case(1, 64, 16, torch.bfloat16)
    assert run.fails(spec, ops, "C8")

    def no_smaller(spec, ops, cid, boundaries, **kw):
        return MinimalCase(ops, [int(ops.m), int(ops.k), int(ops.n)], False, 0)

    monkeypatch.setattr(run, "minimal_case", no_smaller)
    ref = KernelRef("buggy_kernels:decode_path_order").to_dict()
    arg = run.SearchArg(ops, "x", "C8", 1.0, 0.01, 1, repro_dir=str(tmp_path), ref=ref)
    rec = run.search_case(spec, arg, Served(cases=[], device="cpu"))
    assert rec["minimal"]["fails"] is False and rec["repro"]
    info = json.loads((Path(rec["repro"]) / "case.json").read_text())
    assert info["shape"] == [1, 64, 16] and info["what_happened"]["error"] == "C8 fails on case x"
    line = triage_summary({"C8": rec})[0]
    assert "no smaller failing shape than 1,64,16" in line and "minimal M,K,N" not in line


def test_a_minimal_case_where_the_call_itself_fails_says_so_and_replays_that_check(monkeypatch, tmp_path):
    """The helper's kernel returning its output transposed: a square case fails C8 on values, the search's
    non-square probes break the interface (counted failing), so the minimal case can be the call's failure: the
    record says so and the reproducer replays IF (its replay exited 1 on IF while the report promised C8). The
    minimal case is fixed here (M = 1): how far a time-bounded search shrinks depends on the machine's load."""
    from conformance.runtime.pool import KernelRef, Served
    from conformance.triage.minimal import MinimalCase

    spec = get_kernel("buggy_kernels:returns_transposed")
    ops = planted_case(16, 64, 16, torch.bfloat16)
    assert run.fails(spec, ops, "C8") and run.fails(spec, at_shape(ops, m=1), "C8")
    monkeypatch.setattr(
        run, "minimal_case", lambda spec, ops, *a, **kw: MinimalCase(at_shape(ops, m=1), [1, 64, 16], True, 0)
    )
    ref = KernelRef("buggy_kernels:returns_transposed").to_dict()
    arg = run.SearchArg(ops, "x", "C8", 1.0, 0.01, 1, repro_dir=str(tmp_path), ref=ref)
    rec = run.search_case(spec, arg, Served(cases=[], device="cpu"))
    mn = rec["minimal"]
    assert mn["fails"] and mn["call_failure"]["check"] == "IF" and "fault_classes" not in mn
    assert mn["call_failure"]["line"] == "kernel returned shape (16, 1), expected [1,16]"
    assert rec["replay"].endswith("--check IF")
    info = json.loads((Path(rec["repro"]) / "case.json").read_text())
    assert info["what_happened"]["error"] == "IF fails on the minimal case of x"
    line = triage_summary({"C8": rec})[0]
    assert line.endswith(
        "minimal M,K,N 1,64,16 (there the call itself fails, IF: kernel returned shape (16, 1), expected [1,16])"
    )
    text = "\n".join(triage_lines({"checks": [{"check_id": "C8", "name": "declared_contract"}], "triage": {"C8": rec}}))
    assert "the reproducer replays IF." in text
    square = run.broken_call(evaluate_case(spec, ops, device="cpu"))  # square: a valid output (its values fail)
    assert square is None


def test_a_product_the_failing_minimal_case_contradicts_is_not_reported_verified():
    """Second new-user trial of session 14: a gate on the number of 64 x 64 output tiles (>= 8) read "M*N decides"
    (two aspect ratios agreed) while its own minimal case, 449 x 2, fails at M*N = 898."""
    product = {"attribute": "M*N", "passes_at": 2040, "fails_at": 2064, "verified": True, "calls": 2, "note": ""}
    got = run.product_against_minimal(product, [449, 32, 2])
    assert got["verified"] is False and got["passes_at"] == 2040
    assert got["note"] == (
        "the dimensions act separately (the minimal case M,K,N 449,32,2 fails at M*N 898, below the 2040 that passed)"
    )
    assert run.product_against_minimal(product, [86, 768, 24]) == product  # 2064 > 2040: it agrees
    assert run.product_against_minimal(None, [1, 1, 1]) is None
    line = triage_summary({"C8": {"case": "x", "shape": [449, 32, 64], "product": got}})[0]
    assert "M*N passes at" not in line


def test_fault_classes_tied_on_the_minimal_case_are_said_to_be_alike():
    """Second new-user trial of session 14: a ties-away-from-zero rounding bug read "consistent with F2 (score 1),
    F3 (score 1)": two classes fitting equally is no diagnosis."""
    rec = {"case": "x", "shape": [64, 32, 64], "minimal": {"shape": [1, 2, 1], "fails": True}}
    rec["minimal"]["fault_classes"] = {"F2": 1.0, "F3": 1.0, "F1": 0.29}
    line = triage_summary({"C8": rec})[0]
    alike = " (F2 and F3 alike: the minimal case cannot tell them apart, nor from a bug outside the catalogue)"
    assert line.endswith("consistent with F2, F3, F1" + alike)
    rec["minimal"]["fault_classes"] = {"F3": 1.0, "F1": 0.29}
    assert triage_summary({"C8": rec})[0].endswith("consistent with F3, F1")
