"""Hypothesis strategies for W8A8 GEMM operands (DESIGN.md 4).

Shapes include M=1 and tails that are not multiples of 8/16/32; int8 values
are biased toward the extremes -128 and 127 (where the -128 x -128 = 16384
product lives); scales come in kinds:

``ordinary``  log-uniform in [2**-12, 2**-2], a random float32 significand
              (typical per-token / per-channel scales);
``pow2``      exact powers of two 2**e, e in [-14, -2] (DESIGN.md 1: every
              legal epilogue order gives identical bits);
``tiny``      about 2**-70: s_a * s_w ~ 2**-140, so acc * s_a * s_w lands
              near the float32 subnormal range (< 2**-126);
``large``     about 2**60: s_a * s_w ~ 2**120, so acc * s_a * s_w can
              overflow float32 (max ~2**128) or bf16;
``negative``  an ``ordinary`` magnitude with a random sign per element.
``invalid_scales`` draws scales that must be rejected (NaN, ±inf; zero is legal).

All tensors are built with a seeded ``torch.Generator`` from a drawn seed,
so examples are cheap to generate and shrink, and reproducible under the
derandomized CI profile (tests/conftest.py).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from hypothesis import strategies as st

from reference.operands import GemmOperands

SCALE_KINDS = ("ordinary", "pow2", "tiny", "large", "negative")
_DIM_EDGES = (1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65)


def shapes(
    max_m: int = 64, max_k: int = 160, max_n: int = 64, min_k: int = 1
) -> st.SearchStrategy[tuple[int, int, int]]:
    """``(M, K, N)`` with each dim >= 1, biased toward M=1 and sizes just
    below / at / above multiples of 8, 16, 32 (tails), plus uniform sizes.

    Args:
        max_m, max_k, max_n: inclusive upper bounds; min_k: lower bound on K.

    Returns:
        Strategy of int triples.
    """

    def dim(lo: int, hi: int) -> st.SearchStrategy[int]:
        edges = [d for d in _DIM_EDGES if lo <= d <= hi]
        near_hi = [d for d in (hi - 1, hi) if d >= lo]
        return st.one_of(st.sampled_from(edges + near_hi), st.integers(lo, hi))

    return st.tuples(dim(1, max_m), dim(min_k, max_k), dim(1, max_n))


@st.composite
def int8_tensors(draw, shape: Sequence[int], extreme_prob: Optional[float] = None) -> torch.Tensor:
    """int8 tensor of ``shape`` with values biased toward -128 and 127.

    A drawn fraction of the elements (or ``extreme_prob``) is set to -128 or
    127; in some draws the whole tensor is -128 (the worst-case accumulator,
    K * 16384); the rest is uniform in [-128, 127].

    Returns:
        Strategy of contiguous int8 tensors.
    """
    seed = draw(st.integers(0, 2**32 - 1))
    mode = draw(st.sampled_from(["uniform", "extreme_mix", "all_min", "all_max", "small"]))
    p = extreme_prob if extreme_prob is not None else draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
    g = torch.Generator().manual_seed(seed)
    shape = tuple(int(s) for s in shape)
    if mode == "all_min":
        return torch.full(shape, -128, dtype=torch.int8)
    if mode == "all_max":
        return torch.full(shape, 127, dtype=torch.int8)
    if mode == "small":
        return torch.randint(-3, 4, shape, generator=g, dtype=torch.int8)
    t = torch.randint(-128, 128, shape, generator=g, dtype=torch.int16)
    if mode == "extreme_mix" and p > 0:
        pick = torch.rand(shape, generator=g) < p
        ext = torch.where(
            torch.rand(shape, generator=g) < 0.5,
            torch.tensor(-128, dtype=torch.int16),
            torch.tensor(127, dtype=torch.int16),
        )
        t = torch.where(pick, ext, t)
    return t.to(torch.int8).contiguous()


def _scale_tensor(kind: str, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "pow2":
        e = torch.randint(-14, -1, (n,), generator=g).to(torch.float64)
        return torch.pow(2.0, e).to(torch.float32)
    if kind in ("ordinary", "negative"):
        e = torch.rand(n, generator=g, dtype=torch.float64) * 10.0 - 12.0
        s = torch.pow(2.0, e).to(torch.float32)
        if kind == "negative":
            sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
            s = s * sign
        return s
    if kind == "tiny":
        e = torch.rand(n, generator=g, dtype=torch.float64) * 6.0 - 73.0
        return torch.pow(2.0, e).to(torch.float32)
    if kind == "large":
        e = torch.rand(n, generator=g, dtype=torch.float64) * 6.0 + 56.0
        return torch.pow(2.0, e).to(torch.float32)
    raise ValueError(f"unknown scale kind {kind!r}; expected one of {SCALE_KINDS}")


@st.composite
def scales(draw, n: int, kinds: Sequence[str] = SCALE_KINDS) -> torch.Tensor:
    """float32 [n] scales of one drawn kind (see module docstring)."""
    kind = draw(st.sampled_from(list(kinds)))
    return _scale_tensor(kind, n, draw(st.integers(0, 2**32 - 1)))


@st.composite
def invalid_scales(draw, n: int) -> tuple[torch.Tensor, str, int]:
    """Scales that validation must reject: ``(scale float32 [n], problem, index)``
    where ``problem`` is ``"NaN"`` or ``"inf"`` and ``index`` is the first bad
    element (the others are ordinary positive scales). Zero is legal (an
    all-zero activation row quantizes to scale 0), so it is not drawn here."""
    s = _scale_tensor("ordinary", n, draw(st.integers(0, 2**32 - 1)))
    problem = draw(st.sampled_from(["NaN", "inf", "-inf"]))
    idx = draw(st.integers(0, n - 1))
    count = draw(st.integers(1, n - idx))
    val = {"NaN": float("nan"), "inf": float("inf"), "-inf": float("-inf")}[problem]
    s[idx : idx + count] = val
    return s, {"-inf": "inf"}.get(problem, problem), idx


@st.composite
def gemm_operands(
    draw,
    max_m: int = 48,
    max_k: int = 160,
    max_n: int = 48,
    scale_kinds: Sequence[str] = SCALE_KINDS,
    with_bias: Optional[bool] = None,
    out_dtypes: Sequence[torch.dtype] = (torch.bfloat16,),
    min_k: int = 1,
) -> GemmOperands:
    """A valid :class:`GemmOperands` case.

    Args:
        max_m, max_k, max_n: shape bounds (see :func:`shapes`).
        scale_kinds: kinds drawn independently for scale_a and scale_b;
            ``scale_mode`` is ``"pow2"`` when scale_b is pow2, else
            ``"synthetic"``; ``meta`` records both kinds and the shape.
        with_bias: True / False forces a bias / none; None draws it.
        out_dtypes: output dtypes to draw from.

    Returns:
        Strategy of GemmOperands (contiguous int8 a [M,K], b [N,K], float32
        scale_a [M], scale_b [N], bias [N] out_dtype or None).
    """
    m, k, n = draw(shapes(max_m, max_k, max_n, min_k=min_k))
    a = draw(int8_tensors((m, k)))
    b = draw(int8_tensors((n, k)))
    kind_a = draw(st.sampled_from(list(scale_kinds)))
    kind_b = draw(st.sampled_from(list(scale_kinds)))
    sa = _scale_tensor(kind_a, m, draw(st.integers(0, 2**32 - 1)))
    sb = _scale_tensor(kind_b, n, draw(st.integers(0, 2**32 - 1)))
    out_dtype = draw(st.sampled_from(list(out_dtypes)))
    has_bias = draw(st.booleans()) if with_bias is None else with_bias
    bias = None
    if has_bias:
        g = torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))
        bias = (torch.randn(n, generator=g) * 4.0).to(out_dtype)
    return GemmOperands(
        a=a,
        b=b,
        scale_a=sa,
        scale_b=sb,
        bias=bias,
        out_dtype=out_dtype,
        name=f"hyp_{m}x{k}x{n}",
        scale_mode="pow2" if kind_b == "pow2" else "synthetic",
        meta={"scale_kind_a": kind_a, "scale_kind_b": kind_b, "M": m, "K": k, "N": n},
    )
