"""Shared helpers of the trigger-condition case families (``conformance.cases.*``).

Every family case is a ``reference.operands.GemmOperands`` named
``family/<family>/<variant>-<mode>-<dtype>`` with ``meta["source"] ==
"family"``, ``meta["family"]``, ``meta["variant"]``, ``meta["seed"]`` and
``meta["scale_kind"]`` (``real`` or ``pow2``; real cases with float32
output get power-of-two per-token scales, :func:`snap_pow2_`). ``scale_mode`` is ``pow2``
for power-of-two weight scales (check C5 applies) and ``synthetic`` for real
scales (C6 applies). Each case is deterministic given (family, variant,
seed): its ``torch.Generator`` is seeded with CRC-32 of that triple.

A case built to violate a precondition on purpose lists those checks in
``meta["violates"]`` (e.g. ``["C3", "C4"]``, :data:`VIOLATES`): its C3 / C4
failure is a *precondition case* of the suite, not a violation by the
user's operands (``conformance.suite.evaluate``).
"""

from __future__ import annotations

import zlib
from typing import Optional

import torch

from conformance.cases.synthetic import _channel_scales, _pow2_channel_scales, _token_scales
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
    """``torch.Generator`` seeded with CRC-32 of ``"<family>/<variant>/<seed>"``
    (stable across runs, machines and Python hash seeds)."""
    return torch.Generator().manual_seed(zlib.crc32(f"{family}/{variant}/{seed}".encode()))


def sign(g: torch.Generator, n: int) -> torch.Tensor:
    """int64 [n] of +-1, seeded."""
    return torch.where(torch.rand(n, generator=g) < 0.5, -1, 1).to(torch.int64)


def token_scales(g: torch.Generator, m: int) -> torch.Tensor:
    """float32 [m] per-token scales absmax/127, absmax in [0.5, 8) (real mantissas)."""
    return _token_scales(g, m)


def channel_scales(g: torch.Generator, n: int, mode: str) -> torch.Tensor:
    """float32 [n] weight scales: ``real`` absmax/127.5 with absmax in
    [0.02, 0.3); ``pow2`` 2**-e, e in [7, 12]."""
    return _pow2_channel_scales(g, n) if mode == "pow2" else _channel_scales(g, n)


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
    """Round every nonzero element of ``s`` (in place, layout kept) to the
    power of two nearest in log2, keeping its sign; zeros stay.

    Why: with float32 output there is no final rounding, and two scale orders
    can legally differ by two float32 spacings (each order rounds twice), more
    than C6's one spacing. With power-of-two per-token scales every order
    computes the same float32 value (``x * 2**k`` is exact), so real-scale
    cases with float32 output keep C6's premise while ``scale_b`` keeps its
    real significands.
    """
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
    **meta,
) -> GemmOperands:
    """GemmOperands of one family case (naming and meta in the module docstring);
    extra keyword arguments go to ``meta`` (JSON-able values). ``snap_fp32=False``
    keeps real token scales with float32 output: only for accumulators chosen so
    that every legal scale order stays within C6's one spacing."""
    tag = DTYPE_TAG[out_dtype]
    m = {"source": "family", "family": family, "variant": variant, "seed": seed, "scale_kind": mode}
    if mode == "real" and out_dtype == torch.float32 and snap_fp32:
        snap_pow2_(scale_a)
        m["token_scales"] = "pow2 (float32 output, see conformance.cases._common.snap_pow2_)"
    m.update(meta)
    return GemmOperands(
        a=a,
        b=b,
        scale_a=scale_a,
        scale_b=scale_b,
        bias=bias,
        out_dtype=out_dtype,
        name=f"family/{family}/{variant}-{mode}-{tag}",
        scale_mode="pow2" if mode == "pow2" else "synthetic",
        meta=m,
    )
