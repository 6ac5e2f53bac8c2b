"""Float guard: a ``TorchDispatchMode`` that raises ``FloatOpError`` when any aten op inside the integer
forward receives, produces or asks for a floating-point (or complex) tensor. The kernel's int_mm call
runs ``suspended()``: a kernel is a black box with an integer interface.
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
    """Raise ``FloatOpError`` on any float tensor flowing through an aten op; ``ops_seen`` counts the ops inspected."""

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
    """Activate a ``FloatGuard`` (yielded; None and a no-op when ``enabled`` is False)."""
    if not enabled:
        yield None
        return
    g = FloatGuard()
    with g:
        yield g
