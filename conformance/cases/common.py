"""Shared helpers of the trigger-condition case families.

A family case is named ``family/<family>/<variant>-<mode>-<dtype>`` with
``meta`` ``source="family"``, ``family``, ``variant``, ``seed``, ``scale_kind``
(``real`` | ``pow2``; scale_mode ``synthetic`` | ``pow2``) and, for a case built
to violate C3 / C4, ``violates``. Its generator is seeded with CRC-32 of
(family, variant, seed).
"""

from __future__ import annotations

import zlib
from typing import Optional

import torch

from conformance.cases.synthetic import pow2_channel_scales, real_channel_scales, real_token_scales
from reference.operands import GemmOperands

OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
DTYPE_TAG = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
#: Weight-scale modes of the families: real float32 mantissas, or powers of two.
MODES = ("real", "pow2")
#: meta key: the precondition checks a case is built to violate.
VIOLATES = "violates"
#: (mode, out_dtype) for every mode and output dtype, the default variant grid.
GRID = tuple((mode, dt) for mode in MODES for dt in OUT_DTYPES)


def generator(family: str, variant: str, seed: int) -> torch.Generator:
    """``torch.Generator`` seeded with CRC-32 of ``"<family>/<variant>/<seed>"``."""
    return torch.Generator().manual_seed(zlib.crc32(f"{family}/{variant}/{seed}".encode()))


def sign(g: torch.Generator, n: int) -> torch.Tensor:
    """int64 [n] of +-1, seeded."""
    return torch.where(torch.rand(n, generator=g) < 0.5, -1, 1).to(torch.int64)


def token_scales(g: torch.Generator, m: int) -> torch.Tensor:
    """float32 [m] per-token scales absmax/127, absmax in [0.5, 8) (real mantissas)."""
    return real_token_scales(g, m)


def channel_scales(g: torch.Generator, n: int, mode: str) -> torch.Tensor:
    """float32 [n] weight scales: ``real`` absmax/127.5 with absmax in
    [0.02, 0.3); ``pow2`` 2**-e, e in [7, 12]."""
    return pow2_channel_scales(g, n) if mode == "pow2" else real_channel_scales(g, n)


def mantissa(g: torch.Generator, n: int, mode: str) -> torch.Tensor:
    """float64 [n] significands: 1 for ``pow2``, uniform in [1, 2) for ``real``."""
    if mode == "pow2":
        return torch.ones(n, dtype=torch.float64)
    return 1.0 + torch.rand(n, generator=g, dtype=torch.float64)


def small_int8(g: torch.Generator, shape, lo: int = -3, hi: int = 3, nonzero: bool = False) -> torch.Tensor:
    """int8 uniform in [lo, hi] (``nonzero``: 0 replaced by hi)."""
    t = torch.randint(lo, hi + 1, tuple(shape), generator=g, dtype=torch.int16)
    if nonzero:
        t = torch.where(t == 0, torch.tensor(hi, dtype=torch.int16), t)
    return t.to(torch.int8)


def nonzero_int8(g: torch.Generator, shape) -> torch.Tensor:
    """int8 uniform in [-128, 127] without 0 (every element contributes)."""
    return small_int8(g, shape, -128, 127, nonzero=True)


def snap_pow2_(s: torch.Tensor) -> torch.Tensor:
    """Round every nonzero element of ``s`` in place to the signed power of two
    nearest in log2. Float32 output has no final rounding, so legal scale orders
    may differ by two spacings (more than C6 allows) unless ``x * 2**k`` is exact."""
    nz = s != 0
    e = torch.round(torch.log2(s.abs().double().clamp_min(2.0**-149)))
    snapped = torch.where(nz, torch.sign(s.double()) * torch.pow(2.0, e), s.double())
    s.copy_(snapped.to(s.dtype))
    return s


def family_case(
    family: str,
    variant: str,
    mode: str,
    out_dtype: torch.dtype,
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    seed: int = 0,
    snap_fp32: bool = True,
    prefix: str = "family",
    **meta,
) -> GemmOperands:
    """GemmOperands of one family case, named ``<prefix>/<family>/<variant>-<mode>-<dtype>``; extra keywords go to
    ``meta``. Real-mode
    float32 cases get :func:`snap_pow2_` token scales unless ``snap_fp32=False``
    (accumulators chosen to keep every legal order within C6's one spacing)."""
    tag = DTYPE_TAG[out_dtype]
    m = {"source": "family", "family": family, "variant": variant, "seed": seed, "scale_kind": mode}
    if mode == "real" and out_dtype == torch.float32 and snap_fp32:
        snap_pow2_(scale_a)
        m["token_scales"] = "pow2 (float32 output, see conformance.cases.common.snap_pow2_)"
    m.update(meta)
    name, scale_mode = f"{prefix}/{family}/{variant}-{mode}-{tag}", "pow2" if mode == "pow2" else "synthetic"
    return GemmOperands(a, b, scale_a, scale_b, bias, out_dtype, name, scale_mode, m)
