"""Built-in kernel ``cpu``: exact int32 matmul on the CPU plus a CUTLASS-style
epilogue (declared contract ``reference.contract.CUTLASS_STYLE``:
``(float32(acc) * s_w) * s_a``, bias added in float32 before the one RNE
rounding).

Accumulator: K is split into chunks of 1024. Inside a chunk every partial sum
of int8 x int8 products is an integer of magnitude <= 1024 * 128 * 128 = 2**24,
and every integer of magnitude <= 2**24 is exactly representable in float32,
so a float32 GEMM over the chunk is exact whatever order or blocking BLAS
uses (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed.,
section 2.1: an operation whose exact result is representable incurs no
rounding error). Chunk results are summed in int64. The final int64 value is
wrapped to int32 two's complement, as a hardware int32 accumulator would do
(fault F6 relies on that behaviour being the int32 one).

When torch's float32 matmul precision is not "highest" (TF32/bf16 internal
compute allowed), float64 is used instead (exact for |partial sums| < 2**53).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from conformance.kernels import trace
from conformance.kernels._digest import module_digest
from conformance.kernels._torch_epilogue import epilogue
from reference.contract import CUTLASS_STYLE
from reference.validate import validate_operands

CONTRACT = CUTLASS_STYLE
#: int32 overflow behaviour (KernelSpec.overflow): the exact int64 sum is
#: wrapped to int32 two's complement (``_wrap_int32``), as int32 hardware does.
OVERFLOW = "wrap"
NAME = "cpu"  # registry name: the digest this kernel records at run time is its own
SOURCE_DIGEST = module_digest(__file__)
_CHUNK = 1024  # 1024 * 2**14 = 2**24: largest chunk exact in float32


def _wrap_int32(x: Tensor) -> Tensor:
    """int64 -> int32 with two's-complement wrap-around (like int32 hardware)."""
    return (((x + 2**31) % 2**32) - 2**31).to(torch.int32)


def exact_acc_int64(a: Tensor, b: Tensor) -> Tensor:
    """Exact int64 accumulator ``a @ b.T`` by chunked float32 GEMM.

    Args:
        a: int8 [M,K] (CPU). b: int8 [N,K] (CPU).
    Returns:
        int64 [M,N], exact for any K (see module docstring).
    """
    m, k = a.shape
    n = b.shape[0]
    use64 = torch.get_float32_matmul_precision() != "highest"
    ftype = torch.float64 if use64 else torch.float32
    chunk = k if use64 else _CHUNK
    out = torch.zeros((m, n), dtype=torch.int64)
    af = a.to(ftype)
    bf = b.to(ftype)
    for k0 in range(0, k, chunk):
        part = af[:, k0 : k0 + chunk] @ bf[:, k0 : k0 + chunk].T
        out += part.to(torch.int64)
    return out


def int_mm(a: Tensor, b: Tensor) -> Tensor:
    """Accumulator-only entry: int8 [M,K] x int8 [N,K] -> int32 [M,N] (CPU).

    Exact while the true sum fits int32; wraps two's-complement otherwise.
    Raises:
        OperandError: wrong dtype / shape / layout (reference.validate rules).
    """
    _validate_int(a, b)
    trace.record_path("cpu-exact", source_digest=SOURCE_DIGEST, digest_of=NAME)
    return _wrap_int32(exact_acc_int64(a.cpu(), b.cpu()))


def scaled_mm(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[Tensor] = None,
) -> Tensor:
    """W8A8 GEMM ``rnd((float32(a @ b.T) * s_w) * s_a [+ bias])`` on the CPU.

    Args:
        a: int8 [M,K]; b: int8 [N,K]; scale_a: float32 [M]|[M,1]|scalar;
        scale_b: float32 [N]|[N,1]|scalar; bias: out_dtype [N] or None;
        out_dtype: bfloat16 | float16 | float32.
    Returns:
        out_dtype [M,N] on the CPU.
    Raises:
        OperandError: invalid operands (reference.validate.validate_operands).
    """
    validate_operands(a, b, scale_a, scale_b, bias, out_dtype)
    trace.record_operands(a, b, scale_a, scale_b, bias)
    trace.record_path("cpu-exact", source_digest=SOURCE_DIGEST, digest_of=NAME, epilogue="torch-fp32")
    acc = _wrap_int32(exact_acc_int64(a.cpu(), b.cpu()))
    return epilogue(acc, scale_a.cpu(), scale_b.cpu(), CONTRACT, None if bias is None else bias.cpu(), out_dtype)


def _validate_int(a: Tensor, b: Tensor) -> None:
    """Validate accumulator-only operands with the reference validator (unit scales)."""
    one = torch.ones((), dtype=torch.float32)
    validate_operands(a, b, one, one)


def available() -> tuple[bool, str]:
    """(True, "") -- the CPU path needs nothing beyond torch."""
    return True, ""
