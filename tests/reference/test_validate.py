"""reference.validate and reference.operands: one-line errors, digests."""

import hashlib

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from reference.errors import Int8confError, OperandError
from reference.operands import GemmOperands, tensor_digest
from reference.strategies import invalid_scales
from reference.validate import normalize_scales, validate_operands

I8 = torch.int8


def ok_ops(m=3, k=5, n=4):
    return (torch.ones(m, k, dtype=I8), torch.ones(n, k, dtype=I8), torch.ones(m), torch.ones(n))


def err(*args, **kw) -> str:
    with pytest.raises(OperandError) as ei:
        validate_operands(*args, **kw)
    msg = str(ei.value)
    assert "\n" not in msg and isinstance(ei.value, Int8confError)
    return msg


def test_valid_returns_mkn_and_accepts_scale_forms():
    a, b, sa, sb = ok_ops()
    assert validate_operands(a, b, sa, sb) == (3, 5, 4)
    assert validate_operands(a, b, sa[:, None], sb[:, None]) == (3, 5, 4)
    assert validate_operands(a, b, torch.tensor(2.0), torch.tensor([0.5])) == (3, 5, 4)
    assert validate_operands(a, b, -sa, sb, bias=torch.zeros(4, dtype=torch.bfloat16)) == (3, 5, 4)
    assert validate_operands(a, b, sa, sb, torch.zeros(4, dtype=torch.float16), out_dtype=torch.float16) == (3, 5, 4)


def test_exact_messages():
    a, b, sa, sb = ok_ops()
    assert err([[1]], b, sa, sb) == "a must be a torch.Tensor, got list"
    assert err(a.float(), b, sa, sb) == "a has dtype torch.float32; expected torch.int8"
    assert err(a, b[None], sa, sb) == "b must be 2-D [N,K], got 3-D shape (1, 4, 5)"
    at = torch.ones(5, 3, dtype=I8).t()
    assert err(at, b, sa, sb) == (
        "a has strides (1, 3) for shape (3, 5): expected row-major "
        "with unit inner stride and leading stride >= 5; "
        "pass a.contiguous()"
    )
    assert err(a, torch.ones(4, 10, dtype=I8)[:, ::2], sa, sb) == (
        "b has strides (10, 2) for shape (4, 5): expected row-major with unit inner stride "
        "and leading stride >= 5, or column-major (the transposed view of a [5,4] buffer); "
        "pass b.contiguous()"
    )
    assert err(a, torch.ones(4, 6, dtype=I8), sa, sb) == "K mismatch: a is (3, 5) [M,K] but b is (4, 6) [N,K]"
    assert err(torch.ones(0, 5, dtype=I8), b, torch.ones(0), sb).startswith("M=0")
    assert err(a, torch.ones(0, 5, dtype=I8), sa, torch.ones(0)).startswith("N=0")
    assert err(torch.ones(3, 0, dtype=I8), torch.ones(4, 0, dtype=I8), sa, sb).startswith("K=0")
    assert err(a, b, torch.ones(3, 2), sb) == "scale_a has shape (3, 2); expected [M]=[3], [M,1]=[3,1] or a scalar"
    assert err(a, b, sa, torch.ones(3)) == "scale_b has shape (3,); expected [N]=[4], [N,1]=[4,1] or a scalar"
    assert err(a, b, sa.double(), sb) == "scale_a has dtype torch.float64; expected torch.float32"
    nan = torch.ones(10)
    nan[[7, 8, 9]] = float("nan")
    a10 = torch.ones(10, 5, dtype=I8)
    assert err(a10, b, nan, sb) == "scale_a has 3 NaN value(s) (first at index 7)"
    assert (
        err(a, b, sa, torch.tensor([1.0, float("-inf"), 1.0, 1.0])) == "scale_b has 1 inf value(s) (first at index 1)"
    )
    assert err(a, b, sa, sb, bias=torch.zeros(4)) == "bias has dtype torch.float32; expected out_dtype torch.bfloat16"
    assert err(a, b, sa, sb, bias=torch.zeros(3, dtype=torch.bfloat16)) == "bias has shape (3,); expected [N]=[4]"
    assert (
        err(a, b, sa, sb, out_dtype=torch.int8)
        == "out_dtype=torch.int8 is not one of torch.bfloat16, torch.float16, torch.float32"
    )


@given(st.integers(1, 12).flatmap(lambda n: st.tuples(st.just(n), invalid_scales(n))), st.booleans())
def test_invalid_scales_are_rejected_with_index(n_and_bad, on_a):
    n, (bad, problem, idx) = n_and_bad
    a = torch.ones(n, 2, dtype=I8)
    b = torch.ones(n, 2, dtype=I8)
    good = torch.ones(n)
    name = "scale_a" if on_a else "scale_b"
    msg = err(a, b, bad if on_a else good, good if on_a else bad)
    assert msg.startswith(f"{name} has ") and f"{problem} value(s) (first at index {idx})" in msg


def test_normalize_scales():
    sa, sb = normalize_scales(torch.tensor(0.5), torch.tensor([[1.0], [2.0]]), 3, 2)
    assert sa.tolist() == [0.5, 0.5, 0.5] and sb.tolist() == [1.0, 2.0]
    assert sa.is_contiguous() and sa.dtype == torch.float32
    with pytest.raises(OperandError, match=r"scale_b has shape \(3,\)"):
        normalize_scales(torch.ones(3), torch.ones(3), 3, 2)


def test_tensor_digest_format_is_documented():
    t = torch.tensor([[1, -2]], dtype=torch.int8)
    expected = hashlib.sha256(b"torch.int8;1,2;" + bytes([1, 0xFE])).hexdigest()
    assert tensor_digest(t) == expected
    # strides do not matter, dtype and shape do
    u = torch.tensor([[1], [-2]], dtype=torch.int8).t()
    assert tensor_digest(u) == expected
    assert tensor_digest(t.reshape(2)) != expected
    assert tensor_digest(None) == "none"
    assert (
        tensor_digest(torch.tensor(1.0)) == hashlib.sha256(b"torch.float32;;" + bytes([0, 0, 0x80, 0x3F])).hexdigest()
    )


def test_gemm_operands_properties_digests_and_to():
    a, b, sa, sb = ok_ops(2, 3, 4)
    ops = GemmOperands(a, b, sa, sb, name="x", meta={"K": 3})
    assert (ops.m, ops.k, ops.n) == (2, 3, 4)
    d = ops.digests()
    assert set(d) == {"a", "b", "scale_a", "scale_b", "bias"} and d["bias"] == "none"
    assert d["a"] == tensor_digest(a) and d["a"] != d["b"]
    moved = ops.to("cpu")
    assert moved.digests() == d and moved.meta == {"K": 3} and moved.meta is not ops.meta
    assert ops.out_dtype == torch.bfloat16 and ops.scale_mode == "synthetic"


def test_zero_scales_and_all_zero_rows_are_legal():
    # an all-zero activation row quantizes to scale 0 (absmax 0), vLLM-style padding tokens
    a, b, sa, sb = ok_ops()
    a[1] = 0
    assert validate_operands(a, b, torch.tensor([1.0, 0.0, -0.0]), torch.zeros(4)) == (3, 5, 4)


def test_blas_layouts_are_legal():
    """Row-major with unit inner stride and leading stride >= K (a view x[:, :K]),
    b also as the transposed view of a [K, N] buffer (vLLM), scales of any stride."""
    wide = torch.zeros(3, 9, dtype=I8)
    a = wide[:, :5]
    assert a.stride() == (9, 1)
    bt = torch.zeros(5, 7, dtype=I8)[:, :4].t()  # [N=4, K=5], strides (1, 7)
    bpad = torch.zeros(4, 6, dtype=I8)[:, :5]
    sa = torch.ones(3, 2)[:, 0]  # stride 2
    sb = torch.ones(4, 3)[:, 1:2]  # [N,1], strides (3, 1)
    assert validate_operands(a, bt, sa, sb) == (3, 5, 4)
    assert validate_operands(a, bpad, sa, sb) == (3, 5, 4)
    # M = 1: the leading stride of a one-row view is irrelevant
    assert validate_operands(torch.zeros(1, 40, dtype=I8)[:, 3:8], bpad, sa[:1], sb) == (1, 5, 4)
    # a may not be column-major (only b has that exemption)
    assert "a has strides (1, 3)" in err(torch.zeros(5, 3, dtype=I8).t(), bpad, sa, sb)
    # overlapping rows (leading stride < K) are not a matrix
    over = torch.zeros(20, dtype=I8).as_strided((3, 5), (4, 1))
    assert "a has strides (4, 1)" in err(over, bpad, sa, sb)
