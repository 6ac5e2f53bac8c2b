"""The scale-order tie search (:func:`pick_ties`, :func:`pick_fp32_ties`) and
:func:`realize_acc`, int8 operands with a given exact accumulator."""

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
    """float64 [M, N, C] candidates in [1, vmax]: per rounding midpoint mu of ``out_dtype``
    in the top two binades of ``vmax * s_a * s_w``, the integer nearest ``mu / (s_a * s_w)``
    (orders differ only where results straddle a midpoint); float32: 256 seeded integers."""
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


def tie_orders_bits(
    v: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, out_dtype: torch.dtype = torch.bfloat16
) -> list:
    """Output bits (int16 / int32) of the three scale orders on ``v`` (float64 integers
    [M, N, C], |v| < 2**24), as ``reference.epilogue.apply_epilogue`` computes them."""
    x = v.to(torch.float32)
    s_a = sa.reshape(-1, 1, 1)
    s_w = sb.reshape(1, -1, 1)
    ys = ((x * s_a) * s_w, (x * s_w) * s_a, x * (s_a * s_w))  # TIE_ORDERS order
    if out_dtype == torch.float32:
        return [y.view(torch.int32) for y in ys]
    # torch's float32 -> bf16/fp16 cast is RNE: round_fp32's bits on these normal values
    return [y.to(out_dtype).view(torch.int16) for y in ys]


def realize_acc(acc: torch.Tensor, block: int = TIE_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a int8 [M, N*block], b int8 [N, N*block])`` with ``a @ b.T == acc`` (int64
    [M, N], |acc| <= 127 * 127 * (block - 1) + 127, else ValueError): ``b`` block
    diagonal (block - 1 weights of 127, then a 1), ``a`` splits each target evenly."""
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
    """int64 [M, N], |acc| <= vmax: per element the :func:`_tie_targets` candidate
    whose output best tells the scale orders apart (all three, then a_then_w vs
    w_then_a, then fused; seeded tie-break), with a random sign."""
    m, n = int(sa.numel()), int(sb.numel())
    v = _tie_targets(sa, sb, vmax, out_dtype, g)
    y1, y2, y3 = tie_orders_bits(v, sa, sb, out_dtype)
    aw = y1 != y2
    fd = (y3 != y1) | (y3 != y2)
    all3 = aw & (y3 != y1) & (y3 != y2)
    score = 4.0 * all3 + 2.0 * aw + 1.0 * fd + torch.rand(v.shape, generator=g, dtype=torch.float64)
    pick = torch.gather(v, -1, score.argmax(-1, keepdim=True)).squeeze(-1).to(torch.int64)
    sign = torch.where(torch.rand((m, n), generator=g) < 0.5, -1, 1)
    return pick * sign


def pick_fp32_ties(g: torch.Generator, sa: torch.Tensor, sb: torch.Tensor, vmax: int = VMAX) -> torch.Tensor:
    """int64 [M, N]: float32-output ties, every order within one float32 spacing of
    ``a_then_w`` (C6's reference), preferring different bits; 0 where none; random sign."""
    v = _tie_targets(sa, sb, vmax, torch.float32, g)
    y1, y2, y3 = (y.to(torch.int64) for y in tie_orders_bits(v, sa, sb, torch.float32))
    d2, d3 = (y2 - y1).abs(), (y3 - y1).abs()  # positive finite floats: bits order like values
    ok = (d2 <= 1) & (d3 <= 1)
    score = torch.where(
        ok, 2.0 * (d2 > 0) + 1.0 * (d3 > 0) + torch.rand(v.shape, generator=g, dtype=torch.float64), -1.0
    )
    pick = torch.gather(v, -1, score.argmax(-1, keepdim=True)).squeeze(-1).to(torch.int64)
    pick = torch.where(ok.any(-1), pick, 0)
    return pick * torch.where(torch.rand(pick.shape, generator=g) < 0.5, -1, 1)
