"""The fixed synthetic case kinds (:func:`make_case`), deterministic per seed, ``meta["source"] == "synthetic"``."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from conformance.cases.planting import planted_case
from conformance.cases.tie_search import TIE_BLOCK, pick_ties, realize_acc
from reference.accumulate import exact_int_mm
from reference.bits import bits_of
from reference.contract import EpilogueContract
from reference.epilogue import apply_epilogue
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


def real_token_scales(g: torch.Generator, m: int) -> torch.Tensor:
    """float32 [m] absmax/127, absmax in [0.5, 8): full mantissas."""
    absmax = 0.5 + 7.5 * torch.rand(m, generator=g, dtype=torch.float64)
    return (absmax / 127.0).to(torch.float32)


def real_channel_scales(g: torch.Generator, n: int) -> torch.Tensor:
    """float32 [n] absmax/127.5, absmax in [0.02, 0.3)."""
    absmax = 0.02 + 0.28 * torch.rand(n, generator=g, dtype=torch.float64)
    return (absmax / 127.5).to(torch.float32)


def pow2_channel_scales(g: torch.Generator, n: int) -> torch.Tensor:
    """float32 [n] 2**-e, e in [7, 12]."""
    e = torch.randint(7, 13, (n,), generator=g)
    return torch.pow(2.0, -e.to(torch.float64)).to(torch.float32)


def _bias(g: torch.Generator, n: int, dtype: torch.dtype) -> torch.Tensor:
    return (0.5 * torch.randn(n, generator=g, dtype=torch.float32)).to(dtype)


def _epilogue_ties(g: torch.Generator, m: int, n: int, out_dtype: torch.dtype = torch.bfloat16):
    """(a, b, scale_a, scale_b) of ``epilogue_ties``: real scales, :func:`pick_ties`
    accumulators (|acc| < 2**24) realized with K = N * TIE_BLOCK."""
    sa, sb = real_token_scales(g, m), real_channel_scales(g, n)
    acc = pick_ties(g, sa, sb, out_dtype)
    a, b = realize_acc(acc)
    return a, b, sa, sb


def tie_discrimination(ops: GemmOperands, exact: Optional[torch.Tensor] = None) -> dict:
    """Element counts ``{"elements", "a_then_w!=w_then_a", "a_then_w!=fused",
    "w_then_a!=fused", "any", "all_three"}`` of ``ops``' outputs under
    :data:`TIE_ORDERS` (bias point ``fp32_before_round``)."""
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
    """One deterministic case of ``kind`` (:data:`SYNTHETIC_KINDS`; ValueError otherwise):
    ``ordinary``, ``pow2`` (pow2 weight scales), ``bias`` / ``pow2_bias``, ``m1``,
    ``extreme`` (only -128 / 127, row 0 all -128), ``tails`` (no multiples of 8),
    ``fp16_out``, ``epilogue_ties`` (32 x 32 ties, ``meta["discriminating"]``; ``k``
    ignored), ``column_scales`` ([M,1] / [N,1]), ``scalar_scales`` (0-d). Random
    kinds are planted unless ``plant=False``; ``bias`` overrides the kind's default.
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
        meta = {"source": source, "kind": kind, "seed": seed, "tie_block": TIE_BLOCK}
        ops = GemmOperands(a, b, sa, sb, bv, out_dtype, name or f"synthetic/{kind}-s{seed}", "synthetic", meta)
        ops.meta["discriminating"] = tie_discrimination(ops)
        return ops
    pow2 = kind.startswith("pow2")
    if bias is None:
        bias = kind in ("bias", "pow2_bias", "fp16_out")
    if plant and kind != "extreme":
        scalar = kind == "scalar_scales"
        rot, meta = seed + SYNTHETIC_KINDS.index(kind), {"source": source, "kind": kind, "seed": seed}
        kw = dict(scale_a_tensor=scalar, scale_b_tensor=scalar, rotate=rot, meta=meta)
        case_name = name or f"synthetic/{kind}-s{seed}"
        ops = planted_case(m, k, n, out_dtype, "pow2" if pow2 else "real", bias, seed=seed, name=case_name, **kw)
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
    sa = real_token_scales(g, m)
    sb = pow2_channel_scales(g, n) if pow2 else real_channel_scales(g, n)
    if kind == "column_scales":
        sa, sb = sa.view(-1, 1).clone(), sb.view(-1, 1).clone()
    elif kind == "scalar_scales":
        sa, sb = sa[0].clone(), sb[0].clone()
    bv = _bias(g, n, out_dtype) if bias else None
    name, scale_mode = name or f"synthetic/{kind}-s{seed}", "pow2" if pow2 else "synthetic"
    return GemmOperands(a, b, sa, sb, bv, out_dtype, name, scale_mode, {"source": source, "kind": kind, "seed": seed})


def synthetic_cases(seeds: Sequence[int] = (0, 1), kinds: Sequence[str] = SYNTHETIC_KINDS) -> list[GemmOperands]:
    """Every kind in ``kinds`` for every seed in ``seeds`` (kind-major order)."""
    return [make_case(kind, s) for kind in kinds for s in seeds]
