"""Built-in Triton block-scaled W8A8 GEMM, INT8 and e4m3 (the block contract of issue 46). Per output (m, n)::

    acc = +0.0 (float32);  for kb in 0 .. ceil(K / block_k) - 1, in order (the last K-block may be short):
        p   = one tl.dot of K-block kb from zero: int8 -> exact int32, then float32 (RNE); e4m3 -> float32
        acc = r(acc + r(r(p * scale_a[m, kb]) * scale_b[n // block_n, kb]))    # 'mul s_a; mul s_w; add'
    out = r_out(r(acc + float32(bias[n])))                                      # 'add bias; cast out'

Launched with ``enable_fp_fusion=False`` natively (no FMA contraction), so the interpreter (numpy float32 ops,
each rounded once) and CUDA give the same float32 steps; under ``torch.compile`` the launch stays eager (``_launch``),
and no operand value is read during a CUDA-graph capture. One tile spans exactly one K-block: BLOCK_K = block_k
(a power of two >= 32), else the next power of two with the lanes beyond the block masked to zero; K tails
masked. The cast reuses ``triton_gemm.fused_epilogue`` with unit scales (bf16 RNE by integer ops).
e4m3 partial (as ``builtin_triton_fp8``): natively ``max_num_imprecise_acc = min(128, BLOCK_K)``, so the block
is summed in sm_90's narrow tensor-core accumulator, promoted every 128 products, declared
``fp32 bits=14 truncate promote=128`` (issue 30, to be verified natively); the interpreter widens e4m3 exactly to
float16 and sums with numpy in float32: ``fp32``. Every operand is read through its strides (0 allowed)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.runtime.interpreter import InterpretedFunction

from conformance.kernels import builtin_triton, trace, triton_gemm
from conformance.kernels.triton_gemm import fused_epilogue
from conformance.kernels.triton_probe import probe
from reference.errors import OperandError
from reference.fp8 import check_e4m3
from reference.validate import OUT_DTYPES, capturing, nonfinite_summary

NAME = "triton-block"
FP8_NAME = "triton-block-fp8"
#: the declared block accumulation and epilogue (step language of issue 46 / ``reference/contract.py``)
BLOCK_ACCUMULATION = "mul s_a; mul s_w; add"
EPILOGUE = "add bias; cast out"
#: ``tl.dot``'s ``max_num_imprecise_acc`` cap (e4m3) and the declared FP8 accumulator of one K-block's partial
MAX_IMPRECISE = 128
ACCUMULATOR = {"cpu": "fp32", "cuda": f"fp32 bits=14 truncate promote={MAX_IMPRECISE}"}
#: largest block_k: one K-block is one tile (and int8 partials stay far inside int32: 4096 * 2**14 = 2**26)
MAX_BLOCK_K = 4096
SOURCE_DIGEST = hashlib.sha256(b"".join(Path(p).read_bytes() for p in (__file__, triton_gemm.__file__))).hexdigest()
_OPERAND_DTYPES = {torch.int8: "int8", torch.float8_e4m3fn: "e4m3"}
_KERNELS: dict = {}


def block_mm(a_ptr, b_ptr, sa_ptr, sb_ptr, bias_ptr, one_ptr, out_ptr, M, N, K, stride_am, stride_ak, stride_bn,
             stride_bk, stride_sam, stride_sak, stride_sbn, stride_sbk, stride_bias, stride_om, SCALE_BLOCK_N,
             SCALE_BLOCK_K: tl.constexpr, HAS_BIAS: tl.constexpr, OUT_KIND: tl.constexpr, FP8: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
             EVEN_K: tl.constexpr, INT64_IDX: tl.constexpr, K_ITERS_STATIC: tl.constexpr, FLOAT_DOT: tl.constexpr,
             MAX_IMPRECISE: tl.constexpr):  # fmt: skip
    """Block-scaled tile program (module docstring). a [M,K], b [N,K] (int8, or e4m3 with FP8), any strides;
    scale_a fp32 [M, KB], scale_b fp32 [ceil(N / SCALE_BLOCK_N), KB] (KB = ceil(K / SCALE_BLOCK_K)), any strides;
    bias out_dtype [N] (bf16 as int16 bits under the interpreter); one_ptr: a float32 1.0 (the unit scales of
    ``fused_epilogue``); out [M,N] row stride ``stride_om``, OUT_KIND as ``fused_epilogue``. Grid: (tiles,)."""
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
    ram = rm % M  # rows / columns past the edge read a valid one; never stored
    rbn = rn % N
    sa_ptrs = sa_ptr + ram * stride_sam
    sb_ptrs = sb_ptr + (rbn // SCALE_BLOCK_N) * stride_sbn  # the weight block of each column
    k_iters = (K + SCALE_BLOCK_K - 1) // SCALE_BLOCK_K
    a_ptrs = a_ptr + ram[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rbn[None, :] * stride_bn + rk[:, None] * stride_bk
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)  # +0.0; not tl.zeros (interpreter)
    for kb in range(0, K_ITERS_STATIC if K_ITERS_STATIC > 0 else k_iters):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:  # the K tail, and lanes past a non-power-of-two K-block, read as zero
            kk = kb * SCALE_BLOCK_K + rk
            ok = (rk < SCALE_BLOCK_K) & (kk < K)
            if FP8:
                a = tl.load(a_ptrs, mask=ok[None, :], other=0.0)
                b = tl.load(b_ptrs, mask=ok[:, None], other=0.0)
            else:
                a = tl.load(a_ptrs, mask=ok[None, :], other=0)
                b = tl.load(b_ptrs, mask=ok[:, None], other=0)
        if FP8:
            p = tl.dot(a, b, max_num_imprecise_acc=MAX_IMPRECISE)  # e4m3 -> float32 from zero
        elif FLOAT_DOT:  # interpreter: float64 matmul, exact (|partial| <= BLOCK_K * 2**14), one RNE to float32
            p = tl.dot(a.to(tl.float64), b.to(tl.float64)).to(tl.float32)
        else:
            p = tl.dot(a, b).to(tl.float32)  # exact int32, RNE to float32
        sa = tl.load(sa_ptrs + kb * stride_sak)
        sw = tl.load(sb_ptrs + kb * stride_sbk)
        y = p * sa[:, None]  # mul s_a
        y = y * sw[None, :]  # mul s_w
        acc = acc + y  # add (no FMA: enable_fp_fusion=False)
        a_ptrs += SCALE_BLOCK_K * stride_ak
        b_ptrs += SCALE_BLOCK_K * stride_bk

    if HAS_BIAS:  # add bias in float32 (bf16 bias widened from its bits)
        bv = tl.load(bias_ptr + rbn * stride_bias)
        if OUT_KIND == 0:
            bf = (bv.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        else:
            bf = bv.to(tl.float32)
        acc = acc + bf[None, :]
    omask = (rm[:, None] < M) & (rn[None, :] < N)
    # cast out: the shared epilogue with unit scales (x * 1.0 is exact), no bias
    fused_epilogue(acc, rm, rn, omask, one_ptr, one_ptr, out_ptr, out_ptr, M, N, 0, 0, 0, stride_om, False, OUT_KIND,
                   False)  # fmt: skip


def _kernel(native: bool):
    """``(kernel, is_interpreter)``; ``triton.jit`` gives an interpreter under ``TRITON_INTERPRET=1``."""
    got = _KERNELS.get(native)
    if got is None:
        if not native:
            builtin_triton._skip_dead_overflow_checks()
        k = triton.jit(block_mm) if native else InterpretedFunction(block_mm)
        got = _KERNELS[native] = (k, isinstance(k, InterpretedFunction))
    return got


def _bad(msg: str):
    raise OperandError(msg)


def _block_size(block_size) -> tuple[int, int]:
    ok = isinstance(block_size, (tuple, list)) and len(block_size) == 2
    ok = ok and all(isinstance(v, int) and not isinstance(v, bool) for v in block_size)
    if not ok or not (block_size[0] >= 1 and 1 <= block_size[1] <= MAX_BLOCK_K):
        _bad(f"block_size={block_size!r} must be (block_n, block_k): ints, block_n >= 1, 1 <= block_k <= {MAX_BLOCK_K}")
    return int(block_size[0]), int(block_size[1])


def _matrix(x, name: str, dims: str, dtype) -> None:
    if dtype == torch.float8_e4m3fn:
        check_e4m3(x, name, dims)
    elif not isinstance(x, Tensor):
        _bad(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    elif x.dtype != dtype:
        _bad(f"{name} has dtype {x.dtype}; expected {dtype} (as a)")
    elif x.dim() != 2:
        _bad(f"{name} must be 2-D [{dims}], got {x.dim()}-D shape {tuple(x.shape)}")
    builtin_triton._dense_cpu_or_cuda(x, name)


def _float_operand(x, name: str, shape: tuple, dims: str, dtype) -> None:
    if not isinstance(x, Tensor):
        _bad(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != dtype:
        _bad(f"{name} has dtype {x.dtype}; expected {dtype}")
    if tuple(x.shape) != shape:
        _bad(f"{name} has shape {tuple(x.shape)}; expected [{dims}]={list(shape)}")
    builtin_triton._dense_cpu_or_cuda(x, name)
    bad = None if capturing(x) else nonfinite_summary(x)  # a read-back would break a CUDA-graph capture
    if bad:
        _bad(f"{name} has {bad}")


def _validate(a, b, scale_a, scale_b, bias, out_dtype, block_size) -> tuple[int, int, int, int, int]:
    """``(M, K, N, block_n, block_k)`` after the checks of the block contract; OperandError (one line) naming the
    operand otherwise."""
    if out_dtype not in OUT_DTYPES:
        _bad(f"out_dtype={out_dtype} is not one of torch.bfloat16, torch.float16, torch.float32")
    bn, bk = _block_size(block_size)
    if not isinstance(a, Tensor) or a.dtype not in _OPERAND_DTYPES:
        _bad(f"a has {getattr(a, 'dtype', type(a).__name__)}; expected a torch.int8 or torch.float8_e4m3fn tensor")
    _matrix(a, "a", "M,K", a.dtype)
    _matrix(b, "b", "N,K", a.dtype)
    (m, k), (n, kb) = a.shape, b.shape
    if k != kb:
        _bad(f"K mismatch: a is {tuple(a.shape)} [M,K] but b is {tuple(b.shape)} [N,K]")
    if m == 0 or n == 0 or k == 0:
        _bad(f"empty GEMM: a {tuple(a.shape)}, b {tuple(b.shape)}")
    kbs = -(-k // bk)
    _float_operand(scale_a, "scale_a", (m, kbs), "M, ceil(K/block_k)", torch.float32)
    _float_operand(scale_b, "scale_b", (-(-n // bn), kbs), "ceil(N/block_n), ceil(K/block_k)", torch.float32)
    if bias is not None:
        _float_operand(bias, "bias", (n,), "N", out_dtype)
    return m, k, n, bn, bk


def _tiles(m: int, n: int, tile_k: int, interp: bool) -> tuple[int, int, int, int, str]:
    """``(BLOCK_M, BLOCK_N, num_warps, num_stages, config_rule)``: a pure function of the shape and the K tile.
    Natively 64 / 128 rows and columns, halved until one stage of a and b fits 64 KiB, up to 3 stages in 160 KiB."""
    if interp:
        cfg = builtin_triton._interp_config(m, n, tile_k)
        return cfg.block_m, cfg.block_n, 4, 1, "interpreter tiles"
    bm, bn = (64 if m <= 64 else 128), (64 if n <= 64 else 128)
    while (bm + bn) * tile_k > 64 * 1024 and max(bm, bn) > 16:
        bm, bn = (bm // 2, bn) if bm >= bn else (bm, bn // 2)
    stages = max(1, min(3, 160 * 1024 // ((bm + bn) * tile_k)))
    return bm, bn, 8 if bm * bn >= 128 * 128 else 4, stages, "shape"


def launch_options(m: int, n: int, k: int, block_k: int, fp8: bool, has_bias: bool, out_dtype, interp: bool,
                   int64: bool = False) -> tuple[tuple[int], dict, str, str]:  # fmt: skip
    """``(grid, constexprs and launch options, config label, config_rule)`` of a :func:`block_mm` launch: a pure
    function of shape, block_k, dtypes and device kind. BLOCK_K is block_k when a power of two >= 32 (else the next
    one, masked); natively ``enable_fp_fusion=False``."""
    tile_k = max(32, 1 << (block_k - 1).bit_length())
    bm, bn, warps, stages, rule = _tiles(m, n, tile_k, interp)
    kw: dict = dict(SCALE_BLOCK_K=block_k, HAS_BIAS=has_bias, OUT_KIND=builtin_triton._OUT_KIND[out_dtype], FP8=fp8)
    kw.update(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=tile_k, GROUP_M=8, EVEN_K=k % block_k == 0 and tile_k == block_k)
    kw.update(INT64_IDX=int64, K_ITERS_STATIC=-(-k // block_k) if interp else 0)
    kw.update(FLOAT_DOT=interp and not fp8, MAX_IMPRECISE=min(MAX_IMPRECISE, tile_k))
    if not interp:
        kw.update(num_warps=warps, num_stages=stages, enable_fp_fusion=False)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    return grid, kw, f"{bm}x{bn}x{tile_k} w{warps} s{stages}", rule


@torch.compiler.disable
def _launch(kern, grid: tuple, args: tuple, kw: dict, interp: bool) -> None:
    """``kern[grid](*args, **kw)``, eagerly also inside a ``torch.compile``d caller: inductor would recompile the
    user Triton kernel with its own options, without ``enable_fp_fusion=False`` (C14 on an H100: 7 of 32768 fp16
    elements off the eager bits), so the launch stays out of the graph (a graph break, as any opaque call)."""
    if interp:
        with builtin_triton._quiet_ieee_overflow():
            kern[grid](*args, **kw)
    else:
        kern[grid](*args, **kw)


def block_scaled_mm(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[Tensor] = None,
    block_size: tuple[int, int] = (128, 128),
) -> Tensor:
    """Block-scaled W8A8 GEMM (module docstring). a int8 | float8_e4m3fn [M,K], b the same dtype [N,K]; scale_a
    float32 [M, ceil(K/block_k)], scale_b float32 [ceil(N/block_n), ceil(K/block_k)], finite; bias out_dtype [N]
    or None; out_dtype bfloat16 | float16 | float32; block_size (block_n, block_k); any strides. Returns a
    contiguous out_dtype [M,N] on a's device (other operands are moved there). Raises OperandError (one line);
    natively e4m3 needs CUDA sm_89+."""
    m, k, n, bn_s, bk_s = _validate(a, b, scale_a, scale_b, bias, out_dtype, block_size)
    trace.record_operands(a, b, scale_a, scale_b, bias)
    fp8 = a.dtype == torch.float8_e4m3fn
    dev = a.device
    kern, interp = _kernel(a.is_cuda)
    if fp8 and not interp and torch.cuda.get_device_capability(dev) < (8, 9):
        cap = "".join(map(str, torch.cuda.get_device_capability(dev)))
        _bad(f"{NAME}: FP8 tl.dot needs CUDA sm_89 or newer; {dev} is sm_{cap}")
    b, scale_a, scale_b = b.to(dev), scale_a.to(dev), scale_b.to(dev)
    bias = None if bias is None else bias.to(dev)
    int64 = builtin_triton._need_int64(a, b, m, n, k)
    grid, kw, config, rule = launch_options(m, n, k, bk_s, fp8, bias is not None, out_dtype, interp, int64)
    alloc = torch.int16 if interp and out_dtype == torch.bfloat16 else out_dtype
    out = torch.empty((m, n), dtype=alloc, device=dev)
    if interp and bias is not None and bias.dtype == torch.bfloat16:
        bias = bias.view(torch.int16)  # the interpreter has no bf16 loads: raw bits
    one = torch.ones(1, dtype=torch.float32, device=dev)
    args: tuple = (a, b, scale_a, scale_b, out if bias is None else bias, one, out, m, n, k, *a.stride(), *b.stride())
    args += (*scale_a.stride(), *scale_b.stride(), 0 if bias is None else bias.stride(0), n, bn_s)
    _launch(kern, grid, args, kw, interp)
    if trace.current() is not None:
        extra: dict = dict(config=config, config_rule=rule, block_size=[bn_s, bk_s])
        extra.update(operands="e4m3" if fp8 else "int8", block_accumulation=BLOCK_ACCUMULATION, epilogue=EPILOGUE)
        extra.update(triton_version=triton.__version__, device=dev.type, interpreter=interp)
        if fp8:
            extra["max_num_imprecise_acc"] = kw["MAX_IMPRECISE"]
        if interp:
            extra["interpreter_semantics"] = probe()
        mode = "triton-block-interpreter" if interp else "triton-block-native"
        trace.record_path(mode, source_digest=SOURCE_DIGEST, digest_of=FP8_NAME if fp8 else NAME, **extra)
    return out.view(out_dtype) if out.dtype != out_dtype else out
