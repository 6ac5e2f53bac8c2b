"""What a case's operands reach, whatever the kernel or its contract (the operand half of the coverage table).

:func:`operand_reach`: partial-sum extremes in both K directions, accumulator extremes vs 2^24 / int32, negative /
zero scales, zero rows, (-128)*(-128) product pairs, the scale layout, scale-order-discriminating elements. Measured
once when a case is built (:func:`attach_reach`, kept in the case cache: ``meta["reach"]`` with the operands'
digests) and read by ``conformance.suite.coverage`` when the digests still match (a case whose operands were
changed after it was built is measured again).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from conformance.cases.synthetic import tie_discrimination
from reference.accumulate import FP32_EXACT_INT as FP32_EXACT
from reference.accumulate import INT32_MAX, exact_int_mm
from reference.operands import GemmOperands

#: Elements x K per batch of :func:`partial_sum_extremes` (float64: 32 MiB).
PARTIAL_BUDGET = 2**22
PAIR_ALIGN = 32


def partial_sum_extremes(a: Tensor, b: Tensor, budget: int = PARTIAL_BUDGET) -> tuple[Tensor, Tensor, int]:
    """Largest |partial sum| of ``acc[m, n] = sum_k a[m, k] * b[n, k]`` in each summation direction.

    Prefix sums ``P_j`` are exact: float64 matmuls of int8 (integers < 2**53), or float32 ones where every partial
    sum in any order is an integer below 2**24 (``sum_k |a[m,k]| |b[n,k]| < 2**24``). Forward the partial
    sums are ``P_j``, backward ``acc - P_j``, whose maximum is at the smallest or largest ``P_j``
    (convexity). When ``M * N * K > budget`` the prefix sums are taken every ``g`` (power of two)
    products: a lower bound. ``a``: int8 [M, K], ``b``: int8 [N, K] (one device, any).
    Returns ``(forward int64 [M, N], backward int64 [M, N], g)`` on that device.
    """
    m, k = a.shape
    n = b.shape[0]
    g = 1
    while m * n * math.ceil(k / g) > budget and g < k:
        g *= 2
    c = math.ceil(k / g)
    pad = c * g - k
    dt = torch.float32 if _abs_sum_below(a, b, FP32_EXACT) else torch.float64
    af = torch.nn.functional.pad(a.to(dt), (0, pad)).reshape(m, c, g).transpose(0, 1)
    bf = torch.nn.functional.pad(b.to(dt), (0, pad)).reshape(n, c, g).permute(1, 2, 0)
    run = torch.zeros((m, n), dtype=dt, device=a.device)
    lo, hi = run.clone(), run.clone()
    step = max(1, budget // max(1, m * n))
    for c0 in range(0, c, step):
        s = torch.bmm(af[c0 : c0 + step], bf[c0 : c0 + step])  # [C', M, N] chunk sums
        p = run.unsqueeze(0) + torch.cumsum(s, 0)
        lo = torch.minimum(lo, p.amin(0))
        hi = torch.maximum(hi, p.amax(0))
        run = p[-1]
    fwd = torch.maximum(lo.abs(), hi.abs())
    bwd = torch.maximum((run - lo).abs(), (run - hi).abs())
    return fwd.to(torch.int64), bwd.to(torch.int64), g


def _abs_sum_below(a: Tensor, b: Tensor, limit: int) -> bool:
    """Whether ``sum_k |a[m,k]| * |b[n,k]| < limit`` for every (m, n), by a bound in O((M + N) K): the largest row
    sum of ``|a|`` times the largest ``|b|``, or the other way round (False where the bound does not show it)."""
    if a.numel() == 0 or b.numel() == 0:
        return True
    a64, b64 = a.to(torch.int64).abs(), b.to(torch.int64).abs()
    bound = min(int(a64.sum(1).max()) * int(b64.max()), int(b64.sum(1).max()) * int(a64.max()))
    return bound < limit


def pair_alignments(a: Tensor, b: Tensor) -> list[int]:
    """Sorted k (mod PAIR_ALIGN) where some element has the adjacent products
    a[m,k]*b[n,k] and a[m,k+1]*b[n,k+1] both equal to (-128)*(-128)."""
    if a.shape[1] < 2:
        return []
    pa = ((a[:, :-1] == -128) & (a[:, 1:] == -128)).any(0)
    pb = ((b[:, :-1] == -128) & (b[:, 1:] == -128)).any(0)
    ks = torch.nonzero(pa & pb).reshape(-1)
    return torch.unique(ks % PAIR_ALIGN).tolist()  # one read-back, sorted


def operand_reach(ops: GemmOperands, exact: Optional[Tensor] = None) -> dict:
    """The JSON-able operand conditions of int8 case ``ops`` (module docstring); ``exact``: its int64 [M, N]
    accumulator on the operands' device if already computed. Every device gives the same dict (exact sums)."""
    a, b = ops.a, ops.b
    acc = exact if exact is not None else exact_int_mm(a, b)
    fwd, bwd, step = partial_sum_extremes(a, b)
    big = torch.maximum(fwd, bwd) >= FP32_EXACT
    sa, sb = ops.scale_a.reshape(-1), ops.scale_b.reshape(-1)
    max_abs_acc = int(acc.abs().max())
    discriminating = 0
    if ops.out_dtype != torch.float32 and max_abs_acc < FP32_EXACT:
        discriminating = tie_discrimination(ops, acc)["a_then_w!=w_then_a"]
    return {
        "max_partial_fwd": int(fwd.max()),
        "max_partial_bwd": int(bwd.max()),
        "partial_step": step,
        "n_partial_big_final_small": int((big & (acc.abs() < FP32_EXACT)).sum()),
        "max_abs_acc": max_abs_acc,
        "n_acc_ge_2_24": int((acc.abs() >= FP32_EXACT).sum()),
        "n_acc_gt_int32": int((acc.abs() > INT32_MAX).sum()),
        "neg_scale_a": bool((torch.signbit(sa) & (sa != 0)).any()),
        "neg_scale_b": bool((torch.signbit(sb) & (sb != 0)).any()),
        "zero_scale_a": bool((sa == 0).any()),
        "zero_scale_b": bool((sb == 0).any()),
        "zero_rows_a": int((a == 0).all(1).sum()),
        "pair_alignments": pair_alignments(a, b),
        "scale_layout": (
            "scalar"
            if ops.scale_a.dim() == 0 or ops.scale_a.numel() == 1 and ops.m > 1
            else "[M,1]"
            if ops.scale_a.dim() == 2
            else "[M]"
        ),
        "discriminating": discriminating,
    }


def reach_of(ops: GemmOperands, exact: Optional[Tensor] = None) -> dict:
    """``meta["reach"]`` of ``ops`` when it was measured on these very operands (same digests), else measured now."""
    kept = (ops.meta or {}).get("reach")
    if kept is not None and kept.get("digests") == ops.digests():
        return kept["values"]
    return operand_reach(ops, exact)


def attach_reach(cases: list) -> list:
    """Set ``meta["reach"]`` (values and the operands' digests) on every int8 case of ``cases`` a CPU run evaluates;
    returns ``cases``. A ``native_only`` case is measured by :func:`reach_of` where it runs (on its GPU): its
    measurement on the CPU (exact sums at M, N, K all large) would cost more than the rest of the cases together."""
    for c in cases:
        if c.a.dtype == torch.int8 and not (c.meta or {}).get("native_only"):
            c.meta = dict(c.meta or {}, reach={"digests": c.digests(), "values": operand_reach(c)})
    return cases
