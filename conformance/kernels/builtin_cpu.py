"""Built-in kernel ``cpu``: exact int32 GEMM on the CPU plus the CUTLASS_STYLE epilogue
``rnd((float32(acc) * s_w) * s_a [+ bias in float32])``.

Accumulator: float32 GEMMs over K chunks of 1024 (each partial sum is an integer of magnitude <= 2**24, exact in
float32 whatever BLAS does; Higham 2nd ed. section 2.1), summed in int64, wrapped to int32 two's complement (fault
F6 relies on it). float64 when torch's float32 matmul precision is not "highest"."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from conformance.kernels import trace
from conformance.kernels.digest import module_digest
from conformance.kernels.torch_epilogue import epilogue
from reference.contract import CUTLASS_STYLE
from reference.validate import validate_operands

CONTRACT = CUTLASS_STYLE
#: int32 overflow (KernelSpec.overflow): the exact int64 sum wraps to int32 (``_wrap_int32``)
OVERFLOW = "wrap"
NAME = "cpu"  # registry name: the digest this kernel records at run time is its own
SOURCE_DIGEST = module_digest(__file__)
_CHUNK = 1024  # 1024 * 2**14 = 2**24: largest chunk exact in float32


def _wrap_int32(x: Tensor) -> Tensor:
    """int64 -> int32 with two's-complement wrap-around."""
    return (((x + 2**31) % 2**32) - 2**31).to(torch.int32)


def exact_acc_int64(a: Tensor, b: Tensor) -> Tensor:
    """Exact int64 [M,N] ``a @ b.T`` of CPU int8 [M,K], [N,K] by chunked float GEMM, for any K."""
    m, k = a.shape
    n = b.shape[0]
    use64 = torch.get_float32_matmul_precision() != "highest"
    ftype = torch.float64 if use64 else torch.float32
    chunk = k if use64 else _CHUNK
    out = torch.zeros((m, n), dtype=torch.int64)
    af, bf = a.to(ftype), b.to(ftype)
    for k0 in range(0, k, chunk):
        out += (af[:, k0 : k0 + chunk] @ bf[:, k0 : k0 + chunk].T).to(torch.int64)
    return out


def int_mm(a: Tensor, b: Tensor) -> Tensor:
    """Accumulator-only entry: int8 [M,K] x int8 [N,K] -> int32 [M,N] on the CPU, wrapping outside int32.
    Raises OperandError (reference.validate rules)."""
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
    """W8A8 GEMM ``rnd((float32(a @ b.T) * s_w) * s_a [+ bias])``: operands as ``spec``; out_dtype [M,N]
    on the CPU. Raises OperandError."""
    validate_operands(a, b, scale_a, scale_b, bias, out_dtype)
    trace.record_operands(a, b, scale_a, scale_b, bias)
    trace.record_path("cpu-exact", source_digest=SOURCE_DIGEST, digest_of=NAME, epilogue="torch-fp32")
    acc = _wrap_int32(exact_acc_int64(a.cpu(), b.cpu()))
    return epilogue(acc, scale_a.cpu(), scale_b.cpu(), CONTRACT, None if bias is None else bias.cpu(), out_dtype)


def _validate_int(a: Tensor, b: Tensor) -> None:
    one = torch.ones((), dtype=torch.float32)
    validate_operands(a, b, one, one)


def available() -> tuple[bool, str]:
    return True, ""
