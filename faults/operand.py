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
from reference import readback
from reference.errors import OperandError

#: Variants that change ``a`` or ``b`` and therefore the accumulator path (``int_mm``).
ACC_VARIANTS = ("stale", "transposed")


def pow2_scales(scale_b: torch.Tensor) -> torch.Tensor:
    """Nearest power of two of each per-channel scale (log2 rounding), zeros kept.

    Inside a ``reference.memo`` scope the rewrite is computed once per
    source tensor (a copy of a tensor -- the clone the runner hands a kernel
    -- counts as its source, ``memo.copy_source``) and each call gets a fresh
    copy of it (``copy_keep_layout``: the kernel that receives it may write
    into it, the memoized one is never handed out), which carries the
    source's known digest and value checks: every F9 cell of a sweep layer
    rewrites the same scales.

    Args:
        scale_b: float32 [N] | [N, 1] | scalar.
    Returns:
        float32 tensor of the same shape.
    """
    from reference import memo

    if not memo.active():
        return _pow2_scales(scale_b)
    from reference.operands import copy_keep_layout

    src = memo.copy_source(scale_b)
    src = scale_b if src is None else src
    return copy_keep_layout(memo.cached("f9_pow2_scales", (src,), lambda: _pow2_scales(src)))


def _pow2_scales(scale_b: torch.Tensor) -> torch.Tensor:
    """:func:`pow2_scales` computed (no memo)."""
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


def describe(variant: str, ops=None, changed: Optional[list] = None) -> str:
    """One line saying what the variant feeds the kernel; with ``ops`` (or
    ``changed``, its :func:`changed_operands` when already read) it names
    the operands really changed on that case."""
    text = {
        "pow2_scales": "per-channel scales rewritten to the nearest power of two without requantizing the weights",
        "stale": "stale activations: row m holds token m-1's int8 row (cyclic), current scales",
        "transposed": "weight buffer read in the transposed layout (b.t().contiguous().reshape(N, K))",
    }[variant]
    if changed is None and ops is not None:
        changed = changed_operands(variant, ops)
    if changed is not None:
        text += f" ({'changes ' + ', '.join(changed) if changed else 'identical operands here'})"
    return text


def changed_operands(variant: str, ops) -> list:
    """Names (``a``, ``b``, ``scale_b``, in that order) of the operands the
    variant really changes on the case ``ops``: :func:`ask_changed_operands` read."""
    return list(ask_changed_operands(variant, ops).get())


def ask_changed_operands(variant: str, ops):
    """Which operands the variant really changes on the case ``ops`` (bits;
    ``scale_b`` compared as raw float32 bits), asked.

    Returns:
        ``reference.readback.Deferred`` of the list of names (``a``, ``b``,
        ``scale_b``, in that order; callers copy it). The verdicts come back
        in one read-back, shared with whatever else is pending, memoized on
        the case's tensors inside a ``reference.memo`` scope (every F9 cell of
        a sweep layer describes the same case). An operand the variant
        returns as the very same object is unchanged without a comparison.

    Raises:
        OperandError: unknown variant.
    """
    from reference import memo

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
