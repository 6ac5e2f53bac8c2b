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


def callable_digest(fn: Callable) -> str:
    """SHA-256 hex identifying one kernel *function*, for check C1.

    The digest covers the bytes of the module file defining ``fn`` (so any
    change to the module, helpers included, changes it) *and* ``fn``'s
    qualified name, so several kernels defined in one module get different
    digests. Without a source file: ``fn``'s own source plus its qualified
    name; without any Python source (compiled extension functions): the
    qualified name alone. ``functools.wraps`` wrappers are followed to the
    wrapped function (``__wrapped__``).
    """
    target = getattr(fn, "__wrapped__", fn)
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
