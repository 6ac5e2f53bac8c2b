"""F6 / F7 (operands whose selected accumulators really leave the range) and
F9 (the kernel fed other operands): exact accumulators checked with numpy
int64, operand variants checked against hand-computed tensors."""

from __future__ import annotations

import numpy as np
import torch

from conformance.cases import make_case
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import run_int_mm, run_kernel
from conformance.suite.evaluate import evaluate_case
from faults import ground_truth, inject, prepare_case
from faults.mask import acc_case_key
from faults.operand import pow2_scales
from faults.precondition import F6_WINDOW, precondition_operands
from reference.operands import GemmOperands


def _acc64(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    return a.numpy().astype(np.int64) @ b.numpy().astype(np.int64).T


def _small(m=3, k=4, n=5, seed=0) -> GemmOperands:
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int16).to(torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int16).to(torch.int8)
    return GemmOperands(a, b, torch.full((m,), 0.01), torch.full((n,), 0.002), name="small")


def _bits(t):
    return t.contiguous().view(torch.int16)


def test_f7_all_pushes_every_accumulator_to_2p24_with_the_smallest_extension():
    ops = _small()
    acc = _acc64(ops.a, ops.b)
    p = prepare_case(ops, "F7", "all", 0)
    extra = -(-(2**24 - int(acc.min())) // 16384)  # ceil
    assert p.meta["fault_prepared"]["extra_k"] == extra
    # then zero columns to the next multiple of 256 (faults.precondition.K_ALIGN)
    assert p.k % 256 == 0 and ops.k + extra <= p.k < ops.k + extra + 256
    e = ops.k + extra
    assert (p.a[:, ops.k : e] == -128).all() and (p.b[:, ops.k : e] == -128).all()
    assert (p.a[:, e:] == 0).all() and (p.b[:, e:] == 0).all()
    assert torch.equal(p.a[:, : ops.k], ops.a) and torch.equal(p.b[:, : ops.k], ops.b)
    acc2 = _acc64(p.a, p.b)
    assert (acc2 - acc == extra * 16384).all() and acc2.min() >= 2**24
    assert acc2.min() - 16384 < 2**24  # one column fewer would not do
    assert prepare_case(p, "F7", "all", 0) is p  # idempotent
    assert prepare_case(ops, "F4", "all", 0) is ops  # other faults: identity


def test_f7_one_changes_exactly_one_accumulator():
    ops = _small(seed=1)
    p = prepare_case(ops, "F7", "one", 4)
    diff = _acc64(p.a, p.b) - _acc64(ops.a, ops.b)
    (i,), (j,) = p.meta["fault_prepared"]["rows"], p.meta["fault_prepared"]["cols"]
    assert diff[i, j] == p.meta["fault_prepared"]["extra_k"] * 16384
    assert np.count_nonzero(diff) == 1 and _acc64(p.a, p.b)[i, j] >= 2**24


def test_f7_ground_truth_and_checks_on_the_cpu_kernel():
    ops = make_case("ordinary", 0)
    gt = ground_truth("cpu", "F7", "all", 0, ops)
    # the cpu kernel converts int32 -> float32 with one RNE rounding, as the reference
    # emulation of its declared contract does: no output bit moves (measured, not assumed)
    assert gt.selected == ops.m * ops.n and gt.no_op and gt.accumulator_source == "exact reference"
    assert gt.operand_change.startswith(f"K {ops.k} -> ")
    cr = evaluate_case(inject("cpu", "F7", "all", 0), prepare_case(ops, "F7", "all", 0))
    assert cr.checks["C4"].verdict == "fail" and cr.checks["C4"].is_precondition_violation
    assert cr.checks["C8"].verdict == "pass" and cr.checks["C2"].verdict == "pass"


def test_f6_window_overflow_and_int32_wraparound():
    ops = _small(m=20, k=8, n=30, seed=2)
    p = prepare_case(ops, "F6", "1%", 0)
    fp = p.meta["fault_prepared"]
    rows, start, cols = fp["window"]
    assert (rows, cols) == F6_WINDOW and (p.m, p.n) == F6_WINDOW
    assert torch.equal(p.a[:, :8], ops.a[:16]) and torch.equal(p.b[:, :8], ops.b[start : start + 16])
    assert torch.equal(p.scale_b, ops.scale_b[start : start + 16])
    acc0 = _acc64(ops.a[:16], ops.b[start : start + 16])
    acc = _acc64(p.a, p.b)
    sel = np.zeros((16, 16), dtype=bool)
    sel[np.ix_(fp["rows"], fp["cols"])] = True
    assert sel.sum() == 4  # 1% of 256: a 2 x 2 block
    assert (acc[sel] >= 2**31).all() and (acc[~sel] == acc0[~sel]).all()
    assert p.k > 131072
    # the cpu kernel's int32 accumulator wraps (two's complement), exactly
    run = run_int_mm(get_kernel("cpu"), p.a, p.b)
    wrapped = ((acc + 2**31) % 2**32) - 2**31
    assert (run.acc.numpy() == wrapped).all()
    gt = ground_truth("cpu", "F6", "1%", 0, p)
    assert (gt.selected, gt.changed, gt.changed_outside) == (4, 4, 0)
    assert gt.max_spacing > 10000 and not gt.no_op


def test_f6_f7_wrapper_passes_through_prepared_operands_or_extends_k_itself():
    ops = make_case("bias", 0)
    p = prepare_case(ops, "F7", "1%", 1)
    cpu = get_kernel("cpu")
    call = lambda s, o: s.scaled_mm(o.a, o.b, o.scale_a, o.scale_b, out_dtype=o.out_dtype, bias=o.bias)  # noqa: E731
    assert torch.equal(_bits(call(inject(cpu, "F7", "1%", 1), p)), _bits(call(cpu, p)))
    # prepared=False: the wrapper extends K on every call (same block for the same case)
    spec = inject(cpu, "F7", "1%", 1, prepared=False)
    a2, b2, *_ = precondition_operands(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias, "F7", "1%", 1)
    assert torch.equal(
        _bits(call(spec, ops)),
        _bits(cpu.scaled_mm(a2, b2, ops.scale_a, ops.scale_b, out_dtype=ops.out_dtype, bias=ops.bias)),
    )
    run = run_kernel(spec, ops)
    assert run.received_digests["a"] != ops.digests()["a"]  # what the kernel really got


def test_self_prepared_f6_block_run_equals_a_run_on_the_full_extended_case():
    # prepared=False runs the selected block alone (K-extended) and merges: same bits as the
    # kernel on the whole K-extended case, for scaled_mm and for int_mm
    cpu = get_kernel("cpu")
    ops = _small(m=4, k=6, n=5, seed=3)
    ops.bias = torch.tensor([0.5, -1.0, 2.0, 0.25, -0.125], dtype=torch.bfloat16)
    spec = inject(cpu, "F6", "1%", 2, prepared=False)
    a2, b2, rows, cols, extra, acc2 = precondition_operands(
        ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias, "F6", "1%", 2
    )
    want = cpu.scaled_mm(a2, b2, ops.scale_a, ops.scale_b, bias=ops.bias)
    got = spec.scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, bias=ops.bias)
    assert torch.equal(_bits(got), _bits(want))
    acc_want = cpu.int_mm(
        *precondition_operands(
            ops.a, ops.b, torch.ones(()), torch.ones(()), None, "F6", "1%", 2, key=acc_case_key(ops.a, ops.b)
        )[:2]
    )
    assert torch.equal(spec.int_mm(ops.a, ops.b), acc_want)
    # 1% of 4 x 5 outputs is one element: exactly one accumulator wrapped
    assert int((acc_want.to(torch.int64) != torch.from_numpy(_acc64(ops.a, ops.b))).sum()) == 1


def test_f9_variants_feed_the_kernel_other_operands():
    cpu = get_kernel("cpu")
    ops = make_case("ordinary", 0)  # 8 x 64 x 48: not square
    n, k = ops.n, ops.k
    bt = torch.from_numpy(ops.b.numpy().T.copy().reshape(n, k))
    want = cpu.scaled_mm(ops.a, bt, ops.scale_a, ops.scale_b)
    out = inject(cpu, "F9.transposed", "all", 0).scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b)
    assert torch.equal(_bits(out), _bits(want))
    a_stale = torch.from_numpy(np.roll(ops.a.numpy(), 1, axis=0).copy())
    want = cpu.scaled_mm(a_stale, ops.b, ops.scale_a, ops.scale_b)
    out = inject(cpu, "F9.stale", "all", 0).scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b)
    assert torch.equal(_bits(out), _bits(want))
    # the int_mm entry is mismatched too (the accumulator path, e.g. detllm's engine)
    acc = inject(cpu, "F9.stale", "all", 0).int_mm(ops.a, ops.b)
    assert (acc.numpy() == _acc64(a_stale, ops.b)).all()
    acc = inject(cpu, "F9", "all", 0).int_mm(ops.a, ops.b)  # pow2_scales: not the acc path
    assert (acc.numpy() == _acc64(ops.a, ops.b)).all()


def test_f9_pow2_scale_rewrite_by_hand_and_its_truth_by_scale_mode():
    s = torch.tensor([0.3, 0.375, 0.0, 1.0, 2.0**-9 * 1.4], dtype=torch.float32)
    # log2: -1.74 -> -2; -1.42 -> -1; zero kept; 0 -> 0; 1.4 < sqrt(2): down
    assert pow2_scales(s).tolist() == [0.25, 0.5, 0.0, 1.0, 2.0**-9]
    own = make_case("ordinary", 1)
    gt = ground_truth("cpu", "F9", "all", 0, own)
    assert gt.changed > 0 and "changes scale_b" in gt.operand_change
    cr = evaluate_case(inject("cpu", "F9", "one", 0), own)
    assert cr.checks["C2"].verdict == "fail"  # what the kernel received
    pw = make_case("pow2", 0)  # weight scales already 2^-e
    gt = ground_truth("cpu", "F9", "all", 0, pw)
    assert gt.no_op and "identical operands here" in gt.operand_change
    assert evaluate_case(inject("cpu", "F9", "all", 0), pw).checks["C2"].verdict == "pass"


def test_detllm_takes_the_injected_int_mm_entry():
    from detllm.engine import resolve_int_mm

    fn, name = resolve_int_mm(inject("cpu", "F9.transposed", "one", 0))
    assert name == "cpu+F9.transposed@one#s0"
    a = torch.ones((2, 3), dtype=torch.int8)
    b = torch.tensor([[1, 0, 0], [5, 1, 0], [9, 9, 1]], dtype=torch.int8)
    acc = fn(a, b)
    # row sums of b (1, 6, 19) and of b.T (15, 10, 1) differ everywhere: exactly the one
    # selected accumulator is the transposed one
    assert int((acc != torch.from_numpy(_acc64(a, b)).to(torch.int32)).sum()) == 1


def test_f6_f7_cases_stay_within_the_kernels_declared_shapes():
    """New-user pass 2026-12-01e: a kernel declaring min_m=17 / n_multiple=32 /
    k_multiple=384 had every F6 cell (16 x 16 window) and some F7 cells (K padded
    to 256 only) marked n/a, and the scorecard read "none" for F6."""
    from conformance.kernels.spec import ShapeConstraints
    from faults.precondition import padded_k, window_shape

    sc = ShapeConstraints(min_m=17, n_multiple=32, k_multiple=384)
    assert window_shape(64, 2048, sc) == (17, 32) and window_shape(64, 2048) == (16, 16)
    assert window_shape(8, 20, sc) == (8, 20)  # never more than the case
    assert padded_k(384, 1000) == 1536 and padded_k(384, 1000, 384) == 1536  # lcm(256, 384)
    assert padded_k(384, 1200, 384) == 2304
    ops = _small(64, 384, 128)
    for fault in ("F6", "F7"):
        p = prepare_case(ops, fault, "1%", 0, constraints=sc)
        assert sc.violations(p.m, p.k, p.n) == [], (fault, p.m, p.k, p.n)
        acc = _acc64(p.a, p.b)
        (i, *_), (j, *_) = p.meta["fault_prepared"]["rows"], p.meta["fault_prepared"]["cols"]
        assert acc[i, j] >= (2**31 if fault == "F6" else 2**24)
