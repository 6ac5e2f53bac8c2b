"""runner.run_kernel / run_int_mm: broken kernels are reported with evidence,
never crash; digests and manifests tell what ran."""

from __future__ import annotations

import pytest
import torch

from conformance.checks.ownership import check_call_independence
from conformance.kernels import trace
from conformance.kernels.registry import get_kernel
from conformance.kernels.runner import run_int_mm, run_kernel, start_kernel
from conformance.kernels.spec import KernelSpec, ShapeConstraints
from reference.contract import CUTLASS_STYLE
from reference.epilogue import reference_scaled_mm
from reference.errors import ContractError, OperandError
from reference.operands import GemmOperands


def _ops(m=4, k=8, n=3, bias=False):
    g = torch.Generator().manual_seed(1)
    return GemmOperands(
        torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g),
        torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g),
        torch.rand(m, generator=g) + 0.5,
        torch.rand(n, generator=g) + 0.5,
        torch.ones(n, dtype=torch.bfloat16) if bias else None,
    )


def _good(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
    return reference_scaled_mm(a, b, sa, sb, CUTLASS_STYLE, bias, out_dtype)


def _spec(fn, **kw):
    return KernelSpec(name="t", scaled_mm=fn, contract=CUTLASS_STYLE, **kw)


def test_good_kernel_runner_records_digests():
    ops = _ops()
    run = run_kernel(_spec(_good), ops)
    assert run.error is None and run.output.dtype == torch.bfloat16
    assert run.manifest["path"] == "unreported" and run.manifest["operands_recorded_by"] == "runner"
    assert run.received_digests == ops.digests()


def test_raising_kernel():
    def boom(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
        raise RuntimeError("CUDA error: an illegal memory access\nsecond line")

    run = run_kernel(_spec(boom), _ops())
    assert run.output is None
    assert run.error.startswith("kernel raised RuntimeError: CUDA error: an illegal memory access")
    assert "\n" not in run.error
    assert run.manifest["extra"]["exception"] == "RuntimeError"
    assert run.manifest["extra"]["traceback_tail"][-1].endswith("in boom")


@pytest.mark.parametrize(
    "ret,msg",
    [
        (lambda o: o.t().contiguous(), "kernel returned shape (3, 4), expected [4,3]"),
        (lambda o: o.float(), "kernel returned dtype torch.float32, expected torch.bfloat16"),
        (lambda o: o.tolist(), "kernel returned list, expected a torch.Tensor [4,3] torch.bfloat16"),
    ],
)
def test_wrong_output(ret, msg):
    def bad(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
        return ret(_good(a, b, sa, sb, out_dtype, bias))

    run = run_kernel(_spec(bad), _ops())
    assert run.error == msg and run.output is None


def test_nan_output_reported_with_position():
    def nan_one(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
        o = _good(a, b, sa, sb, out_dtype, bias)
        o[2, 1] = float("nan")
        return o

    run = run_kernel(_spec(nan_one), _ops())
    assert run.error.startswith("kernel wrote NaN at 1 of 12 elements")
    assert "first at [2,1]" in run.error
    assert run.manifest["extra"]["first_unexpected_nan"] == [2, 1]
    assert run.output is not None and torch.isnan(run.output).sum() == 1


def test_kernel_recorded_operands_win_over_runner():
    # a wrapper that feeds the kernel a transposed-then-copied b (an F9-like fault):
    # the digests show what the innermost kernel received.
    inner = get_kernel("cpu")

    def swap(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
        return inner.scaled_mm(a, b.flip(0).contiguous(), sa, sb, out_dtype, bias)

    ops = _ops()
    run = run_kernel(_spec(swap), ops)
    assert run.error is None and run.manifest["operands_recorded_by"] == "kernel"
    assert run.manifest["path"] == "cpu-exact"
    d = ops.digests()
    assert run.received_digests["a"] == d["a"] and run.received_digests["b"] != d["b"]


def test_invalid_operands_raise_one_line():
    ops = _ops()
    ops.scale_a = ops.scale_a.clone()
    ops.scale_a[1] = float("nan")  # zero is legal (issue 8), NaN is not
    with pytest.raises(OperandError, match=r"^scale_a has 1 NaN value\(s\) \(first at index 1\)$"):
        run_kernel(get_kernel("cpu"), ops)
    with pytest.raises(OperandError, match="K mismatch"):
        run_int_mm(get_kernel("cpu"), ops.a, ops.b[:, :5].contiguous())


def test_constraints_and_device_skip():
    spec = _spec(_good, constraints=ShapeConstraints(min_m=17, k_multiple=8))
    run = run_kernel(spec, _ops(m=4, k=12))
    assert run.manifest["skipped"] is True and run.output is None
    assert run.error == (
        "not runnable here: shape outside declared constraints: M=4 < min_m=17; K=12 is not a multiple of 8"
    )
    if not torch.cuda.is_available():
        run = run_kernel(_spec(_good, devices=("cuda",)), _ops())
        assert run.manifest["skipped"] and "none available here" in run.error


def test_operand_constraints_skip_the_case_with_each_reason():
    # a tensorwise, bf16-only kernel without a bias: a per-token case with a bias and an fp16 output is refused
    # for all three reasons, never called; a case inside them runs
    calls = []
    cons = ShapeConstraints(out_dtypes=(torch.bfloat16,), scales="tensor", bias=False)
    spec = _spec(lambda *a, **kw: calls.append(1) or _good(*a, **kw), constraints=cons)
    ops = _ops(bias=True)
    ops.out_dtype, ops.bias = torch.float16, ops.bias.half()
    run = run_kernel(spec, ops)
    assert run.manifest["skipped"] is True and calls == []
    assert run.manifest["extra"]["constraint_violations"] == [
        "out dtype float16 is not one of bfloat16",
        "per-token / per-channel scales: the kernel takes one scale per operand",
        "a bias: the kernel takes none",
    ]
    assert run.error.startswith("not runnable here: outside declared constraints: out dtype float16")
    ok = _ops()
    ok.scale_a, ok.scale_b = ok.scale_a[:1].clone(), ok.scale_b[0].clone()
    assert run_kernel(spec, ok).error is None and calls == [1]
    with pytest.raises(ContractError, match="scales='rowwise'"):
        ShapeConstraints(scales="rowwise")


def test_int_mm_missing_and_bad():
    a, b = _ops().a, _ops().b
    run = run_int_mm(_spec(_good), a, b)
    assert run.acc is None and run.error == "kernel 't' has no int_mm (accumulator-only) entry"
    run = run_int_mm(_spec(_good, int_mm=lambda a, b: a.long() @ b.long().T), a, b)
    assert run.error == "int_mm returned dtype torch.int64, expected torch.int32"
    run = run_int_mm(_spec(_good, int_mm=lambda a, b: (a.long() @ b.long().T).int()), a, b)
    assert run.error is None and run.output.tolist() == (a.long() @ b.long().T).tolist()


def test_trace_outside_capture_is_noop_and_nested_last_wins():
    trace.record_path("x", k=1)  # no capture: nothing happens, no error
    with trace.capture() as outer:
        trace.record_path("wrapper", a=1)
        trace.record_path("inner", b=2)
    assert outer.path == "inner" and outer.paths == ["wrapper", "inner"]
    assert outer.extra == {"a": 1, "b": 2}
    assert trace.current() is None


def test_c10_makes_no_variant_call_outside_the_declared_out_dtypes():
    # a bf16-only kernel raises on another out dtype: C10's out-dtype variant is not called, the others are
    seen = []

    def bf16_only(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None):
        seen.append(out_dtype)
        if out_dtype != torch.bfloat16:
            raise OperandError(f"writes bfloat16 only, got {out_dtype}")
        return _good(a, b, sa, sb, out_dtype, bias)

    spec = _spec(bf16_only, constraints=ShapeConstraints(out_dtypes=("bfloat16",)))
    ops = _ops(bias=True)
    run = start_kernel(spec, ops, device="cpu", probe_ownership=True).result()
    steps = run.manifest["extra"]["ownership"]["sequence"]
    assert check_call_independence(spec, ops, run).verdict == "pass"
    assert set(seen) == {torch.bfloat16} and not any("out_dtype=" in s["compared"] for s in steps)
    assert [s["compared"].split(":")[0] for s in steps] == [
        "replay",
        "replay",
        "variant",
        "replay",
    ]  # no out-dtype variant
