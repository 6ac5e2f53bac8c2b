"""The Triton kernels behind the built-in ``triton`` kernel (host side:
``conformance.kernels.builtin_triton``).

What they compute, in readable torch (the declared contract
``reference.contract.TRITON_STYLE``, vLLM's Triton ``scaled_mm``)::

    acc = (a.long() @ b.long().T).to(torch.int32)        # int32 [M,N], wraps like int32
    y   = (acc.float() * scale_a[:, None]) * scale_b[None, :]   # two IEEE fp32 multiplies
    out = y.to(out_dtype)                                 # RNE
    if bias is not None:
        out = (out.float() + bias.float()).to(out_dtype)  # bias after the rounding, RNE again

Integer accumulation is exact and order-free while partial sums fit int32
(DESIGN.md section 1), so every tiling, K split and program order below gives
the same int32 accumulator, and the epilogue -- one code path, applied once to
the full int32 sum of an output element -- gives the same bits. (When a sum
leaves int32 every variant wraps it modulo 2**32 the same way: two's-complement
addition is associative, so a split sum wraps to the same value.)

Two kernels:

``w8a8_mm`` (pointer loads; any strides; CUDA and the CPU interpreter)
    One program per ``[BLOCK_M, BLOCK_N]`` output tile, tiles visited in
    *grouped* order (``GROUP_M`` row-tiles share their column-tiles of ``b``
    while they are in L2), ``tl.dot`` of int8 tiles into an int32 register
    tile, masked K tail (``other=0``: zeros add nothing). Every operand is
    addressed through its own strides (a row-major view with a padded leading
    stride, ``b`` as the transposed view of a ``[K, N]`` buffer, scales of
    stride 0 for a scalar, ``[M, 1]`` columns, ...): nothing assumes
    contiguity. ``SPLIT_K > 1`` (small M, large K): program ``(tile, s)``
    reduces the s-th contiguous K range and adds its int32 partial sum into an
    int32 workspace with integer atomics (exact, order-free); the program that
    arrives last at a tile (a per-tile arrival counter, acquire/release) takes
    the full sum back with ``atomic_xchg(ws, 0)`` -- which also leaves the
    workspace zeroed for the next call -- resets the counter and runs the
    epilogue. One launch, no memset, and the workspace stays valid across
    calls and CUDA-graph replays (the host caches it per device and stream).

``w8a8_mm_tma`` (CUDA only; Hopper TMA tensor descriptors)
    The same tile program with ``a`` / ``b`` tiles fetched by TMA from host
    ``TensorDescriptor`` s (16-byte aligned base and leading strides, unit
    inner stride, ``b`` K-contiguous -- the host checks and otherwise uses
    ``w8a8_mm``). ``NUM_PROGS < tiles`` makes it *persistent*: each program
    walks tiles ``pid, pid + NUM_PROGS, ...`` (``tl.range(flatten=...)`` lets
    the compiler pipeline across tile boundaries).

Epilogue (one ``@triton.jit`` device function, :func:`_epilogue`, called by
both kernels and inlined into each natively): ``(float32(acc) * s_a) * s_w`` with
``enable_fp_fusion=False`` at launch (no FMA contraction), then rounding to
bfloat16 *in integer arithmetic* on the float32 bit pattern (``u + 0x7FFF +
lsb``, keep the top 16 bits: RNE; NaN -> 0x7FC0), stored through an int16
view. Why integer ops: the Triton interpreter truncates fp32 -> bf16 (with or
without ``fp_downcast_rounding="rtne"``) and mishandles bf16 subnormals
(tests/conformance/kernels/test_triton.py pins both), so this is the one
formulation that gives identical, correct bits natively and interpreted. bf16
bias is read as its raw 16 bits and widened by a shift (exact). float16
output uses ``.to(tl.float16)`` (RNE natively and in numpy).

Interpreter constraints honoured here: no ``triton.language.standard``
helpers (``tl.zeros``, ``tl.cdiv``, ...) and no plain ``@triton.jit`` helper
functions -- those are compiled-mode objects that cannot be called inside an
interpreted kernel (the kernels are interpreted through an explicit
``InterpretedFunction``, not ``TRITON_INTERPRET=1`` at import); the one
device function, :func:`_epilogue`, is a :class:`_DeviceFunction`, which
the interpreter can call; and the K loop's trip count is passed as the constexpr
``K_ITERS_STATIC`` in interpreter mode (Triton <= 3.6's interpreter cannot
take a runtime loop bound with numpy >= 2.4: it makes every assigned value a
1-element array, which ``range`` cannot convert).
"""

from __future__ import annotations

import triton.language as tl
from triton.runtime.jit import JITFunction


class _DeviceFunction(JITFunction):
    """A ``@triton.jit`` device function that the Triton interpreter can call too.

    Natively it *is* a ``JITFunction``: Triton's code generator compiles a call
    to it as a call of a device function (``tt.call``), which the first pass of
    the pipeline (the MLIR inliner) inlines -- the same IR as if the body were
    written out at each call site (Triton refuses ``noinline`` for a device
    function with tensor arguments, so it cannot become a real call; the
    sm_90 PTX of both kernels is instruction for instruction that of the
    hand-repeated epilogue this replaced). A plain ``JITFunction`` refuses to be
    called from Python ("Cannot call @triton.jit'd outside of the scope of a
    kernel"), which is exactly what an interpreted kernel does; this subclass
    runs the function the way Triton's own interpreter runs a device function
    under ``TRITON_INTERPRET=1`` (``InterpretedFunction.__call__``: the body
    rewritten by the interpreter's AST pass, executed with ``triton.language``
    patched to numpy). Used for the output epilogue shared by both kernels.
    """

    def __call__(self, *args, **kwargs):
        interp = self.__dict__.get("_interpreted")
        if interp is None:
            from triton.runtime.interpreter import InterpretedFunction

            interp = self._interpreted = InterpretedFunction(self.fn)
        return interp(*args, **kwargs)


@_DeviceFunction
def _epilogue(
    acc,
    rm,
    rn,
    omask,
    sa_ptr,
    sb_ptr,
    bias_ptr,
    out_ptr,
    M,
    N,
    stride_sa,
    stride_sb,
    stride_bias,
    stride_om,
    HAS_BIAS: tl.constexpr,
    OUT_KIND: tl.constexpr,
    ACC_ONLY: tl.constexpr,
):
    """Output epilogue of both kernels (module docstring): store one
    ``[BLOCK_M, BLOCK_N]`` tile of the full int32 sums ``acc``.

    acc: int32 [BLOCK_M, BLOCK_N], the complete accumulator of rows ``rm``
    (int32 or int64 [BLOCK_M]) and columns ``rn`` ([BLOCK_N]); omask: bool
    [BLOCK_M, BLOCK_N], the elements to store. ACC_ONLY: store ``acc`` (int32
    out). Otherwise ``(float32(acc) * s_a) * s_w`` (TRITON_STYLE), rounded RNE
    to the output kind (OUT_KIND 0: bf16 as int16 bits, rounded in integer
    arithmetic; 1: fp16; 2: fp32), then, with HAS_BIAS, ``+ bias`` in float32
    and rounded RNE again. Scales and bias are read through their element
    strides (0 = scalar); out row stride ``stride_om``, unit column stride.
    """
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


def w8a8_mm(
    a_ptr,
    b_ptr,
    sa_ptr,
    sb_ptr,
    bias_ptr,
    out_ptr,
    ws_ptr,
    cnt_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_sa,
    stride_sb,
    stride_bias,
    stride_om,
    HAS_BIAS: tl.constexpr,
    OUT_KIND: tl.constexpr,
    ACC_ONLY: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    INT64_IDX: tl.constexpr,
    K_ITERS_STATIC: tl.constexpr,
):
    """Pointer-load W8A8 GEMM tile program (module docstring).

    a: int8 [M,K] strides (stride_am, stride_ak); b: int8 [N,K] strides
    (stride_bn, stride_bk); sa: fp32, element m at ``sa_ptr + m*stride_sa``
    (stride 0 = scalar); sb likewise over N; bias: out_dtype [N] (bf16 passed
    as int16 bits) at stride ``stride_bias``; out: [M,N] row stride
    ``stride_om`` (int32 if ACC_ONLY, int16 bits of bf16 if OUT_KIND 0, fp16
    if 1, fp32 if 2). ws/cnt: int32 workspace [M*N] and per-tile arrival
    counters, all zero on entry and on exit (SPLIT_K > 1 only).
    Grid: (tiles_m * tiles_n, SPLIT_K).
    """
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
    # rows/cols past the edge load a valid row instead (rm % M): no M/N masks in
    # the main loop; those outputs are never stored
    ram = rm % M
    rbn = rn % N
    # the bound goes to range() as an expression, not through a variable: the
    # <= 3.6 interpreter turns every assignment into a 1-element tensor, which
    # range() cannot take with numpy >= 2.4; natively the constexpr test folds away
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

    _epilogue(
        acc,
        rm,
        rn,
        omask,
        sa_ptr,
        sb_ptr,
        bias_ptr,
        out_ptr,
        M,
        N,
        stride_sa,
        stride_sb,
        stride_bias,
        stride_om,
        HAS_BIAS,
        OUT_KIND,
        ACC_ONLY,
    )


def w8a8_mm_tma(
    a_desc,
    b_desc,
    sa_ptr,
    sb_ptr,
    bias_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_sa,
    stride_sb,
    stride_bias,
    stride_om,
    NUM_PROGS,
    HAS_BIAS: tl.constexpr,
    OUT_KIND: tl.constexpr,
    ACC_ONLY: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    FLATTEN: tl.constexpr,
    WARP_SPEC: tl.constexpr,
):
    """TMA W8A8 GEMM (CUDA only): ``a_desc`` over a [M,K] block [BLOCK_M,BLOCK_K],
    ``b_desc`` over b [N,K] block [BLOCK_N,BLOCK_K] (out-of-range reads are
    zero-filled by the TMA unit, so K tails add nothing). Grid: (NUM_PROGS,);
    program p handles tiles p, p + NUM_PROGS, ... in grouped order. Other
    arguments as in :func:`w8a8_mm`; the same :func:`_epilogue`.
    ``WARP_SPEC``: ask the compiler to warp-specialise (``tl.range(...,
    warp_specialize=True)``: TMA producer warps feeding MMA consumer warp
    groups; Hopper's automatic warp specialisation in Triton >= 3.6) -- 1: the
    tile loop (persistent), 2: the K loop, 0: off. Only the schedule changes: the
    same int32 sums, the same epilogue."""
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
        _epilogue(
            acc,
            rm,
            rn,
            omask,
            sa_ptr,
            sb_ptr,
            bias_ptr,
            out_ptr,
            M,
            N,
            stride_sa,
            stride_sb,
            stride_bias,
            stride_om,
            HAS_BIAS,
            OUT_KIND,
            ACC_ONLY,
        )
