"""The ``cpu`` and ``int_mm`` built-ins' epilogue in plain torch ops, written independently of
``reference.epilogue``: each step is one correctly rounded IEEE binary32 operation or RNE cast (IEEE 754-2019 4.3.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor

if TYPE_CHECKING:
    from reference.contract import EpilogueContract


def scale_vectors(scale_a: Tensor, scale_b: Tensor, m: int, n: int) -> tuple[Tensor, Tensor]:
    """Scales [M]|[M,1]|scalar and [N]|[N,1]|scalar as float32 column [M,1] and row [1,N]."""
    sa = scale_a.to(torch.float32).reshape(-1)
    sb = scale_b.to(torch.float32).reshape(-1)
    sa = sa.expand(m) if sa.numel() == 1 else sa
    sb = sb.expand(n) if sb.numel() == 1 else sb
    return sa.reshape(m, 1), sb.reshape(1, n)


def epilogue(
    acc: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    contract: EpilogueContract,
    bias: Optional[Tensor],
    out_dtype: torch.dtype,
) -> Tensor:
    """Apply ``contract`` (a ``reference.contract.EpilogueContract``: scale order, bias point) to an int32 (or int64) accumulator [M,N]: bias
    out_dtype [N] or None; returns out_dtype [M,N] on acc's device."""
    m, n = acc.shape
    sa, sb = scale_vectors(scale_a, scale_b, m, n)
    x = acc.to(torch.float32)
    if contract.scale_order == "a_then_w":
        y = (x * sa) * sb
    elif contract.scale_order == "w_then_a":
        y = (x * sb) * sa
    else:  # fused: one float32 product of the two scales, rounded once
        y = x * (sa * sb)
    if bias is None:
        return y.to(out_dtype)
    b = bias.reshape(1, n)
    if contract.bias_point == "fp32_before_round":
        return (y + b.to(torch.float32)).to(out_dtype)
    # after_round: round, then add in out_dtype arithmetic (float32 add, RNE again)
    r = y.to(out_dtype)
    return (r.to(torch.float32) + b.to(torch.float32)).to(out_dtype)
