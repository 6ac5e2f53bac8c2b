"""Built-in kernel ``int_mm``: ``torch._int_mm`` (int8 x int8 -> int32) plus a
CUTLASS-style epilogue (declared contract ``reference.contract.CUTLASS_STYLE``:
``(float32(acc) * s_w) * s_a``, bias in float32 before the one RNE rounding).

Shape constraints of ``torch._int_mm`` (``mat1 [M,K] @ mat2 [K,N]``):
  * CUDA (cuBLASLt int8 path, aten/src/ATen/native/cuda/Blas.cpp
    ``_int_mm_out_cuda``): M > 16, K a multiple of 8, N a multiple of 8
    (K >= 16 in some releases; we pad K to a multiple of 8 and at least 16).
  * CPU (torch 2.13, found empirically by tests/conformance/kernels/test_builtins.py): any
    M and N, odd sizes included, are exact -- except K = 1 with N > 1, which
    returns wrong values: the [1,N] ``mat2`` then has strides (1, 1) (torch
    keeps degenerate strides on size-1 dims, even after ``.contiguous()``)
    and the CPU kernel reads the leading dimension from them. So K is padded
    to >= 2 on CPU. int32 overflow wraps two's-complement.

When the operands violate the device's constraints they are zero-padded:
extra rows of ``a`` give extra output rows, extra columns of K add products
``0 * x = 0`` to every dot product (exact), extra rows of ``b`` give extra
output columns; the [M, N] top-left block is returned. Padding therefore
changes no bit (proved by a test against the unpadded exact accumulator). The
kernel reports path ``"int_mm-padded"`` when it padded, else ``"int_mm"``.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from conformance.kernels import trace
from conformance.kernels._digest import module_digest
from conformance.kernels._torch_epilogue import epilogue
from conformance.kernels.spec import ShapeConstraints
from reference.contract import CUTLASS_STYLE
from reference.validate import validate_operands

CONTRACT = CUTLASS_STYLE
#: int32 overflow behaviour (KernelSpec.overflow), per device: torch._int_mm
#: on the CPU accumulates in int32 and wraps two's complement (M = N = 1,
#: K = 131,073, all -128 gives -2147467264 = wrap32(2**31 + 16384)); on CUDA
#: cuBLASLt documents nothing (H200, torch 2.11: the same products clamp to
#: 2**31 - 1, and with 20,000 products of -16,256 after them the exact sum
#: comes back), so nothing is promised.
OVERFLOW = {"cpu": "wrap", "cuda": "undefined"}
SOURCE_DIGEST = module_digest(__file__)
NAME = "int_mm"  # registry name: the digest this kernel records at run time is its own
CUDA_CONSTRAINTS = ShapeConstraints(
    min_m=17, k_multiple=8, n_multiple=8, note="torch._int_mm on CUDA; K padded to >= 16 as well"
)
CPU_CONSTRAINTS = ShapeConstraints(
    note="torch._int_mm on CPU: K >= 2 (K = 1 gives wrong values for N > 1; empirical, torch 2.13)"
)


def constraints_for(device_type: str) -> ShapeConstraints:
    """Native shape constraints of ``torch._int_mm`` on ``device_type``."""
    return CUDA_CONSTRAINTS if device_type == "cuda" else CPU_CONSTRAINTS


def padded_shape(m: int, k: int, n: int, device_type: str) -> tuple[int, int, int]:
    """Smallest (M', K', N') >= (M, K, N) that ``torch._int_mm`` handles
    correctly on ``device_type`` (CUDA: M' >= 17, K' multiple of 8 and >= 16,
    N' multiple of 8; CPU: K' >= 2)."""
    if device_type != "cuda":
        return m, max(k, 2), n
    up8 = lambda v: -(-v // 8) * 8  # noqa: E731
    return max(m, 17), max(up8(k), 16), up8(n)


#: cuBLASLt's int8 GEMM refuses some N' > 2^17 (CUBLAS_STATUS_NOT_SUPPORTED on the H200 at
#: N' = 131,080, M' = 17, K = 32; N' = 131,072 and 151,936 ran): on CUDA, N' above
#: CUDA_MAX_N is computed in column chunks of CUDA_N_CHUNK (int32 sums: exact, the same bits).
CUDA_MAX_N, CUDA_N_CHUNK = 1 << 17, 1 << 16


def _acc(a: Tensor, b: Tensor, rules: Optional[str] = None) -> tuple[Tensor, bool]:
    """int32 [M,N] accumulator via torch._int_mm, padding if needed.

    Args:
        rules: whose padding rule to apply ("cuda" | "cpu"); None = a's device
            (tests force "cuda" on CPU tensors to prove padding is exact).
    Returns (acc, padded)."""
    m, k = a.shape
    n = b.shape[0]
    rules = rules or a.device.type
    if rules == "cuda":
        # cuBLASLt's int8 path refuses other layouts (CUBLAS_STATUS_NOT_SUPPORTED
        # on the H200 for a padded a, lda 23, and for b given as the transposed
        # view of a [K, N] buffer): dense copies, the same values
        a, b = a.contiguous(), b.contiguous()
    mp, kp, np_ = padded_shape(m, k, n, rules)
    padded = (mp, kp, np_) != (m, k, n)
    if padded:
        a = F.pad(a, (0, kp - k, 0, mp - m))  # zeros: exact (see module docstring)
        b = F.pad(b, (0, kp - k, 0, np_ - n))
    # b.t(): [K,N] column-major view, as cuBLASLt wants
    if rules == "cuda" and np_ > CUDA_MAX_N:
        acc = torch.cat([torch._int_mm(a, b[j : j + CUDA_N_CHUNK].t()) for j in range(0, np_, CUDA_N_CHUNK)], dim=1)
    else:
        acc = torch._int_mm(a, b.t())
    return acc[:m, :n], padded


def int_mm(a: Tensor, b: Tensor) -> Tensor:
    """Accumulator-only entry: int8 [M,K] x int8 [N,K] -> int32 [M,N] on a's device.

    Raises:
        OperandError: wrong dtype / shape / layout (reference.validate rules).
    """
    one = torch.ones((), dtype=torch.float32)
    validate_operands(a, b, one, one)
    acc, padded = _acc(a, b)
    trace.record_path(
        "int_mm-padded" if padded else "int_mm",
        padded=padded,
        source_digest=SOURCE_DIGEST,
        digest_of=NAME,
        device=a.device.type,
    )
    return acc.contiguous()


def scaled_mm(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[Tensor] = None,
) -> Tensor:
    """W8A8 GEMM ``rnd((float32(torch._int_mm(a, b.T)) * s_w) * s_a [+ bias])``.

    Args:
        a: int8 [M,K]; b: int8 [N,K] (same device, CPU or CUDA);
        scale_a: float32 [M]|[M,1]|scalar; scale_b: float32 [N]|[N,1]|scalar;
        bias: out_dtype [N] or None; out_dtype: bfloat16 | float16 | float32.
    Returns:
        out_dtype [M,N] on a's device.
    Raises:
        OperandError: invalid operands (reference.validate.validate_operands).
    """
    validate_operands(a, b, scale_a, scale_b, bias, out_dtype)
    trace.record_operands(a, b, scale_a, scale_b, bias)
    acc, padded = _acc(a, b)
    trace.record_path(
        "int_mm-padded" if padded else "int_mm",
        padded=padded,
        source_digest=SOURCE_DIGEST,
        digest_of=NAME,
        device=a.device.type,
        epilogue="torch-fp32",
    )
    dev = acc.device
    return epilogue(acc, scale_a.to(dev), scale_b.to(dev), CONTRACT, None if bias is None else bias.to(dev), out_dtype)


def available() -> tuple[bool, str]:
    """(ok, reason): ``torch._int_mm`` exists in this torch build."""
    if not hasattr(torch, "_int_mm"):
        return False, f"torch {torch.__version__} has no torch._int_mm"
    return True, ""
