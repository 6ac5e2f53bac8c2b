"""The scale-order tie search: accumulators whose output bits differ between
the scale orders a_then_w / w_then_a / fused (:func:`pick_ties`), and int8
operands realizing given accumulators (:func:`realize_acc`).
"""

from __future__ import annotations

from typing import Optional

import torch

#: epilogue_ties: K entries per output channel (TIE_BLOCK - 1 weights of 127, one of 1).
TIE_BLOCK = 32


#: Explicit mantissa bits of the output dtypes (bf16 7, fp16 10, fp32 23).
MANT_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}
#: Largest |acc| :func:`realize_acc` can build with blocks of TIE_BLOCK:
#: 127 * 127 * (TIE_BLOCK - 1) + 127 = 500126 (< 2**24: float32(acc) is exact).
VMAX = 127 * 127 * (TIE_BLOCK - 1) + 127


def _tie_targets(
    sa: torch.Tensor,
    sb: torch.Tensor,
    vmax: int,
    out_dtype: torch.dtype = torch.bfloat16,
    g: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """Candidate accumulators per element: for every rounding midpoint mu of
    ``out_dtype`` in the top two binades of ``vmax * s_a[m] * s_w[n]``, the
    integer v nearest to ``mu / (s_a[m] * s_w[n])`` (clamped to [1, vmax]).

    Why these: two scale orders give different output bits only when their
    float32 results (each within ~1 float32 ulp of the exact v * s_a * s_w)
    straddle an output-dtype midpoint, so v must put the exact product within
    about an ulp of one. Doubling v scales the product exactly and cannot
    create a new straddle, so only v in the top binade [vmax/2, vmax] adds
    candidates (measured: lower binades found no element the top ones missed).
    float32 output has no final rounding: the orders differ wherever their
    float32 roundings differ, so 256 seeded integers of the top binade are the
    candidates (``g`` required).

    Returns:
        float64 [M, N, C] of integers (float64 is exact here: sa, sb are
        float32, so sa*sb has <= 48 significant bits); C = 2 * 2**p for a
        p-bit mantissa (bf16 256, fp16 2048), 256 for float32.
    """
    c = sa.double().reshape(-1, 1) * sb.double().reshape(1, -1)  # exact
    if out_dtype == torch.float32:
        v = torch.randint(vmax // 2, vmax + 1, tuple(c.shape) + (256,), generator=g)
        return v.to(torch.float64)
    nmid = 2 ** MANT_BITS[out_dtype]
    e = torch.floor(torch.log2(vmax * c))
    i = torch.arange(nmid, dtype=torch.float64)
    cands = []
    for j in (0, 1):  # r binades [2^(e-j), 2^(e-j+1)); nmid midpoints each
        base = torch.pow(2.0, e - j).unsqueeze(-1)
        mu = base * (1 + (i + 0.5) / nmid)
        cands.append(torch.round(mu / c.unsqueeze(-1)))
    return torch.cat(cands, -1).clamp(1, vmax)


def _tie_orders_bits(
    v: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, out_dtype: torch.dtype = torch.bfloat16
) -> list:
    """Output bits (int16 / int32) of the three scale orders on accumulators
    ``v`` (float64 integers [M, N, C], |v| < 2**24 so float32(v) is exact),
    each order as ``reference.epilogue.apply_epilogue`` computes it: separate
    IEEE float32 multiplies, then one RNE to ``out_dtype`` (none for float32)."""
    x = v.to(torch.float32)
    s_a = sa.reshape(-1, 1, 1)
    s_w = sb.reshape(1, -1, 1)
    ys = ((x * s_a) * s_w, (x * s_w) * s_a, x * (s_a * s_w))  # TIE_ORDERS order
    if out_dtype == torch.float32:
        return [y.view(torch.int32) for y in ys]
    # torch's float32 -> bf16/fp16 cast is RNE (c10 round_to_nearest_even), the
    # same bits as round_fp32 on these normal values, and ~20x faster
    return [y.to(out_dtype).view(torch.int16) for y in ys]


def realize_acc(acc: torch.Tensor, block: int = TIE_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 operands whose exact accumulator is ``acc``.

    b [N, K = N*block] is block diagonal: row n holds block-1 weights of 127
    then one 1 in columns [n*block, (n+1)*block), zeros elsewhere, so
    acc[m, n] = 127 * (sum of the block-1 entries of a) + a_last; a splits
    each target into such entries (as evenly as possible).

    Args:
        acc: int64 [M, N], |acc| <= 127 * 127 * (block - 1) + 127 (VMAX for
            the default block).

    Returns:
        ``(a int8 [M, N*block], b int8 [N, N*block])`` with
        ``a.long() @ b.long().T == acc``.

    Raises:
        ValueError: a target out of range.
    """
    m, n = acc.shape
    vmax = 127 * 127 * (block - 1) + 127
    if int(acc.abs().max()) > vmax:
        raise ValueError(f"realize_acc: |acc| up to {int(acc.abs().max())} > {vmax}")
    nbig = block - 1
    s = torch.clamp(torch.round(acc.double() / 127).to(torch.int64), -128 * nbig, 127 * nbig)
    r = acc - 127 * s
    q = torch.div(s, nbig, rounding_mode="floor")
    rem = s - nbig * q  # s = nbig*q + rem, 0 <= rem < nbig
    idx = torch.arange(nbig)
    big = q.unsqueeze(-1) + (idx < rem.unsqueeze(-1)).to(torch.int64)  # [M, N, nbig]
    blocks = torch.cat([big, r.unsqueeze(-1)], -1)  # [M, N, block]
    if int(blocks.min()) < -128 or int(blocks.max()) > 127:
        raise ValueError("realize_acc: a target needs an entry outside int8")
    a = blocks.reshape(m, n * block).to(torch.int8)
    b = torch.zeros((n, n * block), dtype=torch.int8)
    for j in range(n):
        b[j, j * block : (j + 1) * block - 1] = 127
        b[j, (j + 1) * block - 1] = 1
    return a, b


def pick_ties(
    g: torch.Generator, sa: torch.Tensor, sb: torch.Tensor, out_dtype: torch.dtype = torch.bfloat16, vmax: int = VMAX
) -> torch.Tensor:
    """Per element, an accumulator (int64 [M, N], |acc| <= vmax, default VMAX) whose output
    differs between scale orders: among :func:`_tie_targets`, preferring all
    three different, then a_then_w != w_then_a, then fused != one of them;
    ties broken by a seeded draw; random sign (rounding and products are
    sign-symmetric)."""
    m, n = int(sa.numel()), int(sb.numel())
    v = _tie_targets(sa, sb, vmax, out_dtype, g)
    y1, y2, y3 = _tie_orders_bits(v, sa, sb, out_dtype)
    aw = y1 != y2
    fd = (y3 != y1) | (y3 != y2)
    all3 = aw & (y3 != y1) & (y3 != y2)
    score = 4.0 * all3 + 2.0 * aw + 1.0 * fd + torch.rand(v.shape, generator=g, dtype=torch.float64)
    pick = torch.gather(v, -1, score.argmax(-1, keepdim=True)).squeeze(-1).to(torch.int64)
    sign = torch.where(torch.rand((m, n), generator=g) < 0.5, -1, 1)
    return pick * sign
