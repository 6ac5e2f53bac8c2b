"""Asymmetric-activation cases (``reference.asymmetric``): one list per kernel, for check C17 (zero_point).

:func:`asymmetric_cases` gives, for each zero-point form the kernel declares (both when it declares none):
``quantized`` cases (compressed-tensors' asymmetric quantizer on seeded activations: per token, or one scale and zero
point for the tensor; decode M, and prefill M one past each power of two 16 .. 512, bias and out dtypes varied); ``near-zero-point`` (rows that are their zero
point, as zero activations quantize, but for one element: ``acc`` and ``azp * colsum`` ~ 2**27 cancel to a few
units, so a correction made in float after a rounding loses them); and the correction's int32 headroom at K ~ 2**16-2**17, out float32 and power-of-two
scales (the output is ``float32(acc - azp * azp_adj) * 2**-30`` exactly): ``inside-near-limit`` (``|acc - azp *
azp_adj|`` within 2**11 of 2**31, every intermediate inside int32), ``product-outside`` (per-token: ``azp * azp_adj``
leaves int32 while ``acc`` and the corrected value fit: int32 arithmetic wraps back), ``corrected-outside`` (the
corrected value leaves int32: the kernel's declared ``overflow`` decides). :func:`stale_pair` gives two calls that
differ only in ``b`` and its matching ``azp_adj`` (the stale precomputed correction probe). Every case's
``meta["zero_point"]`` is its form, ``meta["family"]`` its family (per-tensor: ``meta["tensor_zero_point"]`` the
zero point folded into ``azp_adj``)."""

from __future__ import annotations

from typing import Optional

import torch

from reference.asymmetric import ZERO_POINTS, precomputed_azp_adj, quantize_asymmetric_per_token
from reference.operands import GemmOperands

_SEED = 1746
#: (M, K, N, out dtype, bias): decode, a small prefill, one past a 32-row tile; then one row past each power-of-two
#: M a kernel may switch paths at (16 .. 512), with a bias and a float32 / float16 output, where an epilogue that
#: corrects in float or adds the bias first changes bits
_QUANTIZED = (
    (1, 64, 48, torch.bfloat16, True),
    (5, 200, 48, torch.float16, False),
    (33, 128, 64, torch.bfloat16, False),
    (4, 96, 32, torch.float32, True),
    (17, 128, 64, torch.float16, True),
    (65, 96, 40, torch.float32, True),
    (129, 64, 48, torch.float32, True),
    (257, 128, 24, torch.float16, True),
    (513, 64, 16, torch.float32, True),
)
#: K of the headroom cases: 255 * 127 * K just below 2**31 (inside), 127 * 127 * K above it (product), 255 * 127 * K
#: above it (corrected)
K_NEAR_LIMIT, K_PRODUCT_OUTSIDE, K_CORRECTED_OUTSIDE = 66311, 140000, 70000


def _kinds(spec) -> tuple:
    decl = getattr(spec, "azp", None)
    return decl.kinds if decl is not None else ZERO_POINTS


def _operands(a, b, sa, sw, kind: str, z, out_dtype, bias, name: str, family: str) -> GemmOperands:
    """A case with ``z`` (int per-tensor, int32 [M] per-token) folded into ``azp_adj`` as the caller does."""
    if kind == "per-tensor":
        adj, azp = precomputed_azp_adj(b, int(z)), None
    else:
        adj, azp = precomputed_azp_adj(b), z.to(torch.int32).reshape(-1)
    meta = {"zero_point": kind, "family": family}
    if kind == "per-tensor":
        meta["tensor_zero_point"] = int(z)
    return GemmOperands(a, b, sa, sw, bias, out_dtype, name, "synthetic", meta, azp_adj=adj, azp=azp)


def _quantized(kind: str, i: int, m: int, k: int, n: int, out_dtype, with_bias: bool) -> GemmOperands:
    g = torch.Generator().manual_seed(_SEED + i)
    x = (torch.randn(m, k, generator=g) * 2 + 0.7).to(torch.bfloat16)  # skewed: zero points away from 0
    if kind == "per-token":
        q, s, z = quantize_asymmetric_per_token(x)
        sa, zp = s.float().reshape(m), z.reshape(m)
    else:
        q, s, z = quantize_asymmetric_per_token(x.reshape(1, m * k))
        q, sa, zp = q.reshape(m, k), s.float().reshape(()), int(z)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    sw = torch.rand(n, generator=g) * 0.02 + 1e-3
    bias = (torch.randn(n, generator=g) * 0.5).to(out_dtype) if with_bias else None
    name = f"azp-{kind}-quantized-m{m}k{k}n{n}"
    return _operands(q, b, sa, sw, kind, zp, out_dtype, bias, name, "quantized")


def _near_zero_point(kind: str) -> GemmOperands:
    """Rows equal to their zero point (101 / -99 / 77) but for ``a[:, 0] = z + 1``; ``b[j, 0] = j + 1``, else 127 (126
    on a few): ``acc = z * colsum + j + 1`` ~ 1e8 (float32 spacing 8) while the corrected value is ``j + 1``."""
    m, k, n = 3, 8192, 8
    zs = [101, -99, 77] if kind == "per-token" else [101] * m
    z = torch.tensor(zs, dtype=torch.int32)
    a = z.reshape(m, 1).expand(m, k).to(torch.int8).clone()
    a[:, 0] = (z + 1).to(torch.int8)
    b = torch.full((n, k), 127, dtype=torch.int8)
    for j in range(n):
        b[j, 0] = j + 1
        b[j, 1 : 1 + 5 * j] = 126
    sa = torch.tensor([0.0123, 0.0071, 0.031]) if kind == "per-token" else torch.tensor(0.0123)
    sw = torch.linspace(0.011, 0.029, n)
    zp = z if kind == "per-token" else zs[0]
    return _operands(a, b, sa, sw, kind, zp, torch.bfloat16, None, f"azp-{kind}-near-zero-point", "near-zero-point")


def _headroom(kind: str, family: str) -> Optional[GemmOperands]:
    """The int32 headroom cases (module docstring); None for ``product-outside`` per-tensor (its ``azp_adj`` is the
    caller's int32 product: no product in the kernel)."""
    sa = torch.full((2,), 2.0**-20) if kind == "per-token" else torch.tensor(2.0**-20)
    if family == "product-outside":
        if kind == "per-tensor":
            return None
        k, n = K_PRODUCT_OUTSIDE, 2
        a = torch.full((1, k), 64, dtype=torch.int8)
        b = torch.full((n, k), 127, dtype=torch.int8)
        b[1, :9] = 126
        z = torch.tensor([127], dtype=torch.int32)
        return _operands(
            a, b, sa[:1], torch.full((n,), 2.0**-10), kind, z, torch.float32, None, f"azp-{kind}-{family}", family
        )
    k = K_NEAR_LIMIT if family == "inside-near-limit" else K_CORRECTED_OUTSIDE
    n = 4
    b = torch.full((n, k), 127, dtype=torch.int8)
    b[2:] = -127
    for j in range(n):
        b[j, : 7 * j + 1] = 126 if j < 2 else -126  # the low bits of each column's sum differ
    a = torch.stack([torch.full((k,), 127), torch.full((k,), -128)]).to(torch.int8)
    z = torch.tensor([-128, 127], dtype=torch.int32) if kind == "per-token" else -128
    sw = torch.full((n,), 2.0**-10)
    return _operands(a, b, sa, sw, kind, z, torch.float32, None, f"azp-{kind}-{family}", family)


HEADROOM_FAMILIES = ("inside-near-limit", "product-outside", "corrected-outside")


def asymmetric_cases(spec=None) -> list[GemmOperands]:
    """The asymmetric cases for ``spec`` (a KernelSpec or None: both zero-point forms; module docstring), seeded:
    the same list every call."""
    out = []
    for kind in _kinds(spec):
        out += [_quantized(kind, i, *shape) for i, shape in enumerate(_QUANTIZED)]
        out.append(_near_zero_point(kind))
        out += [c for fam in HEADROOM_FAMILIES if (c := _headroom(kind, fam)) is not None]
    return out


def stale_pair(kind: str) -> tuple[GemmOperands, GemmOperands]:
    """Two ``kind`` calls with the same ``a``, scales and zero point whose ``b`` differ (its second value is the first
    with every column's first 16 elements negated) and whose ``azp_adj`` match their ``b``: a kernel that keeps a
    correction (or colsum) from the first call gives the first call's correction on the second."""
    first = _quantized(kind, 99, 6, 128, 32, torch.bfloat16, True)
    b2 = first.b.clone()
    b2[:, :16] = (-b2[:, :16].to(torch.int16)).clamp(-128, 127).to(torch.int8)
    zp = first.azp if kind == "per-token" else first.meta["tensor_zero_point"]
    second = _operands(
        first.a,
        b2,
        first.scale_a,
        first.scale_b,
        kind,
        zp,
        first.out_dtype,
        first.bias,
        first.name + "-b-updated",
        "stale",
    )
    return first, second
