"""The nine fault classes of DESIGN.md section 5, as data: the single table of fault
names that reports, predictions and scoring use. Families: ``post-processing`` (the
epilogue after an exact accumulator), ``precondition`` (the accumulator leaves the
range where integer accumulation is exact), ``control`` (no change), ``operand``
(the kernel sees other operands). The wrappers are in :mod:`faults.inject`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from reference.errors import Int8confError


@dataclass(frozen=True)
class FaultClass:
    """One fault class: id ``F1`` .. ``F9``, snake_case name (matrices, reports), family
    (:data:`FAMILIES`) and a one-line description."""

    id: str
    name: str
    family: str
    description: str

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
    ),
    FaultClass(
        "F7",
        "fp32_inexact_accumulator",
        "precondition",
        "an accumulator reaches |acc| >= 2^24, so int32->float32 is no longer exact",
    ),
    FaultClass("F8", "null", "control", "changes nothing; must never be detected"),
    FaultClass(
        "F9",
        "operand_mismatch",
        "operand",
        "the kernel is fed operands other than the reference's (e.g. scales rewritten "
        "without requantizing weights, a stale or transposed tensor)",
    ),
)

FAMILIES = ("post-processing", "precondition", "control", "operand")


def get_fault(key: str) -> FaultClass:
    """Look a fault class up by id (``F3``) or name (``multiplication_order``);
    Int8confError (one line listing the valid ids) otherwise."""
    for f in FAULTS:
        if key in (f.id, f.name):
            return f
    raise Int8confError(f"unknown fault {key!r}; known: {', '.join(f.id + '=' + f.name for f in FAULTS)}")
