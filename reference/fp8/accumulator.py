"""The accumulator an FP8 (e4m3) kernel declares (DESIGN.md section 3b).

An e4m3 x e4m3 product is exact (at most 8 significant bits, a multiple of 2**-18, at most 448**2), so an exact
sum exists, as for INT8; tensor cores do not keep it. A kernel therefore declares its accumulator beside its epilogue:

    exact                                   any order gives the exact sum where the operands allow it
    fp32                                    IEEE binary32 adds, RNE, any order ("precise")
    fp32 bits=<B> [truncate|rne] [promote=<N>]
                                            partial sums keep >= B significant bits (truncating or rounding);
                                            every N products the partial sum is added to an fp32 (RNE) total

:func:`parse_accumulator` reads that text (or a mapping of the same keys); a bad text raises a one-line
:class:`~reference.errors.ContractError`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Union

import torch

from reference.errors import ContractError

#: The FP8 operand dtype of the contract; its largest finite magnitude and its smallest subnormal (2**-9).
E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
E4M3_MIN_EXPONENT = -9
#: Every e4m3 x e4m3 product is an integer multiple of 2**-PRODUCT_SHIFT.
PRODUCT_SHIFT = 18
ACCUMULATOR_KINDS = ("exact", "fp32")
ACCUMULATOR_ROUNDINGS = ("rne", "truncate")
FP32_BITS = 24


@dataclass(frozen=True)
class AccumulatorModel:
    """A declared (or measured) FP8 accumulator. ``kind``: ``exact`` | ``fp32``; ``bits``: significant bits a partial
    sum keeps (24 = IEEE binary32); ``rounding``: ``rne`` | ``truncate`` of a partial sum to ``bits``;
    ``promote_every``: products per partial sum before it is added to an fp32 total (None: never)."""

    kind: str = "fp32"
    bits: int = FP32_BITS
    rounding: str = "rne"
    promote_every: Optional[int] = None

    def __post_init__(self) -> None:
        if self.kind not in ACCUMULATOR_KINDS:
            raise ContractError(f"accumulator kind {self.kind!r} is not one of {ACCUMULATOR_KINDS}")
        if not (isinstance(self.bits, int) and 2 <= self.bits <= FP32_BITS):
            raise ContractError(f"accumulator bits={self.bits!r}: expected an integer in [2, {FP32_BITS}]")
        if self.rounding not in ACCUMULATOR_ROUNDINGS:
            raise ContractError(f"accumulator rounding {self.rounding!r} is not one of {ACCUMULATOR_ROUNDINGS}")
        if self.promote_every is not None and not (isinstance(self.promote_every, int) and self.promote_every >= 1):
            raise ContractError(f"accumulator promote={self.promote_every!r}: expected a positive integer")
        if self.kind == "exact" and (self.bits, self.rounding, self.promote_every) != (FP32_BITS, "rne", None):
            raise ContractError("accumulator 'exact' takes no bits, rounding or promote")

    @property
    def precise(self) -> bool:
        """True for ``exact`` and for plain IEEE binary32 accumulation (24 bits, RNE, any promotion)."""
        return self.kind == "exact" or (self.bits == FP32_BITS and self.rounding == "rne")

    def label(self) -> str:
        """The declaration text :func:`parse_accumulator` reads back to this model."""
        if self.kind == "exact":
            return "exact"
        parts = ["fp32"]
        if (self.bits, self.rounding) != (FP32_BITS, "rne"):
            parts += [f"bits={self.bits}", self.rounding]
        if self.promote_every is not None:
            parts.append(f"promote={self.promote_every}")
        return " ".join(parts)

    def to_dict(self) -> dict:
        """JSON-able form (reports, manifests)."""
        return {"kind": self.kind, "bits": self.bits, "rounding": self.rounding, "promote_every": self.promote_every}


def parse_accumulator(decl: Union[str, Mapping, AccumulatorModel]) -> AccumulatorModel:
    """An :class:`AccumulatorModel` from its text (module docstring), a mapping of its fields, or a model.
    ContractError on anything else, an unknown word, or a bad value."""
    if isinstance(decl, AccumulatorModel):
        return decl
    if isinstance(decl, Mapping):
        unknown = set(decl) - {"kind", "bits", "rounding", "promote_every"}
        if unknown:
            raise ContractError(f"accumulator: unknown key(s) {sorted(unknown)}")
        return AccumulatorModel(**dict(decl))
    if not isinstance(decl, str) or not decl.split():
        raise ContractError(f"accumulator must be a text such as 'fp32 bits=14 truncate promote=128', got {decl!r}")
    words = decl.split()
    fields: dict = {"kind": words[0]}
    for w in words[1:]:
        key, _, value = w.partition("=")
        if w in ACCUMULATOR_ROUNDINGS:
            fields["rounding"] = w
        elif key in ("bits", "promote") and value.isdigit():
            fields["bits" if key == "bits" else "promote_every"] = int(value)
        else:
            raise ContractError(
                f"accumulator {decl!r}: cannot read {w!r} (expected bits=<B>, truncate|rne, promote=<N>)"
            )
    if fields["kind"] == "exact" and len(words) > 1:
        raise ContractError(f"accumulator {decl!r}: 'exact' takes no options")
    return AccumulatorModel(**fields)
