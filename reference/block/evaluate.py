"""The exact reference of a block-scaled kernel: per-K-block partials, the declared block accumulation in IEEE
float32 (one RNE rounding per ``mul`` / ``add``, one per ``fma``; subnormals kept), then the declared epilogue.

int8: a K-block's partial is its exact int32 sum (an integer below 2**53, summed exactly in float64) rounded once to
float32 (exact while ``|p| <= 2**24``: any block_k <= 1040 of int8 products). e4m3: the declared FP8 accumulator model
from 0 over the block (``reference.fp8.emulate_accumulation``; ``exact``: the exact sum rounded once).
Bit-identical on CPU and CUDA. Shapes as ``reference.block.contract``; OperandError / ContractError one line."""

from __future__ import annotations

from typing import Optional

import torch

from reference.bits import fma_fp32, ieee_subnormals
from reference.block.contract import (
    BLOCK_OPERANDS,
    BlockAccumulation,
    check_block_size,
    parse_block_accumulation,
    parse_block_epilogue,
)
from reference.epilogue import apply_steps
from reference.fp8 import AccumulatorModel, emulate_accumulation, parse_accumulator
from reference.validate import validate_operands

_ONE = torch.ones((), dtype=torch.float32)


def block_counts(m: int, k: int, n: int, block_size) -> tuple[int, int]:
    """``(KB, NB)``: K-blocks ``ceil(K / block_k)`` and weight block rows ``ceil(N / block_n)``."""
    bn, bk = check_block_size(block_size)
    return -(-k // bk), -(-n // bn)


def block_partial(a: torch.Tensor, b: torch.Tensor, accumulator: Optional[AccumulatorModel] = None) -> torch.Tensor:
    """float32 [M, N] partial of one K-block: ``a`` [M, k] and ``b`` [N, k] of the block (module docstring)."""
    if a.dtype == torch.int8:
        return (a.to(torch.float64) @ b.to(torch.float64).T).to(torch.float32)  # exact in float64, one rounding
    return emulate_accumulation(a, b, parse_accumulator(accumulator or "exact"))


def _operand(text: str, sa: torch.Tensor, sw: torch.Tensor) -> torch.Tensor:
    names = BLOCK_OPERANDS[text]
    return sa * sw if len(names) == 2 else (sa if names == ("s_a",) else sw)


def accumulate_block(acc: torch.Tensor, p: torch.Tensor, sa, sw, form: BlockAccumulation) -> torch.Tensor:
    """``acc`` after one K-block: the partial ``p`` [M, N], its scales ``sa`` [M, 1] and ``sw`` [1, N] (float32),
    through ``form``'s steps (float32, one rounding each). Call inside ``ieee_subnormals``."""
    for m in form.muls:
        p = p * _operand(m, sa, sw)
    return fma_fp32(p, _operand(form.fma, sa, sw), acc) if form.fma else acc + p


def k_block_chunks(kb: int, split_k: int, interleaved: bool = False) -> list[list[int]]:
    """The K-block indices of each of ``split_k`` chunks of ``kb`` K-blocks: contiguous, a split-K grid's cdiv (split
    s takes K-blocks ``[s * per, (s + 1) * per)`` with ``per = ceil(kb / split_k)``, the last ones shorter or empty),
    or ``interleaved`` (split s takes K-blocks s, s + split_k, ...)."""
    if interleaved:
        return [list(range(s, kb, split_k)) for s in range(split_k)]
    per = -(-kb // split_k)
    return [list(range(kb))[s * per : (s + 1) * per] for s in range(split_k)]


def block_accumulate(a, b, scale_a, scale_b, block_size, accumulation, accumulator=None) -> torch.Tensor:
    """float32 [M, N]: the declared block accumulation over every K-block (``order split_k=S``: S contiguous chunks
    of ``ceil(KB / S)`` K-blocks, the last ones shorter or empty; ``interleaved``: split s takes K-blocks s, s+S, ...;
    each chunk from +0.0, totals added in chunk order). Operands as ``reference.validate.validate_operands`` with
    ``block_size``."""
    form = parse_block_accumulation(accumulation)
    bn, bk = check_block_size(block_size)
    m, k, n = int(a.shape[0]), int(a.shape[1]), int(b.shape[0])
    kb = -(-k // bk)
    rows = torch.arange(n, device=a.device) // bn
    chunks = k_block_chunks(kb, form.split_k, form.interleaved)
    total = torch.zeros((m, n), dtype=torch.float32, device=a.device)
    with ieee_subnormals(a):
        for chunk in chunks:
            acc = torch.zeros((m, n), dtype=torch.float32, device=a.device)
            for j in chunk:
                lo, hi = j * bk, min(k, (j + 1) * bk)
                p = block_partial(a[:, lo:hi], b[:, lo:hi], accumulator)
                sa = scale_a[:, j].to(a.device).reshape(m, 1)
                sw = scale_b[:, j].to(a.device)[rows].reshape(1, n)
                acc = accumulate_block(acc, p, sa, sw, form)
            total = acc if form.split_k == 1 else total + acc
    return total


def reference_block_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    block_size=(128, 128),
    accumulation="mul s_a; mul s_w; add",
    epilogue="add bias; cast out",
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
    accumulator=None,
) -> torch.Tensor:
    """The reference block-scaled GEMM -> [M, N] ``out_dtype`` on a's device: :func:`reference.validate.validate_operands` (with ``block_size``), then
    :func:`block_accumulate`, then the declared ``epilogue`` (``reference.block.contract.parse_block_epilogue``) on
    the float32 result. ``accumulator``: an e4m3 kernel's declared FP8 accumulator (None: exact)."""
    operands = "int8" if a.dtype == torch.int8 else "e4m3"
    validate_operands(a, b, scale_a, scale_b, bias, out_dtype, operands, block_size)
    acc = block_accumulate(a, b, scale_a, scale_b, block_size, accumulation, accumulator)
    return apply_steps(acc, _ONE, _ONE, parse_block_epilogue(epilogue), bias=bias, out_dtype=out_dtype)


def _exact_in_fp32(x: torch.Tensor) -> torch.Tensor:
    """bool: float64 ``x`` is a finite float32 value (subnormals included)."""
    xf = x.to(torch.float32)
    return torch.isfinite(xf) & (xf.to(torch.float64) == x)


def order_free_elements(a, b, scale_a, scale_b, block_size, accumulator=None) -> torch.Tensor:
    """bool [M, N]: elements where every legal block accumulation (any form, any ``order``) gives the same float32
    sum: every intermediate a form may round (``p*s_a``, ``p*s_w``, ``s_a*s_w``, ``p*s_a*s_w``) is exact in float32,
    and the scaled partials ``t`` are multiples of ``u`` (the lowest set bit of any nonzero ``t``; >= 2**-149)
    with ``sum |t| < 2**24 * u``, so no addition of any order rounds. Holds on power-of-two block scales
    with small partials (the proof: ``conformance.checks.block_output``). Operands as :func:`block_accumulate`."""
    bn, bk = check_block_size(block_size)
    m, k, n = int(a.shape[0]), int(a.shape[1]), int(b.shape[0])
    rows = torch.arange(n, device=a.device) // bn
    ok = torch.ones((m, n), dtype=torch.bool, device=a.device)
    total = torch.zeros((m, n), dtype=torch.float64, device=a.device)
    unit = torch.full((m, n), float("inf"), dtype=torch.float64, device=a.device)
    with ieee_subnormals(a):
        for j in range(-(-k // bk)):
            p = block_partial(a[:, j * bk : (j + 1) * bk], b[:, j * bk : (j + 1) * bk], accumulator).to(torch.float64)
            sa = scale_a[:, j].to(a.device, torch.float64).reshape(m, 1)
            sw = scale_b[:, j].to(a.device, torch.float64)[rows].reshape(1, n)
            t = p * sa * sw
            for x in (p * sa, p * sw, sa * sw, t):
                ok &= _exact_in_fp32(x.expand(m, n))
            fm, e = torch.frexp(t)  # t = fm * 2**e, fm * 2**24 an integer (t is a float32 value)
            mi = (fm.abs() * 2.0**24).to(torch.int64)
            u = (mi & -mi).to(torch.float64) * torch.pow(2.0, (e - 24).to(torch.float64))  # t's lowest set bit
            unit = torch.where(t != 0, torch.minimum(unit, u), unit)
            total += t.abs()
    return ok & (total < 2.0**24 * unit) & (total < 2.0**127)
