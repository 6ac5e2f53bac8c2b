"""Fused int8 GEMM + dyadic epilogue: ``detllm.engine._linear`` and what follows it.

acc = A[r] . W[n] exactly in int32 (any tiling gives the same sum); y = round_shift(acc tm[r] m[n],
tk[r] + k[n]) in int64, then per ``mode``: ``MODE_PLAIN`` y; ``MODE_RESIDUAL`` x <- clamp(x + y, int32)
in place; ``MODE_LOGITS`` clamp(y) as int32; ``MODE_SWIGLU`` gate and up rows n and I + n in one program,
each clamped to +-(2^31 - 1), then ``ops.int_swiglu``. Weights are [N, K] row-major.
"""

from __future__ import annotations

import torch
import triton.language as tl

from detllm.kernels.intlang import exp2_table, int_sigmoid, launcher, round_shift

MODE_PLAIN, MODE_RESIDUAL, MODE_LOGITS, MODE_SWIGLU = 0, 1, 2, 3


def _linear_kernel(
    a_ptr, w_ptr, tm_ptr, tk_ptr, m_ptr, k_ptr, out_ptr, table_ptr, R, N, K, W_OFF_UP, MODE: tl.constexpr,
    FG: tl.constexpr, SW_SHIFT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < R
    n_ok = rn < N
    rm64 = rm.to(tl.int64)
    rn64 = rn.to(tl.int64)
    acc = tl.full((BLOCK_M, BLOCK_N), 0, tl.int32)
    acc2 = tl.full((BLOCK_M, BLOCK_N), 0, tl.int32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < K
        a = tl.load(a_ptr + rm64[:, None] * K + kk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0)
        w = tl.load(w_ptr + rn64[None, :] * K + kk[:, None], mask=n_ok[None, :] & k_ok[:, None], other=0)
        acc += tl.dot(a, w, out_dtype=tl.int32)
        if MODE == 3:
            w2 = tl.load(
                w_ptr + (rn64[None, :] + W_OFF_UP) * K + kk[:, None], mask=n_ok[None, :] & k_ok[:, None], other=0
            )
            acc2 += tl.dot(a, w2, out_dtype=tl.int32)
    tm = tl.load(tm_ptr + rm, mask=m_ok, other=0)
    tk = tl.load(tk_ptr + rm, mask=m_ok, other=0)
    mn = tl.load(m_ptr + rn, mask=n_ok, other=0)
    kn = tl.load(k_ptr + rn, mask=n_ok, other=0)
    y = round_shift(acc.to(tl.int64) * tm[:, None] * mn[None, :], tk[:, None] + kn[None, :])
    o_off = rm64[:, None] * N + rn64[None, :]
    o_ok = m_ok[:, None] & n_ok[None, :]
    if MODE == 0:
        tl.store(out_ptr + o_off, y, mask=o_ok)
    elif MODE == 1:
        x = tl.load(out_ptr + o_off, mask=o_ok, other=0)
        tl.store(out_ptr + o_off, tl.minimum(tl.maximum(x + y, -(1 << 31)), (1 << 31) - 1), mask=o_ok)
    elif MODE == 2:
        tl.store(out_ptr + o_off, tl.minimum(tl.maximum(y, -(1 << 31)), (1 << 31) - 1).to(tl.int32), mask=o_ok)
    else:
        mu = tl.load(m_ptr + W_OFF_UP + rn, mask=n_ok, other=0)
        ku = tl.load(k_ptr + W_OFF_UP + rn, mask=n_ok, other=0)
        u = round_shift(acc2.to(tl.int64) * tm[:, None] * mu[None, :], tk[:, None] + ku[None, :])
        lim = (1 << 31) - 1
        g = tl.minimum(tl.maximum(y, -lim), lim)
        u = tl.minimum(tl.maximum(u, -lim), lim)
        silu = round_shift(g * int_sigmoid(g, table_ptr, FG), g * 0 + 30)
        h = round_shift(silu * u, g * 0 + SW_SHIFT)
        tl.store(out_ptr + o_off, h, mask=o_ok)


_KERNEL = launcher(_linear_kernel)


def _tiles(R: int, N: int, K: int, device_type: str):
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages); every choice gives the same bits."""
    if device_type != "cuda":
        return 16, 32, 64, 4, 1
    bm = 16 if R <= 16 else (32 if R <= 32 else 64)
    if R <= 32:
        bn = 32 if N <= 8192 else 64
        return bm, bn, 256 if K % 256 == 0 else 128, 4, 4
    return bm, 128, 64, 4, 3


def linear(
    a: torch.Tensor, w: torch.Tensor, tm: torch.Tensor, tk: torch.Tensor, m: torch.Tensor, k: torch.Tensor,
    mode: int = MODE_PLAIN, out: torch.Tensor | None = None, gate_exp: int = 0, up_exp: int = 0,
    out_exp: int | None = None,
) -> torch.Tensor:  # fmt: skip
    """int8 linear with the dyadic epilogue fused; returns ``out``.

    a: int8 [R, K]; w: int8 [N_w, K] (N_w = 2I for SwiGLU); tm, tk: int64 [R]; m, k: int64 [N_w].
    out: int64 [R, N] (required for ``MODE_RESIDUAL``: the residual stream, updated in place), int32 for
    logits. SwiGLU Q-formats as ``ops.int_swiglu``; out_exp defaults to gate_exp + up_exp.
    """
    R, K = a.shape
    Nw = w.shape[0]
    N = Nw // 2 if mode == MODE_SWIGLU else Nw
    if out is None:
        out = torch.empty(R, N, dtype=torch.int32 if mode == MODE_LOGITS else torch.int64, device=a.device)
    bm, bn, bk, nw, ns = _tiles(R, N, K, a.device.type)
    fo = gate_exp + up_exp if out_exp is None else out_exp
    grid = ((R + bm - 1) // bm, (N + bn - 1) // bn)
    _KERNEL[grid](
        a, w, tm, tk, m, k, out, exp2_table(a.device), R, N, K, N, MODE=mode, FG=int(gate_exp),
        SW_SHIFT=int(gate_exp + up_exp - fo), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns,
    )  # fmt: skip
    return out
