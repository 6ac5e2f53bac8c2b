"""sm_90 Gluon variants of the built-in ``triton`` kernel (``Config.kernel == "gluon"``; host side ``builtin_triton``).

Computes exactly ``triton_gemm.w8a8_mm_tma``: a int8 [M, K], b int8 [N, K] (K-contiguous, via host TMA descriptors
whose zero-filled K tail adds nothing), ``acc = a @ b.T`` in int32, then :func:`_epilogue`, op for op
``triton_gemm.fused_epilogue`` (TRITON_STYLE, integer RNE to bf16; launch with ``enable_fp_fusion=False``).
Gluon lets the int32-accumulator wgmma stay in flight across K steps (``warpgroup_mma_wait(1)``), which Triton's
pipeliner never does. :func:`w8a8_mm_gluon`: a ring of ``STAGES`` TMA slots, tiles in grouped order, persistent when
``NUM_PROGS`` < tiles. :func:`w8a8_mm_gluon_ws`: CUTLASS's ping-pong design (``KernelTmaWarpSpecializedPingpong``)
with ``gl.warp_specialize``: a TMA producer warp and two consumer warp groups alternating on the tensor cores, so one
group's epilogue overlaps the other's main loop. CUDA sm_90 only, never interpreted; Triton 3.6 and 3.9. Importing
never fails: ``AVAILABLE`` is False without Gluon's Hopper API."""

from __future__ import annotations

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    # Triton 3.9 renamed the TMA global -> shared copy (the old name now raises)
    _tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    _jit = gluon.jit
    _constexpr_function = gluon.constexpr_function
    AVAILABLE = True
except (ImportError, AttributeError):  # a Triton without Gluon or its Hopper API
    gluon = gl = TensorDescriptor = None
    AVAILABLE = False

    def _jit(fn):
        return fn

    _constexpr_function = _jit

#: int8 wgmma instruction widths n (Triton's ``mmaVersionToInstrShape``; its lowering refuses n256)
_INT8_N = (224, 208, 192, 176, 160, 144, 128, 112, 96, 80, 64, 48, 32, 24, 16, 8)


@_constexpr_function
def mma_layout(block_m, block_n, num_warps):
    """NVMMA (wgmma v3) register layout of a [block_m, block_n] int32 tile on ``num_warps`` warps:
    warps doubled along M while each warp group's share is at least as tall as wide, else along N (128x256 on 8 warps:
    [4, 2], fewer per-column epilogue registers than Triton's [8, 1]); instruction [16, n, 32], n the widest int8
    width dividing a warp group's columns."""
    wm, wn = 4, 1
    while wm * wn < num_warps:
        if block_m > 16 * wm and block_m // (wm // 4) >= block_n // wn:
            wm *= 2
        else:
            wn *= 2
    cols = block_n // wn
    n = next(x for x in _INT8_N if x <= cols and cols % x == 0)
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[wm, wn], instr_shape=[16, n, 32])


def operand_layout(rows: int, block_k: int):
    """NVMMA shared layout of an int8 [rows, block_k] TMA tile (descriptors and ring use it)."""
    return gl.NVMMASharedLayout.get_default_for([rows, block_k], gl.int8)


def sm90_source(
    block_m,
    block_n,
    block_k,
    stages,
    *,
    out_kind=0,
    has_bias=False,
    acc_only=False,
    group_m=8,
    strides=(1, 1, 1),
    ws=False,
):
    """A ``GluonASTSource`` of :func:`w8a8_mm_gluon` (``ws``: :func:`w8a8_mm_gluon_ws`, compile with
    ``num_warps=4``) for ``triton.compile(src, target=GPUTarget("cuda", 90, 32), ...)`` without a GPU. Typed as the
    JIT specialises a launch: aligned pointers, M, N, K, output row stride divisible by 16; ``strides`` =
    (stride_sa, stride_sb, stride_bias) values, 1 becoming a constant."""
    from triton.experimental.gluon._runtime import GluonASTSource

    out = "*i32" if acc_only else ("*bf16", "*fp16", "*fp32")[out_kind]
    desc = lambda rows: f"tensordesc<i8[{rows}, {block_k}],{operand_layout(rows, block_k)!r}>"
    sig = dict(a_desc=desc(block_m), b_desc=desc(block_n), sa_ptr="*fp32", sb_ptr="*fp32", bias_ptr=out, out_ptr=out)
    sig.update(dict.fromkeys(("M", "N", "K", "stride_om", "NUM_PROGS"), "i32"))
    const = dict(HAS_BIAS=has_bias, OUT_KIND=out_kind, ACC_ONLY=acc_only, BLOCK_M=block_m, BLOCK_N=block_n)
    const.update(BLOCK_K=block_k, GROUP_M=group_m, STAGES=stages)
    aligned = {"sa_ptr", "sb_ptr", "bias_ptr", "out_ptr", "M", "N", "K", "stride_om"}
    for name, v in zip(("stride_sa", "stride_sb", "stride_bias"), strides):
        if v == 1:
            const[name] = 1
        else:
            sig[name] = "i32"
            if v % 16 == 0:
                aligned.add(name)
    fn = w8a8_mm_gluon_ws if ws else w8a8_mm_gluon
    params = list(fn.arg_names)
    sig.update((p, "constexpr") for p in const)
    attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(params) if p in aligned}
    return GluonASTSource(fn=fn, signature={p: sig[p] for p in params}, constexprs=const, attrs=attrs)


def descriptor(t, rows: int, cols: int, ld: int, block_rows: int, block_k: int):
    """Gluon host TMA descriptor over int8 ``t`` [rows, cols] (leading stride ``ld``), block [block_rows, block_k]."""
    return TensorDescriptor(t, [rows, cols], [ld, 1], [block_rows, block_k], operand_layout(block_rows, block_k))


@_jit
def _tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    """(row, column) offset of output tile ``tile`` in grouped order (as ``w8a8_mm_tma``)."""
    width = GROUP_M * num_pid_n
    first_m = (tile // width) * GROUP_M
    group_rows = gl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % width) % group_rows
    pid_n = (tile % width) // group_rows
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@_jit
def _fill(a_desc, b_desc, a_ring, b_ring, ready, g, off_m, off_n, k, pred, STAGES: gl.constexpr):
    """Fill ring slot ``g % STAGES`` with the a / b tiles at K offset ``k`` (skipped unless ``pred``)."""
    slot = g % STAGES
    bar = ready.index(slot)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
    _tma_load(a_desc, [off_m, k], bar, a_ring.index(slot), pred)
    _tma_load(b_desc, [off_n, k], bar, b_ring.index(slot), pred)


@_jit
def _epilogue(acc, off_m, off_n, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, stride_sa, stride_sb, stride_bias, stride_om,
              HAS_BIAS: gl.constexpr, OUT_KIND: gl.constexpr, ACC_ONLY: gl.constexpr, BLOCK_M: gl.constexpr,
              BLOCK_N: gl.constexpr, LAYOUT: gl.constexpr):  # fmt: skip
    """``triton_gemm.fused_epilogue`` in Gluon for one complete int32 tile ``acc`` (layout ``LAYOUT``) at
    (off_m, off_n): the same operations in the same order."""
    rm = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, LAYOUT))
    rn = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, LAYOUT))
    omask = (rm[:, None] < M) & (rn[None, :] < N)
    optrs = out_ptr + rm[:, None] * stride_om + rn[None, :]
    if ACC_ONLY:
        gl.store(optrs, acc, mask=omask)
    else:
        sa = gl.load(sa_ptr + rm * stride_sa, mask=rm < M, other=1.0)
        sb = gl.load(sb_ptr + rn * stride_sb, mask=rn < N, other=1.0)
        y = acc.to(gl.float32) * sa[:, None]  # TRITON_STYLE: s_a first ...
        y = y * sb[None, :]  # ... then s_w (two roundings, no FMA)
        if OUT_KIND == 0:
            # RNE fp32 -> bf16 on the bit pattern (as triton_gemm.fused_epilogue)
            u = y.to(gl.uint32, bitcast=True)
            hi = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            hi = gl.where(y != y, 0x7FC0, hi)  # noqa: PLR0124 -- NaN test
            if HAS_BIAS:
                bb = gl.load(bias_ptr + rn * stride_bias, mask=rn < N, other=0)  # raw bf16 bits
                bf = (bb.to(gl.uint16, bitcast=True).to(gl.uint32) << 16).to(gl.float32, bitcast=True)
                z = (hi << 16).to(gl.float32, bitcast=True) + bf[None, :]
                u = z.to(gl.uint32, bitcast=True)
                hi = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
                hi = gl.where(z != z, 0x7FC0, hi)  # noqa: PLR0124
            gl.store(optrs, hi.to(gl.uint16).to(out_ptr.dtype.element_ty, bitcast=True), mask=omask)
        elif OUT_KIND == 1:
            r = y.to(gl.float16)
            if HAS_BIAS:
                bh = gl.load(bias_ptr + rn * stride_bias, mask=rn < N, other=0.0)
                r = (r.to(gl.float32) + bh.to(gl.float32)[None, :]).to(gl.float16)
            gl.store(optrs, r, mask=omask)
        else:
            r = y
            if HAS_BIAS:
                bs = gl.load(bias_ptr + rn * stride_bias, mask=rn < N, other=0.0)
                r = r + bs[None, :]
            gl.store(optrs, r, mask=omask)


@_jit
def w8a8_mm_gluon(a_desc, b_desc, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, K, stride_sa, stride_sb, stride_bias,
                  stride_om, NUM_PROGS, HAS_BIAS: gl.constexpr, OUT_KIND: gl.constexpr, ACC_ONLY: gl.constexpr,
                  BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                  STAGES: gl.constexpr):  # fmt: skip
    """Pipelined int8 wgmma GEMM: descriptors of block [BLOCK_M, BLOCK_K] / [BLOCK_N, BLOCK_K]
    (:func:`operand_layout`), other arguments as ``triton_gemm.w8a8_mm_tma``. Grid (NUM_PROGS,); ``num_warps`` 4 or 8.
    """
    gl.static_assert(STAGES >= 2, "the refill after wait(1) needs >= 2 slots")
    LAYOUT: gl.constexpr = mma_layout(BLOCK_M, BLOCK_N, gl.num_warps())
    a_ring = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_ring = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
    fence_async_shared()  # barrier initialisation visible to the TMA unit

    pid = gl.program_id(0)
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_iters = gl.cdiv(K, BLOCK_K)

    # prologue of the first tile: STAGES - 1 slots in flight (fewer if K is short)
    g0 = 0  # K steps this program has issued before the current tile (ring position)
    off_m, off_n = _tile_offsets(pid, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
    for j in gl.static_range(STAGES - 1):
        _fill(a_desc, b_desc, a_ring, b_ring, ready, g0 + j, off_m, off_n, j * BLOCK_K,
              (j < k_iters) & (pid < num_tiles), STAGES)  # fmt: skip

    for tile in range(pid, num_tiles, NUM_PROGS):
        off_m, off_n = _tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.int32, layout=LAYOUT)
        for ki in range(k_iters):
            g = g0 + ki
            slot = g % STAGES
            mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
            a_s = a_ring.index(slot)
            b_s = b_ring.index(slot)
            acc = warpgroup_mma(a_s, b_s.permute((1, 0)), acc, is_async=True)
            # keep this step's group in flight; the previous step's has retired ...
            acc, a_s, b_s = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a_s, b_s))
            # ... so its slot ((g - 1) % STAGES) takes step ki + STAGES - 1
            nk = ki + STAGES - 1
            _fill(
                a_desc, b_desc, a_ring, b_ring, ready, g + STAGES - 1, off_m, off_n, nk * BLOCK_K, nk < k_iters, STAGES
            )
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        g0 += k_iters
        # every slot is free: start the next tile's loads, then this tile's epilogue
        nxt = tile + NUM_PROGS
        n_off_m, n_off_n = _tile_offsets(nxt, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        for j in gl.static_range(STAGES - 1):
            _fill(a_desc, b_desc, a_ring, b_ring, ready, g0 + j, n_off_m, n_off_n, j * BLOCK_K,
                  (j < k_iters) & (nxt < num_tiles), STAGES)  # fmt: skip
        _epilogue(acc, off_m, off_n, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, stride_sa, stride_sb, stride_bias,
                  stride_om, HAS_BIAS, OUT_KIND, ACC_ONLY, BLOCK_M, BLOCK_N, LAYOUT)  # fmt: skip

    for s in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(s))


@_jit
def _ws_producer(a_desc, b_desc, a_ring, b_ring, ready, empty, pid, num_pid_m, num_pid_n, num_tiles, k_iters, NUM_PROGS,
                 BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                 STAGES: gl.constexpr):  # fmt: skip
    """Producer (1 warp): TMA loads of every K step of the program's tiles in order, step ``g`` into slot
    ``g % STAGES`` once ``empty`` says step g - STAGES released it."""
    g = 0
    for tile in range(pid, num_tiles, NUM_PROGS):
        off_m, off_n = _tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        for ki in range(k_iters):
            slot = g % STAGES
            # the consumer of step g - STAGES released the slot (first lap: passes at once)
            mbarrier.wait(empty.index(slot), ((g // STAGES) & 1) ^ 1)
            bar = ready.index(slot)
            mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            _tma_load(a_desc, [off_m, ki * BLOCK_K], bar, a_ring.index(slot))
            _tma_load(b_desc, [off_n, ki * BLOCK_K], bar, b_ring.index(slot))
            g += 1


@_jit
def _ws_consumer(a_ring, b_ring, ready, empty, order, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, stride_sa, stride_sb,
                 stride_bias, stride_om, pid, num_pid_m, num_pid_n, num_tiles, k_iters, NUM_PROGS, WG: gl.constexpr,
                 HAS_BIAS: gl.constexpr, OUT_KIND: gl.constexpr, ACC_ONLY: gl.constexpr, BLOCK_M: gl.constexpr,
                 BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    """Consumer warp group ``WG``: the program's local tiles WG, WG + 2, ... (K step ``g = i * k_iters +
    ki`` of local tile i), then :func:`_epilogue`."""
    LAYOUT: gl.constexpr = mma_layout(BLOCK_M, BLOCK_N, gl.num_warps())
    j = 0
    for tile in range(pid + WG * NUM_PROGS, num_tiles, 2 * NUM_PROGS):
        off_m, off_n = _tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        g0 = (2 * j + WG) * k_iters  # ring position of this tile's first K step
        # my turn on the tensor cores; this wait also keeps the ``ready`` parities exact (no consumer runs
        # two phases ahead of a fill: reports/bench/nvidia-h200/probe-2026-12-01g/ws_protocol_sim.py)
        mbarrier.wait(order.index(WG), (j & 1) ^ (1 - WG))
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.int32, layout=LAYOUT)
        for ki in range(k_iters):
            g = g0 + ki
            slot = g % STAGES
            mbarrier.wait(ready.index(slot), (g // STAGES) & 1)
            a_s = a_ring.index(slot)
            b_s = b_ring.index(slot)
            acc = warpgroup_mma(a_s, b_s.permute((1, 0)), acc, is_async=True)
            acc, a_s, b_s = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a_s, b_s))
            # step g - 1's wgmma has retired: hand its slot back to the producer
            mbarrier.arrive(empty.index((g + STAGES - 1) % STAGES), pred=ki > 0)
        # every wgmma of this tile is issued: the other group may start its tile
        mbarrier.arrive(order.index(1 - WG))
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((g0 + k_iters - 1) % STAGES))
        _epilogue(acc, off_m, off_n, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, stride_sa, stride_sb, stride_bias,
                  stride_om, HAS_BIAS, OUT_KIND, ACC_ONLY, BLOCK_M, BLOCK_N, LAYOUT)  # fmt: skip
        j += 1


@_jit
def w8a8_mm_gluon_ws(a_desc, b_desc, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, K, stride_sa, stride_sb, stride_bias,
                     stride_om, NUM_PROGS, HAS_BIAS: gl.constexpr, OUT_KIND: gl.constexpr, ACC_ONLY: gl.constexpr,
                     BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                     STAGES: gl.constexpr):  # fmt: skip
    """Warp-specialised ping-pong int8 GEMM: the arguments and results of :func:`w8a8_mm_gluon`,
    BLOCK_M x BLOCK_N being one consumer's tile. Launch with ``num_warps=4`` (Triton adds the workers' warps),
    grid (NUM_PROGS,); shared memory STAGES * (BLOCK_M + BLOCK_N) * BLOCK_K bytes plus barriers."""
    gl.static_assert(STAGES >= 2, "a consumer keeps one step in flight while the producer refills")
    gl.static_assert(gl.num_warps() == 4, "the default partition is one consumer warp group")
    a_ring = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_ring = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    order = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    for s in gl.static_range(2):
        mbarrier.init(order.index(s), count=1)
    fence_async_shared()  # barrier initialisation visible to the TMA unit

    pid = gl.program_id(0)
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_iters = gl.cdiv(K, BLOCK_K)
    # default partition = consumer 0; workers: consumer 1 (4 warps, 240 registers),
    # producer (1 warp, 24 registers); the default partition gets the leftover (240)
    gl.warp_specialize([
        (_ws_consumer, (a_ring, b_ring, ready, empty, order, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, stride_sa,
                        stride_sb, stride_bias, stride_om, pid, num_pid_m, num_pid_n, num_tiles, k_iters, NUM_PROGS, 0,
                        HAS_BIAS, OUT_KIND, ACC_ONLY, BLOCK_M, BLOCK_N, GROUP_M, STAGES)),
        (_ws_consumer, (a_ring, b_ring, ready, empty, order, sa_ptr, sb_ptr, bias_ptr, out_ptr, M, N, stride_sa,
                        stride_sb, stride_bias, stride_om, pid, num_pid_m, num_pid_n, num_tiles, k_iters, NUM_PROGS, 1,
                        HAS_BIAS, OUT_KIND, ACC_ONLY, BLOCK_M, BLOCK_N, GROUP_M, STAGES)),
        (_ws_producer, (a_desc, b_desc, a_ring, b_ring, ready, empty, pid, num_pid_m, num_pid_n, num_tiles, k_iters,
                        NUM_PROGS, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES)),
    ], [4, 1], [240, 24])  # fmt: skip
