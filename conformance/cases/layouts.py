"""``layouts``: planted operands in every layout the contract admits (DESIGN.md 3; README.md here).

``a_padded`` (``x[:, :K]`` of a wider buffer, padding random), ``b_transposed``
(``w.t()`` of a row-major [K, N] buffer), ``b_padded``, ``scales_strided``
(strided scales and bias), ``all`` (everything at once).
"""

from __future__ import annotations

import torch

from conformance.cases.common import DTYPE_TAG, MODES, OUT_DTYPES, generator
from conformance.cases.planting import planted_case
from reference.operands import GemmOperands

VARIANTS = ("a_padded", "b_transposed", "b_padded", "scales_strided", "all")
SHAPES = ((3, 37, 23), (5, 64, 48), (17, 16, 16), (33, 130, 65), (8, 200, 40))


def _rand_i8(g: torch.Generator, shape, dtype: torch.dtype = torch.int8) -> torch.Tensor:
    """Seeded random bytes [shape] viewed as the one-byte ``dtype`` (int8 or e4m3: any bits, NaN included)."""
    return torch.randint(-128, 128, tuple(shape), generator=g, dtype=torch.int16).to(torch.int8).view(dtype)


def with_layout(ops: GemmOperands, layout: str, g: torch.Generator) -> GemmOperands:
    """``ops``' values in ``layout``: ``dense``, ``a_padded``, ``b_transposed``,
    ``b_transposed_padded`` (``w[:K, :N].t()`` of a wider [K+5, N+9] buffer), ``b_padded``, ``scales_column`` ([M,1] / [N,1]), ``scale_a_0d``, ``scale_b_1``
    ([1]), ``scale_b_0d`` (these three need one scale value per tensor), ``scales_strided``,
    ``bias_strided`` or ``all``; padding holds seeded bytes of the operand's dtype (int8 or e4m3)."""
    a, b, sa, sb, bias = ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias
    m, k = a.shape
    n = b.shape[0]
    everything = layout == "all"
    if layout == "a_padded" or everything:
        buf = _rand_i8(g, (m, k + 13), a.dtype)
        buf[:, :k] = a
        a = buf[:, :k]
    if layout == "b_transposed":
        b = b.t().contiguous().t()
    elif layout == "b_transposed_padded":  # column-major with a leading dimension past N
        buf = _rand_i8(g, (k + 5, n + 9), b.dtype)
        buf[:k, :n] = b.t()
        b = buf[:k, :n].t()
    elif layout == "b_padded":
        buf = _rand_i8(g, (n, k + 7), b.dtype)
        buf[:, :k] = b
        b = buf[:, :k]
    elif everything:
        buf = _rand_i8(g, (k + 5, n), b.dtype)
        buf[:k] = b.t()
        b = buf[:k].t()
    if layout == "scales_column":
        sa, sb = sa.reshape(-1, 1).clone(), sb.reshape(-1, 1).clone()
    elif layout == "scale_a_0d":
        sa = sa[0].clone()
    elif layout == "scale_b_1":
        sb = sb[:1].clone()
    elif layout == "scale_b_0d":
        sb = sb[0].clone()
    if layout == "scales_strided" or everything:
        sa = torch.stack([sa, -sa], 1)[:, 0]
        sb = torch.stack([sb, sb, sb], 1)[:, 1:2]
    if bias is not None and (layout in ("bias_strided", "scales_strided") or everything):
        bias = torch.stack([bias, bias], 1)[:, 0]
    return GemmOperands(a, b, sa, sb, bias, ops.out_dtype, ops.name, ops.scale_mode, ops.meta)


def layout_case(variant: str, mode: str, out_dtype: torch.dtype, shape, seed: int = 0) -> GemmOperands:
    """One planted ``layouts`` case of shape (M, K, N); a bias with ``b_padded``, ``scales_strided``, ``all``."""
    m, k, n = shape
    tag = DTYPE_TAG[out_dtype]
    bias = variant in ("b_padded", "scales_strided", "all")
    meta = {"source": "family", "family": "layouts", "variant": variant, "seed": seed, "scale_kind": mode}
    meta["trigger"] = f"operand layout {variant}"
    name = f"family/layouts/{variant}-{mode}-{tag}"
    ops = planted_case(m, k, n, out_dtype, mode, bias, seed=seed, name=name, meta=meta)
    return with_layout(ops, variant, generator("layouts", f"{variant}-{mode}-{tag}", seed))


def layouts_family(seed: int = 0) -> list[GemmOperands]:
    out = []
    for i, variant in enumerate(VARIANTS):
        for j, mode in enumerate(MODES):
            out.append(layout_case(variant, mode, OUT_DTYPES[(i + j) % 3], SHAPES[(i + j) % len(SHAPES)], seed))
    return out


def _scale_form(s: torch.Tensor, form: str) -> torch.Tensor:
    if form == "column":
        return s.reshape(-1, 1).clone()
    if form == "0d":
        return s.reshape(-1)[0].clone()
    if form == "one":
        return s.reshape(-1)[:1].clone()
    if form == "strided":
        return torch.stack([s, -s], 1)[:, 0]
    return s  # vector, uniform ([M] / [N] of one value)


def with_forms(ops: GemmOperands, forms: dict, g: torch.Generator) -> GemmOperands:
    """``ops``' values with each operand in its own form: ``forms["a"]`` ``dense`` | ``padded``; ``forms["b"]``
    ``dense`` | ``transposed`` | ``padded`` | ``transposed_padded`` (``w.t()`` of the first N columns of a [K, N + 5]
    buffer: leading stride N + 5); ``forms["scale_a"]`` / ``["scale_b"]`` ``vector`` | ``column`` | ``0d`` | ``one`` | ``strided`` |
    ``uniform`` (the scalar forms need one value per tensor); ``forms["bias"]`` ``none`` | ``contiguous`` |
    ``strided``. Padding holds seeded bytes of the operand's dtype."""
    a, b, bias = ops.a, ops.b, ops.bias
    m, k = a.shape
    n = b.shape[0]
    if forms.get("a", "dense") == "padded":
        buf = _rand_i8(g, (m, k + 13), a.dtype)
        buf[:, :k] = a
        a = buf[:, :k]
    fb = forms.get("b", "dense")
    if fb == "transposed":
        b = b.t().contiguous().t()
    elif fb == "padded":
        buf = _rand_i8(g, (n, k + 7), b.dtype)
        buf[:, :k] = b
        b = buf[:, :k]
    elif fb == "transposed_padded":
        buf = _rand_i8(g, (k, n + 5), b.dtype)
        buf[:, :n] = b.t()
        b = buf[:, :n].t()
    sa, sb = (
        _scale_form(ops.scale_a, forms.get("scale_a", "vector")),
        _scale_form(ops.scale_b, forms.get("scale_b", "vector")),
    )
    if bias is not None and forms.get("bias") == "strided":
        bias = torch.stack([bias, bias], 1)[:, 0]
    return GemmOperands(a, b, sa, sb, bias, ops.out_dtype, ops.name, ops.scale_mode, ops.meta)
