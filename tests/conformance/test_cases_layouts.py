"""Operand layouts: the runner hands kernels copies that keep shape, strides
and padding; ``contiguous_only`` kernels get dense copies and the coverage
table says so; reference.operands layout helpers."""

from __future__ import annotations

import torch

from conformance.kernels.loader import declare, spec_from_object
from conformance.kernels.runner import run_kernel
from conformance.suite.coverage import coverage_table, invocation
from conformance.suite.evaluate import evaluate_case
from reference.operands import GemmOperands, copy_keep_layout, layout_label

I8 = torch.int8


def _strided_ops() -> GemmOperands:
    g = torch.Generator().manual_seed(3)
    wide = torch.randint(-128, 128, (4, 13), generator=g).to(I8)
    w = torch.randint(-128, 128, (9, 6), generator=g).to(I8)  # [K, N]
    sa = (torch.rand(4, 2, generator=g) / 64)[:, 1]  # stride 2
    return GemmOperands(wide[:, :9], w.t(), sa, torch.rand(6, generator=g) / 64, name="strided")


def test_copy_keep_layout_keeps_strides_and_padding():
    ops = _strided_ops()
    c = copy_keep_layout(ops.a)
    assert c.stride() == (13, 1) and c.shape == ops.a.shape and torch.equal(c, ops.a)
    assert c.data_ptr() != ops.a.data_ptr()
    # the padding bytes between rows travel too: a dense misread sees the same garbage
    dense = lambda t: torch.as_strided(t, t.shape, (t.shape[1], 1))  # noqa: E731
    assert torch.equal(dense(c), dense(ops.a)) and not torch.equal(dense(c), ops.a)
    assert copy_keep_layout(ops.b).stride() == (1, 6)
    assert [layout_label(t) for t in (ops.a, ops.b, ops.scale_a, ops.scale_b, None)] == [
        "row-major padded",
        "column-major",
        "strided",
        "dense",
        "none",
    ]


def test_runner_hands_the_layout_and_records_it():
    seen = {}

    @declare(contract="cutlass")
    def spy(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        seen.update(a=a.stride(), b=b.stride(), sa=scale_a.stride())
        from buggy_kernels import good_cutlass

        return good_cutlass(a, b, scale_a, scale_b, out_dtype, bias)

    spec = spec_from_object(spy, "spy", "test")
    run = run_kernel(spec, _strided_ops())
    assert run.error is None and seen == {"a": (13, 1), "b": (1, 6), "sa": (2,)}
    assert run.manifest["extra"]["operand_layouts"]["a"] == "row-major padded"
    assert "densified" not in run.manifest["extra"]

    @declare(contract="cutlass", contiguous_only=True)
    def dense_only(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        assert a.is_contiguous() and b.is_contiguous() and scale_a.is_contiguous()
        from buggy_kernels import good_cutlass

        return good_cutlass(a, b, scale_a, scale_b, out_dtype, bias)

    spec = spec_from_object(dense_only, "dense_only", "test")
    assert spec.contiguous_only is True and spec.manifest()["contiguous_only"] is True
    cr = evaluate_case(spec, _strided_ops())
    assert cr.verdict == "pass" and cr.run_manifest["extra"]["densified"] == ["a", "b", "scale_a"]
    rows = {r["condition"]: r for r in coverage_table([cr])}
    assert "NOT covered" in rows["layout of a"]["reached"] and rows["layout of a"]["covered"] == "no"
    # only some operands: the query-string form
    from conformance.kernels.loader import split_query

    _, q = split_query("m:f?contract=cutlass&contiguous_only=b")
    spec_b = spec_from_object(spy, "x", "test", q)
    assert spec_b.dense_operands() == frozenset({"b"})


def test_builtins_take_strided_operands_as_they_are_and_pass():
    # the Triton kernel addresses a and b through their strides (padded a,
    # transposed b), so nothing is densified for any built-in
    from conformance.kernels.registry import get_kernel

    assert get_kernel("triton").dense_operands() == frozenset()
    for name in ("triton", "cpu", "int_mm"):
        cr = evaluate_case(get_kernel(name), _strided_ops(), device="cpu")
        assert cr.verdict == "pass" and "densified" not in cr.run_manifest["extra"]


def test_invocation_recreates_the_command_line():
    import argparse

    ns = argparse.Namespace(
        command="check", kernel=["triton", "x.y:f"], no_model=True, examples=25, device=None, out="reports", func=print
    )
    inv = invocation(ns)
    assert inv["command"] == ("int8conf check --kernel triton --kernel x.y:f --no-model --examples 25 --out reports")
    assert "func" not in inv["options"] and inv["options"]["kernel"] == ["triton", "x.y:f"]
