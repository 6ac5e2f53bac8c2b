"""The fault classes of DESIGN.md sections 5 and 3b, as data: the single table of fault
names that reports, predictions and scoring use. Families: ``post-processing`` (the
epilogue after the accumulator), ``precondition`` (the accumulator leaves the range where
integer accumulation is exact), ``control`` (no change), ``operand`` (the kernel sees
other operands), ``accumulator`` (an FP8 accumulator keeps less than declared). Each
class applies to int8 and / or e4m3 kernels (:func:`faults_for`, :func:`not_applicable`).
The wrappers are in :mod:`faults.inject`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

from reference.errors import Int8confError

#: Operand dtypes of the kernel contract (``conformance.kernels.spec.OPERANDS``).
OPERANDS = ("int8", "e4m3")


@dataclass(frozen=True)
class FaultClass:
    """One fault class: id ``F1`` .. ``F10``, snake_case name (matrices, reports), family
    (:data:`FAMILIES`), a one-line description and the kernel ``operands`` it applies to."""

    id: str
    name: str
    family: str
    description: str
    operands: tuple = OPERANDS

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
    ),
    FaultClass(
        "F7",
        "fp32_inexact_accumulator",
        "precondition",
        "an accumulator reaches |acc| >= 2^24, so int32->float32 is no longer exact",
        operands=("int8",),
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
)

FAMILIES = ("post-processing", "precondition", "control", "operand", "accumulator")

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
}


#: The fault classes of a block-scaled kernel (issue 46), by operand dtype: F1-F5, F8, F9 as for every kernel, F10 for
#: e4m3, the block classes F11-F14 (a class listed here applies once it is in :data:`FAULTS`).
BLOCK_FAULTS: dict[str, tuple[str, ...]] = {
    "int8": ("F1", "F2", "F3", "F4", "F5", "F8", "F9", "F11", "F12", "F13", "F14"),
    "e4m3": ("F1", "F2", "F3", "F4", "F5", "F8", "F9", "F10", "F11", "F12", "F13", "F14"),
}
#: Why a fault class of :data:`FAULTS` does not apply to block-scaled kernels (one line).
NOT_APPLICABLE_BLOCK: dict[str, str] = {
    "F6": "a block-scaled kernel's int32 partial is one K-block's, at most block_k * 2^14 (< 2^31 for block_k <= "
    "131072): no accumulator to push out of int32",
    "F7": "a block-scaled kernel converts each K-block's partial (|p| <= 128 * 2^14 = 2^21 at block_k 128) to float32 "
    "exactly and accumulates in float32 by contract (C8 emulates it)",
}


#: Families whose classes apply only to the kernels they are named for (block-scaled, zero-point), never to
#: per-token x per-channel ones.
KERNEL_KIND_FAMILIES = ("block", "zero-point")


def _check_operands(operands: str) -> None:
    if operands not in OPERANDS:
        raise Int8confError(f"operands {operands!r} is not one of {OPERANDS}")


def faults_for(operands: str, block: bool = False) -> tuple[FaultClass, ...]:
    """The fault classes that apply to kernels of ``operands`` (``int8``: F1-F9; ``e4m3``: F1-F5, F8-F10; ``block``:
    a block-scaled kernel's, :data:`BLOCK_FAULTS`), in catalogue order; Int8confError for an unknown dtype."""
    _check_operands(operands)
    if block:
        return tuple(f for f in FAULTS if f.id in BLOCK_FAULTS[operands])
    return tuple(f for f in FAULTS if operands in f.operands and f.family not in KERNEL_KIND_FAMILIES)


def not_applicable(fault: str, operands: str, block: bool = False) -> Optional[str]:
    """The reason fault id ``fault`` does not apply to ``operands`` kernels (``block``: block-scaled ones), None when
    it does."""
    if block and fault not in BLOCK_FAULTS.get(operands, ()):
        return NOT_APPLICABLE_BLOCK.get(fault) or NOT_APPLICABLE.get((fault, operands)) or "not a block-scaled fault"
    return NOT_APPLICABLE.get((fault, operands))


def get_fault(key: str) -> FaultClass:
    """Look a fault class up by id (``F3``) or name (``multiplication_order``);
    Int8confError (one line listing the valid ids) otherwise."""
    for f in FAULTS:
        if key in (f.id, f.name):
            return f
    raise Int8confError(f"unknown fault {key!r}; known: {', '.join(f.id + '=' + f.name for f in FAULTS)}")
