"""The fault classes of DESIGN.md sections 5 and 3b, as data: the single table of fault
names that reports, predictions and scoring use. Families: ``post-processing`` (the
epilogue after the accumulator), ``precondition`` (the accumulator leaves the range where
integer accumulation is exact), ``control`` (no change), ``operand`` (the kernel sees
other operands), ``accumulator`` (an FP8 accumulator keeps less than declared), ``block``
(a block-scaled kernel's K-block scale indexing), ``zero-point`` (an asymmetric kernel's
correction). Each class applies to int8 and / or e4m3 kernels and to some of the kernel
kinds :data:`KINDS` (:func:`faults_for`, :func:`not_applicable`). Wrappers: :mod:`faults.inject`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

from conformance.kernels.spec import BLOCK, ZERO_POINT, KernelSpec
from reference.errors import Int8confError

#: Operand dtypes of the kernel contract (``conformance.kernels.spec.OPERANDS``).
OPERANDS = ("int8", "e4m3")
#: Kernel kinds by scales, whatever the operand dtype (:func:`kernel_kind` of ``KernelSpec.kind``): per-token x
#: per-channel scales, block scales, asymmetric activations.
PER_CHANNEL = "per-channel"
KINDS = (PER_CHANNEL, BLOCK, ZERO_POINT)


@dataclass(frozen=True)
class FaultClass:
    """One fault class: id ``F1`` .. ``F15``, snake_case name (matrices, reports), family
    (:data:`FAMILIES`), a one-line description, the kernel ``operands`` and ``kinds`` (:data:`KINDS`)
    it applies to."""

    id: str
    name: str
    family: str
    description: str
    operands: tuple = OPERANDS
    kinds: tuple = KINDS

    def to_dict(self) -> dict:
        return asdict(self)


FAULTS: tuple[FaultClass, ...] = (
    FaultClass("F1", "scale_precision", "post-processing", "a scale is rounded to bf16 before it is applied"),
    FaultClass(
        "F2", "double_rounding", "post-processing", "an intermediate product is rounded to bf16, then rounded again"
    ),
    FaultClass(
        "F3", "multiplication_order", "post-processing", "scales applied in the order opposite to the declared contract"
    ),
    FaultClass(
        "F4", "output_truncation", "post-processing", "final conversion rounds toward zero instead of to nearest-even"
    ),
    FaultClass(
        "F5", "fused_ordering", "post-processing", "combined scale (or bias) fused at a different point than declared"
    ),
    FaultClass(
        "F6",
        "int32_overflow",
        "precondition",
        "an accumulator leaves the int32 range (the case is built so the exact value is known)",
        operands=("int8",),
        kinds=("per-channel",),
    ),
    FaultClass(
        "F7",
        "fp32_inexact_accumulator",
        "precondition",
        "an accumulator reaches |acc| >= 2^24, so int32->float32 is no longer exact",
        operands=("int8",),
        kinds=("per-channel",),
    ),
    FaultClass("F8", "null", "control", "changes nothing; must never be detected"),
    FaultClass(
        "F9",
        "operand_mismatch",
        "operand",
        "the kernel is fed operands other than the reference's (e.g. scales rewritten "
        "without requantizing weights, a stale or transposed tensor)",
    ),
    FaultClass(
        "F10",
        "narrow_accumulator",
        "accumulator",
        "an FP8 accumulator keeps fewer significant bits than its declaration",
        operands=("e4m3",),
    ),
    FaultClass(
        "F11",
        "k_block_scale_shift",
        "block",
        "K-block kb's partial scaled with K-block kb+1's scales (the last with the first)",
        kinds=("block",),
    ),
    FaultClass(
        "F12",
        "tail_block_scale",
        "block",
        "the last, partial K-block scaled with the next activation scale in memory (K % block_k != 0)",
        kinds=("block",),
    ),
    FaultClass(
        "F13",
        "weight_block_index",
        "block",
        "the weight-scale row computed with the activation group size: n // block_k instead of n // block_n",
        kinds=("block",),
    ),
    FaultClass(
        "F14",
        "k_tail_dropped",
        "block",
        "the last, partial K-block's partial dropped (a kernel assuming K % block_k == 0)",
        kinds=("block",),
    ),
    FaultClass(
        "F15",
        "stale_azp_correction",
        "zero-point",
        "the precomputed zero-point correction azp_adj computed for another zero point (azp + 1)",
        operands=("int8",),
        kinds=("zero-point",),
    ),
)

FAMILIES = ("post-processing", "precondition", "control", "operand", "accumulator", "block", "zero-point")

#: The largest block_k whose int8 K-block partial is exact in float32 for any int8 operands: |p| <= bk * 128 * 128
#: <= 2**24 (symmetric quantization, |q| <= 127: bk * 127 * 127 <= 2**24 up to 1040).
MAX_EXACT_BLOCK_K = 2**24 // (128 * 128)

#: Why a fault class does not apply to kernels of an operand dtype (faults/README.md, DESIGN.md 3b).
NOT_APPLICABLE: dict[tuple[str, str], str] = {
    ("F6", "e4m3"): (
        "an e4m3 kernel has no int32 accumulator, and its float32 one cannot leave its range: "
        "|sum| <= 448**2 * K < 2**128 for every K < 2**110"
    ),
    ("F7", "e4m3"): (
        "an e4m3 kernel converts no integer accumulator to float32: it accumulates in float32 from the "
        "first add, where rounding is legal within its declared accumulator (C12 bounds it); keeping less "
        "than declared is F10"
    ),
    ("F10", "int8"): "an int8 kernel's int32 accumulator is exact; it declares no retained precision to fall short of",
    ("F15", "e4m3"): "zero points (azp_adj=) are int8 activations' (reference.asymmetric); an e4m3 kernel takes none",
}

_BLOCK_ONLY = "block-scaled kernels only: a per-token x per-channel kernel has no K-blocks or block scales"
#: Why a fault class does not apply to a kind of kernel (:data:`KINDS`).
NOT_APPLICABLE_KIND: dict[tuple[str, str], str] = {
    **{
        (f, "block"): (
            f"a block kernel's int8 K-block partial |p| <= block_k * 128 * 128 <= 2**24 for block_k <= "
            f"{MAX_EXACT_BLOCK_K} (block_k * 127 * 127 for block_k <= 1040; every field size): it neither leaves int32 "
            f"nor turns float32-inexact; larger block_k is not modelled"
        )
        for f in ("F6", "F7")
    },
    **{
        (f, "zero-point"): (
            "extending K changes colsum(b), so the case's precomputed azp_adj would no longer match the operands "
            "(F15 is the zero-point fault)"
        )
        for f in ("F6", "F7")
    },
    **{(f, k): _BLOCK_ONLY for f in ("F11", "F12", "F13", "F14") for k in ("per-channel", "zero-point")},
    **{
        ("F15", k): "asymmetric-activation kernels only (azp=): this kernel takes no azp_adj"
        for k in ("per-channel", "block")
    },
}


def faults_for(operands: str, kind: str = "per-channel") -> tuple[FaultClass, ...]:
    """The fault classes that apply to ``kind`` kernels of ``operands`` (per-channel ``int8``: F1-F9;
    ``e4m3``: F1-F5, F8-F10; block adds F11-F14 and drops F6/F7; zero-point adds F15 and drops F6/F7),
    in catalogue order; Int8confError for an unknown dtype or kind."""
    if operands not in OPERANDS:
        raise Int8confError(f"operands {operands!r} is not one of {OPERANDS}")
    if kind not in KINDS:
        raise Int8confError(f"kernel kind {kind!r} is not one of {KINDS}")
    return tuple(f for f in FAULTS if operands in f.operands and kind in f.kinds)


def kernel_kind(spec: KernelSpec) -> str:
    """:data:`KINDS` entry of a KernelSpec, read from ``KernelSpec.kind``: ``block``, ``zero-point``, else (per-token
    or fp8: per-token x per-channel scales, either operand dtype) ``per-channel``."""
    return spec.kind if spec.kind in (BLOCK, ZERO_POINT) else PER_CHANNEL


def not_applicable(fault: str, operands: str, kind: str = "per-channel") -> Optional[str]:
    """The one-line reason fault id ``fault`` does not apply to ``kind`` kernels of ``operands``, None when it does."""
    return NOT_APPLICABLE.get((fault, operands)) or NOT_APPLICABLE_KIND.get((fault, kind))


def get_fault(key: str) -> FaultClass:
    """Look a fault class up by id (``F3``) or name (``multiplication_order``);
    Int8confError (one line listing the valid ids) otherwise."""
    for f in FAULTS:
        if key in (f.id, f.name):
            return f
    raise Int8confError(f"unknown fault {key!r}; known: {', '.join(f.id + '=' + f.name for f in FAULTS)}")
