"""Suite, cases, pairwise comparison, model-check plumbing and reports."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch
from buggy_kernels import bias_tie_case, make_kernel, order_case, tie_case

from conformance import cases as cases_mod
from conformance.cases import NO_CAPTURES, capture_cases, make_case, synthetic_cases, tile_edge_cases, tile_edge_shapes
from conformance.checks.result import CheckResult
from conformance.kernels.runner import run_kernel
from conformance.runtime.output_dirs import kernel_dirname
from conformance.suite.pairwise import compare_pair, expected_agreement
from conformance.suite.report import SCHEMA_VERSION, read_report, write_reports
from conformance.suite.run import run_conformance, run_model_check
from reference.contract import CUTLASS_STYLE, TRITON_STYLE
from reference.errors import Int8confError


def test_synthetic_cases_deterministic_and_known():
    a, b = synthetic_cases((0,)), synthetic_cases((0,))
    assert [c.digests() for c in a] == [c.digests() for c in b]
    assert a[0].digests() != make_case("ordinary", seed=1).digests()
    ext = make_case("extreme")
    acc00 = int((ext.a[0].to(torch.int64) * ext.b[0].to(torch.int64)).sum())
    assert acc00 == 256 * 128 * 128  # -128 x -128 products, K = 256
    assert set(ext.a.unique().tolist()) == {-128, 127}
    p2 = make_case("pow2")
    mant, _ = torch.frexp(p2.scale_b.abs())  # planted signed-zero columns: -2^-10
    assert p2.scale_mode == "pow2" and bool((mant == 0.5).all())
    assert make_case("fp16_out").bias.dtype == torch.float16
    assert (make_case("m1").m, make_case("tails").k) == (1, 37)


def test_tile_edge_shapes_straddle_tile_edges():
    shapes = tile_edge_shapes()
    assert len(shapes) == len(set(shapes)) == 44
    for e in (16, 32, 64, 128):
        for s in (e - 1, e, e + 1):
            assert (s, s, s) in shapes and (3, s, 17) in shapes and (3, 33, s) in shapes
    assert [m for m, k, n in shapes if (k, n) == (65, 33)] == list(range(1, 10))
    sw = tile_edge_cases()
    assert sw[1].bias is not None and sw[0].bias is None and sw[0].name == "tile_edges/M15xK15xN15"


def test_capture_cases_absent_and_present(monkeypatch):
    fake = types.ModuleType("reference.model.capture")
    fake.default_capture_set = lambda: None
    fake.iter_layer_operands = lambda cs, mode: iter(())
    monkeypatch.setitem(sys.modules, "reference.model.capture", fake)
    rep = capture_cases()
    assert not rep.available and rep.note == f"{NO_CAPTURES} (no capture set has been built)"

    class CS:
        dir = "/captures"

    def layers(cs, mode):
        for name in ("model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"):
            op = make_case("pow2" if mode == "pow2" else "ordinary")
            op.name, op.scale_mode, op.meta = name, mode, {"block": 0}
            yield op

    fake.iter_layer_operands = layers
    rep = capture_cases(capture_set=CS())
    assert rep.available and len(rep.cases) == 4
    assert [cases_mod.case_id(c) for c in rep.cases][:2] == [
        "model.layers.0.self_attn.q_proj[own]",
        "model.layers.0.mlp.down_proj[own]",
    ]
    assert rep.cases[3].meta == {"block": 0, "source": "capture"}


def test_pairwise_bias_points_and_orders():
    ops = bias_tie_case()
    cut, tri = make_kernel("cut", CUTLASS_STYLE), make_kernel("tri", TRITON_STYLE)
    p = compare_pair(cut, tri, ops, run_kernel(cut, ops), run_kernel(tri, ops))
    assert p["status"] == "differ-expected" and p["max_ulp"] == 0x3B80
    assert (p["worst"]["out_bits"], p["worst"]["ref_bits"]) == ("0x3B80", "0x0000")
    o = order_case()
    p = compare_pair(cut, tri, o, run_kernel(cut, o), run_kernel(tri, o))
    assert p["status"] == "differ-expected" and p["max_ulp"] == 1
    same = make_kernel("cut2", CUTLASS_STYLE)
    assert expected_agreement(cut, same, o)[0] is True
    p = compare_pair(cut, same, o, run_kernel(cut, o), run_kernel(same, o))
    assert p["status"] == "identical" and p["agreement"] == 1.0
    pow2 = tie_case(pow2=True)
    assert expected_agreement(cut, tri, pow2)[0] is True  # no bias, pow2 scales
    assert expected_agreement(cut, tri, ops)[0] is False


def test_run_conformance_wrong_kernel_fails_and_reports(tmp_path):
    spec = make_kernel("pkg.mod:trunc?x=1", rounding="rtz")
    res = run_conformance(
        spec,
        against=make_kernel("ref", CUTLASS_STYLE),
        cases=[tie_case(), tie_case(pow2=True), const_case_1024()],
        property_examples=0,
        model_checks=False,
    )
    assert res.verdict == "fail"
    assert res.overall["failed_checks"] == ["C5", "C8"]
    assert res.overall["precondition_violations"] == ["C4"]
    assert res.check("C8").evidence["n_failed_cases"] == 2
    assert res.check("C7").verdict == "n/a"
    assert res.captures["note"] == f"{NO_CAPTURES} (explicit case list)"
    jp, mp = write_reports(res, tmp_path)
    assert jp.parent.name == kernel_dirname(spec.name) == "pkg.mod_trunc_x_1"
    assert read_report(jp)["kernel"]["name"] == spec.name
    other = tmp_path / "other.json"
    other.write_text("[1]")
    with pytest.raises(Int8confError, match="not an int8conf.conformance report"):
        read_report(other)
    doc = json.loads(jp.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    assert doc["schema_version"] == SCHEMA_VERSION and doc["overall"]["verdict"] == "fail"
    assert [c["check_id"] for c in doc["checks"]] == [
        "C1",
        "C2",
        "C3",
        "C4",
        "C5",
        "C6",
        "C7",
        "C8",
        "C9",
        "C10",
        "C13",
        "C14",
        "C15",
        "E1",
    ]
    tie = doc["cases"][0]
    assert tie["checks"]["C8"]["evidence"]["worst"]["out_bits"] == "0x3F81"
    assert doc["pairwise"]["counts"] == {"differ-unexpected": 2, "identical": 1}
    md = mp.read_text()
    assert (
        "**Overall verdict: FAIL on a reduced suite: the default cases (an explicit case list replaced them), the "
        "property test, the model-level checks (C7, E1) skipped**" in md
    )
    row = [ln for ln in md.splitlines() if ln.startswith("| tie-pow2 ")]
    assert len(row) == 2 and row[0].count("FAIL") == 2  # per-case row: C5 and C8
    assert "differ-unexpected" in row[1]  # pairwise row: same contract, different bits
    k1024 = [ln for ln in md.splitlines() if ln.startswith("| const-K1024 ")][0]
    assert "| violated " in k1024 and "FAIL" not in k1024  # C4 precondition, not a kernel failure
    assert "| C4   | fp32_exact_accumulator | precondition violated (1) |" in md
    assert "no captures available: synthetic only" in md
    assert sorted(p.name for p in jp.parent.iterdir()) == ["conformance.json", "conformance.md"]


def const_case_1024():
    from buggy_kernels import const_case

    return const_case(1024)  # |acc| = 2**24: C4 precondition, truncation exact there


def test_run_conformance_builtin_cpu_passes():
    res = run_conformance(
        "cpu", cases=[tie_case(), order_case(), make_case("bias")], property_examples=3, model_checks=False
    )
    assert res.verdict == "pass" and res.property_tests["examples"] == 3
    assert res.property_tests["failed"] is False
    assert res.environment["execution"] == "native"
    assert res.environment["paths_used"] == {"cpu-exact": 6}


def test_model_checks_plumbing(monkeypatch):
    spec = make_kernel("k")
    r = run_model_check("E1", spec, "no_such_module_xyz", "engine_hash_check")
    assert r.verdict == "n/a" and "not available" in r.summary
    mod = types.ModuleType("fake_model_checks")
    mod.ok = lambda s: CheckResult("C7", "token_flip", "pass", f"no flips for {s.name}", {})
    mod.boom = lambda s: 1 / 0
    monkeypatch.setitem(sys.modules, "fake_model_checks", mod)
    assert run_model_check("C7", spec, "fake_model_checks", "ok").summary == "no flips for k"
    r = run_model_check("C7", spec, "fake_model_checks", "boom")
    assert r.verdict == "fail" and r.evidence["failure_kind"] == "harness"
    assert "ZeroDivisionError" in r.summary


def test_property_test_finds_truncation():
    from conformance.suite.property import run_property_test

    sunk = []
    s = run_property_test(make_kernel("t", rounding="rtz"), sunk.append, max_examples=10)
    assert s["failed"] is True and s["examples"] == len(sunk) >= 1
    assert s["falsifying_case"] == sunk[-1].case and sunk[-1].verdict == "fail"
    assert s["failure"].startswith(sunk[-1].case + ": C8 declared_contract")


def test_property_operands_are_the_examples_the_property_test_evaluates(monkeypatch):
    """The draw the warm-up compiles for is the run's sequence when every example passes: same operands (layouts,
    bits), same order, repeats included, same names."""
    from conformance.kernels.registry import get_kernel
    from conformance.suite import property as prop
    from conformance.suite.warmup import case_layout

    seen, real = [], prop.evaluate_case

    def spy(spec, ops, **kw):
        seen.append(ops)
        return real(spec, ops, **kw)

    monkeypatch.setattr(prop, "evaluate_case", spy)
    sunk = []
    s = prop.run_property_test(get_kernel("cpu"), sunk.append, max_examples=10)
    assert s["failed"] is False and len(seen) == 10 and s["examples"] == len(sunk)
    drawn = prop.property_operands(10)

    def key(o):
        return case_layout(o), o.digests(), o.name

    assert [key(o) for o in drawn] == [key(o) for o in seen]
    assert len({case_layout(o) for o in drawn}) > 1


def test_fault_catalogue():
    from faults.catalogue import FAMILIES, FAULTS, get_fault

    assert [f.id for f in FAULTS] == [f"F{i}" for i in range(1, 16)]
    assert get_fault("multiplication_order").id == "F3" and get_fault("F8").family == "control"
    assert get_fault("narrow_accumulator").id == "F10" and get_fault("F10").operands == ("e4m3",)
    assert {f.family for f in FAULTS} == set(FAMILIES)
    with pytest.raises(Exception, match="unknown fault 'F16'"):
        get_fault("F16")
