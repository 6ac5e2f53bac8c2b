"""What a kernel reports about itself while it runs (checks C1, C2): :func:`record_path` (the code path taken,
with details) and :func:`record_operands` (digests of the tensors it received). The runner opens a
:func:`capture` around each call; outside one both are no-ops. Captures nest: records go to the innermost."""

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
    """Everything recorded during one kernel call: ``path`` (last reported, "" if none), ``extra``,
    ``received_digests`` (operand -> sha256 hex, bias "none"), ``paths`` (all, in order), ``digests``
    (``(source_digest, digest_of)`` pairs in order: ``digest_of`` None = the caller's own)."""

    path: str = ""
    extra: dict = field(default_factory=dict)
    received_digests: dict = field(default_factory=dict)
    paths: list = field(default_factory=list)
    digests: list = field(default_factory=list)


_CURRENT: contextvars.ContextVar[Optional[Trace]] = contextvars.ContextVar("int8conf_kernel_trace", default=None)


@contextlib.contextmanager
def capture() -> Iterator[Trace]:
    t = Trace()
    token = _CURRENT.set(t)
    try:
        yield t
    finally:
        _CURRENT.reset(token)


def current() -> Optional[Trace]:
    """The innermost open trace, or None outside :func:`capture`."""
    return _CURRENT.get()


def record_path(path: str, **extra: object) -> None:
    """Record the code path taken; ``extra`` merges into ``Trace.extra`` except ``source_digest`` and
    ``digest_of`` (whose digest: a built-in's name), which go to ``Trace.digests`` (``runner.own_digests`` judges
    those claims)."""
    t = _CURRENT.get()
    if t is None:
        return
    t.path = str(path)
    t.paths.append(str(path))
    if extra.get("source_digest"):
        t.digests.append((str(extra["source_digest"]), extra.get("digest_of")))
    t.extra.update({k: v for k, v in extra.items() if k not in ("source_digest", "digest_of")})


def digest_operands(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor] = None) -> dict:
    """sha256 hex digests of the operands (keys as ``GemmOperands.digests()``; bias 'none' when None)."""
    return {
        k: tensor_digest(t) for k, t in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias))
    }


def record_operands(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor] = None) -> None:
    """Record digests of the operands as the kernel received them (one hash pass, only in a capture)."""
    t = _CURRENT.get()
    if t is None:
        return
    t.received_digests = digest_operands(a, b, scale_a, scale_b, bias)
