"""Bit-exact emulation of a declared epilogue contract (DESIGN.md 3, 4).

Given the exact accumulator, the per-token and per-channel scales, an
optional bias and an :class:`~reference.contract.EpilogueContract`, produce
the one output a correct kernel with that contract must produce: IEEE 754
binary32 arithmetic (every multiply/add rounded to nearest-even), then RNE
to the output dtype. Each step is a separate float32 op (no FMA contraction),
matching eager kernels and the epilogues described in vLLM's
``cutlass_scaled_mm`` (ScaledEpilogue / ScaledEpilogueBias: the accumulator
converted to float, multiplied by the per-channel then per-token scale, bias
added in float) and vLLM's Triton ``scaled_mm`` (scale_a first, then
scale_b, cast to out_dtype, then ``+ bias``).
"""

from __future__ import annotations

from typing import Optional

import torch

from reference.accumulate import exact_int_mm
from reference.bits import ieee_subnormals, round_fp32
from reference.contract import EpilogueContract
from reference.errors import ContractError, OperandError
from reference.validate import OUT_DTYPES, normalize_scales, validate_operands

_TWO53 = 2**53


def _int64_to_fp32_rne(acc: torch.Tensor) -> torch.Tensor:
    """int64 -> float32 with a single round-to-nearest-even (IEEE 754 5.4.1).

    For |acc| <= 2**53 the widening to float64 is exact, so float64 -> float32
    is the one rounding. Larger values (never produced by an int8 GEMM with
    K < 2**39, but accepted) are rounded on the integers directly: keep the
    top 24 significant bits, round the dropped remainder half-to-even; the
    result q * 2**e is exact in float64 and float32.
    """
    from reference import memo

    a64 = acc.to(torch.int64)
    out = a64.to(torch.float64).to(torch.float32)
    if acc.dtype in (torch.int8, torch.int16, torch.int32, torch.uint8):
        return out  # |acc| <= 2**31 < 2**53: no read-back of the rare-path test needed
    bound = memo.known_bound(acc)
    if bound is not None and bound <= _TWO53:
        return out  # bounded by construction (an int8 GEMM's accumulator): no read-back
    big = (a64 > _TWO53) | (a64 < -_TWO53)
    if not bool(big.any()):
        return out
    vals = a64[big].tolist()
    fixed = []
    for v in vals:  # rare path: exact Python-int rounding
        mag = abs(v)
        e = mag.bit_length() - 24
        q, rem = mag >> e, mag & ((1 << e) - 1)
        half = 1 << (e - 1)
        if rem > half or (rem == half and (q & 1)):
            q += 1
        fixed.append((-1 if v < 0 else 1) * float(q * (1 << e)))
    out[big] = torch.tensor(fixed, dtype=torch.float64).to(torch.float32).to(out.device)
    return out


def acc_to_fp32(acc: torch.Tensor) -> torch.Tensor:
    """Convert an accumulator to float32 as a kernel does (one RNE rounding).

    Args:
        acc: int32 or int64 [M, N].

    Returns:
        float32 [M, N]. Exact while ``|acc| <= 2**24``
        (:data:`reference.accumulate.FP32_EXACT_INT`); beyond that the value
        is rounded to nearest-even, e.g. 2**24 + 1 -> 2**24, 2**24 + 3 ->
        2**24 + 4 (the F7 fp32_inexact_accumulator situation). An int32
        accumulator converts the same way (cvtsi2ss / ``__int2float_rn`` are
        RNE), which is what every kernel's epilogue does.

    Raises:
        OperandError: acc is not an int32/int64 tensor.
    """
    if not isinstance(acc, torch.Tensor) or acc.dtype not in (torch.int32, torch.int64):
        raise OperandError(f"acc must be an int32 or int64 tensor, got {getattr(acc, 'dtype', type(acc).__name__)}")
    return _int64_to_fp32_rne(acc)


def _scale_1d(s, rows: int, name: str) -> torch.Tensor:
    if not isinstance(s, torch.Tensor):
        raise OperandError(f"{name} must be a torch.Tensor, got {type(s).__name__}")
    if s.dtype != torch.float32:
        raise OperandError(f"{name} has dtype {s.dtype}; expected torch.float32")
    return s


def apply_epilogue(
    acc: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    contract: EpilogueContract,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """Emulate a contract's epilogue bit for bit.

    Args:
        acc: int32 or int64 [M, N] accumulator (exact integer sums).
        scale_a: float32 per-token scale [M], [M, 1] or scalar.
        scale_b: float32 per-channel scale [N], [N, 1] or scalar.
        contract: the declared :class:`EpilogueContract`.
        bias: None or [N] tensor of dtype ``out_dtype``.
        out_dtype: torch.bfloat16, torch.float16 or torch.float32.

    Returns:
        Tensor [M, N] of ``out_dtype``. With ``x = acc_to_fp32(acc)`` (one RNE,
        exact below 2**24) and ``*``/``+`` IEEE float32 RNE operations:
          - ``a_then_w``: ``y = (x * s_a[m]) * s_w[n]``
          - ``w_then_a``: ``y = (x * s_w[n]) * s_a[m]``
          - ``fused``:    ``y = x * (s_a[m] * s_w[n])`` (combined scale
            rounded once to float32)
          - bias ``fp32_before_round``: ``out = rne(y + float32(bias[n]))``
          - bias ``after_round``: ``out = rne(float32(rne(y)) + float32(bias[n]))``
            (out_dtype add done as torch does for bf16/fp16: exact widen, one
            float32 add, round again)
          - no bias: ``out = rne(y)``; ``rne`` = :func:`reference.bits.round_fp32`.
        Overflow gives ±inf per IEEE, tiny values keep subnormals (no FTZ).

    Raises:
        OperandError: bad acc / scale / bias dtype or shape, bad out_dtype.
        ContractError: contract is not an EpilogueContract.
    """
    if not isinstance(contract, EpilogueContract):
        raise ContractError(f"contract must be an EpilogueContract, got {type(contract).__name__}")
    if out_dtype not in OUT_DTYPES:
        raise OperandError(f"out_dtype={out_dtype} is not one of torch.bfloat16, torch.float16, torch.float32")
    with ieee_subnormals(acc, scale_a, scale_b, *([] if bias is None else [bias])):
        return _apply(acc, scale_a, scale_b, contract, bias, out_dtype)


def cached_epilogue(
    acc: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    contract: EpilogueContract,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """:func:`apply_epilogue`, memoized inside a ``reference.memo.scope`` on
    the identities of ``acc``, the scales and ``bias`` plus ``contract`` and
    ``out_dtype`` (a pure function of them). The sweep asks for the same
    reference of a layer's accumulator in every check of every cell. The
    result is shared: callers must not write into it. Non-tensor scales are
    never memoized (they have no identity to key on).

    Args / Returns / Raises: as :func:`apply_epilogue`.
    """
    from reference import memo

    if not (
        isinstance(acc, torch.Tensor)
        and isinstance(scale_a, torch.Tensor)
        and isinstance(scale_b, torch.Tensor)
        and (bias is None or isinstance(bias, torch.Tensor))
    ):
        return apply_epilogue(acc, scale_a, scale_b, contract, bias=bias, out_dtype=out_dtype)
    return memo.cached(
        ("epilogue", contract, out_dtype),
        (acc, scale_a, scale_b, bias),
        lambda: apply_epilogue(acc, scale_a, scale_b, contract, bias=bias, out_dtype=out_dtype),
    )


def _apply(acc, scale_a, scale_b, contract, bias, out_dtype) -> torch.Tensor:
    x = acc_to_fp32(acc)
    if x.dim() != 2:
        raise OperandError(f"acc must be 2-D [M,N], got shape {tuple(acc.shape)}")
    m, n = (int(s) for s in x.shape)
    sa, sw = normalize_scales(_scale_1d(scale_a, m, "scale_a"), _scale_1d(scale_b, n, "scale_b"), m, n)
    sa = sa.to(x.device).reshape(m, 1)
    sw = sw.to(x.device).reshape(1, n)
    if contract.scale_order == "a_then_w":
        y = (x * sa) * sw
    elif contract.scale_order == "w_then_a":
        y = (x * sw) * sa
    else:  # fused
        y = x * (sa * sw)
    if bias is None:
        return round_fp32(y, out_dtype, "rne")
    if not isinstance(bias, torch.Tensor) or bias.dtype != out_dtype or tuple(bias.shape) != (n,):
        raise OperandError(
            f"bias must be a [{n}] tensor of dtype {out_dtype}, got "
            f"{getattr(bias, 'dtype', type(bias).__name__)} {tuple(getattr(bias, 'shape', ()))}"
        )
    bf = bias.to(x.device).to(torch.float32).reshape(1, n)  # exact widening
    if contract.bias_point == "fp32_before_round":
        return round_fp32(y + bf, out_dtype, "rne")
    r = round_fp32(y, out_dtype, "rne").to(torch.float32)
    return round_fp32(r + bf, out_dtype, "rne")


def reference_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    contract: EpilogueContract,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """The reference W8A8 GEMM under a declared contract.

    ``validate_operands`` + :func:`reference.accumulate.exact_int_mm` (exact
    int64, no int32 wrap) + :func:`apply_epilogue`.

    Args:
        a: int8 [M, K]; b: int8 [N, K]; scale_a: float32 [M]/[M,1]/scalar;
        scale_b: float32 [N]/[N,1]/scalar; contract; bias: [N] out_dtype or
        None; out_dtype: bf16 / fp16 / fp32.

    Returns:
        Tensor [M, N] of out_dtype on a's device.

    Raises:
        OperandError: see :func:`reference.validate.validate_operands`.
        ContractError: contract is not an EpilogueContract.
    """
    m, _k, n = validate_operands(a, b, scale_a, scale_b, bias, out_dtype)
    sa, sw = normalize_scales(scale_a, scale_b, m, n)
    acc = exact_int_mm(a, b)
    return apply_epilogue(acc, sa, sw, contract, bias=bias, out_dtype=out_dtype)
