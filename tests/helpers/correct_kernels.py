"""Correct but unusual kernels: one exact implementation of each declaration form README.md and
conformance/kernels/README.md show (a contract name, ``"<scale_order>/<bias_point>"``, an EpilogueContract, step
lists, per-device and per-out-dtype mappings, the query form, plain attributes, ``devices``).

Each computes the exact integer accumulator (int64 matmul) and then, in plain torch float32 ops written here
(independently of ``reference.epilogue``), exactly the epilogue its declaration names for the call's device and
out dtype. The default suite must pass each one, or fail it only with the declaration attributed (C5 / C6 saying
"the declaration is not interchangeable here", C8 passing): ``tests/conformance/checks/test_declaration_forms.py``.
"""

from __future__ import annotations

import torch

from conformance.kernels.loader import declare
from reference.contract import EpilogueContract

#: The step list README.md's example declares: a bf16 intermediate between the two scales.
BF16_INTERMEDIATE = ["cast fp32", "mul s_a", "cast bf16", "mul s_w -> fp32", "add bias", "cast out"]
#: An fma step adding the bias, +0.0 without one (C ``fmaf(x, s_w, bias)``).
FMA_BIAS = ["cast fp32", "mul s_a", "fma s_w bias", "cast out"]
#: A step list that is the standard contract ``w_then_a/fp32_before_round`` written out.
CUTLASS_STEPS = ["cast fp32", "mul s_w", "mul s_a", "add bias", "cast out"]


def _acc_scales(a, b, scale_a, scale_b):
    """``(float32 acc [M, N], s_a [M, 1], s_w [1, N])``: the exact sum (|acc| < 2**24 converts exactly, else RNE)."""
    m, n = a.shape[0], b.shape[0]
    acc = (a.to(torch.int64) @ b.to(torch.int64).T).to(torch.float32)
    sa = scale_a.to(torch.float32).reshape(-1)
    sb = scale_b.to(torch.float32).reshape(-1)
    sa = (sa.expand(m) if sa.numel() == 1 else sa).reshape(m, 1)
    sb = (sb.expand(n) if sb.numel() == 1 else sb).reshape(1, n)
    return acc, sa, sb


def _standard(a, b, scale_a, scale_b, out_dtype, bias, order: str, bias_point: str):
    """A standard contract in torch float32 ops: ``order`` a_then_w | w_then_a | fused, ``bias_point``
    fp32_before_round | after_round."""
    x, sa, sb = _acc_scales(a, b, scale_a, scale_b)
    y = {"a_then_w": lambda: (x * sa) * sb, "w_then_a": lambda: (x * sb) * sa, "fused": lambda: x * (sa * sb)}[order]()
    if bias is None:
        return y.to(out_dtype)
    bf = bias.to(torch.float32).reshape(1, -1)
    if bias_point == "fp32_before_round":
        return (y + bf).to(out_dtype)
    return (y.to(out_dtype).to(torch.float32) + bf).to(out_dtype)


def _fmaf(x, c, b):
    """float32 ``fmaf(x, c, b)`` element-wise: ``x*c`` exact in float64, the sum rounded to odd, then RNE to float32
    (one rounding of the exact value)."""
    x64, c64, b64 = (t.to(torch.float64) for t in torch.broadcast_tensors(x, c, b))
    p = x64 * c64
    s = p + b64
    bv = s - p
    err = (p - (s - bv)) + (b64 - bv)  # TwoSum: s + err == p + b exactly
    odd = s.view(torch.int64) & 1
    inexact = (err != 0) & (odd == 0) & torch.isfinite(s)
    away = torch.where(err > 0, torch.full_like(s, float("inf")), torch.full_like(s, float("-inf")))
    return torch.where(inexact, torch.nextafter(s, away), s).to(torch.float32)


@declare(contract="cutlass", name="named_cutlass")
def named_cutlass(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """``contract="cutlass"``."""
    return _standard(a, b, scale_a, scale_b, out_dtype, bias, "w_then_a", "fp32_before_round")


@declare(contract="triton", name="named_triton")
def named_triton(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """``contract="triton"``."""
    return _standard(a, b, scale_a, scale_b, out_dtype, bias, "a_then_w", "after_round")


@declare(contract="fused/after_round", name="fused_after_round")
def fused_after_round(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """``contract="<scale_order>/<bias_point>"``."""
    return _standard(a, b, scale_a, scale_b, out_dtype, bias, "fused", "after_round")


@declare(contract=EpilogueContract("w_then_a", "after_round"), name="contract_object")
def contract_object(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """``contract=EpilogueContract(...)``."""
    return _standard(a, b, scale_a, scale_b, out_dtype, bias, "w_then_a", "after_round")


@declare(contract=CUTLASS_STEPS, name="standard_steps")
def standard_steps(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """A step list that is a standard contract."""
    return _standard(a, b, scale_a, scale_b, out_dtype, bias, "w_then_a", "fp32_before_round")


@declare(contract=BF16_INTERMEDIATE, name="bf16_intermediate")
def bf16_intermediate(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """README.md's step list: ``(bf16(acc * s_a) * s_w + bias)`` rounded once to out_dtype."""
    x, sa, sb = _acc_scales(a, b, scale_a, scale_b)
    y = (x * sa).to(torch.bfloat16).to(torch.float32) * sb
    if bias is not None:
        y = y + bias.to(torch.float32).reshape(1, -1)
    return y.to(out_dtype)


@declare(contract=";".join(FMA_BIAS), name="fma_bias")
def fma_bias(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """``fma s_w bias`` as one ``;``-joined string: ``fmaf(acc * s_a, s_w, bias or +0.0)``."""
    x, sa, sb = _acc_scales(a, b, scale_a, scale_b)
    bf = torch.zeros(()) if bias is None else bias.to(torch.float32).reshape(1, -1)
    return _fmaf(x * sa, sb, bf).to(out_dtype)


@declare(contract={"cuda": "cutlass", "cpu": "triton"}, devices=("cpu", "cuda"), name="per_device")
def per_device(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """A per-device mapping whose first entry (cutlass, bias before rounding) is not the CPU's (triton)."""
    if a.device.type == "cuda":
        return _standard(a, b, scale_a, scale_b, out_dtype, bias, "w_then_a", "fp32_before_round")
    return _standard(a, b, scale_a, scale_b, out_dtype, bias, "a_then_w", "after_round")


@declare(
    contract={"cpu/bfloat16": "cutlass", "cpu/float16": "triton", "cpu/float32": "fused/after_round"},
    name="per_out_dtype",
)
def per_out_dtype(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """The false positive of issue 41: a per-out-dtype mapping with a different bias point per out dtype."""
    if out_dtype == torch.bfloat16:
        return _standard(a, b, scale_a, scale_b, out_dtype, bias, "w_then_a", "fp32_before_round")
    if out_dtype == torch.float16:
        return _standard(a, b, scale_a, scale_b, out_dtype, bias, "a_then_w", "after_round")
    return _standard(a, b, scale_a, scale_b, out_dtype, bias, "fused", "after_round")


@declare(
    contract={"cpu": "triton", "cuda/float16": BF16_INTERMEDIATE, "*": "cutlass"},
    devices=("cpu", "cuda"),
    name="readme_mapping",
)
def readme_mapping(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """conformance/kernels/README.md's mapping: triton on the CPU, a bf16 step list for CUDA float16, else cutlass."""
    if a.device.type == "cpu":
        return _standard(a, b, scale_a, scale_b, out_dtype, bias, "a_then_w", "after_round")
    if out_dtype == torch.float16:
        return bf16_intermediate(a, b, scale_a, scale_b, out_dtype, bias)
    return _standard(a, b, scale_a, scale_b, out_dtype, bias, "w_then_a", "fp32_before_round")


def undeclared_w_then_a_after_round(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Declared only by a query: ``correct_kernels:undeclared_w_then_a_after_round?contract=w_then_a/after_round``."""
    return _standard(a, b, scale_a, scale_b, out_dtype, bias, "w_then_a", "after_round")


def attribute_mapping(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, bias=None):
    """Declared by plain attributes: a mapping by out dtype (``*/<dtype>``) with a ``*`` default."""
    if out_dtype == torch.float32:
        return _standard(a, b, scale_a, scale_b, out_dtype, bias, "a_then_w", "after_round")
    return _standard(a, b, scale_a, scale_b, out_dtype, bias, "w_then_a", "fp32_before_round")


attribute_mapping.int8conf_contract = {"*/float32": "triton", "*": CUTLASS_STEPS}
attribute_mapping.int8conf_name = "attribute_mapping"
