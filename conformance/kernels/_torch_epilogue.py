"""Kernel-side epilogue in plain torch ops, shared by the ``cpu`` and
``int_mm`` built-ins.

Written independently of ``reference.epilogue`` (same IEEE semantics, other
code) so that the built-ins are real implementations checked against the
reference, not copies of it. torch's elementwise float32 multiply/add are
IEEE-754 binary32 with round-to-nearest-even on CPU and CUDA, int32 -> float32
conversion rounds to nearest even, and ``Tensor.to(bfloat16|float16)`` rounds
to nearest even (c10 ``round_to_nearest_even``), so each step below is one
correctly rounded IEEE operation (IEEE 754-2019 section 4.3.1).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from reference.contract import EpilogueContract


def scale_vectors(scale_a: Tensor, scale_b: Tensor, m: int, n: int) -> tuple[Tensor, Tensor]:
    """Per-token / per-channel scales as float32 column [M,1] and row [1,N].

    Args:
        scale_a: float32 [M] | [M,1] | scalar.
        scale_b: float32 [N] | [N,1] | scalar.
    """
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
    """Apply a declared epilogue to an int32 accumulator.

    Args:
        acc: int32 [M,N] accumulator (int64 also accepted; converted to float32
            directly, one RNE rounding, same as int32 while |acc| < 2**31).
        scale_a: float32 per-token scale [M] | [M,1] | scalar.
        scale_b: float32 per-channel scale [N] | [N,1] | scalar.
        contract: scale order (a_then_w | w_then_a | fused) and bias point
            (fp32_before_round | after_round); rounding RNE.
        bias: out_dtype [N] or None.
        out_dtype: torch.bfloat16 | torch.float16 | torch.float32.

    Returns:
        out_dtype [M,N] on acc's device.
    """
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
