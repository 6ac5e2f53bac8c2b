"""A conformance run chooses no launch configuration by timing: the switch turns the built-in Triton kernel's
tuner off, C1 records the configuration and fails a timed one, the coverage table counts the configurations
that ran, and the warm-up reproduces each case's operand layout."""

import types

import pytest
import torch
from buggy_kernels import good_cutlass, timing_tuned

from conformance.checks.manifest import check_kernel_manifest
from conformance.kernels import builtin_triton as bt
from conformance.kernels.loader import spec_from_object
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import run_kernel
from conformance.kernels.spec import CONFORMANCE_RUN_ENV, conformance_run, in_conformance_run
from conformance.suite.coverage import coverage_table
from conformance.suite.evaluate import evaluate_case
from conformance.suite.warmup import _zeros, case_layout, plan_groups, reload_name
from reference.operands import GemmOperands, copy_keep_layout


def _ops(m=5, k=40, n=24, seed=0, bias=False):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    sa = torch.rand(m, generator=g) * 1e-2
    sb = torch.rand(n, generator=g) * 1e-2
    bi = torch.randn(n, generator=g).to(torch.bfloat16) if bias else None
    return GemmOperands(a, b, sa, sb, bias=bi, name="t", meta={"source": "synthetic"})


def test_conformance_run_switch_is_scoped_and_turns_timing_off(monkeypatch):
    monkeypatch.delenv(CONFORMANCE_RUN_ENV, raising=False)
    monkeypatch.setenv("INT8CONF_TRITON_AUTOTUNE", "1")
    assert not in_conformance_run() and bt._autotune_enabled()
    with conformance_run():
        assert in_conformance_run() and not bt._autotune_enabled()
        # odd K is padded as a tuned call pads it (only from 2^30 MACs), not as an untimed one
        assert bt._padded_k(64, 64, 1001, native=True) == 0
        assert bt._padded_k(1024, 1024, 1025, native=True) == 1040
    assert not in_conformance_run() and bt._autotune_enabled()
    monkeypatch.setenv("INT8CONF_TRITON_AUTOTUNE", "0")
    assert bt._padded_k(64, 64, 1001, native=True) == 1008  # untimed outside a run: always padded


def test_c1_records_the_interpreters_configuration_and_passes():
    spec = get_kernel("triton")
    with conformance_run():
        run = run_kernel(spec, _ops(), device="cpu")
    r = check_kernel_manifest(spec, _ops(), run)
    assert r.verdict == "pass", r.summary
    assert r.evidence["observed"]["config_rule"] == "interpreter tiles"
    assert r.evidence["observed"]["config"] == bt._interp_config(5, 24, 40).label()


def test_c1_fails_a_kernel_that_chose_its_configuration_by_timing():
    ops = _ops()
    bad = evaluate_case(spec_from_object(timing_tuned, "timing_tuned", "test"), ops)
    assert bad.checks["C1"].verdict == "fail"
    assert "chosen by timing" in bad.checks["C1"].summary
    assert bad.checks["C8"].verdict == "pass"  # the bits are right: only C1 sees it
    good = evaluate_case(spec_from_object(good_cutlass, "good", "test", {"contract": "cutlass"}), ops)
    assert good.checks["C1"].verdict == "pass"


class _CR:
    produced_output = True

    def __init__(self, cov):
        self.coverage = cov


def _cov(config=None, space=None, n=None):
    base = {"max_partial_fwd": 1, "max_partial_bwd": 1, "partial_step": 1, "n_partial_big_final_small": 0}
    base |= {"max_abs_acc": 1, "n_acc_ge_2_24": 0, "n_acc_gt_int32": 0, "out_dtype": "bfloat16"}
    base |= {"out": dict.fromkeys(("subnormal", "pos_inf", "neg_inf", "neg_zero", "pos_zero"), 0)}
    base |= {"scale_mode": "synthetic", "m": 1, "k": 1, "n": 1, "neg_scale_a": False, "neg_scale_b": False}
    base |= {"zero_scale_a": False, "zero_scale_b": False, "zero_rows_a": 0, "pair_alignments": [], "bias_cancel": 0}
    base |= {"discriminating": 0, "layouts": {}, "densified": [], "planted": {}, "scale_layout": "[M]"}
    if config:
        base |= {"config": config, "config_space": space, "config_candidates": n}
    return base


def test_coverage_table_counts_the_configurations_that_ran_per_space():
    crs = [_CR(_cov("c1", "decode", 2)), _CR(_cov("c2", "decode", 2)), _CR(_cov("c1", "large (TMA-able)", 3))]
    crs.append(_CR(_cov()))  # interpreter tiles / a kernel that records none: not counted
    row = next(r for r in coverage_table(crs) if r["condition"].startswith("launch configurations"))
    assert row["reached"] == "decode: 2/2; large (TMA-able): 1/3"
    assert row["cases"] == 3 and row["covered"] == "partial"
    crs = crs[:2]
    row = next(r for r in coverage_table(crs) if r["condition"].startswith("launch configurations"))
    assert row["covered"] == "yes"


def test_warm_up_rebuilds_each_operand_layout_as_the_runner_hands_it():
    a = torch.zeros((7, 48), dtype=torch.int8)[:, 3:43]  # padded rows, offset 3
    b = torch.zeros((40, 24), dtype=torch.int8).t()  # column-major [24, 40]
    ops = GemmOperands(a, b, torch.ones(7, 1), torch.ones(()), out_dtype=torch.float16, name="x")
    lay = case_layout(ops)
    assert lay[0] == ((7, 40), (48, 1), "int8", 0)  # the runner's copy starts at its allocation
    assert lay[1] == ((24, 40), (1, 24), "int8", 0)
    assert lay[2] == ((7, 1), (1, 1), "float32", 0) and lay[4] is None and lay[5] == "torch.float16"
    for got, want in zip((_zeros(x, "cpu") for x in lay[:4]), (a, b, ops.scale_a, ops.scale_b)):
        want = copy_keep_layout(want)  # what run_kernel passes
        assert (got.shape, got.stride(), got.dtype, got.storage_offset()) == (
            want.shape,
            want.stride(),
            want.dtype,
            want.storage_offset(),
        )
    dense = case_layout(ops, frozenset({"a", "b"}))
    assert dense[0] == ((7, 40), (40, 1), "int8", 0) and dense[1] == ((24, 40), (40, 1), "int8", 0)


def test_warm_up_groups_layouts_a_jit_compiles_alike():
    def lay(m, n, k, dt="torch.bfloat16"):
        return (((m, k), (k, 1), "int8", 0), ((n, k), (k, 1), "int8", 0), None, None, None, dt)

    lays = [lay(5, 64, 64), lay(6, 64, 64), lay(5, 64, 64), lay(100, 64, 64), lay(5, 64, 64, "torch.float16")]
    groups = plan_groups(lays)  # 4 distinct: M 5 and 6 compile alike, M 100 and float16 apart; largest first
    assert groups == [[lay(5, 64, 64), lay(6, 64, 64)], [lay(100, 64, 64)], [lay(5, 64, 64, "torch.float16")]]


def test_warm_up_groups_by_the_kernels_own_variant_keys_where_it_names_them():
    lays = [("L", i) for i in range(5)]
    keys = dict(zip(lays, ["x", "y", "x", None, "x"]))  # None: a layout the kernel refused, alone
    groups = plan_groups(lays, keys)
    assert groups == [[("L", 0), ("L", 2), ("L", 4)], [("L", 1)], [("L", 3)]]


def test_the_triton_variant_key_tells_apart_what_compiles_apart(monkeypatch):
    monkeypatch.setenv("INT8CONF_CONFORMANCE_RUN", "1")

    def key(m, dt=torch.bfloat16, bias=False):
        o = _ops(m, 64, 48, seed=m)
        bi = torch.zeros(48, dtype=dt) if bias else None
        return bt.variant_key(o.a, o.b, o.scale_a, o.scale_b, out_dtype=dt, bias=bi)

    assert key(5) == key(6)  # one decode configuration, M not specialized
    assert len({key(5), key(5, torch.float16), key(5, bias=True), key(300)}) == 4
    assert get_kernel("triton").warm_up is bt.variant_key


def test_warm_up_resolves_loaded_kernels_by_their_module_name():
    assert reload_name(get_kernel("triton")) == "triton"
    spec = get_kernel("buggy_kernels:good_triton")
    assert reload_name(spec) == "buggy_kernels:good_triton"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_warm_up_calls_the_kernel_once_per_layout_on_cuda(tmp_path, monkeypatch):
    from conformance.suite.warmup import c9_layouts, warm_up

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))  # a cold cache the workers fill
    monkeypatch.setenv("INT8CONF_CACHE", str(tmp_path / "int8conf"))
    cases = [_ops(m, 64, 48, seed=m, bias=m % 2 == 0) for m in (1, 17, 300)] + [_ops(17, 64, 48)]
    with conformance_run():
        rec = warm_up(get_kernel("triton"), cases, "cuda", workers=2)
        again = warm_up(get_kernel("triton"), cases, "cuda", workers=2)
    want = len(dict.fromkeys([case_layout(c) for c in cases] + c9_layouts(cases)))
    assert rec["layouts"] == want and rec["calls"] == want and rec["error"] == ""
    assert len(rec["process_seconds"]) == rec["workers"] and 1 <= rec["workers"] <= 2  # idle workers take groups
    assert 1 <= rec["groups"] <= want  # the built-in names its compiled variants (bt.variant_key): one compile each
    assert any((tmp_path / "triton").rglob("*.cubin")), "the workers compiled into Triton's cache"
    assert again["skipped"] and again["calls"] == 0


def test_a_pins_table_pins_the_configuration_of_a_bin(tmp_path, monkeypatch):
    key = "(0, True, 64, 8192, 2048, True, True, True)"  # a tuning key: m, n, k bins, then tma
    table = bt.pins_from_tuning({key: {"config": "ptr 128x128x128 g8 sk1 w4 s4", "timings_ms": {}}})
    assert table["pins"] == [{"m": 64, "n": 8192, "k": 2048, "tma": True, "config": "ptr 128x128x128 g8 sk1 w4 s4"}]
    path = tmp_path / "pins.json"
    path.write_text(__import__("json").dumps(table))
    monkeypatch.setenv(bt.PINS_ENV, str(path))
    cands = bt._candidates(64, tma=True)
    assert bt._pinned(cands, 33, 6000, 2048, True).label() == "ptr 128x128x128 g8 sk1 w4 s4"  # same bins
    assert bt._pinned(cands, 33, 6000, 2048, False) is None  # another layout's bin
    assert bt._pinned(bt._candidates(8, tma=False), 8, 6000, 2048, False) is None
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "other"}')
    monkeypatch.setenv(bt.PINS_ENV, str(bad))
    with pytest.raises(ValueError, match="not a Triton pins table"):
        bt._pinned(cands, 33, 6000, 2048, True)
    monkeypatch.setenv(bt.PINS_ENV, str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="missing.json: not a Triton pins table"):
        bt.check_pins_env()  # what importing the kernel runs: also under the interpreter


def test_a_bad_pins_table_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "garbage"
    bad.write_text("garbage")
    env = {**__import__("os").environ, bt.PINS_ENV: str(bad)}
    cmd = [sys.executable, "-m", "conformance.cli", "check", "--kernel", "triton", "--no-model", "--no-captures"]
    cmd += ["--no-tile-edges", "--examples", "0", "-q", "--out", str(tmp_path / "r")]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a Triton pins table" in lines[0]


def test_the_committed_h200_pins_name_candidates():
    from pathlib import Path

    table = bt.load_pins(Path(bt.__file__).parent / "triton_pins" / "nvidia-h200.json")
    labels = {c.label() for cs in (*bt.BUCKET_CONFIGS.values(), *bt.GLUON_CONFIGS.values()) for c in cs}
    labels |= {c.label() for cs in bt.GLUON_WS_CONFIGS.values() for c in cs}
    assert len(table) == 43 and set(table.values()) <= labels
    assert all(tma == (m > 16) for m, _, _, tma in table if m <= 16)  # decode calls are never TMA


def test_warm_up_adds_the_calls_c9_will_make():
    from conformance.checks import batch_invariance
    from conformance.suite.warmup import c9_layouts

    cases = [_ops(m, 64, 48, seed=m, bias=m % 2 == 0) for m in (3, 24)]
    lays = c9_layouts(cases)
    picked = len(batch_invariance.select_cases(cases)) + len(batch_invariance.probe_cases())
    assert len(lays) == picked * (1 + len(batch_invariance.BATCH_SIZES))
    ms = sorted({lay[0][0][0] for lay in lays})
    assert ms == sorted({1, *batch_invariance.BATCH_SIZES}) and all(lay[0][1] == (lay[0][0][1], 1) for lay in lays)


def test_warm_up_covers_the_property_examples(tmp_path, monkeypatch):
    """The suite's warm-up layouts include the property test's examples (int8 plan only), and its marker changes
    with them."""
    from conformance.cases import NO_CAPTURES
    from conformance.suite import plan
    from conformance.suite.property import property_operands
    from conformance.suite.warmup import c9_layouts, marker_path, warm_layouts

    monkeypatch.setenv("INT8CONF_CACHE", str(tmp_path))
    cases = [_ops(3, 32, 16), _ops(20, 32, 16, bias=True)]
    spec = get_kernel("cpu")
    extra = property_operands(5)
    both = list(dict.fromkeys([case_layout(c) for c in cases] + [case_layout(o) for o in extra]))
    c9 = [lay for lay in dict.fromkeys(c9_layouts(cases)) if lay not in both]  # scaled_mm only: no int_mm warmed
    lays = warm_layouts(spec, cases, extra)
    assert lays == [lay + (True,) for lay in both] + [lay + (False,) for lay in c9]
    assert len(both) > len(cases) and c9
    assert marker_path(spec, lays, "cuda") != marker_path(spec, warm_layouts(spec, cases), "cuda")

    got = {}
    monkeypatch.setattr(plan, "cuda_device", lambda spec, device: "cuda")  # the warm-up's gate, on the CPU
    monkeypatch.setattr(plan, "warm_up", lambda spec, cases, dev, say, extra: got.setdefault(spec.name, extra))
    warm = types.SimpleNamespace(name="w", warm_up=True, operands="int8", kind="per-token")
    plan.SuiteState(warm, cases, NO_CAPTURES).warm_up(examples=5)
    fp8 = types.SimpleNamespace(name="f", warm_up=True, operands="e4m3", kind="fp8")
    plan.SuiteState(fp8, cases, NO_CAPTURES).warm_up(examples=5)  # no property step in the FP8 plan
    none = types.SimpleNamespace(name="n", warm_up=True, operands="int8", kind="per-token")
    plan.SuiteState(none, cases, NO_CAPTURES).warm_up(examples=0)
    assert [(o.digests(), o.name) for o in got["w"]] == [(o.digests(), o.name) for o in extra]
    assert got["f"] == [] and got["n"] == []


def test_warm_up_runs_its_workers_and_leaves_a_marker(tmp_path, monkeypatch):
    """The whole warm-up on the CPU (the suite only warms CUDA runs): spawned workers resolve the kernel by
    name and call it once per layout; a complete warm-up is skipped the next time."""
    from conformance.suite.warmup import c9_layouts, marker_path, warm_layouts, warm_up

    monkeypatch.setenv("INT8CONF_CACHE", str(tmp_path))
    cases = [_ops(3, 32, 16), _ops(20, 32, 16, bias=True)]
    spec = get_kernel("cpu")
    rec = warm_up(spec, cases, "cpu", workers=2)
    want = warm_layouts(spec, cases)
    assert len(want) == len(dict.fromkeys([case_layout(c) for c in cases] + c9_layouts(cases)))
    assert (rec["layouts"], rec["calls"], rec["error"]) == (len(want), len(want), "")
    assert 1 <= rec["workers"] <= 2 and marker_path(spec, want, "cpu").is_file()  # idle workers take groups
    assert warm_up(spec, cases, "cpu", workers=2)["skipped"]


@pytest.mark.parametrize("text", ['{"format": "int8conf-triton-pins/1", "pins": [{"m": 1e400}]}', "[" * 100000])
def test_a_pins_table_that_overflows_or_nests_too_deep_names_itself(tmp_path, monkeypatch, text):
    path = tmp_path / "pins.json"
    path.write_text(text)
    bt._PINS.pop(str(path), None)
    with pytest.raises(ValueError, match=rf"{bt.PINS_ENV}=.*pins.json: not a Triton pins table"):
        bt.load_pins(path)
