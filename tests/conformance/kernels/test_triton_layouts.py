"""The built-in ``triton`` kernel under the interpreter: strided operands
(padded leading stride, vLLM's transposed ``b``), every scale layout, zero
scales, exact split-K, and the metadata-keyed host cache. Expected bits come
from the reference (``reference.epilogue.apply_epilogue`` on the exact int64
accumulator of dense copies), which shares no code with the kernel."""

from __future__ import annotations

import pytest
import torch

from conformance.kernels import builtin_triton as bt
from reference.accumulate import exact_int_mm
from reference.contract import TRITON_STYLE
from reference.epilogue import apply_epilogue
from reference.errors import OperandError

_INT = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def _bits(t):
    return t.view(_INT[t.dtype])


def _ref(a, b, sa, sb, bias=None, out_dtype=torch.bfloat16):
    acc = exact_int_mm(a.contiguous(), b.contiguous())
    return apply_epilogue(
        acc, sa.contiguous(), sb.contiguous(), TRITON_STYLE, None if bias is None else bias.contiguous(), out_dtype
    )


def _ints(shape, g):
    return torch.randint(-128, 128, shape, dtype=torch.int8, generator=g)


def test_padded_a_and_transposed_b_give_reference_bits():
    # a = x[:, :K] of a [M, K+24] buffer (row stride K+24); b = w_kn.t() of a [K, N]
    # buffer (strides (1, N): vLLM's column-major weight); scale_a an [M,1] column
    # view of an [M,3] buffer (stride 3); scale_b a strided [N] view; bias strided.
    g = torch.Generator().manual_seed(11)
    m, k, n = 7, 150, 37
    x = _ints((m, k + 24), g)
    a = x[:, :k]
    w_kn = _ints((k, n), g)
    b = w_kn.t()
    sa = (torch.rand(m, 3, generator=g) + 0.05)[:, 1:2]
    sb = (torch.rand(2 * n, generator=g) * 0.01 + 1e-4)[::2]
    bias = (torch.randn(3 * n, generator=g) * 2).to(torch.bfloat16)[::3]
    assert a.stride() == (k + 24, 1) and b.stride() == (1, n) and sa.stride() == (3, 1)
    out = bt.scaled_mm(a, b, sa, sb, torch.bfloat16, bias)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert torch.equal(_bits(out), _bits(_ref(a, b, sa.reshape(-1), sb, bias)))
    assert torch.equal(bt.int_mm(a, b).to(torch.int64), exact_int_mm(a.contiguous(), b.contiguous()))


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32])
def test_strided_operands_other_out_dtypes(out_dtype):
    g = torch.Generator().manual_seed(12)
    m, k, n = 5, 70, 19
    a = _ints((m, k + 9), g)[:, 3 : k + 3]  # unaligned base and odd leading stride
    b = _ints((n, 2 * k), g)[:, ::2]  # non-unit inner stride: still addressed right
    sa = torch.rand(m, generator=g) * 0.02 + 1e-3
    sb = torch.rand(n, generator=g) * 0.01 + 1e-4
    bias = (torch.randn(n, generator=g) * 3).to(out_dtype)
    out = bt.scaled_mm(a, b, sa, sb, out_dtype, bias)
    assert torch.equal(_bits(out), _bits(_ref(a, b, sa, sb, bias, out_dtype)))


def test_scalar_and_zero_scales_keep_the_sign_of_zero():
    # scale_a: zeros on two rows (an all-zero activation row quantizes to 0): the
    # output is +0 or -0 by the sign of acc * s_w (IEEE), which the reference knows.
    g = torch.Generator().manual_seed(13)
    m, k, n = 4, 40, 24
    a, b = _ints((m, k), g), _ints((n, k), g)
    sa = torch.tensor([0.5, 0.0, 0.25, 0.0])
    for sb in (torch.tensor(0.003), torch.tensor([0.003]), torch.full((n, 1), -0.002)):
        out = bt.scaled_mm(a, b, sa, sb)
        ref = _ref(a, b, sa, sb.reshape(-1).expand(n) if sb.numel() == 1 else sb.reshape(-1))
        assert torch.equal(_bits(out), _bits(ref))
        neg_zero = (_bits(out[1]) == -32768).sum()  # 0x8000 = -0.0 in bf16
        assert 0 < int(neg_zero) < n


@pytest.mark.parametrize("split_k", [2, 3])
def test_split_k_is_exact_and_leaves_the_workspace_zero(split_k):
    g = torch.Generator().manual_seed(20 + split_k)
    m, k, n = 9, 300, 40
    a, b = _ints((m, k), g), _ints((n, k), g)
    sa = torch.rand(m, generator=g) + 0.1
    sb = torch.rand(n, generator=g) * 0.01
    bias = torch.randn(n, generator=g).to(torch.bfloat16)
    cfg = bt.Config("ptr", 16, 16, 32, 2, split_k, 4, 1)
    out = bt.scaled_mm_config(cfg, a, b, sa, sb, torch.bfloat16, bias)
    assert torch.equal(_bits(out), _bits(_ref(a, b, sa, sb, bias)))
    acc = bt.scaled_mm_config(cfg, a, b, sa, sb, None)
    assert torch.equal(acc.to(torch.int64), exact_int_mm(a, b))
    assert int(bt._workspace(a.device, 1).abs().sum()) == 0  # restored for the next call


def test_split_k_wraps_like_a_single_int32_accumulator():
    # K = 131,073 products of (-128)(-128) = 2**31 + 16384: beyond int32. Every split
    # wraps modulo 2**32 like one accumulator (two's-complement addition is associative).
    k = 131_073
    a = torch.full((1, k), -128, dtype=torch.int8)
    b = torch.full((1, k), -128, dtype=torch.int8)
    want = ((16384 * k + 2**31) % 2**32) - 2**31
    for sk in (1, 4):
        cfg = bt.Config("ptr", 16, 16, 4096, 1, sk, 4, 1)
        got = bt.scaled_mm_config(cfg, a, b, None, None, None)
        assert int(got[0, 0]) == want == -2147467264


def test_metadata_cache_tells_layouts_apart():
    # same shapes, different strides: the cached call of one must not serve the other
    g = torch.Generator().manual_seed(30)
    m, k, n = 3, 48, 20
    dense = _ints((m, k), g)
    padded = _ints((m, k + 16), g)[:, :k]
    b = _ints((n, k), g)
    sa, sb = torch.rand(m, generator=g) + 0.1, torch.rand(n, generator=g) * 0.01
    for a in (dense, padded, dense, padded):
        assert torch.equal(_bits(bt.scaled_mm(a, b, sa, sb)), _bits(_ref(a, b, sa, sb)))


@pytest.mark.parametrize(
    "bad, msg",
    [
        (lambda a, b, sa, sb: (a.to(torch.int16), b, sa, sb), "a has dtype torch.int16"),
        (lambda a, b, sa, sb: (a, b[:, :-1], sa, sb), "K mismatch"),
        (lambda a, b, sa, sb: (a, b, sa[:2], sb), "scale_a has shape (2,)"),
        (lambda a, b, sa, sb: (a, b, sa, sb.double()), "scale_b has dtype torch.float64"),
        # new-user pass 2026-12-02: these reached torch / the interpreter
        (
            lambda a, b, sa, sb: (a.to_sparse(), b, sa, sb),
            "a has layout torch.sparse_coo; expected a dense (torch.strided) tensor",
        ),
        (lambda a, b, sa, sb: (a, b.to("meta"), sa, sb), "b is on device meta; expected a cpu or cuda"),
        (lambda a, b, sa, sb: (a, b, sa.to("meta"), sb), "scale_a is on device meta; expected a cpu"),
        # re-check pass: CSR has no strides (RuntimeError while building the cache key)
        (
            lambda a, b, sa, sb: (a, b.to_sparse_csr(), sa, sb),
            "b has layout torch.sparse_csr; expected a dense (torch.strided) tensor",
        ),
    ],
)
def test_bad_metadata_is_one_line_even_after_a_cached_call(bad, msg):
    g = torch.Generator().manual_seed(31)
    a, b = _ints((3, 32), g), _ints((16, 32), g)
    sa, sb = torch.rand(3, generator=g) + 0.1, torch.rand(16, generator=g)
    bt.scaled_mm(a, b, sa, sb)  # cached: the bad call differs in metadata, so it is re-validated
    with pytest.raises(OperandError, match=msg.replace("(", r"\(").replace(")", r"\)")) as e:
        bt.scaled_mm(*bad(a, b, sa, sb))
    assert "\n" not in str(e.value)


def test_scaled_mm_refuses_out_dtype_none_without_reading_the_scales():
    """New-user pass 2026-12-02: ``scaled_mm(a, b, 'garbage', [1, 2], None)`` returned
    the int32 accumulator, never looking at the scales."""
    g = torch.Generator().manual_seed(33)
    a, b = _ints((2, 16), g), _ints((3, 16), g)
    with pytest.raises(
        OperandError,
        match=r"out_dtype=None is not an output dtype of "
        r"scaled_mm .*the int32 accumulator is int_mm",
    ):
        bt.scaled_mm(a, b, "garbage", [1, 2], None)
    assert bt.int_mm(a, b).dtype == torch.int32


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_sparse_operand_never_hits_a_broadcast_dense_call_s_cache_entry():
    """Re-check pass 2026-12-02: a COO tensor's stride() is (0, 0), a broadcast dense
    one's too, so the cached call of ``x.expand(8, 32)`` served a COO ``a`` (deep
    NotImplementedError); the key now holds the layout."""
    a = torch.ones(1, 1, dtype=torch.int8).expand(8, 32)  # stride (0, 0)
    b = torch.ones(16, 32, dtype=torch.int8)
    sa, sb = torch.tensor([0.01]).expand(8), torch.ones(16)
    bt.scaled_mm(a, b, sa, sb)
    bt.int_mm(a, b)
    sparse_sa = torch.full((8,), 0.01).to_sparse()  # stride (0,): the broadcast sa's
    assert sparse_sa.stride() == sa.stride() and a.to_sparse().stride() == a.stride()
    for call in (
        lambda: bt.scaled_mm(a.to_sparse(), b, sa, sb),
        lambda: bt.int_mm(a.to_sparse(), b),
        lambda: bt.scaled_mm(a, b, sparse_sa, sb),
    ):
        with pytest.raises(OperandError, match="has layout torch.sparse_coo; expected a dense"):
            call()


def test_meta_bias_is_refused_in_one_line():
    g = torch.Generator().manual_seed(34)
    a, b = _ints((2, 16), g), _ints((16, 16), g)
    bt.scaled_mm(
        a, b, torch.ones(2), torch.ones(16), torch.bfloat16, torch.zeros(16, dtype=torch.bfloat16)
    )  # the cached call a meta bias must not hit
    with pytest.raises(OperandError, match="bias is on device meta; expected a cpu or cuda tensor"):
        bt.scaled_mm(
            a, b, torch.ones(2), torch.ones(16), torch.bfloat16, torch.zeros(16, dtype=torch.bfloat16, device="meta")
        )


def test_bias_of_wrong_dtype_is_refused():
    g = torch.Generator().manual_seed(32)
    a, b = _ints((2, 16), g), _ints((16, 16), g)
    with pytest.raises(OperandError, match="bias must be a \\[16\\] tensor of dtype"):
        bt.scaled_mm(a, b, torch.ones(2), torch.ones(16), torch.bfloat16, torch.zeros(16, dtype=torch.float16))
