"""Hypothesis strategies for W8A8 GEMM operands (DESIGN.md 4).

Shapes include M=1 and tails that are not multiples of 8/16/32; int8 values are biased toward -128 and 127 (where
the -128 x -128 = 16384 product lives). Scale kinds: ``ordinary`` log-uniform in [2**-12, 2**-2]; ``pow2`` exactly
2**e, e in [-14, -2] (every legal epilogue order gives identical bits); ``tiny`` about 2**-70 (acc * s_a * s_w near
the float32 subnormals); ``large`` about 2**60 (can overflow float32 or bf16); ``negative`` ordinary with random
signs. :func:`invalid_scales` draws scales that must be rejected. Tensors come from a ``torch.Generator`` seeded by a
drawn seed: cheap to shrink and reproducible under the derandomized CI profile (tests/conftest.py)."""

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
    """``(M, K, N)``, each dim in [1 (``min_k`` for K), max], biased toward M=1 and sizes just below / at / above
    multiples of 8, 16, 32 (tails), plus uniform sizes."""

    def dim(lo: int, hi: int) -> st.SearchStrategy[int]:
        edges = [d for d in _DIM_EDGES if lo <= d <= hi]
        near_hi = [d for d in (hi - 1, hi) if d >= lo]
        return st.one_of(st.sampled_from(edges + near_hi), st.integers(lo, hi))

    return st.tuples(dim(1, max_m), dim(min_k, max_k), dim(1, max_n))


@st.composite
def int8_tensors(draw, shape: Sequence[int], extreme_prob: Optional[float] = None) -> torch.Tensor:
    """Contiguous int8 tensor of ``shape``: uniform, small, all -128 / all 127 (the worst-case accumulator
    K * 16384), or uniform with a fraction (``extreme_prob``, else drawn) set to -128 or 127."""
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
        lo, hi = torch.tensor(-128, dtype=torch.int16), torch.tensor(127, dtype=torch.int16)
        t = torch.where(pick, torch.where(torch.rand(shape, generator=g) < 0.5, lo, hi), t)
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
            s = s * torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
        return s
    if kind in ("tiny", "large"):
        e = torch.rand(n, generator=g, dtype=torch.float64) * 6.0 + (-73.0 if kind == "tiny" else 56.0)
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
    s[idx : idx + count] = float(problem)
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
    """A valid :class:`GemmOperands` (contiguous int8 a [M, K], b [N, K], float32 scale_a [M], scale_b [N], bias [N]
    of the drawn out_dtype or None; shape bounds as :func:`shapes`). scale_a and scale_b kinds are drawn independently
    from ``scale_kinds``; ``scale_mode`` is ``"pow2"`` when scale_b is pow2, else ``"synthetic"``. ``with_bias``:
    True / False forces a bias / none, None draws it."""
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
    meta = {"scale_kind_a": kind_a, "scale_kind_b": kind_b, "M": m, "K": k, "N": n}
    mode = "pow2" if kind_b == "pow2" else "synthetic"
    return GemmOperands(a, b, sa, sb, bias, out_dtype, f"hyp_{m}x{k}x{n}", mode, meta)
