"""The nine fault classes of DESIGN.md section 5, as data.

The single table of fault names: reports, predictions and scoring take names
from here. The injection wrappers are ``faults.inject`` (``inject``,
``prepare_case``) with one module per family: ``faults.postprocessing``
(F1-F5), ``faults.precondition`` (F6, F7), ``faults.operand`` (F9); F8 goes
through the same wrapper and changes nothing.

Families: ``post-processing`` (the epilogue after an exact accumulator),
``precondition`` (the accumulator itself leaves the range where integer
accumulation is exact and order-free), ``control`` (no change) and
``operand`` (the kernel sees operands other than the reference's).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from reference.errors import Int8confError


@dataclass(frozen=True)
class FaultClass:
    """One fault class.

    Attributes:
        id: ``F1`` .. ``F9``.
        name: snake_case name used in prediction matrices and reports.
        family: ``post-processing`` | ``precondition`` | ``control`` | ``operand``.
        description: one line saying what the fault does.
    """

    id: str
    name: str
    family: str
    description: str

    def to_dict(self) -> dict:
        """Plain dict for JSON reports."""
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
    """Look a fault class up by id (``F3``) or name (``multiplication_order``).

    Raises:
        Int8confError: unknown id or name (one line listing the valid ids).
    """
    for f in FAULTS:
        if key in (f.id, f.name):
            return f
    raise Int8confError(f"unknown fault {key!r}; known: {', '.join(f.id + '=' + f.name for f in FAULTS)}")
