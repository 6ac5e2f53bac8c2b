"""Fault injection into block-scaled and zero-point kernels (issue 46): F1-F5 / F10 / F11-F14 on block kernels, F15
on azp kernels, each pinned against the clean kernel run on independently rewritten operands."""

from __future__ import annotations

import json

import pytest
import torch

import faults  # noqa: F401 -- registers the injected-name resolver
from conformance.cli import main
from conformance.kernels.registry import get_kernel
from conformance.suite.evaluate import evaluate_fixed
from conformance.suite.plan import default_cases
from faults.block import faulty_form
from faults.catalogue import faults_for
from faults.inject import inject
from faults.spec import FaultError, split_injected_name
from faults.truth import ground_truth
from reference.asymmetric import precomputed_azp_adj
from reference.block.contract import parse_block_accumulation
from reference.block.evaluate import reference_block_scaled_mm
from reference.operands import GemmOperands

BS = (64, 128)  # block_n != block_k: F13 moves


def _case(k: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    m, n, kb = 3, 130, -(-k // BS[1])
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    sa = torch.rand((m, kb), generator=g) * 1e-2 + 1e-3
    sw = torch.rand((-(-n // BS[0]), kb), generator=g) * 1e-2 + 1e-3
    return a, b, sa, sw


def _run(spec, a, b, sa, sw):
    return spec.scaled_mm(a, b, sa, sw, out_dtype=torch.float32, bias=None, block_size=BS)


def test_block_and_zero_point_faults_apply_by_kernel_kind():
    assert [f.id for f in faults_for("int8")] == [f"F{i}" for i in range(1, 10)]  # the matrices' scope, unchanged
    assert [f.id for f in faults_for("int8", "block")] == "F1 F2 F3 F4 F5 F8 F9 F11 F12 F13 F14".split()
    assert [f.id for f in faults_for("e4m3", "block")] == "F1 F2 F3 F4 F5 F8 F9 F10 F11 F12 F13 F14".split()
    assert "F15" in [f.id for f in faults_for("int8", "zero-point")]
    for kernel, fault in (("cpu", "F11"), ("block-cpu", "F6"), ("block-cpu", "F15"), ("azp-cpu", "F7")):
        with pytest.raises(FaultError, match="does not apply") as e:
            inject(kernel, fault)
        assert "\n" not in str(e.value)
    name, inj = split_injected_name("block-cpu+F13@1%#s4")
    assert (name, inj.fault, inj.coverage, inj.seed, inj.suffix()) == ("block-cpu", "F13", "1%", 4, "+F13@1%#s4")


def test_f3_and_f5_swap_or_fuse_the_declared_block_forms():
    other = {
        "mul s_a; mul s_w; add": ("mul s_w; mul s_a; add", "mul s_a*s_w; add"),
        "mul s_a; fma s_w": ("mul s_w; fma s_a", "fma s_a*s_w"),
        "mul s_a*s_w; add": ("mul s_a; mul s_w; add", "mul s_w; mul s_a; add"),
        "fma s_a*s_w": ("mul s_a; fma s_w", "mul s_w; fma s_a"),
    }
    for form, (f3, f5) in other.items():
        p = parse_block_accumulation(form)
        assert (faulty_form(p, "F3").label(), faulty_form(p, "F5").label()) == (f3, f5)


def test_block_faults_equal_the_clean_kernel_on_rewritten_scales():
    """F11-F14 at coverage all = block-cpu on the scales / operands each fault reads (derived here, not by faults)."""
    clean = get_kernel("block-cpu")
    a, b, sa, sw = _case(200)  # KB = 2, a partial last K-block of 72
    m, kb = sa.shape
    nxt = sa.clone()
    nxt[:, kb - 1] = sa.reshape(-1)[[((i + 1) * kb) % (m * kb) for i in range(m)]]
    rows13 = torch.clamp(torch.arange(b.shape[0]) // BS[1], max=sw.shape[0] - 1)
    want = {
        "F11": _run(clean, a, b, sa.roll(-1, 1), sw.roll(-1, 1)),
        "F12": _run(clean, a, b, nxt, sw),
        "F14": _run(clean, a[:, :128], b[:, :128], sa[:, :1], sw[:, :1]),
    }
    for fault, expected in want.items():
        got = _run(inject(clean, fault), a, b, sa, sw)
        assert torch.equal(got, expected), fault
    f13 = clean.scaled_mm(a, b, sa, sw[rows13], out_dtype=torch.float32, block_size=(1, 128))
    assert torch.equal(_run(inject(clean, "F13"), a, b, sa, sw), f13)
    ref = lambda acc, s_a=sa, s_w=sw: reference_block_scaled_mm(a, b, s_a, s_w, BS, acc, out_dtype=torch.float32)  # noqa: E731
    assert torch.equal(_run(inject(clean, "F3"), a, b, sa, sw), ref("mul s_w; mul s_a; add"))
    assert torch.equal(_run(inject(clean, "F5"), a, b, sa, sw), ref("mul s_a*s_w; add"))
    bf = lambda s: s.to(torch.bfloat16).to(torch.float32)  # noqa: E731
    assert torch.equal(_run(inject(clean, "F1"), a, b, sa, sw), ref("mul s_a; mul s_w; add", bf(sa), bf(sw)))


def test_ground_truth_of_tail_faults_is_no_change_where_k_is_a_multiple_of_block_k():
    for k, no_op in ((256, True), (200, False)):
        a, b, sa, sw = _case(k, 1)
        ops = GemmOperands(a, b, sa, sw, None, torch.float32, name="t", block_size=BS)
        for fault in ("F12", "F14"):
            gt = ground_truth("block-cpu", fault, "all", 0, ops)
            assert (gt.no_op, gt.selected) == (no_op, 3 * 130), (fault, k, gt)
            assert "no change: K % block_k == 0" in gt.definition
        ops_bk = GemmOperands(
            a, b, sa, sw[torch.arange(0, sw.shape[0], 2)], None, torch.float32, name="t2", block_size=(128, 128)
        )
        assert ground_truth("block-cpu", "F13", "all", 0, ops_bk).no_op  # block_n == block_k


@pytest.mark.parametrize(
    "kernel,fault,case",
    [
        ("block-cpu", "F11", "decode2-longk-fp32"),
        ("block-cpu", "F2", "decode2-longk-fp32"),
        # the safe e4m3 families keep 14 bits, where F10 d10 changes nothing (faults/README.md): the wide sum moves
        ("block-fp8-cpu", "F10", "fp8-wide-sum-fp32"),
    ],
)
def test_c8_fails_on_exactly_the_elements_the_fault_changed(kernel, fault, case):
    spec = get_kernel(kernel)
    cases, _ = default_cases(operands=spec.operands, block_sizes=((128, 128),))
    c = next(c for c in cases if c.name == f"block/128x128/{case}")
    gt = ground_truth(spec, fault, "1%", 0, c)
    cr = evaluate_fixed(inject(spec, fault, "1%"), c, None)
    assert gt.changed > 0 and cr.checks["C8"].verdict == "fail"
    assert cr.checks["C8"].evidence["n_bits_differ"] == gt.changed


def test_f15_moves_the_correction_by_one_zero_point():
    """per-tensor: injected at all = azp-cpu with azp_adj precomputed for z + 1 (reference.asymmetric)."""
    g = torch.Generator().manual_seed(2)
    a = torch.randint(-128, 128, (4, 64), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (16, 64), generator=g, dtype=torch.int8)
    sa, sw = torch.full((4,), 2.0**-10), torch.full((16,), 2.0**-6)
    clean = get_kernel("azp-cpu")
    got = inject(clean, "F15").scaled_mm(a, b, sa, sw, torch.float32, azp_adj=precomputed_azp_adj(b, 5))
    assert torch.equal(got, clean.scaled_mm(a, b, sa, sw, torch.float32, azp_adj=precomputed_azp_adj(b, 6)))
    tok = torch.arange(4, dtype=torch.int32)
    got = inject(clean, "F15").scaled_mm(a, b, sa, sw, torch.float32, azp_adj=precomputed_azp_adj(b), azp=tok)
    assert torch.equal(got, clean.scaled_mm(a, b, sa, sw, torch.float32, azp_adj=precomputed_azp_adj(b), azp=tok + 1))


def test_check_inject_on_a_block_kernel_exits_1_naming_the_failing_checks(tmp_path, capsys):
    args = ["--no-model", "--no-serving", "--no-tile-edges", "--examples", "0", "-q", "--out", str(tmp_path)]
    assert main(["check", "--kernel", "block-cpu", "--inject", "F14:all", *args]) == 1
    doc = json.loads((tmp_path / "block-cpu_F14_all_s0" / "conformance.json").read_text())
    assert doc["overall"]["verdict"] == "fail" and "C8" in doc["overall"]["failed_checks"]
    failed = {c["case"] for c in doc["cases"] if c["verdict"] == "fail"}
    k_of = {c["case"]: c["shape"][1] for c in doc["cases"]}
    bk_of = {c["case"]: int(c["case"].split("/")[1].split("x")[1]) for c in doc["cases"]}
    # F14 changes nothing where K % block_k == 0: every failing case has a partial last K-block
    assert failed and all(k_of[c] % bk_of[c] for c in failed)
    assert "NOT conformant: C" in capsys.readouterr().out


def test_the_gate_decides_c17_of_a_zero_point_kernel(tmp_path):
    from conformance.gate.run import GateOptions, run_gate
    from conformance.runtime.pool import KernelRef

    opts = GateOptions(model_checks=False, serving_checks=False, timeout_s=120)
    res = run_gate(KernelRef("azp-cpu+F15@all#s0"), KernelRef("azp-cpu"), out_dir=tmp_path, options=opts)
    assert [(d.item, d.status) for d in res.serving] == [("C17", "fail")] and res.overall["verdict"] == "blocked"
    assert res.overall["summary"].endswith("; plan checks: C17 fail") and "serving:" not in res.overall["summary"]


def test_the_block_signature_names_the_injected_fault_by_its_emulation():
    from conformance.suite.signatures import explain_block_output

    a, b, sa, sw = _case(300)  # KB = 3, a partial last K-block; block_n != block_k
    ops = GemmOperands(a, b, sa, sw, None, torch.float32, name="t", block_size=BS)
    clean = get_kernel("block-cpu")
    assert explain_block_output(clean, ops, _run(clean, a, b, sa, sw)) is None  # nothing differs
    for fid in ("F11", "F13", "F14"):
        ex = explain_block_output(clean, ops, _run(inject("block-cpu", fid, "all"), a, b, sa, sw))
        assert ex["n_differ"] > 0 and ex["explained"][fid] == ex["n_differ"] == ex["predicted"][fid]
        assert sorted(ex["explained"]) == "F1 F11 F12 F13 F14 F2 F3 F4 F5".split()
        assert all(2 * k <= ex["n_differ"] for f, k in ex["explained"].items() if f != fid)


def test_the_block_signature_names_f10_by_its_default_deficit_on_an_e4m3_kernel():
    from conformance.suite.signatures import explain_block_output

    spec = get_kernel("block-fp8-cpu")
    cases, _ = default_cases(operands=spec.operands, block_sizes=((128, 128),))
    c = next(c for c in cases if c.name == "block/128x128/fp8-wide-sum-fp32")
    gt = ground_truth(spec, "F10", "all", 0, c)
    out = evaluate_fixed(inject(spec, "F10", "all"), c, None).checks["C8"].evidence["n_bits_differ"]
    ex = explain_block_output(spec, c, _call(inject(spec, "F10", "all"), c))
    assert out == gt.changed == ex["n_differ"] > 0
    assert ex["explained"]["F10"] == ex["n_differ"]  # the injected d10 accumulator, emulated, is the kernel's output


def _call(spec, ops):
    return spec.scaled_mm(
        ops.a, ops.b, ops.scale_a, ops.scale_b, out_dtype=ops.out_dtype, bias=ops.bias, block_size=ops.block_size
    )
