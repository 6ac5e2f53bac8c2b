"""The Triton kernel of the built-in ``triton-fp8`` (host side: ``builtin_triton_fp8``). In torch terms::

    acc = fp8_accumulate(a, b)        # float32 [M,N]: tl.dot of e4m3 tiles into a float32 accumulator
    out = triton_gemm.fused_epilogue(acc)  # the int8 kernel's fused epilogue, whose first cast is the identity here

One program per output tile (grouped order), K walked in BLOCK_K steps, no split-K. ``MAX_IMPRECISE`` is
``tl.dot``'s ``max_num_imprecise_acc``: natively on sm_90 the products of that many K elements are summed in the
tensor core's narrow accumulator before being added to the float32 accumulator (the interpreter ignores it)."""

from __future__ import annotations

import triton.language as tl

from conformance.kernels.triton_gemm import fused_epilogue


def fp8_mm(a_ptr, b_ptr, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, K, stride_am, stride_ak, stride_bn, stride_bk,
           stride_sa, stride_sb, stride_bias, stride_om, HAS_BIAS: tl.constexpr, OUT_KIND: tl.constexpr,
           ACC_ONLY: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
           GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, INT64_IDX: tl.constexpr, K_ITERS_STATIC: tl.constexpr,
           MAX_IMPRECISE: tl.constexpr):  # fmt: skip
    """FP8 W8A8 tile program. a e4m3 [M,K], b e4m3 [N,K], any strides; scales fp32 (stride 0 = scalar); bias
    out_dtype [N] (bf16 as int16 bits); out [M,N] as ``triton_gemm.fused_epilogue`` (ACC_ONLY: the float32 accumulator).
    Grid: (tiles_m * tiles_n,)."""
    pid = tl.program_id(0)
    num_pid_m = (M + BLOCK_M - 1) // BLOCK_M
    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * num_pid_n
    first_m = (pid // width) * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % group_rows
    pid_n = (pid % width) // group_rows

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    if INT64_IDX:
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
    ram = rm % M
    rbn = rn % N
    k_iters = (K + BLOCK_K - 1) // BLOCK_K
    a_ptrs = a_ptr + ram[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rbn[None, :] * stride_bn + rk[:, None] * stride_bk
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for i in range(0, K_ITERS_STATIC if K_ITERS_STATIC > 0 else k_iters):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            kk = i * BLOCK_K + rk
            a = tl.load(a_ptrs, mask=kk[None, :] < K, other=0.0)
            b = tl.load(b_ptrs, mask=kk[:, None] < K, other=0.0)
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=MAX_IMPRECISE)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    omask = (rm[:, None] < M) & (rn[None, :] < N)
    fused_epilogue(acc, rm, rn, omask, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, stride_sa, stride_sb, stride_bias, stride_om,
              HAS_BIAS, OUT_KIND, ACC_ONLY)  # fmt: skip
