"""The FP8 (e4m3) side of the kernel contract (DESIGN.md section 3b).

:mod:`.accumulator`: the accumulator a kernel declares (:class:`AccumulatorModel`, :func:`parse_accumulator`).
:mod:`.exact`: exact sums in units of 2**-PRODUCT_SHIFT (:func:`e4m3_fixed`, :func:`exact_fp8_mm`,
:func:`exact_sum_fp32`, :func:`exact_accumulator`, :func:`exact_at_bits`, :func:`reference_fp8_scaled_mm`). :mod:`.emulate`: what a declared accumulator returns (:func:`emulate_accumulation`) and its
worst case in any order (:func:`accumulation_bound`). :mod:`.quantize`: the field's FP8 W8A8 quantizers."""

from reference.fp8.accumulator import (
    ACCUMULATOR_KINDS,
    ACCUMULATOR_ROUNDINGS,
    E4M3,
    E4M3_MAX,
    E4M3_MIN_EXPONENT,
    FP32_BITS,
    PRODUCT_SHIFT,
    AccumulatorModel,
    parse_accumulator,
)
from reference.fp8.emulate import EMULATE_MAX_K, accumulation_bound, emulate_accumulation, unit_roundoff
from reference.fp8.exact import (
    E4M3_FIXED_SHIFT,
    check_e4m3,
    e4m3_fixed,
    exact_accumulator,
    exact_at_bits,
    exact_fp8_mm,
    exact_sum_fp32,
    fixed_to_fp32,
    reference_fp8_scaled_mm,
    representable_fp32,
)
from reference.fp8.quantize import (
    ACTIVATION_RULES,
    MIN_SCALING_FACTOR,
    quantize_activation_fp8_per_tensor,
    quantize_activation_fp8_per_token,
    quantize_weight_fp8_per_channel,
    to_e4m3_saturated,
)

__all__ = [
    "ACCUMULATOR_KINDS",
    "ACCUMULATOR_ROUNDINGS",
    "ACTIVATION_RULES",
    "E4M3",
    "E4M3_FIXED_SHIFT",
    "E4M3_MAX",
    "E4M3_MIN_EXPONENT",
    "EMULATE_MAX_K",
    "FP32_BITS",
    "MIN_SCALING_FACTOR",
    "PRODUCT_SHIFT",
    "AccumulatorModel",
    "accumulation_bound",
    "check_e4m3",
    "e4m3_fixed",
    "emulate_accumulation",
    "exact_accumulator",
    "exact_at_bits",
    "exact_fp8_mm",
    "exact_sum_fp32",
    "fixed_to_fp32",
    "parse_accumulator",
    "quantize_activation_fp8_per_tensor",
    "quantize_activation_fp8_per_token",
    "quantize_weight_fp8_per_channel",
    "reference_fp8_scaled_mm",
    "representable_fp32",
    "to_e4m3_saturated",
    "unit_roundoff",
]
