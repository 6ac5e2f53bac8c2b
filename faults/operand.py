"""F9 operand_mismatch: the kernel is fed operands other than the reference's. Variants
(``faults.spec.F9_VARIANTS``): ``pow2_scales`` (per-channel scales rewritten to the nearest
power of two without requantizing the weights), ``stale`` (row m of ``a`` is row m - 1,
cyclic) and ``transposed`` (``b.t().contiguous().reshape(N, K)``); the last two mismatch
``int_mm`` too (:data:`ACC_VARIANTS`).
"""

from __future__ import annotations

from typing import Optional

import torch

from faults.spec import F9_VARIANTS
from reference import memo, readback
from reference.errors import OperandError
from reference.model.pow2 import rewrite_scales_pow2_without_requant
from reference.operands import copy_keep_layout

#: Variants that change ``a`` or ``b`` and therefore the accumulator path (``int_mm``).
ACC_VARIANTS = ("stale", "transposed")


def pow2_scales(scale_b: torch.Tensor) -> torch.Tensor:
    """Nearest power of two (log2 rounding) of each scale of ``scale_b`` (float32 [N] |
    [N, 1] | scalar, same shape out), zeros kept. Inside a ``reference.memo`` scope computed
    once per source tensor (``memo.copy_source``); each call gets a fresh copy."""
    if not memo.active():
        return _pow2_scales(scale_b)
    src = memo.copy_source(scale_b)
    src = scale_b if src is None else src
    return copy_keep_layout(memo.cached("f9_pow2_scales", (src,), lambda: _pow2_scales(src)))


def _pow2_scales(scale_b: torch.Tensor) -> torch.Tensor:
    s = scale_b.to(torch.float32)
    pos = torch.where(s > 0, s, torch.ones_like(s))
    _, p2 = rewrite_scales_pow2_without_requant(torch.zeros(1, dtype=torch.int8), pos, "nearest")
    return torch.where(s > 0, p2.to(torch.float32), s).to(scale_b.dtype)


def stale_rows(a: torch.Tensor) -> torch.Tensor:
    """``a`` with row m replaced by row m - 1 (cyclic), contiguous."""
    return torch.roll(a, shifts=1, dims=0).contiguous()


def transposed_buffer(b: torch.Tensor) -> torch.Tensor:
    """``b.t().contiguous().reshape(N, K)``: the [K, N] buffer read as [N, K]."""
    n, k = b.shape
    return b.t().contiguous().reshape(n, k)


def mismatched(a, b, scale_a, scale_b, bias: Optional[torch.Tensor], variant: str):
    """``(a', b', scale_a', scale_b', bias)`` an F9 kernel receives (unchanged ones are the
    same objects); OperandError for an unknown variant."""
    if variant == "pow2_scales":
        return a, b, scale_a, pow2_scales(scale_b), bias
    if variant == "stale":
        return stale_rows(a), b, scale_a, scale_b, bias
    if variant == "transposed":
        return a, transposed_buffer(b), scale_a, scale_b, bias
    raise OperandError(f"unknown F9 variant {variant!r}; known: {', '.join(F9_VARIANTS)}")


def mismatched_acc_operands(a, b, variant: str):
    """``(a', b')`` of the ``int_mm`` entry (unchanged for ``pow2_scales``)."""
    if variant == "stale":
        return stale_rows(a), b
    if variant == "transposed":
        return a, transposed_buffer(b)
    return a, b


def describe(variant: str, ops=None, changed: Optional[list] = None, operands: str = "int8") -> str:
    """One line saying what the variant feeds an ``operands`` (int8 / e4m3) kernel; with ``ops``
    (or ``changed``, its :func:`changed_operands` already read) naming the operands really changed."""
    text = {
        "pow2_scales": "per-channel scales rewritten to the nearest power of two without requantizing the weights",
        "stale": f"stale activations: row m holds token m-1's {operands} row (cyclic), current scales",
        "transposed": "weight buffer read in the transposed layout (b.t().contiguous().reshape(N, K))",
    }[variant]
    if changed is None and ops is not None:
        changed = changed_operands(variant, ops)
    if changed is not None:
        text += f" ({'changes ' + ', '.join(changed) if changed else 'identical operands here'})"
    return text


def changed_operands(variant: str, ops) -> list:
    """:func:`ask_changed_operands` read now."""
    return list(ask_changed_operands(variant, ops).get())


def ask_changed_operands(variant: str, ops):
    """Deferred list of the operands (``a``, ``b``, ``scale_b``, in that order; callers copy
    it) whose bits the variant really changes on ``ops``, memoized on the case's tensors
    inside a ``reference.memo`` scope. OperandError for an unknown variant."""

    def ask():
        a2, b2, _, sb2, _ = mismatched(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias, variant)
        names, flags = [], []
        for name, new, old in (("a", a2, ops.a), ("b", b2, ops.b), ("scale_b", sb2, ops.scale_b)):
            if new is old:
                continue
            names.append(name)
            if new.shape != old.shape or new.dtype != old.dtype:
                flags.append(torch.ones((), dtype=torch.bool, device=old.device))
            elif name == "scale_b":  # bits, as torch.equal on the int32 views
                flags.append((new.view(torch.int32) != old.view(torch.int32)).any())
            else:
                flags.append((new != old).any())
        return readback.ask(flags, lambda v: [n for n, f in zip(names, v) if f])

    key = (ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias)
    return memo.cached(("f9_changed", variant), key, ask)
