"""The fixed synthetic case kinds (``make_case``) and the epilogue-tie search.

Deterministic given the seed (``torch.Generator``); ``meta["source"] ==
"synthetic"``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from conformance.cases.planting import planted_case
from conformance.cases.tie_search import TIE_BLOCK, pick_ties, realize_acc
from reference.operands import GemmOperands

#: Synthetic case kinds, in report order (new kinds go last: the index seeds the generator).
SYNTHETIC_KINDS = (
    "ordinary",
    "pow2",
    "bias",
    "pow2_bias",
    "m1",
    "extreme",
    "tails",
    "fp16_out",
    "epilogue_ties",
    "column_scales",
    "scalar_scales",
)
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
    bits = {
        o: bits_of(
            apply_epilogue(
                acc,
                ops.scale_a,
                ops.scale_b,
                EpilogueContract(o, "fp32_before_round"),
                bias=ops.bias,
                out_dtype=ops.out_dtype,
            )
        )
        for o in TIE_ORDERS
    }
    d_aw = bits["a_then_w"] != bits["w_then_a"]
    d_af = bits["a_then_w"] != bits["fused"]
    d_wf = bits["w_then_a"] != bits["fused"]
    return {
        "elements": int(acc.numel()),
        "a_then_w!=w_then_a": int(d_aw.sum()),
        "a_then_w!=fused": int(d_af.sum()),
        "w_then_a!=fused": int(d_wf.sum()),
        "any": int((d_aw | d_af | d_wf).sum()),
        "all_three": int((d_aw & d_af & d_wf).sum()),
    }


def make_case(
    kind: str,
    seed: int = 0,
    m: Optional[int] = None,
    k: Optional[int] = None,
    n: Optional[int] = None,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Optional[bool] = None,
    source: str = "synthetic",
    name: Optional[str] = None,
    plant: bool = True,
) -> GemmOperands:
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
        plant: random kinds carry planted discriminators
            (``conformance.cases.planting.planted_case``; ``meta["planted"]``);
            False: plain random operands.

    Returns:
        GemmOperands with a int8 [M,K], b int8 [N,K], scale_a fp32 [M]
        ([M,1] / 0-d for the layout kinds), scale_b fp32 [N] ([N,1] / 0-d),
        bias out_dtype [N] or None.

    Raises:
        ValueError: unknown kind.
    """
    if kind not in SYNTHETIC_KINDS:
        raise ValueError(f"unknown synthetic case kind {kind!r}; known: {SYNTHETIC_KINDS}")
    shapes = {
        "m1": (1, 96, 40),
        "extreme": (8, 256, 32),
        "tails": (5, 37, 23),
        "epilogue_ties": (32, 32 * TIE_BLOCK, 32),
    }
    dm, dk, dn = shapes.get(kind, (8, 64, 48))
    m, k, n = m or dm, k or dk, n or dn
    if kind == "fp16_out":
        out_dtype = torch.float16
    g = torch.Generator().manual_seed(1000 * seed + SYNTHETIC_KINDS.index(kind))
    if kind == "epilogue_ties":
        a, b, sa, sb = _epilogue_ties(g, m, n)
        bv = _bias(g, n, out_dtype) if bias else None
        ops = GemmOperands(
            a=a,
            b=b,
            scale_a=sa,
            scale_b=sb,
            bias=bv,
            out_dtype=out_dtype,
            name=name or f"synthetic/{kind}-s{seed}",
            scale_mode="synthetic",
            meta={"source": source, "kind": kind, "seed": seed, "tie_block": TIE_BLOCK},
        )
        ops.meta["discriminating"] = tie_discrimination(ops)
        return ops
    pow2 = kind.startswith("pow2")
    if bias is None:
        bias = kind in ("bias", "pow2_bias", "fp16_out")
    if plant and kind != "extreme":
        scalar = kind == "scalar_scales"
        ops = planted_case(
            m,
            k,
            n,
            out_dtype,
            "pow2" if pow2 else "real",
            bias,
            seed=seed,
            name=name or f"synthetic/{kind}-s{seed}",
            scale_a_tensor=scalar,
            scale_b_tensor=scalar,
            rotate=seed + SYNTHETIC_KINDS.index(kind),
            meta={"source": source, "kind": kind, "seed": seed},
        )
        if kind == "column_scales":
            ops.scale_a, ops.scale_b = ops.scale_a.view(-1, 1).clone(), ops.scale_b.view(-1, 1).clone()
        elif scalar:
            ops.scale_a, ops.scale_b = ops.scale_a[0].clone(), ops.scale_b[0].clone()
        return ops
    if kind == "extreme":
        a = torch.where(torch.rand((m, k), generator=g) < 0.5, -128, 127).to(torch.int8)
        b = torch.where(torch.rand((n, k), generator=g) < 0.5, -128, 127).to(torch.int8)
        a[0].fill_(-128)
        b[0].fill_(-128)
    else:
        a, b = _int8(g, (m, k)), _int8(g, (n, k))
    sa = _token_scales(g, m)
    sb = _pow2_channel_scales(g, n) if pow2 else _channel_scales(g, n)
    if kind == "column_scales":
        sa, sb = sa.view(-1, 1).clone(), sb.view(-1, 1).clone()
    elif kind == "scalar_scales":
        sa, sb = sa[0].clone(), sb[0].clone()
    bv = _bias(g, n, out_dtype) if bias else None
    return GemmOperands(
        a=a,
        b=b,
        scale_a=sa,
        scale_b=sb,
        bias=bv,
        out_dtype=out_dtype,
        name=name or f"synthetic/{kind}-s{seed}",
        scale_mode="pow2" if pow2 else "synthetic",
        meta={"source": source, "kind": kind, "seed": seed},
    )


def synthetic_cases(seeds: Sequence[int] = (0, 1), kinds: Sequence[str] = SYNTHETIC_KINDS) -> list[GemmOperands]:
    """Every kind in ``kinds`` for every seed in ``seeds`` (kind-major order)."""
    return [make_case(kind, s) for kind in kinds for s in seeds]
