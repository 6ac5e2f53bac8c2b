"""F9 operand_mismatch: the kernel is fed operands other than the reference's.

Three deterministic variants (``faults.spec.F9_VARIANTS``; the first is the
default of ``F9``, the others are chosen with ``F9.<variant>``):

``pow2_scales``
    The per-channel weight scales are rewritten to the nearest power of two
    (in log2, ``reference.model.pow2.rewrite_scales_pow2_without_requant``)
    *without requantizing the weights* -- the mistake DESIGN.md section 5
    warns about. Zero scales stay zero. Under power-of-two weight scales the
    rewrite is the identity and so is the fault (the ground truth says so).
``stale``
    A stale activation buffer: row ``m`` of ``a`` is the previous token's
    row ``m - 1`` (row 0 gets the last row; a cyclic shift), with the
    current per-token scales. With one token (M = 1), or identical rows, it
    changes nothing.
``transposed``
    The weight buffer read in the other layout: the bytes of ``b``'s
    transpose (``[K, N]`` row-major, what a vLLM-convention caller holds)
    read as ``[N, K]``, i.e. ``b.t().contiguous().reshape(N, K)``. For a
    square weight this is exactly ``b.T``.

The injected kernel (``faults.inject``) runs the wrapped kernel on the
clean operands and on the mismatched ones and takes the selected elements
from the second run (so coverage means the same as for every other fault),
and it records the mismatched operands' digests
(``conformance.kernels.trace.record_operands``): what the kernel received.
The ``int_mm`` entry is mismatched the same way for ``stale`` and
``transposed`` (they change ``a`` / ``b``); ``pow2_scales`` leaves it alone.
"""

from __future__ import annotations

from typing import Optional

import torch

from faults.spec import F9_VARIANTS
from reference.errors import OperandError

#: Variants that change ``a`` or ``b`` and therefore the accumulator path (``int_mm``).
ACC_VARIANTS = ("stale", "transposed")


def pow2_scales(scale_b: torch.Tensor) -> torch.Tensor:
    """Nearest power of two of each per-channel scale (log2 rounding), zeros kept.

    Args:
        scale_b: float32 [N] | [N, 1] | scalar.
    Returns:
        float32 tensor of the same shape.
    """
    from reference.model.pow2 import rewrite_scales_pow2_without_requant
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
    """The operands an F9 kernel receives instead of ``(a, b, scale_a, scale_b, bias)``.

    Returns:
        ``(a', b', scale_a', scale_b', bias)`` (unchanged ones are the same objects).
    Raises:
        OperandError: unknown variant.
    """
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


def describe(variant: str, ops=None) -> str:
    """One line saying what the variant feeds the kernel."""
    text = {"pow2_scales": "per-channel scales rewritten to the nearest power of two without "
                           "requantizing the weights",
            "stale": "stale activations: row m holds token m-1's int8 row (cyclic), current scales",
            "transposed": "weight buffer read in the transposed layout "
                          "(b.t().contiguous().reshape(N, K))"}[variant]
    if ops is not None:
        a2, b2, _, sb2, _ = mismatched(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias, variant)
        changed = []
        if not torch.equal(a2, ops.a):
            changed.append("a")
        if not torch.equal(b2, ops.b):
            changed.append("b")
        if not torch.equal(sb2.view(torch.int32), ops.scale_b.view(torch.int32)):
            changed.append("scale_b")
        text += f" ({'changes ' + ', '.join(changed) if changed else 'identical operands here'})"
    return text
