"""Declared epilogue contracts (DESIGN.md section 3).

A W8A8 kernel computes ``Y = rnd((A @ W.T) * s_a * s_w [+ bias])``. Integer
accumulation is exact and order-free while partial sums fit in int32, so two
correct kernels can only differ in the epilogue: the order in which the two
float32 scale multiplications happen, where bias enters, and the final
rounding. A contract names those choices; ``reference.epilogue`` emulates any
contract bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

from reference.errors import ContractError

SCALE_ORDERS = ("a_then_w", "w_then_a", "fused")
BIAS_POINTS = ("fp32_before_round", "after_round")
ROUNDINGS = ("rne",)


@dataclass(frozen=True)
class EpilogueContract:
    """The epilogue a kernel declares.

    Attributes:
        scale_order: ``a_then_w``: ``(float32(acc) * s_a) * s_w``;
            ``w_then_a``: ``(float32(acc) * s_w) * s_a``;
            ``fused``: ``float32(acc) * (s_a * s_w)`` (the combined scale is one
            float32 product, rounded once). Every multiply is IEEE float32 RNE.
        bias_point: ``fp32_before_round``: bias (converted to float32) is added
            to the float32 scaled value, then one RNE rounding to out_dtype;
            ``after_round``: the scaled value is rounded to out_dtype first,
            then bias is added in out_dtype arithmetic (i.e. computed in
            float32 and rounded RNE again, as torch does for bf16 adds).
        rounding: final float32 -> out_dtype conversion; only ``rne``
            (round to nearest, ties to even) is a legal declaration.

    Raises:
        ContractError: on an unknown field value.
    """

    scale_order: str = "a_then_w"
    bias_point: str = "fp32_before_round"
    rounding: str = "rne"

    def __post_init__(self) -> None:
        if self.scale_order not in SCALE_ORDERS:
            raise ContractError(f"scale_order={self.scale_order!r} is not one of {SCALE_ORDERS}")
        if self.bias_point not in BIAS_POINTS:
            raise ContractError(f"bias_point={self.bias_point!r} is not one of {BIAS_POINTS}")
        if self.rounding not in ROUNDINGS:
            raise ContractError(f"rounding={self.rounding!r} is not one of {ROUNDINGS}")

    def to_dict(self) -> dict:
        """Plain dict for JSON reports (built directly: the sweep asks for it
        several times per cell, and ``dataclasses.asdict`` deep-copies)."""
        return {"scale_order": self.scale_order, "bias_point": self.bias_point, "rounding": self.rounding}

    @classmethod
    def from_dict(cls, d: dict) -> "EpilogueContract":
        """Inverse of :meth:`to_dict`; unknown keys raise ContractError."""
        unknown = set(d) - {"scale_order", "bias_point", "rounding"}
        if unknown:
            raise ContractError(f"unknown epilogue contract field(s): {sorted(unknown)}")
        return cls(**d)

    def label(self) -> str:
        """Short human label, e.g. ``a_then_w/bias:fp32_before_round/rne``."""
        return f"{self.scale_order}/bias:{self.bias_point}/{self.rounding}"


# CUTLASS-style epilogues (vLLM's cutlass_scaled_mm ScaledEpilogue: the
# accumulator is multiplied by the per-channel scale, then by the per-token
# scale, bias added in float32 before the one rounding).
CUTLASS_STYLE = EpilogueContract("w_then_a", "fp32_before_round", "rne")
# vLLM-Triton-style scaled_mm: per-token scale first, then per-channel, cast
# to the output dtype, then the bias (already in the output dtype) is added.
TRITON_STYLE = EpilogueContract("a_then_w", "after_round", "rne")
