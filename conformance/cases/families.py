"""The trigger-condition families of the default suite (README.md here).

:data:`FAMILIES`: name -> ``(builder(seed) -> cases, what it reaches)``; :func:`family_cases`
concatenates them in that order.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional, Sequence

from conformance.cases.accumulator import int32_overflow_family, large_acc_family, partial_sums_family
from conformance.cases.alignment import extreme_pairs_family, k_residues_family, m_n_edges_family
from conformance.cases.covering import covering_family
from conformance.cases.dispatch import dispatch_family
from conformance.cases.large_shapes import large_shapes_family
from conformance.cases.layouts import layouts_family
from conformance.cases.outputs import (
    bias_cancel_family,
    negative_scales_family,
    overflow_inf_family,
    signed_zero_family,
    subnormal_family,
    subnormal_scales_family,
    zero_scales_family,
)
from conformance.cases.regimes import regimes_family
from conformance.cases.ties import ties_family
from reference.operands import GemmOperands

#: name -> (builder(seed) -> cases, the trigger condition it reaches)
FAMILIES: dict[str, tuple[Callable[[int], list], str]] = {
    "partial_sums": (partial_sums_family, "partial sums >= 2^24 (both K directions) with small final |acc|"),
    "large_acc": (large_acc_family, "final |acc| >= 2^24 (float32(acc) inexact)"),
    "int32_overflow": (int32_overflow_family, "|acc| > 2^31 (K = 131073, all -128)"),
    "subnormal": (subnormal_family, "subnormal outputs in bf16 / fp16 / fp32"),
    "subnormal_scales": (
        subnormal_scales_family,
        "float32-subnormal per-channel weight or per-token scales (M = 1), normal outputs",
    ),
    "overflow_inf": (overflow_inf_family, "+-inf outputs and the rounding boundary to inf"),
    "signed_zero": (signed_zero_family, "-0 and +0 outputs"),
    "negative_scales": (negative_scales_family, "negative per-token and per-channel scales"),
    "zero_scales": (zero_scales_family, "zero scales (0 and -0) and all-zero rows"),
    "bias_cancel": (bias_cancel_family, "bias near cancellation"),
    "extreme_pairs": (extreme_pairs_family, "adjacent (-128)*(-128) products at every alignment mod 32"),
    "k_residues": (k_residues_family, "K at every residue mod 8..128 (K = 128..255, 1..7)"),
    "m_n_edges": (m_n_edges_family, "M = 1..17, N and K around tile edges, (17, 16, 16)"),
    "ties": (ties_family, "scale-order ties at M = 1..17, 64, 96"),
    "layouts": (layouts_family, "padded a, transposed / padded b, strided scales and bias"),
    "large_shapes": (
        large_shapes_family,
        "size-dependent paths: scale-order ties at M = 128..513, N > 256 with a "
        "partial last tile and bias, split-K shapes (K = 8195, M <= 16) with "
        "partial sums >= 2^25 and an odd small acc",
    ),
    "dispatch": (
        dispatch_family,
        "epilogue discriminators where kernels switch paths: scale-order ties at "
        "M = 18..127, every |acc| < 2^16 or up to 10^6, with a zero bias, negative or "
        "per-tensor scales, in float32 output; bias near cancellation at K = 2048..8195",
    ),
    "regimes": (
        regimes_family,
        "the trigger map: both sides of every M / N / K boundary a kernel may branch on "
        "(2^k +- 1 up to 2^17 + 1, tile multiples, 151,936, large-K residues, M*N*K "
        "past 2^28 and 2^30, outputs M*N past 2^22 and 2^24, multi-tile grids), every layout, planted "
        "discriminators",
    ),
    "covering": (
        covering_family,
        "a covering array over the declared attribute space (conformance.cases.covering): every legal triple of "
        "shape regime, operand layout, scale form, out dtype and bias, every legal pair of the rest (scale "
        "magnitude class, bias value class, leading planted kind), planted",
    ),
}


#: slices the regimes and covering families are built in by :func:`family_builders` (their cases dominate the build)
REGIME_PARTS = 16
COVERING_PARTS = 8


def family_builders(seed: int = 0) -> list[Callable[[], list]]:
    """Zero-argument builders whose results, concatenated in order, are :func:`family_cases` ``(seed=seed)``: one per
    family, the regimes family in :data:`REGIME_PARTS` slices (picklable: built in worker processes)."""
    sliced = {"regimes": (regimes_family, REGIME_PARTS), "covering": (covering_family, COVERING_PARTS)}
    out: list[Callable[[], list]] = []
    for name in FAMILIES:
        if name in sliced:
            build, parts = sliced[name]
            out += [functools.partial(build, seed, part=(j, parts)) for j in range(parts)]
        else:
            out.append(functools.partial(FAMILIES[name][0], seed))
    return out


def family_cases(names: Optional[Sequence[str]] = None, seed: int = 0) -> list[GemmOperands]:
    """Cases of the families ``names`` (default: all, in order); ValueError for an unknown name."""
    names = list(FAMILIES) if names is None else list(names)
    bad = [x for x in names if x not in FAMILIES]
    if bad:
        raise ValueError(f"unknown case families {bad}; known: {list(FAMILIES)}")
    out: list[GemmOperands] = []
    for name in names:
        out += FAMILIES[name][0](seed)
    return out
