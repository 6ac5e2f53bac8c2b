"""Precondition faults F6 int32_overflow and F7 fp32_inexact_accumulator: operands whose
selected accumulators really leave int32 (F6) or reach ``|acc| >= 2**24`` (F7). K is
extended by ``E = ceil((T - min_selected(acc)) / 16384)`` columns of -128 on the selected
rows of ``a`` and channels of ``b`` (each selected accumulator grows by ``E * 16384``, no
other changes; T = 2**31 or 2**24), then zero-padded to a multiple of :data:`K_ALIGN`. F6
is built on a window of the case (:data:`F6_WINDOW`, :func:`window_shape`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

import torch

from faults.mask import block_indices, case_key, lowest, stream_key
from reference import memo, readback
from reference.accumulate import accumulator_row_col_bound, exact_int_mm
from reference.errors import OperandError
from reference.operands import derived_digest

#: (max rows, max output channels) of the F6 window.
F6_WINDOW: tuple[int, int] = (16, 16)
#: Threshold each selected accumulator must reach: F6 2**31 (outside int32), F7 2**24.
THRESHOLD = {"F6": 2**31, "F7": 2**24}
#: Product of the saturated entries of the new columns: (-128) * (-128).
SATURATED_PRODUCT = 16384
#: Extended K is padded with zero columns to a multiple of this.
K_ALIGN = 256


def padded_k(k: int, extra: int, k_multiple: int = 1) -> int:
    """K of the extended operands: ``k + extra`` rounded up to a multiple of
    :data:`K_ALIGN` and of the kernel's declared ``k_multiple``."""
    return _round_up(k + extra, math.lcm(K_ALIGN, max(1, int(k_multiple))))


def extra_columns(fault: str, lowest_acc: int) -> int:
    """``E = max(1, ceil((T - lowest_acc) / 16384))`` of the module docstring: the columns of -128 that lift the
    selected block, whose smallest exact accumulator is ``lowest_acc``, to F6's / F7's threshold ``T``."""
    return max(1, -(-(THRESHOLD[fault] - int(lowest_acc)) // SATURATED_PRODUCT))


def extended_widths(fault: str, k: int, acc_absmax: int, k_multiple: int = 1) -> list[int]:
    """Every K' (:func:`padded_k`, ascending) F6 / F7 can give a case (or its F6 window) of K ``k`` whose exact
    accumulators all have ``|acc| <= acc_absmax``: E over ``[extra_columns(absmax), extra_columns(-absmax)]``."""
    lo, hi = extra_columns(fault, acc_absmax), extra_columns(fault, -acc_absmax)
    return sorted({padded_k(k, e, k_multiple) for e in range(lo, hi + 1)})


def _round_up(v: int, mult: int) -> int:
    mult = max(1, int(mult))
    return -(-int(v) // mult) * mult


def extend_k(
    a: torch.Tensor, b: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, extra: int, k_multiple: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a' int8 [M, K'], b' int8 [N, K'])``, K' = :func:`padded_k`: ``extra`` columns of
    -128 at ``rows`` of ``a`` and ``cols`` of ``b`` (0 elsewhere), then zero columns."""
    m, k = a.shape
    n = b.shape[0]
    width = padded_k(k, extra, k_multiple)
    a2 = torch.zeros((m, width), dtype=torch.int8, device=a.device)
    b2 = torch.zeros((n, width), dtype=torch.int8, device=b.device)
    a2[:, :k] = a
    b2[:, :k] = b
    a2[rows.to(a.device), k : k + extra] = -128
    b2[cols.to(b.device), k : k + extra] = -128
    return a2, b2


def _ranges(v: list) -> str:
    """Compact ``[0-3, 7, 9-10]`` text of ascending indices (Python ints)."""
    out, i = [], 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[j + 1] == v[j] + 1:
            j += 1
        out.append(str(v[i]) if i == j else f"{v[i]}-{v[j]}")
        i = j + 1
    if len(out) > 8:
        out = out[:8] + [f"... ({len(v)} in all)"]
    return "[" + ", ".join(out) + "]"


def select_block(a, b, scale_a, scale_b, bias, fault: str, coverage: str, seed: int, key: Optional[str] = None):
    """``(rows, cols, extra, acc)`` of a case: int64 index tensors, ``E`` and the exact
    int64 [M, N] accumulator (no operand built). OperandError: fault is not F6/F7."""
    return _select(a, b, scale_a, scale_b, bias, fault, coverage, seed, key)[:4]


def _select(a, b, scale_a, scale_b, bias, fault: str, coverage: str, seed: int, key: Optional[str] = None) -> tuple:
    """:func:`select_block` plus ``((min, max) of the selected block, rows list, cols list)``."""
    if fault not in THRESHOLD:
        raise OperandError(f"{fault!r} is not a precondition fault (F6, F7)")
    key = key or case_key(a, b, scale_a, scale_b, bias)
    m, n = int(a.shape[0]), int(b.shape[0])
    rows_h, cols_h = block_indices(m, n, key, fault, coverage, seed)
    rows, cols = torch.from_numpy(rows_h), torch.from_numpy(cols_h)
    acc = exact_int_mm(a, b)  # on a's device (exact on any: reference.accumulate)
    blk = acc[rows.to(acc.device)][:, cols.to(acc.device)]
    lo, hi = readback.read([blk.min(), blk.max()])
    extra = extra_columns(fault, int(lo))
    return rows, cols, extra, acc, (lo, hi), rows_h.tolist(), cols_h.tolist()


def precondition_operands(
    a, b, scale_a, scale_b, bias, fault: str, coverage: str, seed: int, key: Optional[str] = None
):
    """``(a', b', rows, cols, extra, exact_acc' int64 [M, N])`` of F6 / F7 on a whole case
    (no window); ``key`` defaults to ``case_key``. OperandError: fault is not F6/F7."""
    rows, cols, extra, acc = _select(a, b, scale_a, scale_b, bias, fault, coverage, seed, key)[:4]
    a2, b2 = extend_k(a, b, rows, cols, extra)
    return a2, b2, rows, cols, extra, grown(acc, rows, cols, extra)


def grown(acc: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, extra: int) -> torch.Tensor:
    """``acc`` (int64 [M, N], exact ``A @ B^T`` or the bound ``|A| @ |B|^T``) of a case, as :func:`extend_k`'s
    K-extended case has it: ``+ extra * 16384`` on ``rows x cols`` (the new columns are -128 on the selected rows
    of ``a`` and channels of ``b``, 0 elsewhere; the padding is 0), a new tensor."""
    out = acc.clone()
    r, c = rows.to(acc.device), cols.to(acc.device)
    out[r.unsqueeze(1), c.unsqueeze(0)] += extra * SATURATED_PRODUCT
    return out


def _remember_references(src, a2: torch.Tensor, b2: torch.Tensor, acc: torch.Tensor, rows, cols, extra: int) -> None:
    """In the open ``reference.memo`` scope: the extended case's exact accumulator and row / column bound
    (``reference.accumulate``), known by construction from the source case's (:func:`grown`, exact integers), so no
    check multiplies the K-extended operands again; with the ``K' * 2**14`` bound ``exact_int_mm`` notes."""
    bound = accumulator_row_col_bound(src.a, src.b)
    for kind, v in (("exact", grown(acc, rows, cols, extra)), ("bound", grown(bound, rows, cols, extra))):
        memo.note_bound(v, int(a2.shape[1]) * SATURATED_PRODUCT)
        memo.remember(kind, (a2, b2), v)


def _take(s: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Rows ``idx`` of a per-row scale / bias ([R], [R, 1]); a scalar stays as it is."""
    return s if s.numel() == 1 else s[idx.to(s.device)].contiguous()


def block_case(a, b, scale_a, scale_b, bias, rows, cols, extra: int, k_multiple: int = 1):
    """``(a' [r, K'], b' [c, K'], scale_a', scale_b', bias')``: the selected block as its
    own case, K extended everywhere; its accumulators equal the selected ones of
    :func:`extend_k`'s full case."""
    a_s, b_s = a[rows.to(a.device)], b[cols.to(b.device)]
    r, c = int(a_s.shape[0]), int(b_s.shape[0])
    a2, b2 = extend_k(a_s, b_s, torch.arange(r), torch.arange(c), extra, k_multiple)
    return a2, b2, _take(scale_a, rows), _take(scale_b, cols), None if bias is None else _take(bias, cols)


def window_shape(m: int, n: int, constraints=None) -> tuple[int, int]:
    """Rows and channels of the F6 window of an ``m x n`` case: :data:`F6_WINDOW` raised
    to the ``ShapeConstraints``' ``min_m`` and ``m_multiple`` / ``n_multiple`` (a window
    the kernel refuses would make every F6 cell n/a), at most the case's own."""
    mr, nc = F6_WINDOW
    if constraints is not None:
        mr = _round_up(max(mr, constraints.min_m), constraints.m_multiple)
        nc = _round_up(nc, constraints.n_multiple)
    return min(m, mr), min(n, nc)


def _window(ops, key: str, seed: int, shape: tuple[int, int]):
    """F6 window of ``ops`` (first rows, a seeded run of channels) and ``(r, start, c)``;
    memoized per case and seed (not coverage), each slice noted as a part of its source
    (``memo.note_part``)."""
    tensors = (ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias)
    return memo.cached(("f6_window", key, int(seed), shape), tensors, lambda: _cut_window(ops, key, seed, shape))


def _cut_window(ops, key: str, seed: int, shape: tuple[int, int]):
    n = ops.n
    r, c = shape
    start = 0
    if c < n:
        start = int(lowest(n - c + 1, 1, stream_key(key, "F6", "window", seed, "window"))[0])
    sl = slice(start, start + c)

    def part(whole, cut):
        memo.note_part(whole, cut)
        return cut

    sb = ops.scale_b.reshape(-1)
    sb = sb if sb.numel() == 1 else part(ops.scale_b, sb[sl].contiguous())
    sa = ops.scale_a.reshape(-1)
    sa = sa if sa.numel() == 1 else part(ops.scale_a, sa[:r].contiguous())
    bias = None if ops.bias is None else part(ops.bias, ops.bias[sl].contiguous())
    w = replace(
        ops, a=ops.a[:r].contiguous(), b=ops.b[sl].contiguous(), scale_a=sa, scale_b=sb, bias=bias, meta=dict(ops.meta)
    )
    return w, (r, start, c)


def prepare_precondition(ops, fault: str, coverage: str, seed: int, constraints=None):
    """``(GemmOperands, description)`` of F6 / F7 on ``ops`` (CPU): a new case with
    ``meta["fault_prepared"]`` and one line saying what changed, e.g. ``"K 384 -> 132096
    (+131489 columns of -128 x -128, +223 zero columns) on rows [3] x channels [17];
    selected exact acc in [2147483653, 2147483653]"``. ``constraints``: the kernel's
    ``ShapeConstraints`` (None: none), which window and padded K respect."""
    key = case_key(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias)
    src, win, bounds = ops, None, None
    if fault == "F6":
        src, (r, start, c) = _window(ops, key, seed, window_shape(ops.m, ops.n, constraints))
        if (r, c) != (ops.m, ops.n):
            bounds = [r, start, c]
            win = f"window rows 0-{r - 1} x channels {start}-{start + c - 1} of {ops.m}x{ops.n}; "
    sel = _select(src.a, src.b, src.scale_a, src.scale_b, src.bias, fault, coverage, seed, key=key)
    rows, cols, extra = sel[:3]
    k_mult = 1 if constraints is None else constraints.k_multiple
    a2, b2 = extend_k(src.a, src.b, rows, cols, extra, k_mult)
    (lo, hi), row_list, col_list = sel[4:]
    if memo.active():  # their digests from the recipe: no host copy and hash of tens of MB
        recipe = f"faults.precondition.extend_k;rows={row_list};cols={col_list};extra={extra};k_multiple={k_mult}"
        derived_digest(a2, (src.a,), recipe)
        derived_digest(b2, (src.b,), recipe)
        _remember_references(src, a2, b2, sel[3], rows, cols, extra)
    # every selected accumulator grew by exactly extra * 16384 (module docstring)
    grown = extra * SATURATED_PRODUCT
    width = padded_k(src.k, extra, k_mult)
    desc = (
        f"{win or ''}K {src.k} -> {width} (+{extra} columns of -128 x -128, "
        f"+{width - src.k - extra} zero columns) on rows "
        f"{_ranges(row_list)} x channels {_ranges(col_list)}; selected exact acc in "
        f"[{lo + grown}, {hi + grown}]"
    )
    meta = dict(ops.meta or {})
    prep = dict(fault=fault, coverage=coverage, seed=int(seed), rows=row_list, cols=col_list, extra_k=int(extra))
    meta["fault_prepared"] = dict(prep, operand_change=desc, window=bounds)
    new = replace(src, a=a2, b=b2, meta=meta)
    return new, desc
