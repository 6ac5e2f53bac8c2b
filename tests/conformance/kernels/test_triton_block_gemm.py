"""The built-in Triton block-scaled kernel (``triton_block_gemm.block_scaled_mm``) under the interpreter, bit for bit
against an emulation of the block contract written here in numpy float32 (each array op rounds once, RNE): exact
block partials, ``acc = acc + (p * s_a) * s_w`` per K-block in order, ``+ bias`` in float32, one cast to out (torch's
RNE conversion). Scales have full 24-bit mantissas, so the order of the roundings shows in the bits; one test checks
that the wrong orders (FMA into the sum, fused scale product) give other bits on these operands."""

from __future__ import annotations

import inspect
import re
from fractions import Fraction

import numpy as np
import pytest
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from conformance.kernels import trace
from conformance.kernels.triton_block_gemm import block_mm, block_scaled_mm, launch_options
from reference.errors import OperandError

E4M3 = torch.float8_e4m3fn
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _scales(shape: tuple, g: torch.Generator, lo: int = -9, hi: int = -6) -> torch.Tensor:
    """float32 2**e * 1.m with e in [lo, hi] and a random 23-bit mantissa whose last bit is set (never a power of two)."""
    mant = torch.randint(0, 1 << 23, shape, generator=g) | 1
    exp = torch.randint(lo, hi + 1, shape, generator=g) + 127
    return ((exp << 23) | mant).to(torch.int32).view(torch.float32)


def _int8(shape: tuple, g: torch.Generator) -> torch.Tensor:
    return torch.randint(-128, 128, shape, dtype=torch.int8, generator=g)


def _e4m3(shape: tuple, g: torch.Generator) -> torch.Tensor:
    """n * 2**e, |n| <= 15, e in [-3, 1]: exact e4m3 values (4 significant bits, 2**-3 .. 30)."""
    n = torch.randint(-15, 16, shape, generator=g).double()
    e = torch.randint(-3, 2, shape, generator=g).double()
    return (n * 2.0**e).to(E4M3)


def _r32_exact(q: Fraction) -> np.float32:
    """``q`` rounded once to float32 (RNE; normal or subnormal range, no overflow)."""
    if q == 0:
        return np.float32(0.0)
    s, q = (-1 if q < 0 else 1), abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1  # now 2**e <= q < 2**(e + 1)
    ulp = max(e - 23, -149)
    return np.float32(s * round(q / Fraction(2) ** ulp) * 2.0**ulp)  # round(): half to even; n * 2**ulp exact


def _fma32(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """fmaf(x, y, z) element-wise, exactly (one rounding of the exact x * y + z)."""
    x, y, z = np.broadcast_arrays(x, y, z)
    out = [
        _r32_exact(Fraction(float(u)) * Fraction(float(v)) + Fraction(float(w)))
        for u, v, w in zip(x.flat, y.flat, z.flat)
    ]
    return np.array(out, dtype=np.float32).reshape(x.shape)


def _emulate(a, b, sa, sb, bias, out_dtype, block, order: str = "mul s_a; mul s_w; add") -> torch.Tensor:
    """The block contract in numpy float32, one K-block at a time (``order``: the block accumulation)."""
    bn, bk = block
    (m, k), n = a.shape, b.shape[0]
    if a.dtype == torch.int8:  # exact int64 sums, then one RNE cast to float32
        av, bv = a.numpy().astype(np.int64), b.numpy().astype(np.int64)
    else:  # e4m3 of _e4m3: products are multiples of 2**-6, float64 sums of them exact
        av, bv = a.float().double().numpy(), b.float().double().numpy()
    san, sbn = sa.numpy(), sb.numpy()
    acc = np.zeros((m, n), dtype=np.float32)
    for kb in range(-(-k // bk)):
        cols = slice(kb * bk, min(k, (kb + 1) * bk))
        p = (av[:, cols] @ bv[:, cols].T).astype(np.float32)
        s_a = san[:, kb][:, None]
        s_w = sbn[np.arange(n) // bn, kb][None, :]
        if order == "mul s_a; mul s_w; add":
            acc = acc + (p * s_a) * s_w
        elif order == "mul s_a*s_w; add":
            acc = acc + p * (s_a * s_w)
        elif order == "mul s_a; fma s_w":
            acc = _fma32(p * s_a, s_w, acc)
        else:
            raise AssertionError(order)
        assert acc.dtype == np.float32
    if bias is not None:
        acc = acc + bias.float().numpy()[None, :]
    return torch.from_numpy(acc).to(out_dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16)


def _operands(m, k, n, block, out_dtype, with_bias, seed, kind="int8"):
    g = torch.Generator().manual_seed(seed)
    bn, bk = block
    make = _int8 if kind == "int8" else _e4m3
    a, b = make((m, k), g), make((n, k), g)
    kbs = -(-k // bk)
    sa, sb = _scales((m, kbs), g), _scales((-(-n // bn), kbs), g)
    bias = (torch.randn(n, generator=g) * 8).to(out_dtype) if with_bias else None
    return a, b, sa, sb, bias


def _check(a, b, sa, sb, bias, out_dtype, block, want_from=None):
    out = block_scaled_mm(a, b, sa, sb, out_dtype=out_dtype, bias=bias, block_size=block)
    want = _emulate(*(want_from or (a, b, sa, sb)), bias, out_dtype, block)
    assert out.dtype == out_dtype and out.shape == want.shape and out.is_contiguous()
    assert torch.equal(_bits(out), _bits(want))
    return out


INT8_CASES = {
    "k_tail": (7, 300, 40, (128, 128), torch.bfloat16, True),  # K % 128 = 44; block_n > N
    "block_n_1": (9, 160, 20, (1, 64), torch.float16, False),  # per channel per K-group; K % 64 = 32
    "block_n_64": (12, 256, 150, (64, 128), torch.float32, True),  # N = 150 not a multiple of 64
    "block_n_128": (5, 200, 300, (128, 128), torch.bfloat16, False),  # N = 300: 3 weight blocks
    "block_k_48": (6, 100, 24, (16, 48), torch.float32, True),  # a block_k that is not a power of two
    "block_k_16": (6, 40, 24, (8, 16), torch.float16, True),
}


@pytest.mark.parametrize("case", INT8_CASES)
def test_int8_bits_equal_the_block_contract(case):
    m, k, n, block, out_dtype, with_bias = INT8_CASES[case]
    _check(*_operands(m, k, n, block, out_dtype, with_bias, seed=len(case)), out_dtype, block)


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_int8_every_out_dtype_with_and_without_bias(out_dtype, with_bias):
    block = (32, 64)
    _check(*_operands(10, 150, 70, block, out_dtype, with_bias, seed=3), out_dtype, block)


def test_int8_strided_operands_are_read_through_their_strides():
    m, k, n, block = 9, 200, 50, (16, 64)
    a, b, sa, sb, bias = _operands(m, k, n, block, torch.bfloat16, True, seed=11)
    wide = torch.zeros(m, k + 24, dtype=torch.int8)
    wide[:, :k] = a
    bt = b.t().contiguous().t()  # the transposed view of a [K, N] buffer
    sa_cm = sa.t().contiguous().t()  # column-major scale_a (DeepGEMM / vLLM column_major_scales)
    assert sa_cm.stride() == (1, m)
    sb_buf = torch.zeros(2 * sb.shape[0], 3 * sb.shape[1])
    sb_buf[::2, ::3] = sb
    bias_buf = torch.zeros(2 * n, dtype=torch.bfloat16)
    bias_buf[::2] = bias
    out = _check(wide[:, :k], bt, sa_cm, sb_buf[::2, ::3], bias_buf[::2], torch.bfloat16, block, (a, b, sa, sb))
    dense = block_scaled_mm(a, b, sa.contiguous(), sb, torch.bfloat16, bias, block)
    assert torch.equal(_bits(out), _bits(dense))
    # a column-major a and a broadcast (stride 0) scale_b row
    a_cm = a.t().contiguous().t()
    sb_one = sb[:1].expand(sb.shape[0], -1)
    _check(a_cm, b, sa, sb_one, None, torch.float32, block, (a, b, sa, sb_one.contiguous()))


def test_wrong_block_accumulations_give_other_bits_on_these_operands():
    """The operands discriminate: an FMA into the running sum ('mul s_a; fma s_w') or the scale product formed first
    ('mul s_a*s_w; add') round differently from the declared 'mul s_a; mul s_w; add' on some elements, while the
    kernel matches the declaration on all of them (float32 out: no cast hides a difference)."""
    block = (8, 32)
    a, b, sa, sb, _ = _operands(6, 128, 16, block, torch.float32, False, seed=5)  # 4 K-blocks
    out = _check(a, b, sa, sb, None, torch.float32, block)
    for order in ("mul s_a; fma s_w", "mul s_a*s_w; add"):
        other = _emulate(a, b, sa, sb, None, torch.float32, block, order)
        assert int((_bits(other) != _bits(out)).sum()) > 0, order


E4M3_CASES = {
    "k_tail": (5, 100, 40, (16, 32), torch.bfloat16, True),  # K % 32 = 4; N = 40: 3 weight blocks
    "block_64": (8, 192, 24, (128, 64), torch.float16, False),
    "block_n_1": (4, 64, 20, (1, 32), torch.float32, True),
}


@pytest.mark.parametrize("case", E4M3_CASES)
def test_e4m3_bits_equal_the_block_contract_where_the_partial_is_exact(case):
    """The interpreter's fp8 ``tl.dot`` widens e4m3 exactly to float16 and sums in float32 with numpy (any order).
    The operands of :func:`_e4m3` are multiples of 2**-3 below 2**5, so every product is a multiple of 2**-6 below
    2**10 and any partial sum of a K-block of <= 128 is a multiple of 2**-6 below 2**17: at most 23 significant
    bits, exact in float32 whatever the order. The block partial is then the exact sum, as in the emulation."""
    m, k, n, block, out_dtype, with_bias = E4M3_CASES[case]
    a, b, sa, sb, bias = _operands(m, k, n, block, out_dtype, with_bias, seed=len(case), kind="e4m3")
    _check(a, b, sa, sb, bias, out_dtype, block)
    if case == "k_tail":  # through strides: a padded row stride, b a transposed view
        wide = torch.zeros(m, k + 16, dtype=E4M3)
        wide[:, :k] = a
        _check(wide[:, :k], b.t().contiguous().t(), sa, sb, bias, out_dtype, block, (a, b, sa, sb))


def test_the_path_is_recorded():
    block = (64, 128)
    a, b, sa, sb, bias = _operands(4, 130, 70, block, torch.float16, True, seed=2)
    with trace.capture() as t:
        block_scaled_mm(a, b, sa, sb, torch.float16, bias, block)
    assert t.path == "triton-block-interpreter" and t.paths == [t.path]
    assert t.extra["block_size"] == [64, 128] and t.extra["config_rule"] == "interpreter tiles"
    assert t.extra["block_accumulation"] == "mul s_a; mul s_w; add" and t.extra["operands"] == "int8"
    assert [owner for _, owner in t.digests] == ["triton-block"]
    assert set(t.received_digests) == {"a", "b", "scale_a", "scale_b", "bias"}


def _bad_calls():
    g = torch.Generator().manual_seed(0)
    a, b = _int8((4, 100), g), _int8((20, 100), g)
    sa, sb = _scales((4, 1), g), _scales((1, 1), g)  # block (128, 128): KB = 1, one weight block
    nan_sb = sb.clone()
    nan_sb[0, 0] = float("nan")
    ok = dict(a=a, b=b, scale_a=sa, scale_b=sb)
    return {
        "scale_a": dict(ok, scale_a=sa.reshape(4)),
        "scale_b": dict(ok, scale_b=_scales((20, 1), g)),
        "scale_b has": dict(ok, scale_b=nan_sb),
        "scale_a has dtype": dict(ok, scale_a=sa.half()),
        "b has dtype": dict(ok, b=b.float().to(E4M3)),
        "a has": dict(ok, a=a.float()),
        "bias": dict(ok, bias=torch.zeros(20, dtype=torch.float16)),
        "K mismatch": dict(ok, b=b[:, :99]),
        "block_size": dict(ok, block_size=(128,)),
        "block_size=(0, 128)": dict(ok, block_size=(0, 128)),
        "out_dtype": dict(ok, out_dtype=torch.int32),
    }


@pytest.mark.parametrize("what", list(_bad_calls()))
def test_bad_operands_are_one_line_errors_naming_the_operand(what):
    with pytest.raises(OperandError) as e:
        block_scaled_mm(**_bad_calls()[what])
    msg = str(e.value)
    assert msg.startswith(what) or what in msg
    assert "\n" not in msg


def test_native_launch_has_no_fp32_fma():
    """The native launch options (``launch_options``) compile, for sm_90 on the CPU, to separate fp32 multiplies and
    adds with no ``fma.rn.f32``: the interpreter's rounding steps (with ``enable_fp_fusion`` on, Triton contracts
    ``acc + y * s_w`` into FMAs). e4m3, so the fp8 ``tl.dot`` with ``max_num_imprecise_acc`` compiles too."""
    _, kw, _, _ = launch_options(16, 16, 100, 32, True, True, torch.bfloat16, interp=False)
    assert kw["BLOCK_K"] == kw["SCALE_BLOCK_K"] == 32 and kw["MAX_IMPRECISE"] == 32
    opts = {o: kw.pop(o) for o in ("num_warps", "num_stages", "enable_fp_fusion")}
    sig = {p: "constexpr" if p in kw else "i32" for p in inspect.signature(block_mm).parameters}
    sig.update(a_ptr="*fp8e4nv", b_ptr="*fp8e4nv", sa_ptr="*fp32", sb_ptr="*fp32", one_ptr="*fp32")
    sig.update(bias_ptr="*bf16", out_ptr="*bf16")
    src = ASTSource(fn=triton.jit(block_mm), signature=sig, constexprs=kw)
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts).asm["ptx"]
    assert "wgmma" in ptx and not re.search(r"\bfma\.rn(\.ftz)?\.f32", ptx)
    assert re.search(r"\bmul\.rn\.f32", ptx) and re.search(r"\badd\.rn\.f32", ptx)
