"""What a kernel reports about itself while it runs (feeds checks C1 and C2).

A kernel calls :func:`record_path` to say which code path it took (e.g.
``"triton-native"``, ``"triton-interpreter"``, ``"int_mm-padded"``) and
:func:`record_operands` with the tensors it actually received. The runner
opens a :func:`capture` around each call and copies what was recorded into
``KernelRun.manifest`` / ``KernelRun.received_digests``.

Outside a capture both functions are no-ops, so kernels can call them
unconditionally. Captures nest (a fault wrapper calling an inner kernel):
records go to the innermost open capture, and the last record wins, so the
operands digested are the ones the innermost kernel saw.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Iterator, Optional

from torch import Tensor

from reference.operands import tensor_digest

__all__ = ["Trace", "capture", "record_path", "record_operands", "current"]


@dataclass
class Trace:
    """Everything recorded during one kernel call.

    Attributes:
        path: code path the kernel says it took ("" if it said nothing).
        extra: free key/values the kernel attached to its path (JSON-able).
        received_digests: ``{"a","b","scale_a","scale_b","bias"} -> sha256 hex``
            of the operands the kernel received (bias digest "none" when None);
            empty if the kernel never called :func:`record_operands`.
        paths: every path recorded, in order (a wrapper and its inner kernel).
        digests: every ``(source_digest, digest_of)`` recorded, in order: the
            run-time source digest a kernel reported and whose it is (None:
            the caller's own; a built-in called inside another kernel names
            itself, e.g. ``"cpu"``), kept per call so an inner kernel's record
            cannot overwrite its wrapper's.
    """

    path: str = ""
    extra: dict = field(default_factory=dict)
    received_digests: dict = field(default_factory=dict)
    paths: list = field(default_factory=list)
    digests: list = field(default_factory=list)


_CURRENT: contextvars.ContextVar[Optional[Trace]] = contextvars.ContextVar("int8conf_kernel_trace", default=None)


@contextlib.contextmanager
def capture() -> Iterator[Trace]:
    """Open a fresh :class:`Trace` for the duration of the ``with`` block."""
    t = Trace()
    token = _CURRENT.set(t)
    try:
        yield t
    finally:
        _CURRENT.reset(token)


def current() -> Optional[Trace]:
    """The innermost open trace, or None outside :func:`capture`."""
    return _CURRENT.get()


def record_path(path: str, **extra) -> None:
    """Record the code path a kernel took, with JSON-able details.

    Args:
        path: short label, e.g. ``"triton-interpreter"``.
        **extra: merged into ``Trace.extra`` (later keys overwrite), except
            ``source_digest`` (the code that ran, for check C1) and
            ``digest_of`` (whose digest it is, when not the caller's own:
            a built-in's name, used by the built-in itself), which go to
            ``Trace.digests``. The runner accepts a ``digest_of`` claim only
            when the digest is that built-in's source digest; any other is
            counted as the running kernel's own
            (``conformance.kernels.runner.own_digests``).
    """
    t = _CURRENT.get()
    if t is None:
        return
    t.path = str(path)
    t.paths.append(str(path))
    if extra.get("source_digest"):
        t.digests.append((str(extra["source_digest"]), extra.get("digest_of")))
    t.extra.update({k: v for k, v in extra.items() if k not in ("source_digest", "digest_of")})


def digest_operands(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor] = None) -> dict:
    """sha256 hex digests of the operands, same keys as
    ``GemmOperands.digests()`` (``reference.operands.tensor_digest``; bias ->
    "none" when None). Tensors on any device (copied to CPU to hash)."""
    out = {}
    for key, t in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias)):
        out[key] = tensor_digest(t)
    return out


def record_operands(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor] = None) -> None:
    """Record digests of the operands the kernel actually received.

    Call it with the tensors as the kernel got them (before any padding or
    reshaping of its own). Costs one hash pass over the operands, only while
    a capture is open.
    """
    t = _CURRENT.get()
    if t is None:
        return
    t.received_digests = digest_operands(a, b, scale_a, scale_b, bias)
