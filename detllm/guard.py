"""Float guard: a ``TorchDispatchMode`` that turns any floating-point tensor
inside the integer forward into an error.

Every aten op dispatched while the guard is active has its tensor inputs and
outputs inspected; a floating-point (or complex) dtype raises
``FloatOpError`` (an ``Int8confError``) naming the op and dtype. The one
exception is the int8 x int8 -> int32 matmul of the kernel under test
(``suspended()``): a kernel is a black box whose *interface* is integer
(the engine checks its output is int32 of the right shape); how it computes
the exact integer result inside (e.g. ``reference.accumulate.exact_int_mm``
uses exact float32 BLAS on K-chunks) is the kernel's business.

Mechanism: ``torch.utils._python_dispatch.TorchDispatchMode`` (PyTorch
"__torch_dispatch__" extension point, see the PyTorch docs "Extending
PyTorch: __torch_dispatch__").
"""

from __future__ import annotations

import contextlib
import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from reference.errors import Int8confError

_state = threading.local()


class FloatOpError(Int8confError, RuntimeError):
    """A floating-point tensor appeared inside the guarded integer forward."""


def _suspended() -> bool:
    return getattr(_state, "suspended", 0) > 0


@contextlib.contextmanager
def suspended():
    """Let ops through unchecked inside this block (the kernel's int_mm call)."""
    _state.suspended = getattr(_state, "suspended", 0) + 1
    try:
        yield
    finally:
        _state.suspended -= 1


class FloatGuard(TorchDispatchMode):
    """Raise ``FloatOpError`` on any float tensor flowing through an aten op.

    Attributes:
        ops_seen: number of aten ops inspected (evidence for reports/tests).
    """

    def __init__(self):
        super().__init__()
        self.ops_seen = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _suspended():
            return func(*args, **kwargs)
        _check_leaves(func, args, "received")
        if kwargs:
            _check_leaves(func, tuple(kwargs.values()), "received")
        out = func(*args, **kwargs)
        self.ops_seen += 1
        _check_leaves(func, out if isinstance(out, (tuple, list)) else (out,), "produced")
        return out


def _check_leaves(func, items, verb: str) -> None:
    """Raise FloatOpError for a float tensor or float dtype among items (one level of nesting)."""
    for t in items:
        if isinstance(t, (tuple, list)):
            _check_leaves(func, t, verb)
        elif isinstance(t, torch.Tensor):
            if t.dtype.is_floating_point or t.dtype.is_complex:
                raise FloatOpError(f"float guard: {func} {verb} a {t.dtype} tensor inside the integer forward")
        elif isinstance(t, torch.dtype) and (t.is_floating_point or t.is_complex):
            raise FloatOpError(f"float guard: {func} asked for dtype {t} inside the integer forward")


@contextlib.contextmanager
def float_guard(enabled: bool = True):
    """Context manager: activate a ``FloatGuard`` (no-op if ``enabled`` is False).

    Yields the FloatGuard (or None).
    Raises:
        FloatOpError: from inside the block, on the first float tensor.
    """
    if not enabled:
        yield None
        return
    g = FloatGuard()
    with g:
        yield g
