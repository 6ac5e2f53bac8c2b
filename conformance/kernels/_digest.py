"""Source digests for check C1 (kernel manifest): per module (built-ins, one
kernel per module) and per kernel function (third-party kernels)."""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path
from typing import Callable


def module_digest(path: str) -> str:
    """SHA-256 hex of a module's source file bytes (``__file__``)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _qualified_name(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _single_digest(target: Callable) -> str:
    """SHA-256 hex of one function: its module file's bytes + NUL + qualified
    name; else its own source + NUL + name; else the name alone."""
    name = _qualified_name(target).encode()
    try:
        src_file = inspect.getsourcefile(target)
        if src_file and Path(src_file).is_file():
            h = hashlib.sha256(Path(src_file).read_bytes())
            h.update(b"\0" + name)
            return h.hexdigest()
    except TypeError:
        pass
    try:
        return hashlib.sha256(inspect.getsource(target).encode() + b"\0" + name).hexdigest()
    except (OSError, TypeError):
        return hashlib.sha256(name).hexdigest()


def callable_digest(fn: Callable) -> str:
    """SHA-256 hex identifying one kernel *function*, for check C1.

    The digest covers the bytes of the module file defining ``fn`` (so any
    change to the module, helpers defined in it included, changes it) *and*
    ``fn``'s qualified name, so several kernels defined in one module get
    different digests (:func:`_single_digest`). A ``functools.wraps`` wrapper
    covers itself *and* every function it wraps (``__wrapped__``, up to 16
    levels): SHA-256 over their single digests joined by commas, so a change
    to the wrapper's module or to the wrapped one changes it. Code in *other*
    modules the kernel imports is not covered (state their versions in
    ``KernelSpec.version``).
    """
    chain, target = [], fn
    while target is not None and len(chain) < 16:
        chain.append(_single_digest(target))
        target = getattr(target, "__wrapped__", None)
    if len(chain) == 1:
        return chain[0]
    return hashlib.sha256(",".join(chain).encode("ascii")).hexdigest()
