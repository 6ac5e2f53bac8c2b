"""Source digests for check C1 (kernel manifest)."""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path
from typing import Callable


def module_digest(path: str) -> str:
    """SHA-256 hex of a module's source file bytes (``__file__``)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def callable_digest(fn: Callable) -> str:
    """SHA-256 hex of the source of the module defining ``fn`` (whole file),
    else of ``fn``'s own source, else of its qualified name (compiled
    extension functions have no Python source)."""
    target = getattr(fn, "__wrapped__", fn)
    try:
        src_file = inspect.getsourcefile(target)
        if src_file and Path(src_file).is_file():
            return module_digest(src_file)
    except TypeError:
        pass
    try:
        return hashlib.sha256(inspect.getsource(target).encode()).hexdigest()
    except (OSError, TypeError):
        name = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"
        return hashlib.sha256(name.encode()).hexdigest()
