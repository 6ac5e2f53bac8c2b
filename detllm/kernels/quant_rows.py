"""Fused per-token activation quantization: ``detllm.engine.quant_rows``, one program per row."""

from __future__ import annotations

import torch
import triton.language as tl

from detllm.kernels.intlang import bitlen, div_round_pos, launcher, next_pow2, rmax, round_shift


def _quant_rows_kernel(v_ptr, q_ptr, tm_ptr, tk_ptr, H, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_H)
    msk = offs < H
    v = tl.load(v_ptr + row * H + offs, mask=msk, other=0).to(tl.int64)
    M = rmax(tl.abs(v))
    q = div_round_pos(127 * v, tl.maximum(M, 1))
    tl.store(q_ptr + row * H + offs, q.to(tl.int8), mask=msk)
    s = tl.maximum(bitlen(M) - 17, 0)
    tl.store(tm_ptr + row, round_shift(M, s))
    tl.store(tk_ptr + row, -s)


_KERNEL = launcher(_quant_rows_kernel)


def row_outputs(R: int, H: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Uninitialised outputs of a per-row int8 quantization (this kernel and
    ``norm_quant``): (q int8 [R, H], tm int64 [R], tk int64 [R]) on ``device``."""
    return (
        torch.empty(R, H, dtype=torch.int8, device=device),
        torch.empty(R, dtype=torch.int64, device=device),
        torch.empty(R, dtype=torch.int64, device=device),
    )


def quant_rows(v: torch.Tensor, out=None):
    """Fused ``engine.quant_rows`` for int64 v [R, H] -> (q int8 [R, H], tm int64 [R], tk int64 [R])."""
    R, H = v.shape
    q, tm, tk = out if out is not None else row_outputs(R, H, v.device)
    bh = next_pow2(H)
    _KERNEL[(R,)](v, q, tm, tk, H, BLOCK_H=bh, num_warps=4 if bh <= 1024 else 8)
    return q, tm, tk
