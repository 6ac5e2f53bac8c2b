"""The categorical variants of a case (:func:`flips`): the same values with one attribute changed.

Attributes: ``out_dtype`` (each other of bf16 / fp16 / fp32, the bias cast along), ``bias`` (``absent``, or
``present``: a seeded bias of small multiples of 1/4, exact in every out dtype), ``layout:a`` (``dense`` /
``padded``), ``layout:b`` (``dense`` / ``transposed`` / ``padded``), ``scale_form:scale_a`` / ``scale_form:scale_b``
(``scalar``: a 0-d tensor of the first value; ``vector``: a dense [M] / [N], a scalar repeated). Only values other
than the case's own are listed. Deterministic.
"""

from __future__ import annotations

import dataclasses

import torch

from conformance.cases.common import DTYPE_TAG, OUT_DTYPES, generator
from conformance.triage.reshape import SCALAR_FORMS, operand_forms, reform
from reference.operands import GemmOperands

#: The layouts a flip gives each matrix operand (``operand_forms`` names; ``a`` is row-major by contract).
LAYOUTS = {"a": ("dense", "padded"), "b": ("dense", "transposed", "padded")}


def _seeded_bias(ops: GemmOperands) -> torch.Tensor:
    """[N] of ``ops.out_dtype``: seeded multiples of 1/4 in [-2, 2] (exact in bf16, fp16, fp32)."""
    g = generator("triage", f"bias-{ops.n}", 0)
    return (torch.randint(-8, 9, (ops.n,), generator=g).to(torch.float32) / 4).to(ops.out_dtype)


def flips(ops: GemmOperands) -> list[tuple[str, str, GemmOperands]]:
    """``[(attribute, value, operands)]`` for every categorical variant of ``ops`` (module docstring), in a fixed
    order: out dtype, bias, layouts, scale forms. Each variant's ``meta`` is a copy of ``ops.meta``."""
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
    return out
