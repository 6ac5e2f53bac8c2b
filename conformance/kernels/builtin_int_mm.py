"""Built-in kernel ``int_mm``: ``torch._int_mm`` plus the CUTLASS_STYLE epilogue
``rnd((float32(acc) * s_w) * s_a [+ bias in float32])``.

``torch._int_mm`` needs on CUDA (cuBLASLt) M > 16 and K, N multiples of 8 (K >= 16 in some releases), and on the
CPU K >= 2 (K = 1 with N > 1 gives wrong values: the [1,N] mat2 keeps strides (1, 1)). Operands outside these are
zero-padded (zero products add nothing; the [M,N] block is returned; path ``"int_mm-padded"``), so no bit changes."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from conformance.kernels import trace
from conformance.kernels.digest import module_digest
from conformance.kernels.torch_epilogue import epilogue
from reference.contract import CUTLASS_STYLE
from reference.validate import validate_operands

CONTRACT = CUTLASS_STYLE
#: int32 overflow: the CPU wraps two's complement; cuBLASLt documents nothing (clamps were seen), so undefined
OVERFLOW = {"cpu": "wrap", "cuda": "undefined"}
SOURCE_DIGEST = module_digest(__file__)
NAME = "int_mm"  # registry name: the digest this kernel records at run time is its own


def padded_shape(m: int, k: int, n: int, device_type: str) -> tuple[int, int, int]:
    """Smallest (M', K', N') >= (M, K, N) ``torch._int_mm`` handles on ``device_type`` (CUDA: M' >= 17,
    K' multiple of 8 and >= 16, N' multiple of 8; CPU: K' >= 2)."""
    if device_type != "cuda":
        return m, max(k, 2), n
    up8 = lambda v: -(-v // 8) * 8  # noqa: E731
    return max(m, 17), max(up8(k), 16), up8(n)


#: cuBLASLt refuses some N' > 2^17: above CUDA_MAX_N columns are computed in chunks (exact int32 sums)
CUDA_MAX_N, CUDA_N_CHUNK = 1 << 17, 1 << 16


def _acc(a: Tensor, b: Tensor, rules: Optional[str] = None) -> tuple[Tensor, bool]:
    """``(int32 [M,N] accumulator, padded)`` via ``torch._int_mm``; ``rules``: whose padding rule ("cuda" /
    "cpu"; None = a's device)."""
    m, k = a.shape
    n = b.shape[0]
    rules = rules or a.device.type
    if rules == "cuda":
        # cuBLASLt's int8 path refuses other layouts (a padded a; b as the transposed view of a [K, N] buffer)
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
    """Accumulator-only entry: int8 [M,K] x int8 [N,K] -> int32 [M,N] on a's device. Raises OperandError."""
    one = torch.ones((), dtype=torch.float32)
    validate_operands(a, b, one, one)
    acc, padded = _acc(a, b)
    _record(padded, a.device.type)
    return acc.contiguous()


def _record(padded: bool, device: str, **kw: object) -> None:
    path = "int_mm-padded" if padded else "int_mm"
    trace.record_path(path, padded=padded, source_digest=SOURCE_DIGEST, digest_of=NAME, device=device, **kw)


def scaled_mm(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[Tensor] = None,
) -> Tensor:
    """W8A8 GEMM ``rnd((float32(torch._int_mm(a, b.T)) * s_w) * s_a [+ bias])``: operands as ``spec``
    (a, b on one device); out_dtype [M,N] on a's device. Raises OperandError."""
    validate_operands(a, b, scale_a, scale_b, bias, out_dtype)
    trace.record_operands(a, b, scale_a, scale_b, bias)
    acc, padded = _acc(a, b)
    _record(padded, a.device.type, epilogue="torch-fp32")
    dev = acc.device
    return epilogue(acc, scale_a.to(dev), scale_b.to(dev), CONTRACT, None if bias is None else bias.to(dev), out_dtype)


def available() -> tuple[bool, str]:
    """(ok, reason): ``torch._int_mm`` exists in this torch build."""
    if not hasattr(torch, "_int_mm"):
        return False, f"torch {torch.__version__} has no torch._int_mm"
    return True, ""
