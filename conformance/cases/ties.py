"""``ties``: epilogue-discriminating cases at every M from 1 to 17 and at large M.

Accumulators are chosen per element (``conformance.cases.synthetic.pick_ties``)
so that the output bits of the scale orders a_then_w / w_then_a / fused
differ where possible, with N = 24 (K = 768) and real scales (under
power-of-two weight scales all orders agree, so the family has no pow2
mode). bf16 at every M in 1..17 plus M = 64 and 96; fp16 at M = 1, 2, 7,
16, 17, 33. No float32 output: without a final rounding two legal orders
differ by up to two float32 spacings (each rounds twice), which C6's one
spacing does not allow, so real-scale float32 cases would fail correct
kernels (scale-order bugs show in bf16 and fp16 output). A kernel that takes another scale
order (or epilogue) only at one of these M -- a decode path at M = 1, a
small-M split -- is caught by C8 at that M; the same accumulators at deep K,
wide N, the M between 17 and 128 and small |acc| are family ``dispatch``
(``conformance.cases.dispatch``), at M >= 128 ``large_shapes``.
"""

from __future__ import annotations

import torch

from conformance.cases._common import family_case, generator, token_scales
from conformance.cases.synthetic import _channel_scales
from conformance.cases.tie_search import pick_ties, realize_acc
from reference.operands import GemmOperands

N_TIES = 24
BF16_M = tuple(range(1, 18)) + (64, 96)
FP16_M = (1, 2, 7, 16, 17, 33)


def tie_case(m: int, out_dtype: torch.dtype = torch.bfloat16, seed: int = 0, n: int = N_TIES) -> GemmOperands:
    """One ``ties`` case: M = m, N = n, K = 32 n (``realize_acc``)."""
    tag = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[out_dtype]
    g = generator("ties", f"M{m}-{tag}", seed)
    sa, sb = token_scales(g, m), _channel_scales(g, n)
    acc = pick_ties(g, sa, sb, out_dtype)
    a, b = realize_acc(acc)
    return family_case("ties", f"M{m}", "real", out_dtype, a, b, sa, sb, seed=seed, trigger="scale-order ties")


def ties_family(seed: int = 0) -> list[GemmOperands]:
    """``ties``: bf16 at BF16_M, fp16 at FP16_M (25 cases)."""
    return [tie_case(m, torch.bfloat16, seed) for m in BF16_M] + [tie_case(m, torch.float16, seed) for m in FP16_M]
