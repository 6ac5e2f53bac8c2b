"""The fixed synthetic case kinds (``make_case``) and the epilogue-tie search.

Deterministic given the seed (``torch.Generator``); ``meta["source"] ==
"synthetic"``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from reference.operands import GemmOperands

#: Synthetic case kinds, in report order (new kinds go last: the index seeds the generator).
SYNTHETIC_KINDS = ("ordinary", "pow2", "bias", "pow2_bias", "m1", "extreme", "tails", "fp16_out",
                   "epilogue_ties", "column_scales", "scalar_scales")
#: epilogue_ties: K entries per output channel (TIE_BLOCK - 1 weights of 127, one of 1).
TIE_BLOCK = 32
#: Scale orders the epilogue_ties search tells apart (reference.contract).
TIE_ORDERS = ("a_then_w", "w_then_a", "fused")


def _int8(g: torch.Generator, shape) -> torch.Tensor:
    return torch.randint(-128, 128, shape, generator=g, dtype=torch.int16).to(torch.int8)


def _token_scales(g: torch.Generator, m: int) -> torch.Tensor:
    """Per-token scales like dynamic quantization's absmax/127 with absmax in
    [0.5, 8): full float32 mantissas, so scale order matters."""
    absmax = 0.5 + 7.5 * torch.rand(m, generator=g, dtype=torch.float64)
    return (absmax / 127.0).to(torch.float32)


def _channel_scales(g: torch.Generator, n: int) -> torch.Tensor:
    """Per-channel weight scales absmax/127.5 with absmax in [0.02, 0.3)."""
    absmax = 0.02 + 0.28 * torch.rand(n, generator=g, dtype=torch.float64)
    return (absmax / 127.5).to(torch.float32)


def _pow2_channel_scales(g: torch.Generator, n: int) -> torch.Tensor:
    """Power-of-two weight scales 2**-e, e in [7, 12] (like requantized
    per-channel scales snapped to a power of two)."""
    e = torch.randint(7, 13, (n,), generator=g)
    return torch.pow(2.0, -e.to(torch.float64)).to(torch.float32)


def _bias(g: torch.Generator, n: int, dtype: torch.dtype) -> torch.Tensor:
    return (0.5 * torch.randn(n, generator=g, dtype=torch.float32)).to(dtype)


#: Explicit mantissa bits of the output dtypes (bf16 7, fp16 10, fp32 23).
MANT_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}
#: Largest |acc| :func:`realize_acc` can build with blocks of TIE_BLOCK:
#: 127 * 127 * (TIE_BLOCK - 1) + 127 = 500126 (< 2**24: float32(acc) is exact).
VMAX = 127 * 127 * (TIE_BLOCK - 1) + 127


def _tie_targets(sa: torch.Tensor, sb: torch.Tensor, vmax: int,
                 out_dtype: torch.dtype = torch.bfloat16,
                 g: Optional[torch.Generator] = None) -> torch.Tensor:
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


def _tie_orders_bits(v: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
                     out_dtype: torch.dtype = torch.bfloat16) -> list:
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
        b[j, j * block:(j + 1) * block - 1] = 127
        b[j, (j + 1) * block - 1] = 1
    return a, b


def pick_ties(g: torch.Generator, sa: torch.Tensor, sb: torch.Tensor,
              out_dtype: torch.dtype = torch.bfloat16, vmax: int = VMAX) -> torch.Tensor:
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
    score = 4.0 * all3 + 2.0 * aw + 1.0 * fd + torch.rand(v.shape, generator=g,
                                                           dtype=torch.float64)
    pick = torch.gather(v, -1, score.argmax(-1, keepdim=True)).squeeze(-1).to(torch.int64)
    sign = torch.where(torch.rand((m, n), generator=g) < 0.5, -1, 1)
    return pick * sign


def _epilogue_ties(g: torch.Generator, m: int, n: int, out_dtype: torch.dtype = torch.bfloat16):
    """(a, b, scale_a, scale_b) of the ``epilogue_ties`` kind (see make_case):
    real token / channel scales, accumulators from :func:`pick_ties` built by
    :func:`realize_acc` (K = N * TIE_BLOCK, |acc| <= VMAX = 500126 < 2**24:
    the float32 conversion stays exact)."""
    sa, sb = _token_scales(g, m), _channel_scales(g, n)
    acc = pick_ties(g, sa, sb, out_dtype)
    a, b = realize_acc(acc)
    return a, b, sa, sb


def tie_discrimination(ops: GemmOperands, exact: Optional[torch.Tensor] = None) -> dict:
    """How many output elements of ``ops`` tell the scale orders apart.

    Computed with ``reference.epilogue.apply_epilogue`` for each order in
    :data:`TIE_ORDERS` (the case's bias and out_dtype; bias point
    ``fp32_before_round``).

    Returns:
        ``{"elements", "a_then_w!=w_then_a", "a_then_w!=fused",
        "w_then_a!=fused", "any", "all_three"}`` (element counts).
    """
    from reference.accumulate import exact_int_mm
    from reference.bits import bits_of
    from reference.contract import EpilogueContract
    from reference.epilogue import apply_epilogue

    acc = exact if exact is not None else exact_int_mm(ops.a, ops.b)
    bits = {o: bits_of(apply_epilogue(acc, ops.scale_a, ops.scale_b,
                                      EpilogueContract(o, "fp32_before_round"),
                                      bias=ops.bias, out_dtype=ops.out_dtype))
            for o in TIE_ORDERS}
    d_aw = bits["a_then_w"] != bits["w_then_a"]
    d_af = bits["a_then_w"] != bits["fused"]
    d_wf = bits["w_then_a"] != bits["fused"]
    return {"elements": int(acc.numel()), "a_then_w!=w_then_a": int(d_aw.sum()),
            "a_then_w!=fused": int(d_af.sum()), "w_then_a!=fused": int(d_wf.sum()),
            "any": int((d_aw | d_af | d_wf).sum()), "all_three": int((d_aw & d_af & d_wf).sum())}


def make_case(kind: str, seed: int = 0, m: Optional[int] = None, k: Optional[int] = None,
              n: Optional[int] = None, out_dtype: torch.dtype = torch.bfloat16,
              bias: Optional[bool] = None, source: str = "synthetic",
              name: Optional[str] = None) -> GemmOperands:
    """Build one deterministic synthetic case.

    Args:
        kind: one of :data:`SYNTHETIC_KINDS`: ``ordinary`` (random int8, real
            scales), ``pow2`` (power-of-two per-channel scales, scale_mode
            ``pow2``), ``bias`` / ``pow2_bias`` (with an out_dtype bias),
            ``m1`` (one token, decode), ``extreme`` (int8 values only -128 /
            127, row 0 of a and b all -128 so -128 x -128 products appear),
            ``tails`` (M, K, N not multiples of 8), ``fp16_out`` (float16
            output and bias), ``epilogue_ties`` (M = N = 32, K = 32 * N,
            block-diagonal b; every accumulator chosen so that the bf16
            results of the scale orders a_then_w / w_then_a / fused differ
            where possible: about 3/4 of the elements tell a_then_w from
            w_then_a, see :func:`_epilogue_ties`; ``meta["discriminating"]``
            holds :func:`tie_discrimination`; a ``k`` override is ignored),
            ``column_scales`` (scale_a [M,1], scale_b [N,1], the vLLM
            layout) and ``scalar_scales`` (per-tensor 0-d scales): the
            contract admits all three scale layouts, so a kernel must too.
        seed: generator seed (same seed, same bits).
        m, k, n: shape override (defaults depend on kind).
        out_dtype: output dtype (bias has this dtype).
        bias: force bias on/off (default by kind).
        source: ``meta["source"]`` label.
        name: case name (default ``synthetic/<kind>-s<seed>``).

    Returns:
        GemmOperands with a int8 [M,K], b int8 [N,K], scale_a fp32 [M]
        ([M,1] / 0-d for the layout kinds), scale_b fp32 [N] ([N,1] / 0-d),
        bias out_dtype [N] or None.

    Raises:
        ValueError: unknown kind.
    """
    if kind not in SYNTHETIC_KINDS:
        raise ValueError(f"unknown synthetic case kind {kind!r}; known: {SYNTHETIC_KINDS}")
    shapes = {"m1": (1, 96, 40), "extreme": (8, 256, 32), "tails": (5, 37, 23),
              "epilogue_ties": (32, 32 * TIE_BLOCK, 32)}
    dm, dk, dn = shapes.get(kind, (8, 64, 48))
    m, k, n = m or dm, k or dk, n or dn
    if kind == "fp16_out":
        out_dtype = torch.float16
    g = torch.Generator().manual_seed(1000 * seed + SYNTHETIC_KINDS.index(kind))
    if kind == "epilogue_ties":
        a, b, sa, sb = _epilogue_ties(g, m, n)
        bv = _bias(g, n, out_dtype) if bias else None
        ops = GemmOperands(a=a, b=b, scale_a=sa, scale_b=sb, bias=bv, out_dtype=out_dtype,
                           name=name or f"synthetic/{kind}-s{seed}", scale_mode="synthetic",
                           meta={"source": source, "kind": kind, "seed": seed,
                                 "tie_block": TIE_BLOCK})
        ops.meta["discriminating"] = tie_discrimination(ops)
        return ops
    if kind == "extreme":
        a = torch.where(torch.rand((m, k), generator=g) < 0.5, -128, 127).to(torch.int8)
        b = torch.where(torch.rand((n, k), generator=g) < 0.5, -128, 127).to(torch.int8)
        a[0].fill_(-128)
        b[0].fill_(-128)
    else:
        a, b = _int8(g, (m, k)), _int8(g, (n, k))
    sa = _token_scales(g, m)
    pow2 = kind.startswith("pow2")
    sb = _pow2_channel_scales(g, n) if pow2 else _channel_scales(g, n)
    if kind == "column_scales":
        sa, sb = sa.view(-1, 1).clone(), sb.view(-1, 1).clone()
    elif kind == "scalar_scales":
        sa, sb = sa[0].clone(), sb[0].clone()
    if bias is None:
        bias = kind in ("bias", "pow2_bias", "fp16_out")
    bv = _bias(g, n, out_dtype) if bias else None
    return GemmOperands(a=a, b=b, scale_a=sa, scale_b=sb, bias=bv, out_dtype=out_dtype,
                        name=name or f"synthetic/{kind}-s{seed}",
                        scale_mode="pow2" if pow2 else "synthetic",
                        meta={"source": source, "kind": kind, "seed": seed})


def synthetic_cases(seeds: Sequence[int] = (0, 1),
                    kinds: Sequence[str] = SYNTHETIC_KINDS) -> list[GemmOperands]:
    """Every kind in ``kinds`` for every seed in ``seeds`` (kind-major order)."""
    return [make_case(kind, s) for kind in kinds for s in seeds]
