"""Built-in kernel ``fp8-cpu``: the exact FP8 reference (DESIGN.md 3b) on the CPU.

Accumulator ``exact``: ``reference.fp8.exact_sum_fp32`` (the exact int64 fixed-point sum of the e4m3 products, one RNE
rounding to float32). Epilogue: CUTLASS_STYLE steps evaluated by ``reference.epilogue.apply_epilogue`` on that float32
value. CUDA operands are computed on the CPU and the output returned on their device."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from conformance.kernels import trace
from conformance.kernels.digest import module_digest
from reference import fp8
from reference.contract import CUTLASS_STYLE
from reference.epilogue import apply_epilogue
from reference.validate import validate_operands

NAME = "fp8-cpu"
CONTRACT = CUTLASS_STYLE
SOURCE_DIGEST = module_digest(__file__)


def scaled_mm(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[Tensor] = None,
) -> Tensor:
    """FP8 W8A8 GEMM ``rnd((exact(a @ b.T) * s_w) * s_a [+ bias])``: a e4m3 [M,K], b e4m3 [N,K], scales and bias as
    ``spec``; out_dtype [M,N] on a's device. Raises OperandError (``validate_operands(..., operands="e4m3")``)."""
    validate_operands(a, b, scale_a, scale_b, bias, out_dtype, operands="e4m3")
    trace.record_operands(a, b, scale_a, scale_b, bias)
    trace.record_path("fp8-cpu-exact", source_digest=SOURCE_DIGEST, digest_of=NAME, epilogue="reference")
    acc = fp8.exact_sum_fp32(a.cpu(), b.cpu())
    out = apply_epilogue(acc, scale_a.cpu(), scale_b.cpu(), CONTRACT, None if bias is None else bias.cpu(), out_dtype)
    return out.to(a.device)


def available(name: str = NAME) -> tuple[bool, str]:
    return True, ""


KERNELS = {
    NAME: dict(
        scaled_mm=scaled_mm,
        contract=CONTRACT,
        devices=("cpu", "cuda"),
        version="1",
        description="exact FP8 reference: exact e4m3 sum rounded once to float32 + reference CUTLASS_STYLE epilogue",
        operands="e4m3",
        accumulator="exact",
    )
}
