"""Deliberately wrong asymmetric-activation kernels (``reference.asymmetric``), one per field bug, for C17's tests.

Each declares vLLM's CUTLASS contract and both zero-point forms, computes the int8 GEMM exactly (int64) and differs
from ``cutlass_scaled_mm_azp`` in the correction only: ``azp_wrong_sign`` (``acc + azp * azp_adj``),
``azp_float_after_scale`` (``float32(acc) * s_w - float32(azp * azp_adj) * s_w``: the correction in float after the
scale), ``azp_ignored_per_token`` (``acc - azp_adj`` whatever ``azp``), ``azp_cached_colsum`` (the ``azp_adj`` of the
first call for a weight shape, kept), ``azp_int32_product_overflow`` (``azp * azp_adj`` in int32, which wraps,
subtracted from the int64 accumulator: wrong wherever the product leaves int32 though the corrected value fits),
``azp_bias_first_past_m16`` (past M = 16 with a bias: the scaled accumulator plus the bias, then the scaled correction
subtracted in float; from a new user's trial: the prefill path the cases once missed).
Load one as ``--kernel buggy_azp_kernels:NAME``."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from conformance.kernels.loader import declare
from reference.bits import ieee_subnormals

_AZP = ("per-tensor", "per-token")
#: azp_cached_colsum's cache: (N, K) -> the first azp_adj seen
_CACHE: dict = {}


def _acc(a: Tensor, b: Tensor) -> Tensor:
    return (a.to(torch.float64) @ b.to(torch.float64).T).to(torch.int64)


def _scales(sa: Tensor, sb: Tensor, m: int, n: int) -> tuple[Tensor, Tensor]:
    sa = sa.reshape(-1).expand(m) if sa.numel() == 1 else sa.reshape(m)
    sb = sb.reshape(-1).expand(n) if sb.numel() == 1 else sb.reshape(n)
    return sa.reshape(m, 1), sb.reshape(1, n)


def _correction(azp_adj: Tensor, azp: Optional[Tensor], m: int) -> Tensor:
    adj = azp_adj.reshape(1, -1).to(torch.int64)
    return adj if azp is None else azp.reshape(m, 1).to(torch.int64) * adj


def _epilogue(x: Tensor, sa: Tensor, sb: Tensor, bias, out_dtype) -> Tensor:
    """CUTLASS: ``(float32(x) * s_w) * s_a + bias`` (x int64: one RNE rounding, via float64)."""
    x32 = x.to(torch.float64).to(torch.float32) if not x.is_floating_point() else x
    with ieee_subnormals(x32):
        y = (x32 * sb) * sa
        if bias is not None:
            y = y + bias.to(torch.float32)
        return y.to(out_dtype)


def _wrap32(x: Tensor) -> Tensor:
    return (x + 2**31).remainder(2**32) - 2**31


@declare(contract="cutlass", azp=_AZP, name="azp_wrong_sign")
def azp_wrong_sign(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, azp_adj=None, azp=None):
    m, n = a.shape[0], b.shape[0]
    sa, sb = _scales(scale_a, scale_b, m, n)
    return _epilogue(_wrap32(_acc(a, b) + _correction(azp_adj, azp, m)), sa, sb, bias, out_dtype)


@declare(contract="cutlass", azp=_AZP, name="azp_float_after_scale")
def azp_float_after_scale(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, azp_adj=None, azp=None):
    m, n = a.shape[0], b.shape[0]
    sa, sb = _scales(scale_a, scale_b, m, n)
    f32 = lambda t: t.to(torch.float64).to(torch.float32)  # noqa: E731
    with ieee_subnormals():
        y = f32(_wrap32(_acc(a, b))) * sb - f32(_correction(azp_adj, azp, m)) * sb
        y = y * sa
        if bias is not None:
            y = y + bias.to(torch.float32)
        return y.to(out_dtype)


@declare(contract="cutlass", azp=_AZP, name="azp_ignored_per_token")
def azp_ignored_per_token(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, azp_adj=None, azp=None):
    m, n = a.shape[0], b.shape[0]
    sa, sb = _scales(scale_a, scale_b, m, n)
    return _epilogue(_wrap32(_acc(a, b) - _correction(azp_adj, None, m)), sa, sb, bias, out_dtype)


@declare(contract="cutlass", azp=_AZP, name="azp_cached_colsum")
def azp_cached_colsum(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, azp_adj=None, azp=None):
    m, n = a.shape[0], b.shape[0]
    sa, sb = _scales(scale_a, scale_b, m, n)
    adj = _CACHE.setdefault((n, b.shape[1], azp is None), azp_adj.clone())
    return _epilogue(_wrap32(_acc(a, b) - _correction(adj, azp, m)), sa, sb, bias, out_dtype)


@declare(contract="cutlass", azp=_AZP, name="azp_int32_product_overflow")
def azp_int32_product_overflow(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, azp_adj=None, azp=None):
    m, n = a.shape[0], b.shape[0]
    sa, sb = _scales(scale_a, scale_b, m, n)
    adj = azp_adj.reshape(1, n).to(torch.int32)
    prod = adj if azp is None else azp.reshape(m, 1).to(torch.int32) * adj  # int32: wraps
    return _epilogue(_acc(a, b) - prod.to(torch.int64), sa, sb, bias, out_dtype)


@declare(contract="cutlass", azp=_AZP, name="azp_bias_first_past_m16")
def azp_bias_first_past_m16(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None, azp_adj=None, azp=None):
    m, n = a.shape[0], b.shape[0]
    sa, sb = _scales(scale_a, scale_b, m, n)
    if m <= 16 or bias is None:
        return _epilogue(_wrap32(_acc(a, b) - _correction(azp_adj, azp, m)), sa, sb, bias, out_dtype)
    f32 = lambda t: t.to(torch.float64).to(torch.float32)  # noqa: E731
    with ieee_subnormals():  # a prefill path: the scaled accumulator plus bias, then the scaled correction off
        y = (f32(_wrap32(_acc(a, b))) * sb) * sa + bias.to(torch.float32)
        return (y - (f32(_correction(azp_adj, azp, m)) * sb) * sa).to(out_dtype)


BUGGY_AZP = (
    "azp_bias_first_past_m16",
    "azp_wrong_sign",
    "azp_float_after_scale",
    "azp_ignored_per_token",
    "azp_cached_colsum",
    "azp_int32_product_overflow",
)
