"""What a declared FP8 accumulator returns (:func:`emulate_accumulation`) and how far any kernel obeying it may be from
the exact sum (:func:`accumulation_bound`).

The model of ``fp32 bits=B rounding promote=N``: products are exact; within a partial sum of N products each add
``s + p`` is computed exactly and its result kept to B significant bits, rounded to nearest-even (``rne``) or
truncated toward zero (``truncate``), with an unbounded exponent; after every N products (and after the last) the
partial sum is added to a float32 total (IEEE RNE) and restarts at 0. ``fp32`` is B=24 RNE without promotion (IEEE
binary32 adds). This is the one-add-at-a-time reading of Hopper's FP8 MMA, which keeps about 14 bits, aligning addends
to the largest exponent and truncating (DeepSeek-V3 technical report, arXiv:2412.19437, section 3.3.2)."""

from __future__ import annotations

import math

import torch

from reference.errors import ContractError, OperandError
from reference.fp8.accumulator import FP32_BITS, PRODUCT_SHIFT, AccumulatorModel, parse_accumulator
from reference.fp8.exact import check_pair, e4m3_fixed, exact_sum_fp32, fixed_mm

ORDERS = ("sequential",)
#: Largest K :func:`emulate_accumulation` takes: partial sums stay below 2**53 units (exact in float64).
EMULATE_MAX_K = 2**17


def _keep_bits(v: torch.Tensor, bits: int, rounding: str) -> torch.Tensor:
    """float64 integers ``v`` (|v| < 2**53: exact, normal) kept to ``bits`` significant bits, truncated toward zero
    or RNE, on v's device. Works on the IEEE encoding: the low ``53 - bits`` significand bits are cleared; RNE first
    adds half a kept unit minus one plus the lowest kept bit (a carry into the exponent is the correct round-up)."""
    low = 53 - bits
    if low <= 0:
        return v
    enc = v.view(torch.int64)
    if rounding == "rne":
        enc = enc + ((1 << (low - 1)) - 1) + (torch.bitwise_right_shift(enc, low) & 1)
    return (enc & ~((1 << low) - 1)).view(torch.float64)


def emulate_accumulation(
    a: torch.Tensor, b: torch.Tensor, model: AccumulatorModel, order: str = "sequential"
) -> torch.Tensor:
    """The float32 [M, N] accumulator a kernel obeying ``model`` (an AccumulatorModel or its text) returns for
    ``a @ b.T``, k in increasing order (module docstring); ``exact`` -> :func:`exact_sum_fp32`. Exact arithmetic on
    a's device (bit-identical on CPU and CUDA): partial sums are integers in units of 2**-PRODUCT_SHIFT held exactly
    in float64, totals float32. a: e4m3 [M, K]; b: e4m3 [N, K], on one device.
    OperandError as :func:`exact_fp8_mm` or K > EMULATE_MAX_K; ContractError: bad model or order."""
    model = parse_accumulator(model)
    if order not in ORDERS:
        raise ContractError(f"order={order!r} is not one of {ORDERS}")
    if model.kind == "exact":
        return exact_sum_fp32(a, b)
    m, k, n = check_pair(a, b)
    if k > EMULATE_MAX_K:
        raise OperandError(f"K={k} exceeds {EMULATE_MAX_K}, the largest K emulate_accumulation takes")
    fa, fb = (e4m3_fixed(t).to(torch.float64) for t in (a, b))
    group = model.promote_every or max(k, 1)
    partial = torch.zeros((m, n), dtype=torch.float64, device=a.device)
    total = torch.zeros((m, n), dtype=torch.float32, device=a.device)
    for j in range(k):
        partial = _keep_bits(torch.addr(partial, fa[:, j], fb[:, j]), model.bits, model.rounding)
        if (j + 1) % group == 0 or j == k - 1:
            # <= 24 significant bits below 2**53: exactly a float32; then one IEEE float32 add
            total = total + (partial * 2.0**-PRODUCT_SHIFT).to(torch.float32)
            partial = torch.zeros_like(partial)
    return total


def _growth(u: float, n: int) -> float:
    """``(1 + u)**n``, inf when it overflows float64."""
    try:
        return math.exp(n * math.log1p(u))
    except OverflowError:
        return math.inf


def _chain(n: int, u: float) -> float:
    """``(n - 1) * u * (1 + u)**(n - 2)``: error of n terms summed in any order, per unit of sum |terms|."""
    return 0.0 if n < 2 else (n - 1) * u * _growth(u, n - 2)


def unit_roundoff(model: AccumulatorModel) -> float:
    """Relative error of one partial-sum add: 2**-B (RNE), 2**(1-B) (truncation); 0 for ``exact``."""
    model = parse_accumulator(model)
    if model.kind == "exact":
        return 0.0
    return 2.0 ** -(model.bits - (model.rounding == "truncate"))


def accumulation_bound(a: torch.Tensor, b: torch.Tensor, model: AccumulatorModel) -> torch.Tensor:
    """float64 [M, N] upper bound on |accumulator - exact sum| for any kernel obeying ``model``, in any summation
    order and any grouping of the products into partial sums of <= N = min(promote, K) (N = K without promote); 0 for
    ``exact``. Each add x (+) y errs by <= u(|x| + |y|) (:func:`unit_roundoff`; also covers aligning to the larger
    operand and truncating), each float32 promotion add by <= 2**-24(|x| + |y|). A sum of n terms is a tree of n - 1
    adds; a node's computed value is <= (1 + u)**height * sum |leaves|, so the error is <= c(n, u) * sum |terms|,
    c(n, u) = (n - 1) u (1 + u)**(n - 2) (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section
    4.2). A partial sum starts at 0, so it is N + 1 leaves (the product itself is kept to B bits when B < 8).
    Bound = [c(N + 1, u) + c(K, 2**-24) (1 + u)**N] * sum_k |a_k b_k| (the promotions: <= K partial sums),
    times (1 + 2**-40) for float64 rounding. Arguments and errors as :func:`emulate_accumulation`."""
    model = parse_accumulator(model)
    m, k, n = check_pair(a, b)
    if model.kind == "exact":
        return torch.zeros((m, n), dtype=torch.float64, device=a.device)
    s_fixed = fixed_mm(e4m3_fixed(a).abs(), e4m3_fixed(b).abs())
    s = s_fixed.to(torch.float64)  # sum |a_k b_k|: exact below 2**53 units, rounded up above
    s = torch.where(s_fixed > 2**53, torch.nextafter(s, torch.full_like(s, math.inf)), s)
    u, group = unit_roundoff(model), min(model.promote_every or k, k)
    c = _chain(group + 1, u)  # the first add (to a zero partial sum) rounds too when B < 8
    if model.promote_every is not None:
        c += _chain(k, 2.0**-FP32_BITS) * _growth(u, group)
    return s * (c * 2.0**-PRODUCT_SHIFT * (1 + 2.0**-40))
