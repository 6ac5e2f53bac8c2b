"""The one epilogue evaluator (DESIGN.md 3, 4): exact accumulator + scales + bias + a step list -> the output bits.

IEEE 754 binary32 arithmetic, every operation a separate RNE-rounded float32 op (no FMA contraction unless a step says
``fma``), then RNE to the output dtype: what eager kernels, vLLM's ``cutlass_scaled_mm`` and its Triton ``scaled_mm``
do. :func:`apply_epilogue` / :func:`reference_scaled_mm` evaluate a standard contract's step list."""

from __future__ import annotations

import ast
import functools
from typing import Optional

import torch

from reference import memo
from reference.accumulate import exact_int_mm
from reference.bits import fma_fp32, ieee_subnormals, round_fp32
from reference.contract import DTYPES, EpilogueContract, parse_steps
from reference.errors import ContractError, OperandError
from reference.validate import OUT_DTYPES, normalize_scales, validate_operands

_TWO53 = 2**53
_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _int64_to_fp32_rne(acc: torch.Tensor) -> torch.Tensor:
    """int64 -> float32 with one RNE rounding: via float64 (exact for ``|acc| <= 2**53``); larger values are rounded on
    the Python integers (top 24 significant bits, remainder half-to-even)."""
    a64 = acc.to(torch.int64)
    out = a64.to(torch.float64).to(torch.float32)
    if acc.dtype in (torch.int8, torch.int16, torch.int32, torch.uint8):
        return out  # |acc| <= 2**31 < 2**53
    bound = memo.known_bound(acc)
    if bound is not None and bound <= _TWO53:
        return out  # bounded by construction: no read-back
    big = (a64 > _TWO53) | (a64 < -_TWO53)
    if not bool(big.any()):
        return out
    fixed = []
    for v in a64[big].tolist():
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
    """int32/int64 [M, N] accumulator -> float32 with one RNE rounding, as ``cvtsi2ss`` / ``__int2float_rn`` do; a
    float32 accumulator (an FP8 kernel's, DESIGN.md 3b) is returned as is.

    Exact while ``|acc| <= 2**24`` (:data:`reference.accumulate.FP32_EXACT_INT`); beyond, 2**24 + 1 -> 2**24 and 2**24 +
    3 -> 2**24 + 4 (the F7 fp32_inexact_accumulator situation). OperandError for any other input."""
    if isinstance(acc, torch.Tensor) and acc.dtype == torch.float32:
        return acc
    if not isinstance(acc, torch.Tensor) or acc.dtype not in (torch.int32, torch.int64):
        got = getattr(acc, "dtype", type(acc).__name__)
        raise OperandError(f"acc must be an int32 or int64 tensor (or a float32 FP8 accumulator), got {got}")
    return _int64_to_fp32_rne(acc)


@functools.lru_cache(maxsize=512)
def _operand_tree(expr: str) -> ast.AST:
    return ast.parse(expr, mode="eval").body


def _round_to(x32: torch.Tensor, dtype: torch.dtype, mode: str = "rne") -> torch.Tensor:
    return x32 if dtype == torch.float32 else round_fp32(x32, dtype, mode)


def _eval_operand(node, sa: torch.Tensor, sw: torch.Tensor) -> torch.Tensor:
    if isinstance(node, ast.BinOp):
        return _eval_operand(node.left, sa, sw) * _eval_operand(node.right, sa, sw)
    if isinstance(node, ast.Name):
        return sa if node.id == "s_a" else sw
    if isinstance(node, ast.Constant):
        return torch.tensor(float(node.value), dtype=torch.float64).to(torch.float32)
    if isinstance(node, ast.UnaryOp):
        return -_eval_operand(node.operand, sa, sw)
    # bf16()/fp16()/fp32() rounding call
    return _round_to(_eval_operand(node.args[0], sa, sw).to(torch.float32), DTYPES[node.func.id]).float()


def apply_steps(
    acc: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    steps,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """Evaluate an epilogue step list bit for bit -> [M, N] ``out_dtype``.

    ``acc``: int32/int64 [M, N], or float32 (an FP8 accumulator value, used as is: ``cast fp32`` is the identity);
    ``scale_a``: float32 [M]/[M, 1]/scalar (``s_a``); ``scale_b``: float32 [N]/[N, 1]/scalar (``s_w``); ``steps``:
    anything :func:`reference.contract.parse_steps` reads; ``bias``: None or a float [N] tensor (widened exactly).
    Values are held in their step dtype; ``mul``/``add`` are one float32 RNE op rounded to the result dtype (torch's
    opmath for bf16/fp16); numbers in operands are rounded to float32. Casting the accumulator to bf16/fp16 goes through
    float32, as torch does. Overflow gives ±inf, subnormals are kept (no FTZ). ContractError: bad
    description or its final dtype is not ``out_dtype``; OperandError: bad acc / scales / bias / out_dtype."""
    out = _evaluate(acc, scale_a, scale_b, parse_steps(steps), bias, out_dtype, None)
    # torch's own final cast: same values as apply_epilogue, but a NaN gets torch's encoding, not round_fp32's
    return out if out_dtype == torch.float32 else out.float().to(out_dtype)


def _evaluate(acc, scale_a, scale_b, desc, bias, out_dtype, bias_dtype) -> torch.Tensor:
    if out_dtype not in OUT_DTYPES:
        raise OperandError(f"out_dtype={out_dtype} is not one of torch.bfloat16, torch.float16, torch.float32")
    with ieee_subnormals():  # no tensor list: operand constants are computed on the CPU even for GPU inputs
        x = acc_to_fp32(acc)
        if x.dim() != 2:
            raise OperandError(f"acc must be 2-D [M,N], got shape {tuple(acc.shape)}")
        m, n = (int(s) for s in x.shape)
        for s, name in ((scale_a, "scale_a"), (scale_b, "scale_b")):  # dtypes of both before their shapes
            if not isinstance(s, torch.Tensor):
                raise OperandError(f"{name} must be a torch.Tensor, got {type(s).__name__}")
            if s.dtype != torch.float32:
                raise OperandError(f"{name} has dtype {s.dtype}; expected torch.float32")
        sa, sw = normalize_scales(scale_a, scale_b, m, n)
        sa = sa.to(x.device).reshape(m, 1)
        sw = sw.to(x.device).reshape(1, n)
        bf = None
        if bias is not None:
            ok = isinstance(bias, torch.Tensor) and tuple(bias.shape) == (n,)
            if not (ok and (bias.dtype == bias_dtype if bias_dtype else bias.is_floating_point())):
                want = f"[{n}] tensor of dtype {bias_dtype}" if bias_dtype else f"float [{n}] tensor"
                raise OperandError(
                    f"bias must be a {want}, got "
                    f"{getattr(bias, 'dtype', type(bias).__name__)} {tuple(getattr(bias, 'shape', ()))}"
                )
            bf = bias.to(x.device).to(torch.float32).reshape(1, n)  # exact widening
        cur, val = torch.float32, x
        for st in desc.steps:
            new = cur if st.dtype is None else (out_dtype if st.dtype == "out" else DTYPES[st.dtype])
            if st.op == "cast":
                val = _round_to(val.float(), new, st.rounding)
            elif st.op == "mul":
                val = _round_to(val.float() * _eval_operand(_operand_tree(st.operand), sa, sw), new)
            elif st.op == "add_bias":
                if bf is not None:
                    val = _round_to(val.float() + bf, new)
                elif new != cur:
                    val = _round_to(val.float(), new)
            else:  # fma
                opnd = _eval_operand(_operand_tree(st.operand), sa, sw)
                if bf is None and st.rounding == "bias?":  # no bias: a plain multiply
                    val = _round_to(val.float() * opnd, new)
                else:
                    b = bf if (bf is not None and st.rounding != "0") else torch.zeros((), dtype=torch.float32)
                    val = _round_to(fma_fp32(val.float(), opnd, b), new)
            cur = new
        if cur != out_dtype:
            raise ContractError(
                f"epilogue {desc.label()!r} ends in {_DTYPE_NAMES[cur]} but the call asked "
                f"for out_dtype {out_dtype}: end it with 'cast out' (or the call's dtype)"
            )
        return val


def apply_epilogue(
    acc: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    contract: EpilogueContract,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """:func:`apply_steps` of a standard contract's step list; the bias must be [N] of ``out_dtype``. ContractError when
    ``contract`` is not an EpilogueContract; OperandError as :func:`apply_steps`."""
    if not isinstance(contract, EpilogueContract):
        raise ContractError(f"contract must be an EpilogueContract, got {type(contract).__name__}")
    return _evaluate(acc, scale_a, scale_b, contract.steps, bias, out_dtype, out_dtype)


def cached_epilogue(
    acc: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    contract: EpilogueContract,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """:func:`apply_epilogue` memoized inside a ``reference.memo.scope`` on the tensors' identities, ``contract`` and
    ``out_dtype`` (non-tensor operands: never). The result is shared: callers must not write into it."""
    run = lambda: apply_epilogue(acc, scale_a, scale_b, contract, bias=bias, out_dtype=out_dtype)  # noqa: E731
    tensors = (acc, scale_a, scale_b) + (() if bias is None else (bias,))
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return run()
    return memo.cached(("epilogue", contract, out_dtype), (acc, scale_a, scale_b, bias), run)


def reference_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    contract: EpilogueContract,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """The reference W8A8 GEMM: :func:`reference.validate.validate_operands` (OperandError), exact int64
    :func:`reference.accumulate.exact_int_mm`, then :func:`apply_epilogue` -> [M, N] ``out_dtype`` on a's device.

    a: int8 [M, K]; b: int8 [N, K]; scales and bias as :func:`apply_epilogue`."""
    m, _k, n = validate_operands(a, b, scale_a, scale_b, bias, out_dtype)
    sa, sw = normalize_scales(scale_a, scale_b, m, n)
    return apply_epilogue(exact_int_mm(a, b), sa, sw, contract, bias=bias, out_dtype=out_dtype)
