"""Post-processing faults F1-F5: the declared epilogue changed in exactly one way.

Notation (as in ``reference.epilogue``): ``x = float32(acc)`` (one RNE
conversion of the accumulator), ``s_a`` per-token scale [M], ``s_w``
per-channel scale [N], ``*`` and ``+`` single IEEE binary32 operations with
round-to-nearest-even (no FMA), ``rnd`` the RNE conversion float32 ->
out_dtype, ``r16`` the RNE conversion float32 -> 16-bit storage type (the
output dtype when it is bf16 or fp16, bf16 when the output is float32),
widened back exactly. The declared epilogue of each contract is

==========  =========================  ==========================================
contract    scaling ``y``              output
==========  =========================  ==========================================
a_then_w    ``(x * s_a) * s_w``        no bias: ``rnd(y)``
w_then_a    ``(x * s_w) * s_a``        bias fp32_before_round: ``rnd(y + b)``
fused       ``x * (s_a * s_w)``        bias after_round: ``rnd(rnd(y) + b)``
==========  =========================  ==========================================

and each fault changes one thing (everything else as declared):

F1 scale_precision
    The per-token activation scale is rounded to bf16 (RNE) before it is
    applied: ``s_a -> bf16(s_a)`` in the declared formula (for ``fused``:
    ``x * (bf16(s_a) * s_w)``). Models a dynamic per-token quantizer that
    hands its float32 scales over in the activation dtype. Why ``s_a`` and
    not ``s_w``: the field's standard W8A8 quantizer computes weight scales
    in the weight's own dtype (absmax / 127.5 in bf16, DESIGN.md section 4),
    so a checkpoint's ``s_w`` are already bf16 values and rounding them again
    changes nothing (measured on the default model's captures: 0 of 24,576
    elements of a q_proj moved); per-token scales are full float32 values.
    Under power-of-two *weight* scales ``s_a`` is still a full float32
    value; whether F1 then moves anything is measured by the ground truth
    (``faults.truth``), not assumed here.
F2 double_rounding
    The intermediate product is stored in 16 bits, then the rest of the
    epilogue rounds again: ``a_then_w``: ``(r16(x * s_a)) * s_w``;
    ``w_then_a``: ``(r16(x * s_w)) * s_a``; ``fused``: the combined scale
    ``r16(s_a * s_w)``, i.e. ``x * r16(s_a * s_w)``.
F3 multiplication_order
    The scales are applied in the order opposite to the declared one:
    ``a_then_w <-> w_then_a``; ``fused`` (scales combined first, then the
    accumulator) -> accumulator first, per-token scale first:
    ``(x * s_a) * s_w``.
F4 output_truncation
    Every float32 -> out_dtype conversion of the epilogue rounds toward zero
    (``reference.bits.round_fp32(mode="rtz")``) instead of RNE: the one
    final conversion, and with bias ``after_round`` both conversions (a
    truncating convert is used wherever the kernel converts). With a
    float32 output there is no conversion and F4 changes nothing.
F5 fused_ordering
    Something is fused at a different point than declared. With a bias:
    the bias enters at the other point (``fp32_before_round <->
    after_round``), the scale order as declared. Without a bias: the scales
    are combined at a different point: ``a_then_w`` and ``w_then_a`` ->
    ``fused`` (``x * (s_a * s_w)``); ``fused`` -> per-channel first,
    ``(x * s_w) * s_a`` (F3 on a fused kernel is per-token first, so F3 and
    F5 stay different faults on every contract).

Only the selected elements take these values (``faults.inject``); all other
elements keep the kernel's own bits.
"""

from __future__ import annotations

from typing import Optional

import torch

from reference.bits import ieee_subnormals, round_fp32
from reference.contract import EpilogueContract
from reference.epilogue import acc_to_fp32
from reference.errors import OperandError
from reference.validate import normalize_scales

_OTHER_ORDER_F3 = {"a_then_w": "w_then_a", "w_then_a": "a_then_w", "fused": "a_then_w"}
_OTHER_ORDER_F5 = {"a_then_w": "fused", "w_then_a": "fused", "fused": "w_then_a"}
_OTHER_BIAS = {"fp32_before_round": "after_round", "after_round": "fp32_before_round"}
_FAULTS = ("F1", "F2", "F3", "F4", "F5")


def storage16(out_dtype: torch.dtype) -> torch.dtype:
    """16-bit type of F2's intermediate: out_dtype if bf16/fp16, else bf16."""
    return out_dtype if out_dtype in (torch.bfloat16, torch.float16) else torch.bfloat16


def faulty_steps(contract: EpilogueContract, fault: str, has_bias: bool) -> dict:
    """The epilogue a fault executes instead of the declared one.

    Returns:
        ``{"scale_order", "bias_point", "rounding", "scale_a_bf16",
        "intermediate16", "definition"}``: scale order and bias point actually
        used, final rounding (``rne``/``rtz``), whether ``s_a`` is rounded to
        bf16 first (F1), whether the intermediate product is stored in 16
        bits (F2), and a one-line formula.
    Raises:
        OperandError: fault is not F1-F5.
    """
    if fault not in _FAULTS:
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
    r = "rtz" if rounding == "rtz" else "rne"
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
    """The declared epilogue with post-processing fault ``fault`` (module docstring).

    Args:
        acc: int32 or int64 [M, N] accumulator (the kernel's ``int_mm`` or the
            exact reference one).
        scale_a: float32 [M] | [M, 1] | scalar per-token scale.
        scale_b: float32 [N] | [N, 1] | scalar per-channel scale.
        contract: the kernel's declared EpilogueContract.
        fault: ``F1`` .. ``F5``.
        bias: None or out_dtype [N].
        out_dtype: bf16, fp16 or float32.

    Returns:
        out_dtype [M, N] on acc's device: every element computed with the
        faulty epilogue (the caller keeps only the selected ones).

    Raises:
        OperandError: bad fault id, acc dtype or scale layout.
    """
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
