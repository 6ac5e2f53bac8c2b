"""``ties``: scale-order-discriminating accumulators (``tie_search.pick_ties``) at M = 1..17, 64, 96
(bf16) and 1, 2, 7, 16, 17, 33 (fp16), N = 24, K = 768, real scales only (no fp32: README.md)."""

from __future__ import annotations

import torch

from conformance.cases.common import family_case, generator, token_scales
from conformance.cases.synthetic import real_channel_scales
from conformance.cases.tie_search import pick_ties, realize_acc
from reference.operands import GemmOperands

N_TIES = 24
BF16_M = tuple(range(1, 18)) + (64, 96)
FP16_M = (1, 2, 7, 16, 17, 33)


def tie_case(m: int, out_dtype: torch.dtype = torch.bfloat16, seed: int = 0, n: int = N_TIES) -> GemmOperands:
    """One ``ties`` case: M = m, N = n, K = 32 n (``realize_acc``)."""
    tag = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[out_dtype]
    g = generator("ties", f"M{m}-{tag}", seed)
    sa, sb = token_scales(g, m), real_channel_scales(g, n)
    acc = pick_ties(g, sa, sb, out_dtype)
    a, b = realize_acc(acc)
    return family_case("ties", f"M{m}", "real", out_dtype, a, b, sa, sb, seed=seed, trigger="scale-order ties")


def ties_family(seed: int = 0) -> list[GemmOperands]:
    """``ties``: bf16 at BF16_M, fp16 at FP16_M (25 cases)."""
    return [tie_case(m, torch.bfloat16, seed) for m in BF16_M] + [tie_case(m, torch.float16, seed) for m in FP16_M]
