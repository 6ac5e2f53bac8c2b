"""The categorical variants of a case (:func:`flips`): the same values with one attribute changed.

Attributes: ``out_dtype`` (each other of bf16 / fp16 / fp32, the bias cast along), ``bias`` (``absent``, or
``present``: a seeded bias of small multiples of 1/4, exact in every out dtype), ``layout:a`` (``dense`` /
``padded``), ``layout:b`` (``dense`` / ``transposed`` / ``padded``), ``scale_form:scale_a`` / ``scale_form:scale_b``
(``scalar``: a 0-d tensor of the first value; ``vector``: a dense [M] / [N], a scalar repeated or a column's
values),
``magnitude:scale_a`` / ``magnitude:scale_b`` (:data:`SCALE_CLASSES`, the planted cases' magnitude classes less
``huge``, which rescales s_a and s_w together: :func:`scale_class`, :func:`to_scale_class`; the scale's form kept),
and, where two or more operands are strided or padded, ``strides`` ``contiguous``: every one of them contiguous at
once (a bug read through any of them passes no single flip). Only values other than the case's own are listed (a
magnitude flip only where it reaches its class). Deterministic.
"""

from __future__ import annotations

import dataclasses

import torch

from conformance.cases.common import DTYPE_TAG, OUT_DTYPES, generator, snap_pow2_
from conformance.cases.planting import SUBNORMAL_EXP
from conformance.triage.reshape import SCALAR_FORMS, operand_forms, reform
from reference.operands import GemmOperands

#: The per-row scale forms held as a column ([M, 1] / [N, 1], dense or strided).
COLUMN_FORMS = ("column", "column_strided")
#: The layouts a flip gives each matrix operand (``operand_forms`` names; ``a`` is row-major by contract).
LAYOUTS = {"a": ("dense", "padded"), "b": ("dense", "transposed", "padded")}
#: Scale magnitude classes (``conformance.cases.planting.MAGNITUDES``' names): ``subnormal`` some nonzero element
#: below float32's smallest normal 2^-126; ``pow2`` every nonzero element a power of two; ``typical`` otherwise.
SCALE_CLASSES = ("typical", "pow2", "subnormal")
#: Each strided or padded form (``operand_forms`` names) and the contiguous form of the same operand.
CONTIGUOUS = {"padded": "dense", "transposed_padded": "transposed", "strided": "vector", "column_strided": "column"}
_F32_TINY = 2.0**-126


def scale_class(s: torch.Tensor) -> str:
    """The :data:`SCALE_CLASSES` class of scale ``s`` (any shape; zeros ignored; all zero reads ``typical``)."""
    v = s.detach().reshape(-1).to(torch.float64)
    v = v[(v != 0) & v.isfinite()]
    if not v.numel():
        return "typical"
    if bool((v.abs() < _F32_TINY).any()):
        return "subnormal"
    return "pow2" if bool(torch.frexp(v)[0].abs().eq(0.5).all()) else "typical"


def to_scale_class(s: torch.Tensor, cls: str) -> torch.Tensor:
    """float32 values of ``s`` (its shape, contiguous) moved to class ``cls`` element by element, signs and zeros
    kept: ``subnormal`` every normal element times 2^SUBNORMAL_EXP (the planted cases' factor); ``typical`` /
    ``pow2`` every subnormal element times 2^-SUBNORMAL_EXP, then ``pow2`` snapped to the nearest power of two
    (``snap_pow2_``), ``typical`` times 1.5 where every nonzero element is a power of two. The result may miss
    ``cls`` (e.g. a scale of zeros): check with :func:`scale_class`.

    Raises:
        ValueError: ``cls`` not in :data:`SCALE_CLASSES`.
    """
    if cls not in SCALE_CLASSES:
        raise ValueError(f"to_scale_class: {cls!r} is not one of {SCALE_CLASSES}")
    v = s.detach().to(torch.float64).contiguous().clone()
    tiny = (v != 0) & (v.abs() < _F32_TINY)
    if cls == "subnormal":
        v = torch.where(tiny, v, v * 2.0**SUBNORMAL_EXP)
    else:
        v = torch.where(tiny, v * 2.0**-SUBNORMAL_EXP, v)
        if cls == "pow2":
            snap_pow2_(v)
        elif scale_class(v) == "pow2":
            v = v * 1.5
    return v.to(torch.float32)


def own_values(ops: GemmOperands) -> dict[str, str]:
    """The case's own value of every attribute :func:`flips` varies (``out_dtype`` -> ``bf16``, ``bias`` ->
    ``present`` | ``absent``, ``layout:b`` -> ``transposed``, ``magnitude:scale_a`` -> ``subnormal``, ...)."""
    forms = operand_forms(ops)
    out = {"out_dtype": DTYPE_TAG[ops.out_dtype], "bias": "absent" if ops.bias is None else "present"}
    for name in LAYOUTS:
        out[f"layout:{name}"] = forms[name]
    for name in ("scale_a", "scale_b"):
        own = "scalar" if forms[name] in SCALAR_FORMS else "column" if forms[name] in COLUMN_FORMS else "vector"
        out[f"scale_form:{name}"] = own
        out[f"magnitude:{name}"] = scale_class(getattr(ops, name))
    out["strides"] = "strided" if strided_operands(forms) else "contiguous"
    return out


def strided_operands(forms: dict) -> dict[str, str]:
    """``{operand: its contiguous form}`` for each strided or padded operand of ``forms`` (``operand_forms``)."""
    return {k: "contiguous" if k == "bias" else CONTIGUOUS[f] for k, f in forms.items() if f in CONTIGUOUS}


def _seeded_bias(ops: GemmOperands) -> torch.Tensor:
    """[N] of ``ops.out_dtype``: seeded multiples of 1/4 in [-2, 2] (exact in bf16, fp16, fp32)."""
    g = generator("triage", f"bias-{ops.n}", 0)
    return (torch.randint(-8, 9, (ops.n,), generator=g).to(torch.float32) / 4).to(ops.out_dtype)


def flips(ops: GemmOperands) -> list[tuple[str, str, GemmOperands]]:
    """``[(attribute, value, operands)]`` for every categorical variant of ``ops`` (module docstring), in a fixed
    order: out dtype, bias, layouts, scale forms, strides, scale magnitudes. Each variant's ``meta`` is a copy of
    ``ops.meta``."""
    out: list[tuple[str, str, GemmOperands]] = []
    forms = operand_forms(ops)
    for dt in OUT_DTYPES:
        if dt != ops.out_dtype:
            bias = None if ops.bias is None else ops.bias.to(dt)
            cast = dataclasses.replace(ops, out_dtype=dt, bias=bias, meta=dict(ops.meta))
            out.append(("out_dtype", DTYPE_TAG[dt], reform(cast, {"bias": forms["bias"]})))
    if ops.bias is None:
        out.append(("bias", "present", dataclasses.replace(ops, bias=_seeded_bias(ops), meta=dict(ops.meta))))
    else:
        out.append(("bias", "absent", dataclasses.replace(ops, bias=None, meta=dict(ops.meta))))
    for name, choices in LAYOUTS.items():
        for value in choices:
            if value != forms[name]:
                out.append((f"layout:{name}", value, reform(ops, {name: value})))
    for name in ("scale_a", "scale_b"):
        scalar = forms[name] in SCALAR_FORMS
        value, form = ("vector", "vector") if scalar else ("scalar", "0d")
        out.append((f"scale_form:{name}", value, reform(ops, {name: form})))
        if forms[name] in COLUMN_FORMS:  # an [M, 1] / [N, 1] column: also the same values as a dense vector
            out.append((f"scale_form:{name}", "vector", reform(ops, {name: "vector"})))
    strided = strided_operands(forms)
    if len(strided) > 1:
        out.append(("strides", "contiguous", reform(ops, strided)))
    for name in ("scale_a", "scale_b"):
        s = getattr(ops, name)
        own = scale_class(s)
        for cls in SCALE_CLASSES:
            moved = to_scale_class(s, cls)
            if cls != own and scale_class(moved) == cls:
                dense = dataclasses.replace(ops, meta=dict(ops.meta), **{name: moved})
                out.append((f"magnitude:{name}", cls, reform(dense, {name: forms[name]})))
    return out
