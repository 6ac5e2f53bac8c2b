"""Built-in asymmetric-activation kernel on the CPU: ``azp-cpu``, vLLM's ``cutlass_scaled_mm_azp`` semantics
(``reference.asymmetric``): zero point per tensor (``azp_adj = z * colsum(b)``) or per token (``azp_adj = colsum(b)``,
``azp`` int32 [M]), the correction in int32 before the float epilogue, then the CUTLASS contract
(``(float32(x) * s_w) * s_a + bias``, one rounding to out_dtype).

The accumulator is one float64 GEMM (exact integers while ``|acc| < 2**53``) narrowed to int32 with numpy's
wrapping cast; ``acc - azp * azp_adj`` in numpy int32 arithmetic (wraps mod 2**32, as PTX ``sub.s32`` /
``mul.lo.s32``); numpy's int32 -> float32 conversion (RNE); the scales and bias in torch float32 ops (subnormals
kept). Independent of ``reference.asymmetric`` (which checks it). CUDA operands are computed on the CPU and returned
on their device."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor

from conformance.kernels import trace
from conformance.kernels.digest import module_digest
from reference.bits import ieee_subnormals
from reference.contract import CUTLASS_STYLE
from reference.errors import OperandError
from reference.validate import validate_operands

SOURCE_DIGEST = module_digest(__file__)


def scaled_mm(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[Tensor] = None,
    azp_adj: Optional[Tensor] = None,
    azp: Optional[Tensor] = None,
) -> Tensor:
    """Asymmetric int8 GEMM (module docstring): a int8 [M,K], b int8 [N,K], scale_a float32 [M]/[M,1]/scalar,
    scale_b float32 [N]/[N,1]/scalar, azp_adj int32 [N] (required), azp None or int32 [M]; out_dtype [M,N] on a's
    device. Raises OperandError."""
    if azp_adj is None:
        raise OperandError("azp-cpu takes azp_adj= int32 [N]: colsum(b) (per-token) or z * colsum(b) (per-tensor)")
    m, _k, n = validate_operands(a, b, scale_a, scale_b, bias, out_dtype, "int8", None, azp_adj, azp)
    trace.record_operands(a, b, scale_a, scale_b, bias)
    trace.record_path("azp-cpu-int32-correction", source_digest=SOURCE_DIGEST, digest_of="azp-cpu")
    acc = (a.cpu().to(torch.float64) @ b.cpu().to(torch.float64).T).numpy().astype(np.int64).astype(np.int32)
    adj = azp_adj.cpu().reshape(1, n).numpy().astype(np.int32)
    corr = adj if azp is None else azp.cpu().reshape(m, 1).numpy().astype(np.int32) * adj
    x = torch.from_numpy((acc - corr).astype(np.float32))
    sa = scale_a.cpu().reshape(-1).expand(m).reshape(m, 1) if scale_a.numel() == 1 else scale_a.cpu().reshape(m, 1)
    sw = scale_b.cpu().reshape(-1).expand(n).reshape(1, n) if scale_b.numel() == 1 else scale_b.cpu().reshape(1, n)
    with ieee_subnormals(x):
        y = (x * sw) * sa
        if bias is not None:
            y = y + bias.cpu().to(torch.float32)
        return y.to(out_dtype).to(a.device)


def available(name: str = "azp-cpu") -> tuple[bool, str]:
    return True, ""


KERNELS = {
    "azp-cpu": dict(
        scaled_mm=scaled_mm,
        contract=CUTLASS_STYLE,
        devices=("cpu", "cuda"),
        version="1",
        description="asymmetric int8 activations on the CPU: acc - azp*azp_adj in int32 (wrapping), CUTLASS epilogue",
        azp=("per-tensor", "per-token"),
    )
}
