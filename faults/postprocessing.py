"""Post-processing faults F1-F5: the declared epilogue (``reference.epilogue``) changed in
exactly one way, applied by ``faults.inject`` to the selected elements only. Formulas per
contract: ``faults/README.md`` and :func:`faulty_steps`; ``r16`` is RNE to a 16-bit type
(out_dtype if bf16 / fp16, else bf16) and back.
"""

from __future__ import annotations

from typing import Optional

import torch

from faults.spec import POSTPROCESSING_FAULTS
from reference.bits import ieee_subnormals, round_fp32
from reference.contract import EpilogueContract
from reference.epilogue import acc_to_fp32
from reference.errors import OperandError
from reference.validate import normalize_scales

_OTHER_ORDER_F3 = {"a_then_w": "w_then_a", "w_then_a": "a_then_w", "fused": "a_then_w"}
_OTHER_ORDER_F5 = {"a_then_w": "fused", "w_then_a": "fused", "fused": "w_then_a"}
_OTHER_BIAS = {"fp32_before_round": "after_round", "after_round": "fp32_before_round"}


def storage16(out_dtype: torch.dtype) -> torch.dtype:
    """16-bit type of F2's intermediate: out_dtype if bf16/fp16, else bf16."""
    return out_dtype if out_dtype in (torch.bfloat16, torch.float16) else torch.bfloat16


def faulty_steps(contract: EpilogueContract, fault: str, has_bias: bool) -> dict:
    """The epilogue a fault executes instead of the declared one: ``{"scale_order",
    "bias_point", "rounding" (rne / rtz), "scale_a_bf16" (F1), "intermediate16" (F2),
    "definition" (one-line formula)}``. OperandError: fault is not F1-F5."""
    if fault not in POSTPROCESSING_FAULTS:
        raise OperandError(f"{fault!r} is not a post-processing fault (F1-F5)")
    order, bias_point = contract.scale_order, contract.bias_point
    rounding, sa16, inter16 = "rne", fault == "F1", fault == "F2"
    if fault == "F3":
        order = _OTHER_ORDER_F3[order]
    elif fault == "F4":
        rounding = "rtz"
    elif fault == "F5":
        if has_bias:
            bias_point = _OTHER_BIAS[bias_point]
        else:
            order = _OTHER_ORDER_F5[order]
    sa = "bf16(s_a)" if sa16 else "s_a"
    if order == "a_then_w":
        y = f"(r16(x*{sa}))*s_w" if inter16 else f"(x*{sa})*s_w"
    elif order == "w_then_a":
        y = f"(r16(x*s_w))*{sa}" if inter16 else f"(x*s_w)*{sa}"
    else:
        y = f"x*r16({sa}*s_w)" if inter16 else f"x*({sa}*s_w)"
    r = rounding  # rne / rtz
    if not has_bias:
        out = f"{r}({y})"
    elif bias_point == "fp32_before_round":
        out = f"{r}({y} + b)"
    else:
        out = f"{r}({r}({y}) + b)"
    return {
        "scale_order": order,
        "bias_point": bias_point,
        "rounding": rounding,
        "scale_a_bf16": sa16,
        "intermediate16": inter16,
        "definition": out,
    }


def faulty_epilogue(
    acc: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    contract: EpilogueContract,
    fault: str,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """out_dtype [M, N] on acc's device: every element of the int32 / int64 [M, N]
    accumulator through ``contract``'s epilogue with ``fault`` (F1-F5). Scales float32
    [M] / [N] (or [.., 1], scalar), bias None or out_dtype [N]. OperandError: bad fault
    id, acc dtype or scale layout."""
    steps = faulty_steps(contract, fault, bias is not None)
    with ieee_subnormals(acc, scale_a, scale_b, *([] if bias is None else [bias])):
        x = acc_to_fp32(acc)
        m, n = (int(s) for s in x.shape)
        sa, sw = normalize_scales(scale_a.to(torch.float32), scale_b.to(torch.float32), m, n)
        sa = sa.to(x.device).reshape(m, 1)
        sw = sw.to(x.device).reshape(1, n)
        if steps["scale_a_bf16"]:
            sa = round_fp32(sa, torch.bfloat16, "rne").to(torch.float32)
        s16 = storage16(out_dtype)

        def inter(t: torch.Tensor) -> torch.Tensor:
            return round_fp32(t, s16, "rne").to(torch.float32) if steps["intermediate16"] else t

        order = steps["scale_order"]
        if order == "a_then_w":
            y = inter(x * sa) * sw
        elif order == "w_then_a":
            y = inter(x * sw) * sa
        else:
            y = x * inter(sa * sw)
        mode = steps["rounding"]
        if bias is None:
            return round_fp32(y, out_dtype, mode)
        bf = bias.to(x.device).to(torch.float32).reshape(1, n)  # exact widening
        if steps["bias_point"] == "fp32_before_round":
            return round_fp32(y + bf, out_dtype, mode)
        r = round_fp32(y, out_dtype, mode).to(torch.float32)
        return round_fp32(r + bf, out_dtype, mode)
