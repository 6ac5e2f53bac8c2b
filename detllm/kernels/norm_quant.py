"""Fused RMSNorm + per-token int8 quantization: ``detllm.engine.norm_quant`` (``_rms_core``,
``ratio_dyadic``), bit for bit, one program per row.
"""

from __future__ import annotations

import torch
import triton.language as tl

from detllm.kernels.intlang import bitlen, div_round_pos, isqrt_newton, launcher, next_pow2, rmax, round_shift, rsum
from detllm.kernels.quant_rows import row_outputs


def _norm_quant_kernel(x_ptr, g_ptr, q_ptr, tm_ptr, tk_ptr, H, eps_int, P, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_H)
    msk = offs < H
    x = tl.load(x_ptr + row * H + offs, mask=msk, other=0).to(tl.int64)
    g = tl.load(g_ptr + offs, mask=msk, other=0).to(tl.int64)
    amax = rmax(tl.abs(x))
    sh = tl.maximum(bitlen(amax) - 15, 0)
    xs = round_shift(x, sh)
    eps = sh * 0 + eps_int
    S = rsum(xs * xs) + round_shift(eps, 2 * sh)
    pp = sh * 0 + P
    n = (S << (2 * pp)) // H
    r = tl.maximum(isqrt_newton(n), 1)
    z = xs * g
    M = rmax(tl.abs(z))
    q = div_round_pos(127 * z, tl.maximum(M, 1))
    tl.store(q_ptr + row * H + offs, q.to(tl.int8), mask=msk)
    # ratio_dyadic(M << P, r): m in [2^15, 2^17], one rounding
    num = M << pp
    a = bitlen(num)
    b = bitlen(r)
    k = tl.where(num > 0, 16 - (a - b), a * 0)
    numer = num << tl.minimum(tl.maximum(k, 0), 63)
    denom = r << tl.minimum(tl.maximum(-k, 0), 63)
    tl.store(tm_ptr + row, div_round_pos(numer, denom))
    tl.store(tk_ptr + row, k)


_KERNEL = launcher(_norm_quant_kernel)


def rms_p(H: int, eps_int: int) -> int:
    """P of ``engine._rms_core``: max(0, (62 - bitlen(H * 2^30 + eps)) // 2)."""
    return max(0, (62 - (H * (1 << 30) + int(eps_int)).bit_length()) // 2)


def norm_quant(x: torch.Tensor, g: torch.Tensor, eps_int: int, out=None):
    """Fused ``engine.norm_quant``: x int64 [R, H] (|x| <= 2^31), g int [H], eps_int >= 0 ->
    (q int8 [R, H], tm int64 [R], tk int64 [R]); ``out`` optionally preallocated.
    """
    R, H = x.shape
    q, tm, tk = out if out is not None else row_outputs(R, H, x.device)
    bh = next_pow2(H)
    _KERNEL[(R,)](x, g, q, tm, tk, H, int(eps_int), rms_p(H, eps_int), BLOCK_H=bh, num_warps=4 if bh <= 1024 else 8)
    return q, tm, tk
