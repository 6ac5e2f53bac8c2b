"""Emulated FP8 (e4m3) kernels for the tests: a kernel obeys a given accumulator model exactly.

:func:`emulated_accumulator` sums the products of ``a`` [M, K] and ``b`` [N, K] (float8_e4m3fn) in a given k order,
in int64 units of 2**-18 (exact): each product is added to a partial sum rounded to ``bits`` significant bits
(truncated toward zero or RNE); every ``promote_every`` products the partial sum is added to an fp32 (RNE) total.
``exact``: the int64 sum. The result is the float32 accumulator value. :func:`fp8_kernel` wraps it in a
``scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)`` with the float32 epilogue ``(acc * s_a) * s_w (+ bias)``
rounded once to ``out_dtype``. Valid while every partial sum stays below 2**53 units (K <= 2**17).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from reference.fp8 import E4M3, FP32_BITS, PRODUCT_SHIFT, AccumulatorModel, parse_accumulator
from reference.validate import normalize_scales

OPERAND_SHIFT = PRODUCT_SHIFT // 2  # every e4m3 value is a multiple of 2**-9


def operand_units(x: torch.Tensor) -> torch.Tensor:
    """int64 of an e4m3 tensor in units of 2**-9 (exact)."""
    return (x.to(torch.float64) * 2.0**OPERAND_SHIFT).to(torch.int64)


def round_units(x: torch.Tensor, bits: int, rounding: str) -> torch.Tensor:
    """int64 ``x`` rounded to ``bits`` significant bits: ``truncate`` toward zero or ``rne``."""
    mag = x.abs()
    _, e = torch.frexp(mag.to(torch.float64))  # bit length of |x| (exact below 2**53)
    shift = (e.to(torch.int64) - bits).clamp_min(0)
    q = torch.bitwise_right_shift(mag, shift)
    if rounding == "rne":
        rem = mag - torch.bitwise_left_shift(q, shift)
        half = torch.bitwise_right_shift(torch.bitwise_left_shift(torch.ones_like(shift), shift), 1)
        up = (shift > 0) & ((rem > half) | ((rem == half) & (q % 2 == 1)))
        q = q + up.to(torch.int64)
    return torch.sign(x) * torch.bitwise_left_shift(q, shift)


def emulated_units(a: torch.Tensor, b: torch.Tensor, model, order: Optional[Sequence[int]] = None) -> torch.Tensor:
    """int64 [M, N] accumulator in units of 2**-18 under ``model``, products taken in ``order`` (default k
    increasing); fp32 models give a value with at most 24 significant bits."""
    model = parse_accumulator(model)
    pa, pb = operand_units(a), operand_units(b)
    k = pa.shape[1]
    order = list(range(k)) if order is None else [int(i) for i in order]
    nonzero = ((pa != 0).any(0) & (pb != 0).any(0)).tolist()
    total = torch.zeros(pa.shape[0], pb.shape[0], dtype=torch.int64)
    part = torch.zeros_like(total)
    for i, kk in enumerate(order):
        if nonzero[kk]:
            p = pa[:, kk, None] * pb[None, :, kk]
            if model.kind == "exact":
                total += p
            else:
                part = round_units(part + p, model.bits, model.rounding)
        if model.kind != "exact" and model.promote_every and (i + 1) % model.promote_every == 0:
            total, part = round_units(total + part, FP32_BITS, "rne"), torch.zeros_like(part)
    if model.kind != "exact":
        total = round_units(total + part, FP32_BITS, "rne")
    return total


def emulated_accumulator(a, b, model, order: Optional[Sequence[int]] = None) -> torch.Tensor:
    """float32 [M, N]: :func:`emulated_units` as a value (the exact model rounds once, RNE)."""
    return (emulated_units(a, b, model, order).to(torch.float64) / 2.0**PRODUCT_SHIFT).to(torch.float32)


def fp8_kernel(model, order: Optional[Sequence[int]] = None):
    """``scaled_mm`` of a kernel whose accumulator obeys ``model`` (text or AccumulatorModel); ``.model`` on it."""
    model: AccumulatorModel = parse_accumulator(model)

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
        assert a.dtype == E4M3 and b.dtype == E4M3, "fp8 test kernel: e4m3 operands only"
        acc = emulated_accumulator(a, b, model, order)
        sa, sb = normalize_scales(scale_a, scale_b, a.shape[0], b.shape[0])
        y = acc * sa[:, None] * sb[None, :]
        if bias is not None:
            y = y + bias.to(torch.float32)
        return y.to(out_dtype)

    scaled_mm.model = model
    return scaled_mm
