"""Built-in kernel ``triton-fp8``: a Triton FP8 (e4m3) GEMM with the ``triton`` built-in's fused epilogue
(kernel: ``triton_fp8_gemm.fp8_mm``; contract ``TRITON_STYLE`` on the float32 accumulator).

Native (CUDA sm_89+, ``enable_fp_fusion=False``): one configuration per shape, :func:`native_config`, recorded with
``config_rule="shape"``; nothing is timed. ``max_num_imprecise_acc`` = :data:`MAX_IMPRECISE` = BLOCK_K = 128, so on
sm_90 the tensor core's partial sum is added to the float32 accumulator every 128 products: declared
``fp32 bits=14 truncate promote=128`` (Hopper FP8 MMA as measured for cuBLASLt in issue 30, to be verified
natively). CPU tensors (or ``TRITON_INTERPRET=1``) run the Triton interpreter, whose fp8 ``tl.dot`` widens the tiles
exactly (to float16) and sums them with numpy in float32: declared ``fp32``. Operands are read through their strides."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

import torch
import triton
from torch import Tensor
from triton.runtime.interpreter import InterpretedFunction

from conformance.kernels import builtin_triton, trace, triton_fp8_gemm, triton_gemm
from conformance.kernels.spec import ShapeConstraints
from conformance.kernels.triton_probe import probe
from reference.contract import TRITON_STYLE
from reference.errors import OperandError
from reference.validate import validate_operands

NAME = "triton-fp8"
CONTRACT = TRITON_STYLE
#: ``tl.dot``'s ``max_num_imprecise_acc`` and the native BLOCK_K
MAX_IMPRECISE = 128
SOURCE_DIGEST = hashlib.sha256(
    b"".join(Path(p).read_bytes() for p in (__file__, triton_fp8_gemm.__file__, triton_gemm.__file__))
).hexdigest()
_KERNELS: dict = {}


def native_config(m: int, n: int, k: int) -> tuple[int, int, int, int, int]:
    """``(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)`` of a native call: a pure function of the shape
    (BLOCK_M >= 64 keeps sm_90 on wgmma; BLOCK_K = :data:`MAX_IMPRECISE`)."""
    bm = 64 if m <= 64 else 128
    bn = 64 if n <= 64 else 128
    return bm, bn, MAX_IMPRECISE, 8 if bm * bn >= 128 * 128 else 4, 3


def _kernel(native: bool):
    """``(kernel, is_interpreter)``; ``triton.jit`` gives an interpreter under ``TRITON_INTERPRET=1``."""
    got = _KERNELS.get(native)
    if got is None:
        if not native:
            builtin_triton._skip_dead_overflow_checks()
        k = triton.jit(triton_fp8_gemm.fp8_mm) if native else InterpretedFunction(triton_fp8_gemm.fp8_mm)
        got = _KERNELS[native] = (k, isinstance(k, InterpretedFunction))
    return got


def _run(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor], out_dtype) -> Tensor:
    m, k, n = validate_operands(a, b, scale_a, scale_b, bias, out_dtype, operands="e4m3")
    trace.record_operands(a, b, scale_a, scale_b, bias)
    dev = a.device
    kern, interp = _kernel(a.is_cuda)
    if not interp and torch.cuda.get_device_capability(dev) < (8, 9):
        cap = ".".join(map(str, torch.cuda.get_device_capability(dev)))
        raise OperandError(f"{NAME}: FP8 tl.dot needs CUDA sm_89 or newer; {dev} is sm_{cap.replace('.', '')}")
    b = b.to(dev)
    sa, sa_st = builtin_triton._scale_stride(scale_a, "scale_a", m, "M", dev)
    sb, sb_st = builtin_triton._scale_stride(scale_b, "scale_b", n, "N", dev)
    bias = None if bias is None else bias.to(dev)
    if interp:
        cfg = builtin_triton._interp_config(m, n, k)
        bm, bn, bk, warps, stages, rule = cfg.block_m, cfg.block_n, cfg.block_k, 4, 1, "interpreter tiles"
    else:
        (bm, bn, bk, warps, stages), rule = native_config(m, n, k), "shape"
    k_iters = (k + bk - 1) // bk
    kw = dict(HAS_BIAS=bias is not None, OUT_KIND=builtin_triton._OUT_KIND[out_dtype], ACC_ONLY=False)
    kw.update(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, EVEN_K=k % bk == 0)
    kw.update(INT64_IDX=builtin_triton._need_int64(a, b, m, n, k), K_ITERS_STATIC=k_iters if interp else 0)
    kw.update(MAX_IMPRECISE=min(MAX_IMPRECISE, bk))  # the interpreter ignores it but wants it <= BLOCK_K
    if not interp:
        kw.update(num_warps=warps, num_stages=stages, enable_fp_fusion=False)
    alloc = torch.int16 if interp and out_dtype == torch.bfloat16 else out_dtype
    out = torch.empty((m, n), dtype=alloc, device=dev)
    if interp and bias is not None and bias.dtype == torch.bfloat16:
        bias = bias.view(torch.int16)  # the interpreter has no bf16 loads: raw bits
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    args: tuple = (a, b, sa, sb, out if bias is None else bias, out, m, n, k, a.stride(0), a.stride(1), b.stride(0))
    args += (b.stride(1), sa_st, sb_st, 0 if bias is None else bias.stride(0), n)
    if interp:
        with builtin_triton._quiet_ieee_overflow():
            kern[grid](*args, **kw)
    else:
        kern[grid](*args, **kw)
    if trace.current() is not None:
        extra = dict(
            config=f"{bm}x{bn}x{bk} w{warps} s{stages}", config_rule=rule, max_num_imprecise_acc=kw["MAX_IMPRECISE"]
        )
        extra.update(triton_version=triton.__version__, device=dev.type, interpreter=interp)
        if interp:
            extra["interpreter_semantics"] = probe()
        mode = "triton-fp8-interpreter" if interp else "triton-fp8-native"
        trace.record_path(mode, source_digest=SOURCE_DIGEST, digest_of=NAME, **extra)
    return out.view(out_dtype) if out.dtype != out_dtype else out


def scaled_mm(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[Tensor] = None,
) -> Tensor:
    """FP8 W8A8 GEMM, TRITON_STYLE on the float32 accumulator: ``rnd(rnd((acc * s_a) * s_w) + bias)``. a e4m3 [M,K],
    b e4m3 [N,K] (any strides); scales and bias as ``spec``. Returns a contiguous out_dtype [M,N] on a's device.
    Raises OperandError (bad operands; native on a device older than sm_89)."""
    return _run(a, b, scale_a, scale_b, bias, out_dtype)


def available(name: str = NAME) -> tuple[bool, str]:
    return True, ""


KERNELS = {
    NAME: dict(
        scaled_mm=scaled_mm,
        contract=CONTRACT,
        devices=("cuda", "cpu"),
        constraints=ShapeConstraints(note="masked tails: any M, K, N >= 1"),
        version="1",
        description="Triton FP8 GEMM (tl.dot e4m3 -> fp32, max_num_imprecise_acc=128, fused TRITON_STYLE epilogue; native on CUDA sm_89+, interpreter on CPU)",
        warm_up=True,
        operands="e4m3",
        accumulator={"cpu": "fp32", "cuda": f"fp32 bits=14 truncate promote={MAX_IMPRECISE}"},
    )
}
