"""Source digests for check C1: per module file (built-ins) and per kernel callable (third-party kernels)."""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
import sys
import sysconfig
import types
from pathlib import Path
from typing import Callable, Optional

#: at most this many helper files are read per kernel (the first ones in walk order)
MAX_HELPER_FILES = 256
#: int8conf's own packages: a user kernel importing them is not "its" code
_OWN_DIRS = tuple(Path(__file__).resolve().parents[2] / d for d in ("conformance", "reference", "faults", "detllm"))
#: the standard library (a functools.partial's module is functools)
_STDLIB_DIRS = tuple({Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib")})


def module_digest(path: str) -> str:
    """SHA-256 hex of a module's source file bytes (``__file__``)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _is_code(obj: object) -> bool:
    return any(
        f(obj) for f in (inspect.isfunction, inspect.ismethod, inspect.isclass, inspect.ismodule, inspect.isbuiltin)
    )


def _qualified_name(fn: Callable) -> str:
    """``module.qualname``; a callable instance is named by its class (``Cls()``), never by its repr."""
    if not _is_code(fn) and not hasattr(fn, "__qualname__"):
        t = type(fn)
        return f"{t.__module__}.{t.__qualname__}()"
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _partial_args(p: functools.partial) -> str:
    # bound arguments of a partial, memory addresses removed (stable across processes)
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr((p.args, sorted(p.keywords.items()))))


def _single_digest(target: Callable) -> str:
    """SHA-256 hex of one callable: its module file's bytes + NUL + qualified name; else its source +
    NUL + name; else the name. An instance is digested by its class; a ``functools.partial`` by its bound arguments."""
    if isinstance(target, functools.partial):
        return hashlib.sha256(b"functools.partial\0" + _partial_args(target).encode()).hexdigest()
    name = _qualified_name(target).encode()
    if not _is_code(target):
        target = type(target)
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
    """SHA-256 hex identifying one kernel function (check C1), stable across processes.

    Covers the defining module's bytes and the qualified name (:func:`_single_digest`); a wrapper (``__wrapped__``,
    ``functools.partial``, up to 16 levels) covers every link, joined. When the kernel has helper modules of its own
    project (:func:`helper_files`), the digest also covers ``relative/path.py:<sha256>`` of each, sorted. Not covered:
    installed libraries, constants imported by value, imports inside function bodies."""
    chain: list[str] = []
    targets: list[Callable] = []
    target: Optional[Callable] = fn
    while target is not None and len(chain) < 16:
        chain.append(_single_digest(target))
        targets.append(target)
        target = target.func if isinstance(target, functools.partial) else getattr(target, "__wrapped__", None)
    base = chain[0] if len(chain) == 1 else hashlib.sha256(",".join(chain).encode("ascii")).hexdigest()
    helpers = helper_files(targets)
    if not helpers:
        return base
    parts = [base] + [f"{rel}:{hashlib.sha256(path.read_bytes()).hexdigest()}" for rel, path in helpers]
    return hashlib.sha256(",".join(parts).encode()).hexdigest()


def _namespace_and_file(obj: object) -> Optional[tuple[dict, Path]]:
    """(globals, .py file) of a module, a function, or an object naming its module in
    ``__module__``; None otherwise."""
    ns: Optional[dict]
    if isinstance(obj, types.ModuleType):
        ns, f = vars(obj), getattr(obj, "__file__", None)
    elif isinstance(obj, types.FunctionType):
        ns, f = obj.__globals__, obj.__code__.co_filename
    else:
        try:
            modname = getattr(obj, "__module__", None)
        except Exception:  # noqa: BLE001 -- a lazy proxy may raise anything on getattr
            return None
        mod = sys.modules.get(modname) if isinstance(modname, str) else None
        ns, f = (vars(mod), getattr(mod, "__file__", None)) if mod else (None, None)
    if ns is None or not f or not str(f).endswith(".py"):
        return None
    path = Path(f).resolve()
    return (ns, path) if path.is_file() else None


def _project_root(ns: dict, path: Path) -> Path:
    """The kernel's project folder: its top-level package's folder (namespace package: first
    ``__path__`` entry), else its file's folder."""
    top = str(ns.get("__name__", "")).split(".")[0]
    pkg = sys.modules.get(top) if "." in str(ns.get("__name__", "")) else None
    pkg_file = getattr(pkg, "__file__", None)
    if pkg_file:
        return Path(pkg_file).resolve().parent
    pkg_path = list(getattr(pkg, "__path__", None) or [])
    return Path(pkg_path[0]).resolve() if pkg_path else path.parent


def _parent_packages(ns: dict) -> list:
    """The loaded parent packages of the module whose globals are ``ns``."""
    parts = str(ns.get("__name__", "")).split(".")[:-1]
    return [m for m in (sys.modules.get(".".join(parts[:i])) for i in range(len(parts), 0, -1)) if m is not None]


def _is_library(path: Path) -> bool:
    """An installed library, the standard library or int8conf itself."""
    installed = any(p in ("site-packages", "dist-packages") for p in path.parts)
    return installed or any(path.is_relative_to(d) for d in _STDLIB_DIRS + _OWN_DIRS)


def _is_helper(path: Path, root: Path) -> bool:
    return path.is_relative_to(root) and not _is_library(path)


def helper_files(targets: list) -> list[tuple[str, Path]]:
    """The kernel's helper modules ``[(posix path relative to the project folder, path)]``, sorted:
    ``.py`` files reachable transitively from the targets' globals (modules, functions, classes, parent packages)
    under the project folder, outside libraries and int8conf, other than the targets' own; at most
    :data:`MAX_HELPER_FILES`."""
    seen: dict[Path, dict] = {}
    root: Optional[Path] = None
    for t in targets:
        found = _namespace_and_file(t)
        if found is None or _is_library(found[1]):  # e.g. a partial: functools, not the kernel
            continue
        ns, path = found
        root = root or _project_root(ns, path)
        seen.setdefault(path, ns)
    if root is None:
        return []
    own = set(seen)
    queue = list(seen.values())
    while queue and len(seen) - len(own) < MAX_HELPER_FILES:
        ns = queue.pop(0)
        for v in _parent_packages(ns) + list(ns.values()):
            found = _namespace_and_file(v)
            if found is None or found[1] in seen or not _is_helper(found[1], root):
                continue
            sub_ns, path = found
            seen[path] = sub_ns
            queue.append(sub_ns)
            if len(seen) - len(own) >= MAX_HELPER_FILES:
                break
    return sorted((p.relative_to(root).as_posix(), p) for p in seen if p not in own)
