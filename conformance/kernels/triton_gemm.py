"""The Triton kernels of the built-in ``triton`` kernel (host side: ``builtin_triton``). In torch terms::

    acc = (a.long() @ b.long().T).to(torch.int32)               # int32 [M,N], wraps like int32
    out = ((acc.float() * scale_a[:, None]) * scale_b[None, :]).to(out_dtype)   # two fp32 multiplies, RNE
    if bias is not None: out = (out.float() + bias.float()).to(out_dtype)      # after the rounding, RNE again

Every tiling, K split and program order gives the same int32 sums and one epilogue (:func:`fused_epilogue`), so the
same bits. ``w8a8_mm``: pointer loads through every stride (CUDA and the interpreter), grouped order, exact split-K
(int32 atomics; the last program at a tile takes the sum with ``atomic_xchg(ws, 0)``, leaving the workspace zeroed).
``w8a8_mm_tma``: Hopper TMA descriptors, optionally persistent / warp-specialised. bf16 is rounded with integer ops
(``u + 0x7FFF + lsb``) because the interpreter truncates fp32 -> bf16. Interpreter limits: no ``tl.zeros`` /
``tl.cdiv`` or plain ``@triton.jit`` helpers, and a constexpr K trip count (``K_ITERS_STATIC``). Its integer dot is
numpy's element loop; ``FLOAT_DOT`` (interpreter only) takes each K block's dot in float64 instead: every partial sum
is an integer of magnitude <= BLOCK_K * 2**14 < 2**53, so any order is exact and the block sum converts to int32
exactly; the int32 accumulator then wraps as before."""

from __future__ import annotations

import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction


class _DeviceFunction(JITFunction):
    """A ``@triton.jit`` device function the interpreter can call too: natively a ``JITFunction``
    (inlined), from Python run as ``InterpretedFunction`` (as under ``TRITON_INTERPRET=1``)."""

    def __call__(self, *args, **kwargs):
        interp = self.__dict__.get("_interpreted")
        if interp is None:
            interp = self._interpreted = InterpretedFunction(self.fn)
        return interp(*args, **kwargs)


@_DeviceFunction
def fused_epilogue(acc, rm, rn, omask, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, stride_sa, stride_sb, stride_bias, stride_om,
              HAS_BIAS: tl.constexpr, OUT_KIND: tl.constexpr, ACC_ONLY: tl.constexpr):  # fmt: skip
    """Store one tile of complete int32 sums ``acc`` [BLOCK_M, BLOCK_N] (rows ``rm``, columns ``rn``,
    mask ``omask``). ACC_ONLY: int32 out; else ``(float32(acc) * s_a) * s_w`` rounded RNE to OUT_KIND (0: bf16 as
    int16 bits, 1: fp16, 2: fp32), then with HAS_BIAS ``+ bias`` in float32, rounded again. Scales and bias read
    through their element strides (0 = scalar); out row stride ``stride_om``."""
    optrs = out_ptr + rm[:, None] * stride_om + rn[None, :]
    if ACC_ONLY:
        tl.store(optrs, acc, mask=omask)
    else:
        sa = tl.load(sa_ptr + rm * stride_sa, mask=rm < M, other=1.0)
        sb = tl.load(sb_ptr + rn * stride_sb, mask=rn < N, other=1.0)
        y = acc.to(tl.float32) * sa[:, None]  # TRITON_STYLE: s_a first ...
        y = y * sb[None, :]  # ... then s_w
        if OUT_KIND == 0:
            # RNE fp32 -> bf16 on the bit pattern (module docstring)
            u = y.to(tl.uint32, bitcast=True)
            hi = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            hi = tl.where(y != y, 0x7FC0, hi)
            if HAS_BIAS:
                bb = tl.load(bias_ptr + rn * stride_bias, mask=rn < N, other=0)  # raw bf16 bits
                bf = (bb.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
                z = (hi << 16).to(tl.float32, bitcast=True) + bf[None, :]
                u = z.to(tl.uint32, bitcast=True)
                hi = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
                hi = tl.where(z != z, 0x7FC0, hi)
            tl.store(optrs, hi.to(tl.uint16).to(out_ptr.dtype.element_ty, bitcast=True), mask=omask)
        elif OUT_KIND == 1:
            r = y.to(tl.float16)
            if HAS_BIAS:
                bh = tl.load(bias_ptr + rn * stride_bias, mask=rn < N, other=0.0)
                r = (r.to(tl.float32) + bh.to(tl.float32)[None, :]).to(tl.float16)
            tl.store(optrs, r, mask=omask)
        else:
            r = y
            if HAS_BIAS:
                bs = tl.load(bias_ptr + rn * stride_bias, mask=rn < N, other=0.0)
                r = r + bs[None, :]
            tl.store(optrs, r, mask=omask)


def w8a8_mm(a_ptr, b_ptr, sa_ptr, sb_ptr, bias_ptr, out_ptr, ws_ptr, cnt_ptr, M, N, K, stride_am, stride_ak, stride_bn,
            stride_bk, stride_sa, stride_sb, stride_bias, stride_om, HAS_BIAS: tl.constexpr, OUT_KIND: tl.constexpr,
            ACC_ONLY: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
            GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr, INT64_IDX: tl.constexpr,
            K_ITERS_STATIC: tl.constexpr, FLOAT_DOT: tl.constexpr):  # fmt: skip
    """Pointer-load W8A8 tile program. a int8 [M,K], b int8 [N,K], any strides; scales fp32 (stride 0 =
    scalar); bias out_dtype [N] (bf16 as int16 bits); out [M,N] as :func:`fused_epilogue`. ws / cnt: int32 workspace [M*N]
    and per-tile counters, zero on entry and exit (SPLIT_K > 1). Grid: (tiles_m * tiles_n, SPLIT_K)."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = (M + BLOCK_M - 1) // BLOCK_M
    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N
    # grouped ("swizzled") order: GROUP_M row-tiles walk the column-tiles together
    width = GROUP_M * num_pid_n
    first_m = (pid // width) * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % group_rows
    pid_n = (pid % width) // group_rows

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    if INT64_IDX:  # element offsets that do not fit int32 (huge operands / output)
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
    # rows/cols past the edge load a valid row (rm % M): no M/N masks in the loop; never stored
    ram = rm % M
    rbn = rn % N
    # the bound goes to range() as an expression: the <= 3.6 interpreter makes every assigned value a
    # 1-element tensor, which range() refuses with numpy >= 2.4
    k_iters = (K + BLOCK_K * SPLIT_K - 1) // (BLOCK_K * SPLIT_K)
    k_lo = pid_k * k_iters * BLOCK_K
    a_ptrs = a_ptr + ram[:, None] * stride_am + (k_lo + rk)[None, :] * stride_ak
    b_ptrs = b_ptr + rbn[None, :] * stride_bn + (k_lo + rk)[:, None] * stride_bk
    acc = tl.full((BLOCK_M, BLOCK_N), 0, tl.int32)  # not tl.zeros (module docstring)
    for i in range(0, K_ITERS_STATIC if K_ITERS_STATIC > 0 else k_iters):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            kk = k_lo + i * BLOCK_K + rk
            a = tl.load(a_ptrs, mask=kk[None, :] < K, other=0)
            b = tl.load(b_ptrs, mask=kk[:, None] < K, other=0)
        if FLOAT_DOT:  # interpreter: numpy's float64 matmul, exact (module docstring)
            acc += tl.dot(a.to(tl.float64), b.to(tl.float64)).to(tl.int32)
        else:
            acc += tl.dot(a, b)  # int8 x int8 -> int32 (not dot(a, b, acc): 3.6 wants out_dtype=)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    omask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT_K > 1:
        # exact split-K: integer atomics, the last program to arrive runs the epilogue
        wptrs = ws_ptr + rm[:, None] * N + rn[None, :]
        tl.atomic_add(wptrs, acc, mask=omask, sem="relaxed")
        tl.debug_barrier()  # every thread's add precedes the release below
        tile = pid_m * num_pid_n + pid_n
        arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
        tl.debug_barrier()
        last = arrived == SPLIT_K - 1
        # a full-shape mask (the interpreter's atomics refuse a broadcast scalar mask)
        omask = omask & ((tl.full((BLOCK_M, BLOCK_N), 0, tl.int32) + arrived) == SPLIT_K - 1)
        acc = tl.atomic_xchg(
            wptrs, tl.full((BLOCK_M, BLOCK_N), 0, tl.int32), mask=omask, sem="relaxed"
        )  # full sum out, workspace zeroed
        tl.atomic_xchg(cnt_ptr + tile, 0, mask=last, sem="relaxed")

    fused_epilogue(acc, rm, rn, omask, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, stride_sa, stride_sb, stride_bias, stride_om,
              HAS_BIAS, OUT_KIND, ACC_ONLY)  # fmt: skip


def w8a8_mm_tma(a_desc, b_desc, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, K, stride_sa, stride_sb, stride_bias,
                stride_om, NUM_PROGS, HAS_BIAS: tl.constexpr, OUT_KIND: tl.constexpr, ACC_ONLY: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                FLATTEN: tl.constexpr, WARP_SPEC: tl.constexpr):  # fmt: skip
    """TMA W8A8 GEMM (CUDA): descriptors over a [M,K] / b [N,K] with blocks [BLOCK_M|BLOCK_N, BLOCK_K]
    (TMA zero-fills the K tail). Grid (NUM_PROGS,), program p takes tiles p, p + NUM_PROGS, ... ``WARP_SPEC``:
    compiler warp specialisation of the tile loop (1) or K loop (2). Other arguments as :func:`w8a8_mm`."""
    pid = tl.program_id(0)
    num_pid_m = (M + BLOCK_M - 1) // BLOCK_M
    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N
    num_tiles = num_pid_m * num_pid_n
    k_iters = (K + BLOCK_K - 1) // BLOCK_K
    width = GROUP_M * num_pid_n
    for tile in tl.range(pid, num_tiles, NUM_PROGS, flatten=FLATTEN, warp_specialize=WARP_SPEC == 1):
        first_m = (tile // width) * GROUP_M
        group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % width) % group_rows
        pid_n = (tile % width) // group_rows
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.full((BLOCK_M, BLOCK_N), 0, tl.int32)
        for ki in tl.range(0, k_iters, warp_specialize=WARP_SPEC == 2):
            a = a_desc.load([off_m, ki * BLOCK_K])
            b = b_desc.load([off_n, ki * BLOCK_K])
            acc += tl.dot(a, b.T)

        rm = off_m + tl.arange(0, BLOCK_M)
        rn = off_n + tl.arange(0, BLOCK_N)
        omask = (rm[:, None] < M) & (rn[None, :] < N)
        fused_epilogue(acc, rm, rn, omask, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, stride_sa, stride_sb, stride_bias,
                  stride_om, HAS_BIAS, OUT_KIND, ACC_ONLY)  # fmt: skip
