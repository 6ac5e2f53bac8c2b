"""Precondition faults F6 int32_overflow and F7 fp32_inexact_accumulator:
operands built so that the selected accumulators really leave the range
where integer accumulation is exact (F6: outside int32) or where
``float32(acc)`` is exact (F7: ``|acc| >= 2**24``), on the real data of the
case, with the exact value known from ``reference.accumulate.exact_int_mm``.

Construction (:func:`extend_k`): K is extended by ``E`` columns. In the new
columns ``a`` is -128 on the selected rows and 0 elsewhere, ``b`` is -128
on the selected output channels and 0 elsewhere, so every selected
accumulator grows by exactly ``E * 16384`` and every other accumulator is
unchanged (each new column adds ``a[m,k]*b[n,k] = 0`` unless both the row
and the channel are selected). Then zero columns pad K to a multiple of
:data:`K_ALIGN` (they add nothing to any accumulator): a GEMM kernel
specialises on the row stride's alignment and on K being a multiple of its
K tile, and an odd K (e.g. 131,873) makes every load of a Triton kernel a
byte-wide masked one -- on the H200 the sweep's F6 kernel calls took 14 ms
each at K ~ 131k, one program walking K on one byte at a time; real layers
have aligned K. Scales and bias are untouched. ``E`` is the
smallest count that puts *every* selected accumulator over the threshold:
``E = ceil((T - min_selected(acc)) / 16384)`` with ``T = 2**31`` (F6: the
exact value is at least ``INT32_MAX + 1``) or ``T = 2**24`` (F7). Since an
int8 product is at most 16384 in magnitude, F6 needs K > 131,072
(DESIGN.md section 1); F7 needs about 1024 more columns.

The selection is a block of rows x channels (``faults.mask.block_selection``:
one / 1 % / all, deterministic given case, fault, coverage, seed).

F6 window: a GEMM with K > 131,072 costs ``M*N*131072`` multiply-adds per
kernel call, about ten seconds of a 2-core CPU for a 64 x 1536 layer (and
1.2 s for 64 x 64, measured), plus hundreds of MB of operands, and a sweep
cell calls it several times (kernel, int_mm, reference, C3 bound, ground
truth). :func:`prepare_precondition` therefore builds the F6 case on a
window of the real data: the first ``min(M, 16)`` tokens and ``min(N, 16)``
consecutive output channels starting at a seeded offset
(:data:`F6_WINDOW`; raised to the kernel's declared ``min_m`` and M / N
multiples when they ask for more, :func:`window_shape`); the selection and
the coverage apply to that window (``1%`` of 256 outputs: a 2 x 2 block).
F7 uses the whole case. Inside an injected kernel that extends K on every
call (``Injection.prepared=False``) there is no window: the output must keep
the caller's shape.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

import torch

from faults.mask import block_indices, case_key, lowest, stream_key
from reference import memo, readback
from reference.errors import OperandError
from reference.operands import derived_digest

#: (max rows, max output channels) of the F6 window.
F6_WINDOW: tuple[int, int] = (16, 16)
#: Threshold each selected accumulator must reach: F6 2**31 (outside int32), F7 2**24.
THRESHOLD = {"F6": 2**31, "F7": 2**24}
#: Product of the saturated entries of the new columns: (-128) * (-128).
SATURATED_PRODUCT = 16384
#: Extended K is padded with zero columns to a multiple of this (module docstring).
K_ALIGN = 256


def padded_k(k: int, extra: int, k_multiple: int = 1) -> int:
    """K of the extended operands: ``k + extra`` rounded up to a multiple of
    :data:`K_ALIGN` and of the kernel's declared ``k_multiple``
    (``ShapeConstraints``) -- ``extra`` saturated columns, then zero columns."""
    step = math.lcm(K_ALIGN, max(1, int(k_multiple)))
    return -(-(k + extra) // step) * step


def _round_up(v: int, mult: int) -> int:
    mult = max(1, int(mult))
    return -(-int(v) // mult) * mult


def _block_range(acc: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> tuple[int, int]:
    """``(min, max)`` of the selected block of ``acc``, read back together
    (one read-back: the extension length needs the minimum, the case's
    description both)."""
    blk = acc[rows.to(acc.device)][:, cols.to(acc.device)]
    return tuple(readback.read([blk.min(), blk.max()]))


def _extension(low: int, fault: str) -> int:
    """Columns to add, ``E = ceil((T - min_selected(acc)) / 16384)`` (module
    docstring), at least 1, from the selected block's minimum ``low``."""
    need = THRESHOLD[fault] - int(low)
    return max(1, -(-need // SATURATED_PRODUCT))


def extend_k(
    a: torch.Tensor, b: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, extra: int, k_multiple: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Append ``extra`` columns: -128 at ``rows`` of ``a`` and ``cols`` of ``b``, 0 elsewhere;
    then zero columns up to :func:`padded_k`.

    Args:
        a: int8 [M, K]; b: int8 [N, K]; rows, cols: int64 indices; extra: >= 1;
        k_multiple: the kernel's declared K multiple (1: none).
    Returns:
        ``(a' int8 [M, K'], b' int8 [N, K'])`` with ``K' = padded_k(K, extra,
        k_multiple)``, contiguous, on a's device.
    """
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
    """Selected rows, channels and extension length of a case (no operand built).

    Returns:
        ``(rows, cols, extra, acc)``: int64 index tensors, ``E`` and the exact
        int64 [M, N] accumulator of the unextended operands.
    Raises:
        OperandError: fault is not F6/F7.
    """
    return _select(a, b, scale_a, scale_b, bias, fault, coverage, seed, key)[:4]


def _select(a, b, scale_a, scale_b, bias, fault: str, coverage: str, seed: int, key: Optional[str] = None) -> tuple:
    """:func:`select_block` plus what the case description needs:
    ``(rows, cols, extra, acc, (min, max) of the selected block of acc,
    rows as a list, cols as a list)`` -- the indices are drawn on the host
    (``faults.mask.block_indices``), so their lists cost no read-back."""
    from reference.accumulate import exact_int_mm

    if fault not in THRESHOLD:
        raise OperandError(f"{fault!r} is not a precondition fault (F6, F7)")
    key = key or case_key(a, b, scale_a, scale_b, bias)
    m, n = int(a.shape[0]), int(b.shape[0])
    rows_h, cols_h = block_indices(m, n, key, fault, coverage, seed)
    rows, cols = torch.from_numpy(rows_h), torch.from_numpy(cols_h)
    acc = exact_int_mm(a, b)  # on a's device (exact on any: reference.accumulate)
    lo, hi = _block_range(acc, rows, cols)
    return rows, cols, _extension(lo, fault), acc, (lo, hi), rows_h.tolist(), cols_h.tolist()


def precondition_operands(
    a, b, scale_a, scale_b, bias, fault: str, coverage: str, seed: int, key: Optional[str] = None
):
    """Extended operands for F6 / F7 on a whole case (no window).

    Args:
        a, b, scale_a, scale_b, bias: the case as ``scaled_mm`` gets it.
        fault: ``F6`` | ``F7``; coverage; seed.
        key: case key for the selection (default ``faults.mask.case_key``).
    Returns:
        ``(a', b', rows, cols, extra, exact_acc' int64 [M, N])``.
    Raises:
        OperandError: fault is not F6/F7.
    """
    return _extended(_select(a, b, scale_a, scale_b, bias, fault, coverage, seed, key), a, b)


def _extended(sel: tuple, a, b) -> tuple:
    """:func:`precondition_operands`' result from a :func:`_select` result."""
    rows, cols, extra, acc = sel[:4]
    a2, b2 = extend_k(a, b, rows, cols, extra)
    acc2 = acc.clone()
    r, c = rows.to(acc.device), cols.to(acc.device)
    acc2[r.unsqueeze(1), c.unsqueeze(0)] += extra * SATURATED_PRODUCT
    return a2, b2, rows, cols, extra, acc2


def _take(s: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Rows ``idx`` of a per-row scale / bias ([R], [R, 1]); a scalar stays as it is."""
    return s if s.numel() == 1 else s[idx.to(s.device)].contiguous()


def block_case(a, b, scale_a, scale_b, bias, rows, cols, extra: int, k_multiple: int = 1):
    """The selected block as its own case, K extended on every row and channel.

    Returns:
        ``(a' [r, K'], b' [c, K'], scale_a', scale_b', bias')``: every
        accumulator of this case equals the corresponding selected accumulator
        of :func:`extend_k`'s full case (a GEMM output element depends only on
        its own row, channel, scales and bias).
    """
    a_s, b_s = a[rows.to(a.device)], b[cols.to(b.device)]
    r, c = int(a_s.shape[0]), int(b_s.shape[0])
    a2, b2 = extend_k(a_s, b_s, torch.arange(r), torch.arange(c), extra, k_multiple)
    return a2, b2, _take(scale_a, rows), _take(scale_b, cols), None if bias is None else _take(bias, cols)


def window_shape(m: int, n: int, constraints=None) -> tuple[int, int]:
    """Rows and channels of the F6 window of an ``m x n`` case: :data:`F6_WINDOW`,
    raised to the kernel's declared ``min_m`` and rounded up to its ``m_multiple``
    / ``n_multiple`` (``conformance.kernels.spec.ShapeConstraints``; a window
    the kernel refuses would make every F6 cell n/a), at most the case's own."""
    mr, nc = F6_WINDOW
    if constraints is not None:
        mr = _round_up(max(mr, constraints.min_m), constraints.m_multiple)
        nc = _round_up(nc, constraints.n_multiple)
    return min(m, mr), min(n, nc)


def _window(ops, key: str, seed: int, shape: tuple[int, int]):
    """F6 window of ``ops``: first rows, a seeded run of consecutive channels.

    The window depends on the case and the seed only (not on the coverage),
    so inside a ``reference.memo`` scope it is cut once per case and seed:
    the sweep's three F6 cells of a layer share its tensors (their digests,
    value checks and accumulators). Each slice is recorded as a part of the
    tensor it was cut from (``memo.note_part``: a part of a tensor without
    NaN / inf has none either, so its value check costs no read-back)."""
    tensors = (ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias)
    return memo.cached(("f6_window", key, int(seed), shape), tensors, lambda: _cut_window(ops, key, seed, shape))


def _cut_window(ops, key: str, seed: int, shape: tuple[int, int]):
    """:func:`_window` computed (no memo)."""
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
    """The F6 / F7 operands of a case (module docstring).

    Args:
        ops: ``reference.operands.GemmOperands`` (CPU tensors).
        fault: ``F6`` | ``F7``; coverage: ``one`` | ``1%`` | ``all``; seed: int >= 0.
        constraints: the kernel's ``ShapeConstraints`` (None: none), so the F6
            window and the padded K are shapes it accepts (:func:`window_shape`,
            :func:`padded_k`).
    Returns:
        ``(GemmOperands, description)``: a new case (same name, scale mode and
        meta plus ``meta["fault_prepared"]``) and one line saying what changed,
        e.g. ``"K 384 -> 132096 (+131489 columns of -128 x -128, +223 zero
        columns) on rows [3] x channels [17]; selected exact acc in
        [2147483653, 2147483653]"``.
    """
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
    meta["fault_prepared"] = {
        "fault": fault,
        "coverage": coverage,
        "seed": int(seed),
        "rows": row_list,
        "cols": col_list,
        "extra_k": int(extra),
        "operand_change": desc,
        "window": bounds,
    }
    new = replace(src, a=a2, b=b2, meta=meta)
    return new, desc
