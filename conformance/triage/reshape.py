"""A failing case's operands at another shape, everything else kept (:func:`at_shape`).

Rows of ``a`` / ``scale_a`` (M) and rows of ``b`` / ``scale_b`` / ``bias`` (N) are cropped (the first ones kept)
or tiled (index ``i % old``), so the planted rows and columns of the case stay. Columns of ``a`` / ``b`` (K) are
cropped, or extended with zeros (``k_fill="zeros"``, the default: every accumulator, hence every planted
discriminator, unchanged) or tiled (``k_fill="tile"``: nonzero data in the new columns, the accumulators change).
Cropping K changes the accumulators: planted discriminators may be lost there. Each operand keeps its form (:func:`operand_forms`, the vocabulary of ``conformance.cases.layouts.with_forms``,
which re-creates it at the new shape: padding of seeded bytes), a scalar scale stays scalar, the bias stays present
or absent and the out dtype stays. Deterministic: the same case and shape give the same bits.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from conformance.cases.common import generator
from conformance.cases.layouts import with_forms
from conformance.cases.planting import planted_case
from reference.operands import GemmOperands

#: The scale forms that hold one value for the whole tensor (``with_forms``' ``0d`` and ``one``).
SCALAR_FORMS = ("0d", "one")
#: ``meta`` key of a reshaped case: ``{"from_shape": [M, K, N], "shape": [M, K, N]}``.
META_KEY = "triage"


def _scale_form(s: torch.Tensor, rows: int) -> str:
    if s.dim() == 0:
        return "0d"
    if s.dim() == 2:
        return "column_strided" if s.shape[0] > 1 and int(s.stride(0)) != 1 else "column"
    if s.numel() == 1 and rows > 1:
        return "one"
    if s.numel() > 1 and int(s.stride(0)) != 1:
        return "strided"
    return "vector"


def _b_form(b: torch.Tensor) -> str:
    n, k = (int(v) for v in b.shape)
    s0, s1 = (int(v) for v in b.stride())
    if n > 1 and k > 1 and s0 == 1:
        return "transposed_padded" if s1 > n else "transposed"
    if k > 0 and s1 == 1 and s0 > k:
        return "padded"
    return "dense"


def operand_forms(ops: GemmOperands) -> dict[str, str]:
    """The form of each operand, as ``with_forms`` names it: ``a`` ``dense`` | ``padded``; ``b`` ``dense`` |
    ``transposed`` | ``padded`` | ``transposed_padded``; ``scale_a`` / ``scale_b`` ``vector`` | ``column`` | ``0d``
    | ``one`` | ``strided`` | ``column_strided`` (an [M, 1] view with a row stride > 1, as ``layouts``'
    ``scales_strided`` builds ``scale_b``); ``bias`` ``none`` | ``contiguous`` | ``strided``. A transposed ``b``
    needs N and K > 1 (else it reads as dense)."""
    m, k = (int(v) for v in ops.a.shape)
    a_padded = k > 0 and int(ops.a.stride(1)) == 1 and int(ops.a.stride(0)) > k
    bias = ops.bias
    return {
        "a": "padded" if a_padded else "dense",
        "b": _b_form(ops.b),
        "scale_a": _scale_form(ops.scale_a, ops.m),
        "scale_b": _scale_form(ops.scale_b, ops.n),
        "bias": "none"
        if bias is None
        else ("strided" if bias.numel() > 1 and int(bias.stride(0)) != 1 else "contiguous"),
    }


def row_index(old: int, new: int, source: Optional[torch.Tensor] = None) -> torch.Tensor:
    """int64 [new]: ``i % old`` (crop when new <= old, tile past it); with ``source`` (int64 indices < old),
    ``source[i % len(source)]``: those rows tiled."""
    if source is None or source.numel() == 0:
        return torch.arange(new, dtype=torch.int64) % old
    return source.to(torch.int64)[torch.arange(new, dtype=torch.int64) % source.numel()]


def _columns(t: torch.Tensor, idx: torch.Tensor, k_fill: str) -> torch.Tensor:
    """Dense ``t[:, idx]``, or with ``k_fill == "zeros"`` the first columns of ``t`` and zeros past its width."""
    k0, k = int(t.shape[1]), int(idx.numel())
    if k_fill == "tile" or k <= k0:
        return t[:, idx].contiguous()
    out = torch.zeros((int(t.shape[0]), k), dtype=t.dtype)
    out[:, :k0] = t
    return out


def _values(s: torch.Tensor, form: str, idx: torch.Tensor) -> torch.Tensor:
    """A scale's values as a dense 1-D tensor: one value for a scalar form, else ``s[idx]``."""
    flat = s.detach().reshape(-1).contiguous()
    return flat[:1].clone() if form in SCALAR_FORMS else flat[idx].clone()


def reform(ops: GemmOperands, forms: dict, seed: int = 0) -> GemmOperands:
    """``ops``' values (any layout) re-created in ``forms`` (:func:`operand_forms`' vocabulary; a key left out keeps
    the operand's form; a scalar form of a per-row scale keeps its first value, a per-row form of a scalar
    repeats it). Padding: seeded bytes (``generator("triage", shape, seed)``). ``meta`` shallow-copied."""
    now = operand_forms(ops)
    want = {**now, **forms}
    m, n = ops.m, ops.n
    sa = ops.scale_a.detach().reshape(-1).contiguous()
    sb = ops.scale_b.detach().reshape(-1).contiguous()
    if want["scale_a"] not in SCALAR_FORMS:
        sa = sa[row_index(sa.numel(), m)].clone()
    if want["scale_b"] not in SCALAR_FORMS:
        sb = sb[row_index(sb.numel(), n)].clone()
    bias = None if ops.bias is None else ops.bias.detach().contiguous().clone()
    dense = GemmOperands(
        ops.a.detach().contiguous().clone(),
        ops.b.detach().contiguous().clone(),
        sa,
        sb,
        bias,
        ops.out_dtype,
        ops.name,
        ops.scale_mode,
        ops.meta,
    )
    g = generator("triage", f"{m}x{ops.k}x{n}", seed)
    kept = {key: "column" if v == "column_strided" else v for key, v in want.items()}
    out = with_forms(dense, {**kept, "bias": "strided" if want["bias"] == "strided" else "contiguous"}, g)
    sa2 = _strided_column(out.scale_a) if want["scale_a"] == "column_strided" else out.scale_a
    sb2 = _strided_column(out.scale_b) if want["scale_b"] == "column_strided" else out.scale_b
    return dataclasses.replace(out, scale_a=sa2, scale_b=sb2, meta=dict(ops.meta))


def _strided_column(s: torch.Tensor) -> torch.Tensor:
    """[R, 1] view of row stride 3 holding ``s``' values (``layouts.with_layout``'s strided column)."""
    flat = s.reshape(-1)
    return torch.stack([flat, flat, flat], 1)[:, 1:2]


#: How :func:`at_shape` fills the new columns of a longer K.
K_FILLS = ("zeros", "tile")


def at_shape(
    ops: GemmOperands,
    m: Optional[int] = None,
    n: Optional[int] = None,
    k: Optional[int] = None,
    k_fill: str = "zeros",
    rows: Optional[torch.Tensor] = None,
    cols: Optional[torch.Tensor] = None,
) -> GemmOperands:
    """``ops`` at shape (m, k, n) (None keeps that dimension; each >= 1): rows cropped or tiled, columns cropped or
    filled per ``k_fill`` (:data:`K_FILLS`; module docstring), every operand's form kept (:func:`operand_forms`),
    scale mode, out dtype, bias presence kept; ``rows`` / ``cols`` (int64 indices of M rows / N columns): only
    those tiled (with their scales and bias), e.g. the rows whose output differs. ``name`` gets ``@MxKxN``;
    ``meta[META_KEY]`` records the shape it came from and the new one. Deterministic.

    Raises:
        ValueError: a dimension < 1, an unknown ``k_fill``.
    """
    m0, k0, n0 = ops.m, ops.k, ops.n
    m, n, k = m0 if m is None else int(m), n0 if n is None else int(n), k0 if k is None else int(k)
    if min(m, n, k) < 1:
        raise ValueError(f"at_shape: every dimension must be >= 1, got M={m}, K={k}, N={n}")
    if k_fill not in K_FILLS:
        raise ValueError(f"at_shape: k_fill {k_fill!r} is not one of {K_FILLS}")
    forms = operand_forms(ops)
    im, in_, ik = row_index(m0, m, rows), row_index(n0, n, cols), row_index(k0, k)
    a = _columns(ops.a.detach().contiguous()[im], ik, k_fill)
    b = _columns(ops.b.detach().contiguous()[in_], ik, k_fill)
    sa = _values(ops.scale_a, forms["scale_a"], im)
    sb = _values(ops.scale_b, forms["scale_b"], in_)
    bias = None if ops.bias is None else ops.bias.detach().contiguous()[in_].clone()
    meta = dict(ops.meta)
    first = meta.get(META_KEY, {}).get("from_shape", [m0, k0, n0])
    meta[META_KEY] = {"from_shape": list(first), "shape": [m, k, n]}
    base = ops.name.split("@")[0]
    dense = GemmOperands(a, b, sa, sb, bias, ops.out_dtype, f"{base}@{m}x{k}x{n}", ops.scale_mode, meta)
    return reform(dense, forms)


def replanted(ops: GemmOperands, k: int) -> GemmOperands:
    """A fresh case at (M, ``k``, N) in ``ops``' forms, out dtype, bias presence and scale mode: INT8 operands get
    ``conformance.cases.planting.planted_case``'s discriminators (every legal epilogue told apart at this K; a
    scalar scale stays scalar), e4m3 operands :func:`reseeded` values at ``k``. A K probe whose crop lost the case's
    discriminating sums is retried on it (:mod:`conformance.triage.boundary`)."""
    forms = operand_forms(ops)
    if ops.a.dtype != torch.int8:
        return reseeded(at_shape(ops, k=k))
    fresh = planted_case(
        ops.m,
        k,
        ops.n,
        ops.out_dtype,
        mode="pow2" if ops.scale_mode == "pow2" else "real",
        bias=ops.bias is not None,
        name="triage",
        scale_a_tensor=forms["scale_a"] in SCALAR_FORMS,
        scale_b_tensor=forms["scale_b"] in SCALAR_FORMS,
    )
    meta = {**ops.meta, META_KEY: {"from_shape": [ops.m, ops.k, ops.n], "shape": [ops.m, k, ops.n]}}
    named = dataclasses.replace(fresh, name=f"{ops.name.split('@')[0]}@{ops.m}x{k}x{ops.n}+planted", meta=meta)
    return reform(named, forms)


def reseeded(ops: GemmOperands, seed: int = 0) -> GemmOperands:
    """``ops`` with ``a`` and ``b`` replaced by seeded full-range values of their dtype (int8 in [-128, 127]; e4m3:
    any finite byte, NaN bytes read as zero), scales, bias, out dtype and every operand's form kept. A probe whose
    cropped K lost the case's discriminating sums is retried on these (:mod:`conformance.triage.boundary`)."""
    g = generator("triage", f"reseed-{ops.m}x{ops.k}x{ops.n}", seed)

    def values(rows: int, dtype: torch.dtype) -> torch.Tensor:
        raw = torch.randint(-128, 128, (rows, ops.k), generator=g, dtype=torch.int16).to(torch.int8)
        if dtype == torch.int8:
            return raw
        raw = torch.where((raw == 0x7F) | (raw == -1), torch.zeros_like(raw), raw)  # e4m3 NaN bytes 0x7f / 0xff
        return raw.view(dtype)

    dense = dataclasses.replace(ops, a=values(ops.m, ops.a.dtype), b=values(ops.n, ops.b.dtype), meta=dict(ops.meta))
    return reform(dense, operand_forms(ops))
