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

from conformance.cases._common import (DTYPE_TAG, MODES, OUT_DTYPES, channel_scales,
                                       family_case, generator, token_scales)
from reference.operands import GemmOperands

VARIANTS = ("a_padded", "b_transposed", "b_padded", "scales_strided", "all")
SHAPES = ((3, 37, 23), (5, 64, 48), (17, 16, 16), (33, 130, 65), (8, 200, 40))


def _rand_i8(g: torch.Generator, shape) -> torch.Tensor:
    return torch.randint(-128, 128, tuple(shape), generator=g, dtype=torch.int16).to(torch.int8)


def layout_case(variant: str, mode: str, out_dtype: torch.dtype, shape, seed: int = 0
                ) -> GemmOperands:
    """One ``layouts`` case (module docstring) of shape (M, K, N)."""
    m, k, n = shape
    g = generator("layouts", f"{variant}-{mode}-{DTYPE_TAG[out_dtype]}", seed)
    everything = variant == "all"
    a = _rand_i8(g, (m, k))
    if variant == "a_padded" or everything:
        a = _rand_i8(g, (m, k + 13))[:, :k]
    b = _rand_i8(g, (n, k))
    if variant == "b_transposed":
        b = _rand_i8(g, (k, n)).t()
    elif variant == "b_padded":
        b = _rand_i8(g, (n, k + 7))[:, :k]
    elif everything:
        b = _rand_i8(g, (k + 5, n))[:k].t()
    sa, sb = token_scales(g, m), channel_scales(g, n, mode)
    bias = (0.5 * torch.randn(n, generator=g)).to(out_dtype)
    if variant == "scales_strided" or everything:
        sa = torch.stack([sa, -sa], 1)[:, 0]
        sb = torch.stack([sb, sb, sb], 1)[:, 1:2]
        bias = torch.stack([bias, bias], 1)[:, 0]
    elif variant != "b_padded":
        bias = None
    return family_case("layouts", variant, mode, out_dtype, a, b, sa, sb, bias=bias, seed=seed,
                       trigger=f"operand layout {variant}")


def layouts_family(seed: int = 0) -> list[GemmOperands]:
    """``layouts``: 5 variants x both modes (10 cases), shape and output dtype rotating."""
    out = []
    for i, variant in enumerate(VARIANTS):
        for j, mode in enumerate(MODES):
            out.append(layout_case(variant, mode, OUT_DTYPES[(i + j) % 3],
                                   SHAPES[(i + j) % len(SHAPES)], seed))
    return out
