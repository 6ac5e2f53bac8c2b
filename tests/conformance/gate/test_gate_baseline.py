"""``--baseline``: compare with a stored conformance report instead of
re-running the incumbent; a stale / incomparable baseline is refused with
the reason; the CLI's documented exit codes."""

import json
import os
from pathlib import Path

import pytest

from conformance.cases import capture_cases, make_case
from conformance.cli import main
from conformance.gate.policy import parse_policy
from conformance.gate.run import GateOptions, NotComparable, run_gate
from conformance.runtime.pool import KernelRef
from conformance.suite.report import write_reports
from conformance.suite.run import run_conformance
from faults.spec import make_injection

SYN = [make_case("ordinary", 0), make_case("pow2", 0), make_case("epilogue_ties", 0)]
# the stored baselines below are reduced suites (explicit cases, no property test, no model checks)
BIT = parse_policy({"name": "bit", "require": "bit_identical", "allow_reduced_baseline": True})
ONE = parse_policy({"name": "one", "allow": "within_one_spacing", "allow_reduced_baseline": True})


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """cpu's stored report on SYN + the first captured layer (both scale modes)."""
    cases = SYN + capture_cases(max_layers=1).cases
    res = run_conformance("cpu", cases=cases, property_examples=0, model_checks=False)
    jp, _ = write_reports(res, tmp_path_factory.mktemp("baseline"))
    return jp, cases


def _gate(tmp_path, cand, baseline, cases, policy=BIT):
    return run_gate(
        cand, baseline=baseline, policy=policy, cases=cases, out_dir=tmp_path, options=GateOptions(model_checks=False)
    )


def test_report_carries_comparability_and_output_digests(baseline):
    doc = json.loads(baseline[0].read_text())
    comp = doc["comparability"]
    assert comp["n_cases"] == 5 and comp["n_capture_cases"] == 2 and comp["suite_version"]
    assert len(comp["cases_digest"]) == 64 and len(comp["captures_digest"]) == 64
    assert all(len(c["output_digest"]) == 64 for c in doc["cases"])


def test_exact_candidate_passes_against_the_stored_baseline(tmp_path, baseline):
    jp, cases = baseline
    res = _gate(tmp_path, KernelRef("int_mm"), jp, cases)
    assert [d.status for d in res.cases] == ["pass"] * 5 and res.exit_code == 0
    assert all(d.delta["via"].startswith("output digest equal") for d in res.cases)
    assert res.incumbent["baseline"] == str(jp)


def test_faulty_candidate_measured_against_the_baseline_contract_reference(tmp_path, baseline):
    """F4 (truncation) moves outputs by one spacing: the distance to the
    stored incumbent is measured through the reference of its declared
    contract, whose digest reproduces the stored output digest."""
    jp, cases = baseline
    bit = _gate(tmp_path / "bit", KernelRef("cpu", make_injection("F4")), jp, cases, BIT)
    one = _gate(tmp_path / "one", KernelRef("cpu", make_injection("F4")), jp, cases, ONE)
    assert bit.exit_code == 1 and all(d.status == "fail" for d in bit.cases)
    assert one.exit_code == 0 and all(d.status == "warn" for d in one.cases)
    assert all(d.delta["max_ulp"] == 1 and d.delta["via"].startswith("baseline output reproduced") for d in one.cases)


def test_stale_baseline_with_different_captures_is_refused(tmp_path, baseline):
    jp, _ = baseline
    other = SYN + capture_cases(max_layers=2).cases
    with pytest.raises(NotComparable) as e:
        _gate(tmp_path, KernelRef("int_mm"), jp, other)
    assert any(
        r.startswith("different captures: baseline 2 capture cases") and "this run 4" in r for r in e.value.reasons
    )
    assert not (tmp_path / "logs").exists()  # refused before any kernel ran


def test_old_or_partial_baseline_is_refused(tmp_path, baseline):
    jp, cases = baseline
    doc = json.loads(jp.read_text())
    doc.pop("comparability")
    doc["notes"] = ["partial run: 3 of 5 fixed cases ran"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    with pytest.raises(NotComparable) as e:
        _gate(tmp_path, KernelRef("int_mm"), old, cases)
    assert any("no comparability record" in r for r in e.value.reasons)
    assert any("partial run" in r for r in e.value.reasons)


def test_a_baseline_marked_partial_is_refused(tmp_path, baseline):
    """The ``partial`` record alone (no note) marks a stored report partial."""
    from conformance.runtime.partial_run import partial_run

    jp, cases = baseline
    doc = json.loads(jp.read_text())
    assert doc["partial"]["partial"] is False
    doc["partial"] = partial_run(3, 5, interrupted=True, stage="fixed cases")
    doc["notes"] = []
    stopped = tmp_path / "stopped.json"
    stopped.write_text(json.dumps(doc))
    with pytest.raises(NotComparable) as e:
        _gate(tmp_path, KernelRef("int_mm"), stopped, cases)
    assert (
        "it is a partial run (partial run: interrupted after 3 of 5 fixed cases; the verdict "
        "covers only what finished)" in e.value.reasons
    )


def _cli(tmp_path, *args):
    return main(
        ["gate", "--candidate", "int_mm", "--no-model", "--no-tile-edges", "-q", "--out", str(tmp_path / "out"), *args]
    )


def test_cli_exit_codes(tmp_path, capsys, monkeypatch):
    base = run_conformance(
        "cpu", include_tile_edges=False, max_capture_layers=1, property_examples=0, model_checks=False
    )
    jp, _ = write_reports(base, tmp_path / "A")
    policy = tmp_path / "p.yaml"
    policy.write_text("require: [bit_identical]\nallow_reduced_baseline: true\n")
    assert _cli(tmp_path, "--baseline", str(jp), "--max-capture-layers", "1", "--policy", str(policy)) == 0
    from machine_paths import absolute_strings, machine_paths

    out = tmp_path / "out"
    assert (
        machine_paths(
            (out / "gate.json").read_text() + (out / "gate.md").read_text() + (out / "junit.xml").read_text(), tmp_path
        )
        == []
    )
    assert absolute_strings(json.loads((out / "gate.json").read_text())) == []
    assert _cli(tmp_path, "--baseline", str(jp), "--max-capture-layers", "2") == 2
    err = capsys.readouterr().err
    assert "NOT COMPARABLE" in err and "different captures" in err
    md = (tmp_path / "out" / "gate.md").read_text()
    assert "NOT COMPARABLE" in md and "different captures" in md
    bad = tmp_path / "bad.yaml"
    bad.write_text("allow: [everything]\n")
    assert _cli(tmp_path, "--incumbent", "cpu", "--policy", str(bad)) == 2
    assert "field 'allow'" in capsys.readouterr().err
    import conformance.gate.run as G

    def boom(*a, **k):
        raise RuntimeError("bug")

    monkeypatch.setattr(G, "run_gate", boom)
    assert _cli(tmp_path, "--incumbent", "cpu") == 4  # one table: 3 is check's "not run" only
    assert "internal error: RuntimeError: bug" in capsys.readouterr().err


def test_cli_blocked_exit_code(tmp_path):
    assert (
        main(
            [
                "gate",
                "--candidate",
                "cpu",
                "--inject",
                "F4",
                "--incumbent",
                "cpu",
                "--no-model",
                "--no-captures",
                "--no-tile-edges",
                "-q",
                "--out",
                str(tmp_path),
            ]
        )
        == 1
    )


# --- an unusable --out is refused before any kernel runs -------------------------------

POLICIES = Path(__file__).resolve().parents[3] / "examples" / "policies"


def _tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def gate_never_runs(monkeypatch):
    """Fails the test if the CLI gets as far as running the gate."""
    import conformance.gate.run as G

    def ran(*a, **k):
        raise AssertionError("the gate ran before --out was refused")

    monkeypatch.setattr(G, "run_gate", ran)


@pytest.mark.parametrize(
    "layout,out,bad,problem",
    [
        ("o", "o", "o", "exists and is not a directory"),  # --out /etc/passwd
        ("o", "o/sub", "o/sub", "cannot create reports directory (Not a directory: {bad})"),
        ("o/logs", "o", "o/logs", "exists and is not a directory"),  # children's logs
        ("o/repro", "o", "o/repro", "exists and is not a directory"),  # reproducers
        ("o/gate.json/", "o", "o", "gate.json is a directory, not a file"),
        ("o/junit.xml/", "o", "o", "junit.xml is a directory, not a file"),
    ],
)
def test_cli_unusable_out_is_one_line_exit_2_before_any_work(
    tmp_path, capsys, gate_never_runs, layout, out, bad, problem
):
    p = tmp_path / layout.rstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.mkdir() if layout.endswith("/") else p.write_text("x")
    before = _tree(tmp_path)
    assert (
        main(
            [
                "gate",
                "--candidate",
                "int_mm",
                "--incumbent",
                "cpu",
                "--no-model",
                "--policy",
                str(POLICIES / "bit-identity.yaml"),
                "--out",
                str(tmp_path / out),
            ]
        )
        == 2
    )
    cap = capsys.readouterr()
    bad = tmp_path / bad
    assert cap.err.splitlines() == [f"int8conf: error: --out {bad}: {problem.format(bad=bad)}"]
    assert cap.out == ""
    assert _tree(tmp_path) == before  # no logs/, no report


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_cli_read_only_out_is_one_line_exit_2(tmp_path, capsys, gate_never_runs):
    tmp_path.joinpath("o").mkdir(mode=0o555)
    try:
        assert (
            main(["gate", "--candidate", "int_mm", "--incumbent", "cpu", "--no-model", "--out", str(tmp_path / "o")])
            == 2
        )
    finally:
        tmp_path.joinpath("o").chmod(0o755)
    assert capsys.readouterr().err.splitlines() == [f"int8conf: error: --out {tmp_path / 'o'}: not writable"]
    assert _tree(tmp_path) == ["o"]


@pytest.mark.parametrize(
    "args,words",
    [
        (["--candidate", "fixg_no_such_mod:fn", "--incumbent", "cpu"], "--candidate 'fixg_no_such_mod:fn'"),
        (["--candidate", "cpu", "--incumbent", "fixg_no_such_mod:fn"], "--incumbent 'fixg_no_such_mod:fn'"),
        (["--candidate", "int_mm", "--incumbent", "cpu", "--policy", "/nonexistent.yaml"], "/nonexistent.yaml"),
    ],
)
def test_cli_refused_gate_leaves_no_out_folder(tmp_path, capsys, args, words):
    assert main(["gate", *args, "--no-model", "-q", "--out", str(tmp_path / "new" / "out")]) == 2
    assert words in capsys.readouterr().err
    assert _tree(tmp_path) == []


# --- a baseline whose per-case digests were edited is refused (issue 31, item 3) -----


def _edited(tmp_path, jp, case_index, operand="b"):
    """The stored report with one case's operand digest replaced (its
    comparability record untouched)."""
    doc = json.loads(jp.read_text())
    doc["cases"][case_index]["operand_digests"][operand] = "f" * 64
    p = tmp_path / "edited.json"
    p.write_text(json.dumps(doc))
    return p, doc["cases"][case_index]["case"]


def test_baseline_with_an_edited_case_digest_is_refused_naming_the_case(tmp_path, baseline):
    jp, cases = baseline
    edited, name = _edited(tmp_path, jp, 1)
    assert name == "synthetic/pow2-s0"
    with pytest.raises(NotComparable) as e:
        _gate(tmp_path, KernelRef("int_mm"), edited, cases)
    b = cases[1].digests()["b"]
    assert e.value.reasons == [
        f"case synthetic/pow2-s0: operand digest 'b' is {'f' * 12} in the baseline, "
        f"{b[:12]} in this run (1 of 5 cases differ)"
    ]
    assert not (tmp_path / "logs").exists()  # refused before any kernel ran


def test_cli_refuses_an_edited_baseline_exit_2_in_one_line(tmp_path, capsys):
    base = run_conformance(
        "cpu", include_captures=False, include_tile_edges=False, property_examples=0, model_checks=False
    )
    jp, _ = write_reports(base, tmp_path / "A")
    edited, name = _edited(tmp_path, jp, 3, "scale_a")
    policy = tmp_path / "p.yaml"
    policy.write_text("allow_reduced_baseline: true\n")
    assert _cli(tmp_path, "--baseline", str(jp), "--no-captures", "--policy", str(policy)) == 0
    capsys.readouterr()
    assert _cli(tmp_path, "--baseline", str(edited), "--no-captures", "--policy", str(policy)) == 2
    sa = make_case("pow2", 1).digests()["scale_a"][:12]
    assert (name, capsys.readouterr().err.splitlines()) == (
        "synthetic/pow2-s1",
        [
            f"int8conf gate: NOT COMPARABLE: baseline {edited}: case synthetic/pow2-s1: operand "
            f"digest 'scale_a' is ffffffffffff in the baseline, {sa} in this run (1 of 22 cases "
            f"differ)",
            f"report: {tmp_path / 'out' / 'gate.md'}",
        ],
    )


def test_legal_contract_difference_against_a_stored_baseline(tmp_path, baseline):
    """The stored incumbent's C8 verdicts count as its side of the
    contract_difference rule (issue 31, item 1)."""
    jp, cases = baseline
    pol = parse_policy({"require": "bit_identical", "allow": "contract_difference", "allow_reduced_baseline": True})
    res = _gate(tmp_path, KernelRef("buggy_kernels:good_triton"), jp, cases, pol)
    faulty = _gate(tmp_path / "faulty", KernelRef("cpu", make_injection("F4")), jp, cases, pol)
    # ordinary-s0 and epilogue_ties-s0 carry scale-order ties the two contracts split
    assert [d.status for d in res.cases] == ["warn", "pass", "warn", "pass", "pass"]
    assert res.exit_code == 0 and res.cases[2].reasons[0]["text"].endswith(
        "a difference the two declared contracts allow (C8 passes for both kernels): allowed by "
        "the policy (contract_difference)"
    )
    assert [d.status for d in faulty.cases] == ["fail"] * 5 and faulty.exit_code == 1


def test_baseline_whose_comparability_record_disagrees_with_its_cases_is_refused(tmp_path, baseline):
    jp, cases = baseline
    doc = json.loads(jp.read_text())
    doc["comparability"]["cases_digest"] = "0" * 64
    p = tmp_path / "record.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(NotComparable) as e:
        _gate(tmp_path, KernelRef("int_mm"), p, cases)
    from conformance.gate.run import case_rows
    from conformance.suite.run import comparability

    mine = comparability(case_rows(cases))["cases_digest"][:12]
    assert e.value.reasons == [
        f"its comparability record does not match its own cases (cases digest 000000000000 vs "
        f"{mine}); re-run `int8conf check` for the incumbent"
    ]


def test_a_reduced_baseline_is_refused_in_one_line_unless_the_policy_allows_it(tmp_path, capsys):
    """issue 42, item 2: a baseline whose PASS covers a reduced suite is not gated against silently."""
    base = run_conformance(
        "cpu", include_captures=False, include_tile_edges=False, property_examples=0, model_checks=False
    )
    skipped = [
        "the tile-edge shapes and case families",
        "layer-capture replay",
        "the property test",
        "the model-level checks (C7, E1)",
    ]
    assert (base.verdict, base.overall["reduced_suite"]) == ("pass", skipped)
    assert base.overall["headline"] == "PASS on a reduced suite: " + ", ".join(skipped) + " skipped"
    jp, mp = write_reports(base, tmp_path / "A")
    assert "**Overall verdict: PASS on a reduced suite: the tile-edge shapes and case families," in mp.read_text()
    assert json.loads(jp.read_text())["overall"]["reduced_suite"] == skipped
    strict = tmp_path / "strict.yaml"
    strict.write_text("require: [bit_identical]\n")
    assert _cli(tmp_path, "--baseline", str(jp), "--no-captures", "--policy", str(strict)) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        f"int8conf gate: NOT COMPARABLE: baseline {jp}: it ran a reduced suite ({', '.join(skipped)} skipped): its "
        "PASS covers less than the default suite; re-run `int8conf check` without those options, or set "
        "allow_reduced_baseline: true in the policy"
    )
    assert len(err) == 2 and err[1].startswith("report: ")
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text("require: [bit_identical]\nallow_reduced_baseline: true\n")
    assert _cli(tmp_path, "--baseline", str(jp), "--no-captures", "--policy", str(lenient)) == 0


def _as_written_before_the_rename(doc: dict) -> dict:
    """``doc`` as a report of the tile-edge shapes' former name wrote it: source and case ids ``sweep``,
    ``include_sweep`` in the invocation's options, the old reduced-suite phrase, a comparability record of those."""
    from conformance.suite.run import comparability

    for c in doc["cases"]:
        if c["source"] == "tile_edges":
            c["source"], c["case"] = "sweep", c["case"].replace("tile_edges/", "sweep/")
    comp = comparability(doc["cases"])
    doc["comparability"].update(cases_digest=comp["cases_digest"], case_ids=comp["case_ids"])
    opts = doc["invocation"]["options"]
    opts["include_sweep"] = opts.pop("include_tile_edges")
    doc["overall"]["reduced_suite"] = ["the shape sweep and case families", *doc["overall"]["reduced_suite"]]
    return doc


def test_a_baseline_written_before_the_tile_edges_rename_is_read_with_the_current_names(tmp_path):
    """Its ``sweep/M...`` cases are the ``tile_edges/M...`` cases (the same operands): read as those and gated
    against; an expectation naming the old case ids (``sweep/M15*``) still matches."""
    from conformance.cases import tile_edge_cases
    from conformance.suite.plan import TILE_EDGES_LEFT_OUT
    from conformance.suite.report import read_report

    cases = tile_edge_cases()[:3]
    res = run_conformance("cpu", cases=cases, property_examples=0, model_checks=False)
    jp, _ = write_reports(res, tmp_path / "A")
    new = json.loads(jp.read_text())
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_as_written_before_the_rename(json.loads(jp.read_text()))))
    assert '"sweep/M15xK15xN15"' in old.read_text() and '"include_sweep"' in old.read_text()
    doc = read_report(old)
    assert [c["case"] for c in doc["cases"]] == [c["case"] for c in new["cases"]] == [c.name for c in cases]
    assert {c["source"] for c in doc["cases"]} == {"tile_edges"} and doc["comparability"] == new["comparability"]
    assert doc["invocation"]["options"] == new["invocation"]["options"]  # include_tile_edges
    assert doc["overall"]["reduced_suite"] == [TILE_EDGES_LEFT_OUT, *new["overall"]["reduced_suite"]]
    pol = parse_policy(
        {
            "require": "bit_identical",
            "allow_reduced_baseline": True,
            "expectations": [{"case": "sweep/M15*", "check": "output", "reason": "old id", "owner": "@me"}],
        }
    )
    assert pol.expectations[0].case == "tile_edges/M15*"
    gated = _gate(tmp_path / "g", KernelRef("cpu", make_injection("F4")), old, cases, pol)
    assert [d.item for d in gated.cases] == [c.name for c in cases]
    assert [d.status for d in gated.cases] == ["warn", "fail", "fail"]  # the expectation covers M15 only
    assert _gate(tmp_path / "ok", KernelRef("int_mm"), old, cases).exit_code == 0


@pytest.mark.parametrize("cand,inc", [("cpu", "fp8-cpu"), ("fp8-cpu", "cpu"), ("block-cpu", "block-fp8-cpu")])
def test_an_incumbent_of_another_kind_is_not_comparable_exit_2_before_any_work(tmp_path, capsys, cand, inc):
    """An int8 kernel and an e4m3 one (or block kernels on other operands) share no case: a new user's gate of such a
    swap passed bit-identity with every case 'warn' and no bit compared."""
    assert main(["gate", "--candidate", cand, "--incumbent", inc, "--out", str(tmp_path / "o"), "--no-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not comparable" in err[0] and "the gate compares kernels of one kind" in err[0], err
    assert not (tmp_path / "o" / "gate.json").exists()
