"""Exact e4m3 arithmetic: every finite e4m3 value is an integer multiple of 2**-9 (``E4M3_FIXED_SHIFT``), every
product of two a multiple of 2**-18 (``PRODUCT_SHIFT``), so a dot product is an int64 fixed-point number."""

from __future__ import annotations

import functools
from typing import Optional

import torch

from reference import memo
from reference.accumulate import exact_int_mm
from reference.contract import EpilogueContract
from reference.epilogue import acc_to_fp32, apply_epilogue
from reference.errors import OperandError
from reference.fp8.accumulator import E4M3, E4M3_MIN_EXPONENT, PRODUCT_SHIFT
from reference.validate import capturing, normalize_scales, validate_operands

#: ``e4m3_fixed(x) = x * 2**E4M3_FIXED_SHIFT`` is an integer with |v| <= 448 * 2**9 < 2**18 for every finite e4m3 x.
E4M3_FIXED_SHIFT = -E4M3_MIN_EXPONENT
#: K-chunk of the float64 GEMM: <= 2**16 products of |v| < 2**17.81 each keep every partial sum below 2**53.
CHUNK_K = 2**16


@functools.lru_cache(maxsize=8)
def _fixed_table(device: str) -> torch.Tensor:
    values = torch.arange(256, dtype=torch.uint8).view(E4M3).to(torch.float64) * 2.0**E4M3_FIXED_SHIFT
    return torch.nan_to_num(values, nan=0.0).to(torch.int64).to(device)


def _nan_count(x: torch.Tensor) -> torch.Tensor:
    return ((x.view(torch.uint8) & 0x7F) == 0x7F).sum()  # 0x7F / 0xFF: e4m3fn's only non-finite encodings


def check_e4m3(x, name: str, dims: str = "") -> None:
    """OperandError (one line) unless ``x`` is a float8_e4m3fn tensor (2-D when ``dims`` names them) with no NaN
    (values not read while a CUDA graph is captured)."""
    if not isinstance(x, torch.Tensor):
        raise OperandError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != E4M3:
        raise OperandError(f"{name} has dtype {x.dtype}; expected torch.float8_e4m3fn")
    if dims and x.dim() != 2:
        raise OperandError(f"{name} must be 2-D [{dims}], got shape {tuple(x.shape)}")
    if capturing(x):  # a CUDA graph being captured: reading values would synchronize (reference.validate)
        return
    n = int(_nan_count(x))
    if n:
        first = tuple(int(i) for i in ((x.view(torch.uint8) & 0x7F) == 0x7F).nonzero()[0].tolist())
        raise OperandError(f"{name} has {n} NaN value(s) (first at {first})")


def e4m3_fixed(x: torch.Tensor) -> torch.Tensor:
    """``x * 2**9`` as int64 (exact, |v| <= 229376), same shape and device; any strides. OperandError: not e4m3, NaN."""
    check_e4m3(x, "x")
    return _fixed_table(str(x.device))[x.view(torch.uint8).to(torch.int64)]


def check_pair(a, b) -> tuple[int, int, int]:
    """``(M, K, N)`` of e4m3 ``a`` [M, K] and ``b`` [N, K] on one device; OperandError otherwise (NaN included)."""
    check_e4m3(a, "a", "M,K")
    check_e4m3(b, "b", "N,K")
    if a.shape[1] != b.shape[1]:
        raise OperandError(f"K mismatch: a is {tuple(a.shape)} [M,K] but b is {tuple(b.shape)} [N,K]")
    if a.device != b.device:
        raise OperandError(f"a is on {a.device} but b is on {b.device}")
    return int(a.shape[0]), int(a.shape[1]), int(b.shape[0])


def fixed_mm(fa: torch.Tensor, fb: torch.Tensor) -> torch.Tensor:
    """Exact ``fa @ fb.T`` -> int64 [M, N] of int64 [M, K] / [N, K] with |v| < 2**18: float64 GEMMs over K-chunks of
    :data:`CHUNK_K` (every partial sum an integer below 2**53, so exact in any order, FMA or not), summed in int64."""
    (m, k), n = fa.shape, fb.shape[0]
    acc = torch.zeros((m, n), dtype=torch.int64, device=fa.device)
    for c in range(0, k, CHUNK_K):
        acc += (fa[:, c : c + CHUNK_K].to(torch.float64) @ fb[:, c : c + CHUNK_K].to(torch.float64).T).to(torch.int64)
    return acc


def exact_fp8_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact ``a @ b.T`` in units of 2**-PRODUCT_SHIFT: int64 [M, N] on a's device.

    a: float8_e4m3fn [M, K]; b: float8_e4m3fn [N, K]; any strides, CPU or CUDA. OperandError: wrong type, dtype or
    rank, K mismatch, different devices, a NaN operand."""
    check_pair(a, b)
    return fixed_mm(e4m3_fixed(a), e4m3_fixed(b))


def _check_fixed(num, shift) -> None:
    if not isinstance(num, torch.Tensor) or num.dtype != torch.int64:
        raise OperandError(f"num must be an int64 tensor, got {getattr(num, 'dtype', type(num).__name__)}")
    if not isinstance(shift, int) or not 0 <= shift <= 126:
        raise OperandError(f"shift={shift!r}: expected an integer in [0, 126]")


def fixed_to_fp32(num: torch.Tensor, shift: int) -> torch.Tensor:
    """``num * 2**-shift`` rounded once (RNE) to float32, same shape and device: one RNE of the int64
    (:func:`reference.epilogue.acc_to_fp32`), then an exact power-of-two scaling (nonzero results >= 2**-126 are
    normal). num: int64 with |num| < 2**63; shift: int in [0, 126]. OperandError otherwise."""
    _check_fixed(num, shift)
    return acc_to_fp32(num) * (2.0**-shift)


def representable_fp32(num: torch.Tensor, shift: int) -> torch.Tensor:
    """Bool tensor: ``num * 2**-shift`` is exactly a float32 (its odd part has <= 24 bits). Arguments as
    :func:`fixed_to_fp32`."""
    _check_fixed(num, shift)
    mag = num.abs()
    low = torch.where(mag == 0, torch.ones_like(mag), mag & (-mag))
    return torch.div(mag, low, rounding_mode="floor") < 2**24


def exact_sum_fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The exact ``a @ b.T`` rounded once (RNE) to float32 [M, N]; arguments and errors as :func:`exact_fp8_mm`."""
    return fixed_to_fp32(exact_fp8_mm(a, b), PRODUCT_SHIFT)


def exact_accumulator(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The exact accumulator of a ``scaled_mm`` case as the epilogue takes it, on a's device: int64 [M, N]
    (``reference.accumulate.exact_int_mm``) for int8 operands, float32 [M, N] (:func:`exact_sum_fp32`: the exact sum
    rounded once) for e4m3 ones; memoized inside a ``reference.memo`` scope. OperandError as those functions."""
    if isinstance(a, torch.Tensor) and a.dtype == E4M3:
        return memo.cached("exact_fp8", (a, b), lambda: exact_sum_fp32(a, b))
    return exact_int_mm(a, b)


def _lowest_bit(v: torch.Tensor) -> torch.Tensor:
    """int64 lowest set bit of each |v| (0 for 0)."""
    return v.abs() & (-v.abs())


def exact_at_bits(a: torch.Tensor, b: torch.Tensor, bits: int) -> torch.Tensor:
    """bool [M, N]: every partial sum of element (m, n), in any order, grouping or split, is a multiple of ``u`` with
    fewer than 2**bits units, so it is exact in a partial sum of ``bits`` significant bits and in float32 (the lemma
    of ``conformance.cases.fp8``): ``sum_k |a b| < 2**bits * u`` with ``u`` = the lowest set bit of row m's nonzero
    ``a`` values times that of row n's ``b`` (<= every product's own; 1 where a row is all zero). Arguments and
    errors as :func:`exact_fp8_mm`; ``bits`` in [1, 24]."""
    check_pair(a, b)
    fa, fb = e4m3_fixed(a), e4m3_fixed(b)
    big = torch.full((), 2**62, dtype=torch.int64, device=fa.device)

    def row_lsb(f: torch.Tensor) -> torch.Tensor:
        low = torch.where(f != 0, _lowest_bit(f), big).amin(dim=1)
        return torch.where(low == big, torch.ones_like(low), low)

    u = row_lsb(fa)[:, None] * row_lsb(fb)[None, :]
    return fixed_mm(fa.abs(), fb.abs()) < u * 2**bits


def reference_fp8_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    contract: EpilogueContract,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """The reference FP8 W8A8 GEMM: ``validate_operands(..., operands="e4m3")`` (OperandError), the exact sum rounded
    once to float32 (:func:`exact_sum_fp32`), then ``reference.epilogue.apply_epilogue`` under ``contract`` ->
    [M, N] ``out_dtype`` on a's device. a: e4m3 [M, K]; b: e4m3 [N, K]; scales and bias as ``apply_epilogue``."""
    m, _k, n = validate_operands(a, b, scale_a, scale_b, bias, out_dtype, operands="e4m3")
    sa, sw = normalize_scales(scale_a, scale_b, m, n)
    return apply_epilogue(exact_sum_fp32(a, b), sa, sw, contract, bias=bias, out_dtype=out_dtype)
