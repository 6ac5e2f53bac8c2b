"""``layouts``: operands in every layout the contract admits (DESIGN.md 3).

Variants (both weight-scale modes, shapes and dtypes rotating):

* ``a_padded``: ``a`` is the view ``x[:, :K]`` of a wider row-major buffer
  (leading stride K + 13), as serving code passes activations; the padding
  holds random int8, so a kernel that treats ``a`` as dense reads garbage.
* ``b_transposed``: ``b`` [N, K] is the transposed view ``w.t()`` of a
  row-major [K, N] buffer (strides (1, N)), vLLM's weight layout.
* ``b_padded``: ``b`` is ``w[:, :K]`` of a wider row-major [N, K + 7] buffer.
* ``scales_strided``: scale_a is a column of an [M, 2] buffer (stride 2),
  scale_b an [N, 1] view of an [N, 3] buffer (strides (3, 1)), bias a
  stride-2 view.
* ``all``: all of the above at once (b transposed and padded: ``w[:K].t()``
  of a [K + 5, N] buffer).
"""

from __future__ import annotations

import torch

from conformance.cases._common import DTYPE_TAG, MODES, OUT_DTYPES, generator
from conformance.cases.planting import planted_case
from reference.operands import GemmOperands

VARIANTS = ("a_padded", "b_transposed", "b_padded", "scales_strided", "all")
SHAPES = ((3, 37, 23), (5, 64, 48), (17, 16, 16), (33, 130, 65), (8, 200, 40))


def _rand_i8(g: torch.Generator, shape) -> torch.Tensor:
    return torch.randint(-128, 128, tuple(shape), generator=g, dtype=torch.int16).to(torch.int8)


def with_layout(ops: GemmOperands, layout: str, g: torch.Generator) -> GemmOperands:
    """``ops`` with the same values in ``layout``: ``dense``, ``a_padded``,
    ``b_transposed``, ``b_padded``, ``scales_column`` ([M,1] / [N,1]),
    ``scale_a_0d``, ``scale_b_1`` ([1]), ``scales_strided``, ``bias_strided`` or
    ``all`` (module docstring; padding holds seeded int8). ``scale_a_0d`` /
    ``scale_b_1`` need one scale value per tensor
    (``planted_case(scale_*_tensor=True)``)."""
    a, b, sa, sb, bias = ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias
    m, k = a.shape
    n = b.shape[0]
    everything = layout == "all"
    if layout == "a_padded" or everything:
        buf = _rand_i8(g, (m, k + 13))
        buf[:, :k] = a
        a = buf[:, :k]
    if layout == "b_transposed":
        b = b.t().contiguous().t()
    elif layout == "b_padded":
        buf = _rand_i8(g, (n, k + 7))
        buf[:, :k] = b
        b = buf[:, :k]
    elif everything:
        buf = _rand_i8(g, (k + 5, n))
        buf[:k] = b.t()
        b = buf[:k].t()
    if layout == "scales_column":
        sa, sb = sa.reshape(-1, 1).clone(), sb.reshape(-1, 1).clone()
    elif layout == "scale_a_0d":
        sa = sa[0].clone()
    elif layout == "scale_b_1":
        sb = sb[:1].clone()
    if layout == "scales_strided" or everything:
        sa = torch.stack([sa, -sa], 1)[:, 0]
        sb = torch.stack([sb, sb, sb], 1)[:, 1:2]
    if bias is not None and (layout in ("bias_strided", "scales_strided") or everything):
        bias = torch.stack([bias, bias], 1)[:, 0]
    return GemmOperands(
        a=a,
        b=b,
        scale_a=sa,
        scale_b=sb,
        bias=bias,
        out_dtype=ops.out_dtype,
        name=ops.name,
        scale_mode=ops.scale_mode,
        meta=ops.meta,
    )


def layout_case(variant: str, mode: str, out_dtype: torch.dtype, shape, seed: int = 0) -> GemmOperands:
    """One ``layouts`` case (module docstring) of shape (M, K, N), planted
    (``conformance.cases.planting``): a bias with ``b_padded``, ``scales_strided``
    and ``all``."""
    m, k, n = shape
    tag = DTYPE_TAG[out_dtype]
    bias = variant in ("b_padded", "scales_strided", "all")
    ops = planted_case(
        m,
        k,
        n,
        out_dtype,
        mode,
        bias,
        seed=seed,
        name=f"family/layouts/{variant}-{mode}-{tag}",
        meta={
            "source": "family",
            "family": "layouts",
            "variant": variant,
            "seed": seed,
            "scale_kind": mode,
            "trigger": f"operand layout {variant}",
        },
    )
    return with_layout(ops, variant, generator("layouts", f"{variant}-{mode}-{tag}", seed))


def layouts_family(seed: int = 0) -> list[GemmOperands]:
    """``layouts``: 5 variants x both modes (10 cases), shape and output dtype rotating."""
    out = []
    for i, variant in enumerate(VARIANTS):
        for j, mode in enumerate(MODES):
            out.append(layout_case(variant, mode, OUT_DTYPES[(i + j) % 3], SHAPES[(i + j) % len(SHAPES)], seed))
    return out
