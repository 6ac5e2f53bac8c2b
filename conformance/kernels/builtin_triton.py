"""Built-in kernel ``triton``: a Triton int8 GEMM with a fused epilogue.

Declared contract: ``reference.contract.TRITON_STYLE`` (vLLM's Triton
``scaled_mm``): ``y = (float32(acc) * s_a) * s_w``, rounded RNE to out_dtype,
then ``rnd(float32(y) + float32(bias))`` (bias added after the rounding, in
float32, rounded RNE again).

Kernel: one program per [BLOCK_M, BLOCK_N] output tile; ``tl.dot`` of int8
tiles accumulates into an int32 register tile (exact while partial sums fit
int32, DESIGN.md section 1); K tails and M/N edges are masked loads with
``other=0`` (zeros add nothing to a dot product) and masked stores.

Rounding to bfloat16 is done *explicitly in integer arithmetic* inside the
kernel (``u + 0x7FFF + lsb`` then keep the top 16 bits: round to nearest,
ties to even, on the float32 bit pattern; NaN -> 0x7FC0 like torch), and the
bf16 result is stored through a bitcast. Why: Triton 3.9's interpreter
implements ``x.to(tl.bfloat16)`` as truncation toward zero, with or without
``fp_downcast_rounding="rtne"``, and mishandles subnormals in fp32 <-> bf16
casts (tests/test_kern_triton.py pins this). With explicit rounding the kernel
gives the same, correct RNE bits in the interpreter and natively. bf16 bias
is loaded as its 16 raw bits and widened by a shift (exact). float16 output
uses ``.to(tl.float16)``: numpy ``astype`` in the interpreter and
``cvt.rn.f16.f32`` natively, both RNE.

Modes (reported by ``trace.record_path``):
  * ``"triton-native"``: CUDA tensors, ``triton.jit`` compiled kernel
    (``enable_fp_fusion=False`` so no multiply-add is contracted into an FMA).
  * ``"triton-interpreter"``: CPU tensors, the same Python function run by
    ``triton.runtime.interpreter.InterpretedFunction`` (numpy). We build the
    interpreted kernel object explicitly instead of relying on the
    ``TRITON_INTERPRET=1`` environment variable: Triton 3.x reads that variable
    (``triton.knobs.runtime.interpret``) when ``@triton.jit`` *decorates* a
    function, so setting it after this module is imported would be too late
    and setting it globally would also switch other users' kernels. If the
    user did set ``TRITON_INTERPRET=1``, ``triton.jit`` itself returns an
    interpreted function; we detect that and report ``triton-interpreter``
    even for CUDA tensors (the interpreter copies them to the host).
    What "before triton is imported" really protects: the helpers of
    ``triton.language.standard`` (``tl.zeros``, ``tl.cdiv``, ``tl.sum``, ...)
    are themselves ``@triton.jit`` functions decorated at import, so with the
    variable unset they are compiled-mode objects that raise "Cannot call
    @triton.jit'd outside of the scope of a kernel" inside an interpreted
    kernel. The kernel therefore uses only builtins (``tl.full`` instead of
    ``tl.zeros``); tests/test_kern_triton.py runs it with the variable set
    before import and unset, and checks identical bits.
  The manifest ``extra`` carries the block sizes and, in interpreter mode, the
  measured interpreter semantics of every epilogue step
  (``conformance.kernels.triton_probe.probe``).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Optional

import torch
import triton
import triton.language as tl
from torch import Tensor

from conformance.kernels import trace
from conformance.kernels._digest import module_digest
from reference.contract import TRITON_STYLE

CONTRACT = TRITON_STYLE
#: int32 overflow behaviour (KernelSpec.overflow): ``acc += tl.dot(a, b)`` on an
#: int32 tile wraps two's complement (PTX integer mma without ``.satfinite``,
#: numpy int32 in the interpreter; measured: M = N = 1, K = 131,073, all -128
#: gives -2147467264 = wrap32(2**31 + 16384)).
OVERFLOW = "wrap"
SOURCE_DIGEST = module_digest(__file__)
_OUT_KIND = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}


def _w8a8_gemm(a_ptr, b_ptr, sa_ptr, sb_ptr, bias_ptr, out_ptr,
               M, N, K, stride_am, stride_bn, stride_om,
               HAS_BIAS: tl.constexpr, OUT_KIND: tl.constexpr, ACC_ONLY: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               K_STATIC: tl.constexpr):
    # a: int8 [M,K] row stride stride_am; b: int8 [N,K] row stride stride_bn;
    # out: int32 (ACC_ONLY) | int16 bits of bf16 | fp16 | fp32, [M,N].
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.full((BLOCK_M, BLOCK_N), 0, tl.int32)  # not tl.zeros: @jit stdlib (docstring)
    # K_STATIC > 0 (interpreter only): loop bound as a plain int, see _launch
    for k0 in range(0, K_STATIC if K_STATIC > 0 else K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :],
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0)
        b = tl.load(b_ptr + rn[None, :] * stride_bn + kk[:, None],
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0)
        acc += tl.dot(a, b)  # int8 x int8 -> int32
    omask = (rm[:, None] < M) & (rn[None, :] < N)
    optrs = out_ptr + rm[:, None] * stride_om + rn[None, :]
    if ACC_ONLY:
        tl.store(optrs, acc, mask=omask)
    else:
        sa = tl.load(sa_ptr + rm, mask=rm < M, other=1.0)
        sb = tl.load(sb_ptr + rn, mask=rn < N, other=1.0)
        y = acc.to(tl.float32) * sa[:, None]  # TRITON_STYLE: s_a first
        y = y * sb[None, :]
        if OUT_KIND == 0:
            # explicit RNE fp32 -> bf16 on the bit pattern (see module docstring)
            u = y.to(tl.uint32, bitcast=True)
            hi = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            hi = tl.where(y != y, 0x7FC0, hi)
            if HAS_BIAS:
                bb = tl.load(bias_ptr + rn, mask=rn < N, other=0)  # raw bf16 bits (int16)
                bf = (bb.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
                z = (hi << 16).to(tl.float32, bitcast=True) + bf[None, :]
                u = z.to(tl.uint32, bitcast=True)
                hi = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
                hi = tl.where(z != z, 0x7FC0, hi)
            tl.store(optrs, hi.to(tl.uint16).to(tl.int16, bitcast=True), mask=omask)
        elif OUT_KIND == 1:
            r = y.to(tl.float16)
            if HAS_BIAS:
                bh = tl.load(bias_ptr + rn, mask=rn < N, other=0.0)
                r = (r.to(tl.float32) + bh.to(tl.float32)[None, :]).to(tl.float16)
            tl.store(optrs, r, mask=omask)
        else:
            r = y
            if HAS_BIAS:
                bs = tl.load(bias_ptr + rn, mask=rn < N, other=0.0)
                r = r + bs[None, :]
            tl.store(optrs, r, mask=omask)


_KERNELS: dict = {}


def _kernel(native: bool):
    """The kernel object for a mode (built once): (kernel, is_interpreter)."""
    key = "native" if native else "interp"
    if key not in _KERNELS:
        from triton.runtime.interpreter import InterpretedFunction

        k = triton.jit(_w8a8_gemm) if native else InterpretedFunction(_w8a8_gemm)
        _KERNELS[key] = (k, isinstance(k, InterpretedFunction))
    return _KERNELS[key]


def _blocks(m: int, n: int, interpreter: bool) -> tuple[int, int, int]:
    """Tile sizes. Native: 64x128x64 (64 rows for small M). Interpreter: larger
    K blocks (fewer Python-level iterations); every dim >= 16 for tl.dot."""
    if interpreter:
        bm = 16 if m <= 16 else (32 if m <= 32 else 64)
        bn = 16 if n <= 16 else (32 if n <= 32 else 64)
        return bm, bn, 128
    bm = 64 if m <= 64 else 128
    return bm, 128, 64


@contextlib.contextmanager
def _quiet_ieee_overflow():
    """Silence numpy's "overflow encountered in cast/multiply/add"
    RuntimeWarnings raised inside the Triton interpreter only.

    The interpreter emulates float32 ops with numpy; an IEEE overflow there
    (``acc * s_a * s_w`` beyond float32 max with large scales, float32 ->
    float16 beyond 65504, bf16 bias add at the top of the range) yields ±inf,
    exactly what the contract and the reference (``reference.epilogue``:
    "Overflow gives ±inf per IEEE") require and what native Triton does
    silently; numpy merely announces it. Checked benign: the hypothesis
    property test with "large" scales matches the reference bit for bit
    with these warnings. Other warnings, and these from any other module,
    still show.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"overflow encountered in (cast|multiply|add)",
                                category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
        yield


def _launch(a: Tensor, b: Tensor, sa: Optional[Tensor], sb: Optional[Tensor],
            bias: Optional[Tensor], out_dtype: Optional[torch.dtype]) -> tuple[Tensor, dict]:
    """Run the kernel; out_dtype None = accumulator only. Returns (out, extra)."""
    m, k = a.shape
    n = b.shape[0]
    native = a.is_cuda
    kern, interp = _kernel(native)
    bm, bn, bk = _blocks(m, n, interp)
    # Interpreter: K goes in as a constexpr loop bound too. Triton <= 3.6's
    # interpreter turns a runtime loop bound into an int with int(ndarray[1]),
    # which recent numpy rejects ("only 0-dimensional arrays can be converted");
    # natively K stays a runtime argument (no recompilation per K).
    acc_only = out_dtype is None
    if acc_only:
        out = torch.empty((m, n), dtype=torch.int32, device=a.device)
        out_view = out
    else:
        out = torch.empty((m, n), dtype=out_dtype, device=a.device)
        out_view = out.view(torch.int16) if out_dtype == torch.bfloat16 else out
    dummy = torch.zeros(1, dtype=torch.float32, device=a.device)
    bias_arg = dummy if bias is None else (bias.view(torch.int16) if bias.dtype == torch.bfloat16
                                           else bias)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    opts = {} if interp else {"num_warps": 4, "num_stages": 3, "enable_fp_fusion": False}
    with _quiet_ieee_overflow() if interp else contextlib.nullcontext():
        kern[grid](a, b, dummy if sa is None else sa, dummy if sb is None else sb, bias_arg,
                   out_view, m, n, k, a.stride(0), b.stride(0), out_view.stride(0),
                   HAS_BIAS=bias is not None, OUT_KIND=_OUT_KIND.get(out_dtype, 0),
                   ACC_ONLY=acc_only, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                   K_STATIC=k if interp else 0, **opts)
    extra = {"block_m": bm, "block_n": bn, "block_k": bk, "triton_version": triton.__version__,
             "final_rounding": "explicit-rne-bitops" if out_dtype == torch.bfloat16 else
             ("cast-to-fp16" if out_dtype == torch.float16 else "none"),
             "source_digest": SOURCE_DIGEST, "device": a.device.type}
    path = "triton-interpreter" if interp else "triton-native"
    if interp:
        from conformance.kernels.triton_probe import probe

        extra["interpreter_semantics"] = probe()
    trace.record_path(path, interpreter=interp, **extra)
    return out, extra


def _scales(scale_a: Tensor, scale_b: Tensor, m: int, n: int, device) -> tuple[Tensor, Tensor]:
    """Contiguous float32 [M], [N] on ``device`` (scalars broadcast, values unchanged)."""
    from reference.validate import normalize_scales

    sa, sb = normalize_scales(scale_a, scale_b, m, n)
    return sa.to(device).contiguous(), sb.to(device).contiguous()


def int_mm(a: Tensor, b: Tensor) -> Tensor:
    """Accumulator-only entry: int8 [M,K] x int8 [N,K] -> int32 [M,N] (a's device;
    CPU runs under the interpreter).

    Raises:
        OperandError: wrong dtype / shape / layout (reference.validate rules).
    """
    from reference.validate import validate_operands

    one = torch.ones((), dtype=torch.float32)
    validate_operands(a, b, one, one)
    out, _ = _launch(a, b.to(a.device), None, None, None, None)
    return out


def scaled_mm(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor,
              out_dtype: torch.dtype = torch.bfloat16, bias: Optional[Tensor] = None) -> Tensor:
    """W8A8 GEMM, TRITON_STYLE epilogue: ``rnd(rnd((float32(acc) * s_a) * s_w) + bias)``.

    Args:
        a: int8 [M,K]; b: int8 [N,K]; scale_a: float32 [M]|[M,1]|scalar;
        scale_b: float32 [N]|[N,1]|scalar; bias: out_dtype [N] or None;
        out_dtype: bfloat16 | float16 | float32.
    Returns:
        out_dtype [M,N] on a's device (CUDA: native; CPU: interpreter).
    Raises:
        OperandError: invalid operands (reference.validate.validate_operands).
    """
    from reference.validate import validate_operands

    m, _, n = validate_operands(a, b, scale_a, scale_b, bias, out_dtype)
    trace.record_operands(a, b, scale_a, scale_b, bias)
    sa, sb = _scales(scale_a, scale_b, m, n, a.device)
    out, _ = _launch(a, b.to(a.device), sa, sb,
                     None if bias is None else bias.to(a.device).contiguous(), out_dtype)
    return out


def available() -> tuple[bool, str]:
    """(True, "") -- triton imported; without CUDA the interpreter is used."""
    return True, ""
