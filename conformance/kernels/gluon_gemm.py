"""The built-in ``triton`` kernel's third variant: an sm_90 int8 GEMM written in
Gluon (``triton.experimental.gluon``), so the int32-accumulator wgmma can stay in
flight across K steps (host side: ``conformance.kernels.builtin_triton``,
``Config.kernel == "gluon"``; tried on sm_90 unless ``INT8CONF_TRITON_GLUON=0``).

Why it exists. Triton's own wgmma pipeliner never makes an int32-accumulator dot
asynchronous ("Rule 2.1: We don't make the dot async if the accumulator is not
fp32", ``dotCanBeProperlyAsync`` in ``WGMMAPipeline.cpp``, Triton 3.6 and 3.9), so
every K step of ``triton_gemm.w8a8_mm`` / ``w8a8_mm_tma`` ends in ``wgmma.wait_group
0``: the tensor cores drain at each step while fp16 / fp8 kernels keep one group in
flight (``wait_group 1``). The built-in stops near 1,140 TOPS at 8192^3 on the H200
(target 1,400); reports/bench/nvidia-h200/probe-2026-12-01f/NOTE.md traced it to this
drain. Gluon hands the schedule to the kernel author: ``warpgroup_mma(...,
is_async=True)`` and the waits are emitted as written, so the pipeline below is
ours, not the pipeliner's. On the H200 (2026-12-01g) it is exact everywhere it was
checked and reaches 1,367 TOPS at 8192^3 (128x256x128, 8 warps, 4 stages); the
warp-specialised variant below reaches 1,513 (2026-12-02).

What it computes: exactly ``triton_gemm.w8a8_mm_tma`` -- ``a`` int8 [M, K] and ``b``
int8 [N, K] (both K-contiguous, read through host TMA descriptors; the TMA unit
zero-fills the K tail, which adds nothing), ``acc = a @ b.T`` in int32 (exact and
order-free while it fits, so the same int32 sums as the other variants), then the
same epilogue, :func:`_epilogue`, re-implemented with explicit layouts and checked
op for op against ``triton_gemm._epilogue`` (its docstring is the contract):
``y = (float32(acc) * s_a) * s_w`` (two separate fp32 multiplies; launched with
``enable_fp_fusion=False`` so the fp32 bias add is not contracted into an FMA),
bf16 by integer RNE on the fp32 bit pattern (``u + 0x7FFF + lsb``, top 16 bits,
NaN -> 0x7FC0) stored by a 16-bit bitcast, fp16 by ``.to(float16)`` (RNE), fp32 as is,
optional bias added after the rounding and rounded again; ``ACC_ONLY`` stores the
int32 sums.

Pipeline (per program; the structure of the Gluon tutorials ``04-tma.py``,
``05-wgmma.py`` and ``07-persistence.py`` of triton-lang/triton, written for int8
and a wait depth of one):

* a ring of ``STAGES`` NVMMA-shared slots, each an ``a`` tile [BLOCK_M, BLOCK_K] and
  a ``b`` tile [BLOCK_N, BLOCK_K], and one mbarrier per slot. Filling a slot:
  ``mbarrier.expect(bar, bytes of both tiles)`` then two TMA loads that signal it;
* K step ``g`` (counted over the program's whole life, so slot ``g % STAGES`` and
  barrier parity ``(g // STAGES) & 1`` stay right across tiles) waits for its slot,
  issues ``warpgroup_mma(a_slot, b_slot^T, acc, is_async=True)`` and then
  ``warpgroup_mma_wait(num_outstanding=1)``: step g's wgmma group stays in flight
  while step g-1's is retired, which frees step g-1's slot; that slot is refilled at
  once with step ``g + STAGES - 1`` (so ``STAGES - 1`` TMA loads and one wgmma group
  are in flight at every step; ``STAGES >= 2``). With two warp groups (8 warps) a
  slot is read by both: Triton's shared-memory hazard analysis (membar) puts a
  ``bar.sync`` between the wait and the refill, so both groups have retired step
  g-1 before its slot is overwritten (checked in the sm_90 PTX by the test);
* after the last K step ``warpgroup_mma_wait(0)``; a persistent program
  (``NUM_PROGS`` < tiles) then issues the first ``STAGES - 1`` loads of its next tile
  *before* running this tile's epilogue, so those loads overlap the epilogue;
* tiles in grouped ("swizzled") order, ``GROUP_M`` row-tiles per group, program p
  takes tiles p, p + NUM_PROGS, ... (``NUM_PROGS`` = tiles: one tile per program).

Layouts: the accumulator lives in the wgmma register layout (NVMMA distributed,
version 3; instruction m64 x n x k32, n the largest int8 wgmma width that divides
the warp group's share of BLOCK_N, 224 at most, as Triton picks it -- asked for
n256, Triton 3.6 and 3.9 fail even from Gluon, "WGMMA type or shape is not
supported" in NVGPUToLLVM; warps split between M and N as in :func:`mma_layout`);
``b``'s [BLOCK_N, BLOCK_K] slot is handed to the wgmma as its transposed
[BLOCK_K, BLOCK_N] view, i.e. K-major, the only major-ness int8 wgmma takes. The
epilogue works in that same layout (row / column indices and scales in
its slice layouts, stores masked at the M / N edges): converting a 128x256 int32
tile to a blocked layout would need 128 KiB of shared scratch on top of the ring,
and the output is written once per tile (at 8192^3 far below the memory system's
rate), so store coalescing is not worth that shared memory.

Warp-specialised ping-pong variant, :func:`w8a8_mm_gluon_ws` (``Config("gluon", ...,
warp_spec=True)``, label ending in ``persistent ws``; written offline, first run on the
H200 2026-12-02: exact on every probed shape, 1,513 TOPS at 8192^3 in the bench;
tried by default on sm_90, ``INT8CONF_TRITON_GLUON_WS=0`` leaves it out). The design of
CUTLASS's
``KernelTmaWarpSpecializedPingpong`` (``sm90_gemm_tma_warpspecialized_pingpong.hpp``,
its ``PipelineTmaAsync`` full / empty barrier pairs and ``OrderedSequenceBarrier``)
written with Gluon's ``warp_specialize`` as Triton's Gluon tutorial
``08-warp-specialization.py`` uses it; the same operands, :func:`_epilogue` and bits.
It targets the two losses left in :func:`w8a8_mm_gluon`: the tensor cores idle during
each tile's epilogue, and the consumer warps issue every TMA refill themselves (after
a ``bar.sync``).

* Partitions (``gl.warp_specialize``; Triton 3.6 and 3.9 take the same form: a list of
  ``(function, args)`` with the default partition first, then the workers' warp
  counts and register requests -- 3.9 makes the latter optional, 3.6 requires it;
  worker arguments may not be register tensors, so each consumer builds its own
  accumulator): the default partition (``num_warps`` 4) is consumer 0; worker 0 (4
  warps) is consumer 1; worker 1 (1 warp) is the producer. Register requests
  [240, 24]: Triton pads the producer's warp group with idle warps (12 warps, 384
  threads, launched at ``.maxnreg`` 168) and emits ``setmaxnreg``: consumers 240 per
  thread (the default partition gets the leftover, also 240), producer 24;
  128 * (240 + 240 + 24) = 64,512 of the 65,536 registers. A consumer's [BLOCK_M,
  BLOCK_N] int32 tile on one warp group (128x128: 128 registers a thread) plus the
  epilogue fits in 240 without spills (sm_90 ptxas, both Tritons; a 64x256 tile spilled
  with the fp32 + bias epilogue and is not offered).
* Persistent: program p owns tiles p, p + NUM_PROGS, ... (grouped order), its *local*
  tiles 0, 1, 2, ...; consumer ``WG`` takes local tiles WG, WG + 2, ... The producer
  walks every local tile's K steps in order; K step ``g`` (counted over the program's
  life: local tile i's step ki is ``g = i * k_iters + ki``) uses ring slot ``g % STAGES``
  with phase ``(g // STAGES) & 1`` -- the consumer of local tile i knows its ``g``
  without talking to the other consumer.
* Ring barriers (each ``count=1``; an mbarrier starts in phase 0, and waiting for
  parity 1 on it returns at once): ``ready[s]``: the producer's ``expect`` (one
  arrival + the tile bytes) and its two TMA loads complete phase ``g // STAGES`` of
  slot s; the consumer waits parity ``(g // STAGES) & 1`` before its wgmma reads the
  slot. ``empty[s]``: the consumer arrives once the wgmma that read step g has
  retired; the producer waits parity ``((g // STAGES) & 1) ^ 1`` before refilling
  (step g - STAGES released the slot; the first lap passes at once).
* Consumer K step: wait ``ready``, ``warpgroup_mma(..., is_async=True)``,
  ``warpgroup_mma_wait(num_outstanding=1)`` (this step's group stays in flight; step
  g - 1's has retired), then arrive on ``empty[(g - 1) % STAGES]`` (not at a tile's
  first step: the previous tile's last slot was released after its
  ``warpgroup_mma_wait(0)``). One elected thread arrives (Triton's lowering: thread 0
  of the warp group, after a warp-group ``bar.sync`` that Triton's membar analysis
  inserts -- seen in the PTX); wgmma is a warp-group collective, so its retirement
  covers the whole group's reads, as CUTLASS's one-thread ``consumer_release``.
  No proxy fence: wgmma and TMA both access shared memory through the async proxy.
* Ordering barriers ``order[0]``, ``order[1]`` (CUTLASS's math ``OrderedSequenceBarrier``,
  main-loop half): before its j-th tile consumer WG waits ``order[WG]`` with parity
  ``(j & 1) ^ 1`` (WG 0: its first tile passes at once) or ``j & 1`` (WG 1: after WG
  0's first arrival); after issuing its last wgmma of the tile it arrives on
  ``order[1 - WG]``, then retires its wgmma, releases the last slot and runs the
  epilogue while the other group's main loop runs. Besides putting one group at a
  time on the tensor cores, this wait is what makes the parities exact: a consumer
  starts local tile i only after the other consumer has passed every ``ready`` wait of
  tile i - 1 (and itself of tile i - 2, ...), so every fill before tile i has
  completed; within the tile, the slot's previous fill (step g - STAGES) was either
  observed by this consumer or belongs to an earlier tile. Hence no ``ready`` barrier is
  ever an even number of phases short of its waiter (parity aliasing: a wait for
  parity p also passes when the barrier is two phases short), and none can run ahead
  (that needs this consumer's own release). Without it a consumer could pass a wait
  on a slot whose earlier fill has not landed -- e.g. consumer 1's first step g =
  k_iters in an odd lap of the ring waits parity 1, which a fresh barrier passes (the
  model check reports/bench/nvidia-h200/probe-2026-12-01g/ws_protocol_sim.py finds such
  schedules with ``--no-order``, none with the barrier). The producer cannot alias: it
  fills step g only after it filled g - STAGES, which it did after step g - 2 * STAGES
  was released. The waits only ever wait for a
  predecessor that exists (consumer 1 has a j-th tile only if consumer 0 has one; the
  producer never waits for a consumer), so an odd tile count, a consumer with no tile,
  ``k_iters < STAGES`` and ``k_iters == 1`` cannot deadlock. CUTLASS also orders the
  two epilogues (they share its epilogue's shared memory and TMA store); ours store
  from registers, so they are not ordered.
* Every TMA load issued is waited for by a consumer, and every wgmma retired, before
  the program ends (no asynchronous operation outlives the kernel); the barriers are
  not invalidated (their memory is not reused).

CUDA sm_90 only, never interpreted. Compiles with Triton 3.6 and 3.9 (the one API
difference, the TMA load's name, is shimmed below). Importing this module never
fails: ``AVAILABLE`` is False when this Triton has no Gluon Hopper API.
"""

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

#: int8 wgmma instruction widths n (Triton's ``mmaVersionToInstrShape`` for 8-bit
#: integer operands; Triton's lowering refuses n256, module docstring)
_INT8_N = (224, 208, 192, 176, 160, 144, 128, 112, 96, 80, 64, 48, 32, 24, 16, 8)


@_constexpr_function
def mma_layout(block_m, block_n, num_warps):
    """The accumulator's NVMMA (wgmma, version 3) register layout for a [block_m,
    block_n] int32 tile on ``num_warps`` warps: from one warp group ([4, 1], 16 rows
    a warp), warps are doubled along M while each warp group's share of the tile is
    at least as tall as it is wide, else along N. 256x128 on 8 warps is [8, 1] and
    128x256 is [4, 2] (each warp group 128x128), where Triton picks [8, 1] (64x256):
    the same wgmma instructions (m64n128k32) and shared-memory operand traffic, half
    the distinct columns per thread, so half the per-column scale / bias registers
    in the epilogue (sm_90 ptxas: 198-219 registers with [4, 2], 255 with [8, 1]).
    Instruction [16, n, 32], n the widest int8 width dividing each warp group's
    columns."""
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
    """NVMMA shared layout of an int8 [rows, block_k] TMA tile (the host builds the
    descriptors with it; the kernel's ring takes the descriptors' layout)."""
    return gl.NVMMASharedLayout.get_default_for([rows, block_k], gl.int8)


def sm90_source(
    block_m: int,
    block_n: int,
    block_k: int,
    stages: int,
    *,
    out_kind: int = 0,
    has_bias: bool = False,
    acc_only: bool = False,
    group_m: int = 8,
    strides: tuple = (1, 1, 1),
    ws: bool = False,
):
    """A ``GluonASTSource`` of :func:`w8a8_mm_gluon` for ``triton.compile(src,
    target=GPUTarget("cuda", 90, 32), options=dict(num_warps=..., enable_fp_fusion=False))``
    without a GPU (tests, reports/bench/nvidia-h200/probe-2026-12-01f/sm90_compile.py).
    Arguments typed as the JIT specialises a launch (out / bias bf16, fp16 or fp32;
    int32 out if ``acc_only``): aligned pointers, M, N, K and the output row stride
    divisible by 16; ``strides`` = (stride_sa, stride_sb, stride_bias) given as
    values, 1 becoming the constant 1 (the JIT's rule; per-row / per-column scales
    and a contiguous bias), others a runtime int. ``ws``: the warp-specialised
    :func:`w8a8_mm_gluon_ws` instead (same parameters; compile with ``num_warps=4``)."""
    from triton.experimental.gluon._runtime import GluonASTSource

    out = "*i32" if acc_only else ("*bf16", "*fp16", "*fp32")[out_kind]
    sig = {
        "a_desc": f"tensordesc<i8[{block_m}, {block_k}],{operand_layout(block_m, block_k)!r}>",
        "b_desc": f"tensordesc<i8[{block_n}, {block_k}],{operand_layout(block_n, block_k)!r}>",
        "sa_ptr": "*fp32",
        "sb_ptr": "*fp32",
        "bias_ptr": out,
        "out_ptr": out,
        "M": "i32",
        "N": "i32",
        "K": "i32",
        "stride_om": "i32",
        "NUM_PROGS": "i32",
    }
    const = {
        "HAS_BIAS": has_bias,
        "OUT_KIND": out_kind,
        "ACC_ONLY": acc_only,
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
        "BLOCK_K": block_k,
        "GROUP_M": group_m,
        "STAGES": stages,
    }
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
    """Gluon host TMA descriptor over int8 ``t`` [rows, cols] (leading stride ``ld``,
    unit inner stride, 16-byte aligned: the caller checked), block [block_rows, block_k]."""
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
    """Fill ring slot ``g % STAGES`` with the a / b tiles of rows ``off_m`` / ``off_n``
    at K offset ``k`` (skipped when ``pred`` is false); its barrier completes when
    both tiles have landed."""
    slot = g % STAGES
    bar = ready.index(slot)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
    _tma_load(a_desc, [off_m, k], bar, a_ring.index(slot), pred)
    _tma_load(b_desc, [off_n, k], bar, b_ring.index(slot), pred)


@_jit
def _epilogue(
    acc,
    off_m,
    off_n,
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
    HAS_BIAS: gl.constexpr,
    OUT_KIND: gl.constexpr,
    ACC_ONLY: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    LAYOUT: gl.constexpr,
):
    """``triton_gemm._epilogue`` in Gluon, for one [BLOCK_M, BLOCK_N] int32 tile ``acc``
    (complete sums, layout ``LAYOUT``) at (off_m, off_n): the same operations in the
    same order, indices / scales / bias in ``LAYOUT``'s slice layouts."""
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
            # RNE fp32 -> bf16 on the bit pattern (triton_gemm module docstring)
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
def w8a8_mm_gluon(
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
    HAS_BIAS: gl.constexpr,
    OUT_KIND: gl.constexpr,
    ACC_ONLY: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BLOCK_K: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):
    """Pipelined int8 wgmma GEMM (module docstring). ``a_desc``: Gluon TMA descriptor
    over a [M, K], block [BLOCK_M, BLOCK_K]; ``b_desc``: over b [N, K], block
    [BLOCK_N, BLOCK_K] (layouts :func:`operand_layout`). Other arguments as
    ``triton_gemm.w8a8_mm_tma`` (bf16 out / bias: bf16 or int16, used as raw bits). Grid:
    (NUM_PROGS,). Launch with ``num_warps`` 4 or 8 and ``enable_fp_fusion=False``."""
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
        _fill(
            a_desc,
            b_desc,
            a_ring,
            b_ring,
            ready,
            g0 + j,
            off_m,
            off_n,
            j * BLOCK_K,
            (j < k_iters) & (pid < num_tiles),
            STAGES,
        )

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
            _fill(
                a_desc,
                b_desc,
                a_ring,
                b_ring,
                ready,
                g0 + j,
                n_off_m,
                n_off_n,
                j * BLOCK_K,
                (j < k_iters) & (nxt < num_tiles),
                STAGES,
            )
        _epilogue(
            acc,
            off_m,
            off_n,
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
            BLOCK_M,
            BLOCK_N,
            LAYOUT,
        )

    for s in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(s))


# ------------------------------------------------------- warp-specialised ping-pong
@_jit
def _ws_producer(
    a_desc,
    b_desc,
    a_ring,
    b_ring,
    ready,
    empty,
    pid,
    num_pid_m,
    num_pid_n,
    num_tiles,
    k_iters,
    NUM_PROGS,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BLOCK_K: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):
    """Producer partition (1 warp, 24 registers): the TMA loads of every K step of
    every tile of this program, in order, step ``g`` into ring slot ``g % STAGES``
    (module docstring, "Ring barriers"). Runs ahead of the consumers by up to STAGES
    steps, across tile boundaries; K tails are zero-filled by TMA."""
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
def _ws_consumer(
    a_ring,
    b_ring,
    ready,
    empty,
    order,
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
    pid,
    num_pid_m,
    num_pid_n,
    num_tiles,
    k_iters,
    NUM_PROGS,
    WG: gl.constexpr,
    HAS_BIAS: gl.constexpr,
    OUT_KIND: gl.constexpr,
    ACC_ONLY: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):
    """Consumer warp group ``WG`` (0: the default partition, 1: a 4-warp worker): the
    program's local tiles WG, WG + 2, ..., each a [BLOCK_M, BLOCK_N] int32 accumulator
    in this warp group's wgmma layout, then :func:`_epilogue` on it (module docstring,
    "Consumer K step" and "Ordering barriers")."""
    LAYOUT: gl.constexpr = mma_layout(BLOCK_M, BLOCK_N, gl.num_warps())
    j = 0
    for tile in range(pid + WG * NUM_PROGS, num_tiles, 2 * NUM_PROGS):
        off_m, off_n = _tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        g0 = (2 * j + WG) * k_iters  # ring position of this tile's first K step
        # my turn on the tensor cores: the other group has issued its previous tile
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
        _epilogue(
            acc,
            off_m,
            off_n,
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
            BLOCK_M,
            BLOCK_N,
            LAYOUT,
        )
        j += 1


@_jit
def w8a8_mm_gluon_ws(
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
    HAS_BIAS: gl.constexpr,
    OUT_KIND: gl.constexpr,
    ACC_ONLY: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BLOCK_K: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):
    """Warp-specialised ping-pong int8 GEMM (module docstring): the arguments, grid
    and results of :func:`w8a8_mm_gluon` (a [M, K] and b [N, K] int8 through TMA
    descriptors of block [BLOCK_M, BLOCK_K] / [BLOCK_N, BLOCK_K]; fp32 scales; out bf16 /
    fp16 / fp32, or int32 if ACC_ONLY), BLOCK_M x BLOCK_N being *one consumer's* tile.
    Launch with ``num_warps=4`` (the default partition; Triton adds the workers' 8
    warps) and ``enable_fp_fusion=False``; grid (NUM_PROGS,), normally min(tiles, SMs).
    Shared memory: STAGES * (BLOCK_M + BLOCK_N) * BLOCK_K bytes of ring + barriers."""
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
    gl.warp_specialize(
        [
            (
                _ws_consumer,
                (
                    a_ring,
                    b_ring,
                    ready,
                    empty,
                    order,
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
                    pid,
                    num_pid_m,
                    num_pid_n,
                    num_tiles,
                    k_iters,
                    NUM_PROGS,
                    0,
                    HAS_BIAS,
                    OUT_KIND,
                    ACC_ONLY,
                    BLOCK_M,
                    BLOCK_N,
                    GROUP_M,
                    STAGES,
                ),
            ),
            (
                _ws_consumer,
                (
                    a_ring,
                    b_ring,
                    ready,
                    empty,
                    order,
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
                    pid,
                    num_pid_m,
                    num_pid_n,
                    num_tiles,
                    k_iters,
                    NUM_PROGS,
                    1,
                    HAS_BIAS,
                    OUT_KIND,
                    ACC_ONLY,
                    BLOCK_M,
                    BLOCK_N,
                    GROUP_M,
                    STAGES,
                ),
            ),
            (
                _ws_producer,
                (
                    a_desc,
                    b_desc,
                    a_ring,
                    b_ring,
                    ready,
                    empty,
                    pid,
                    num_pid_m,
                    num_pid_n,
                    num_tiles,
                    k_iters,
                    NUM_PROGS,
                    BLOCK_M,
                    BLOCK_N,
                    BLOCK_K,
                    GROUP_M,
                    STAGES,
                ),
            ),
        ],
        [4, 1],
        [240, 24],
    )
