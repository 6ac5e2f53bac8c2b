"""File helpers shared by every writer and reader of int8conf files.

Writers are atomic (temp file in the destination directory, then
``os.replace``), so a crash or a full disk never leaves a half-written
report, checkpoint, capture or asset. Readers turn a missing or malformed
JSON file into one ``Int8confError`` line naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from reference.errors import Int8confError


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; parent directories are created.

    The file is made world-readable (``mkstemp`` creates 0600) since reports
    and shipped assets are meant to be shared.

    Raises:
        OSError: the directory cannot be created or written (the temp file is
            removed; an existing ``path`` is left untouched).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """UTF-8 text version of :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any, indent: int = 2, **dumps_kwargs) -> None:
    """Write ``obj`` as key-sorted UTF-8 JSON (trailing newline), atomically.

    Extra keyword arguments go to ``json.dumps`` (e.g. ``allow_nan=False``).
    """
    dumps_kwargs.setdefault("sort_keys", True)
    dumps_kwargs.setdefault("ensure_ascii", False)
    atomic_write_text(path, json.dumps(obj, indent=indent, **dumps_kwargs) + "\n")


def file_sha256(path: Path) -> str:
    """SHA-256 hex digest of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_json_object(path: Path, error: type = Int8confError, missing_hint: str = "") -> dict:
    """Read a JSON file whose top level must be an object.

    Args:
        path: the file.
        error: the Int8confError subclass to raise (CheckpointError, CaptureError, ...).
        missing_hint: appended to the "missing" message, e.g. "not a capture directory".
    Returns:
        the parsed dict.
    Raises:
        ``error``: one line naming the file when it is missing, not UTF-8 JSON,
            or its top level is not an object.
    """
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: missing" + (f" ({missing_hint})" if missing_hint else ""))
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path}: not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(obj, dict):
        raise error(f"{path}: top level is {type(obj).__name__}, expected an object")
    return obj


# ------------------------------------------------------------ portable paths
#: the directory holding the ``reference`` package: the repository root of a
#: checkout (``site-packages`` of an installed copy, where the packages and
#: their assets keep the same relative paths)
REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE_ENV = "INT8CONF_CACHE"


def cache_location(cache=None) -> Path:
    """Where the artifact cache is (``cache`` argument, ``$INT8CONF_CACHE``
    or ``~/.cache/int8conf``), without creating it."""
    return Path(cache) if cache is not None else Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "int8conf")


#: what an absolute path outside every known root becomes: ``.../<name>``
EXTERNAL = "..."


def _path_roots() -> list:
    """``(absolute root, portable prefix)`` pairs, longest root first: the
    repository root (-> relative path), the artifact cache (->
    ``$INT8CONF_CACHE``), the temporary directory (-> ``$TMPDIR``) and the
    home directory (-> ``~``); each root both as written and symlink-resolved."""
    pairs = [
        (REPO_ROOT, ""),
        (cache_location(), f"${CACHE_ENV}"),
        (Path(tempfile.gettempdir()), "$TMPDIR"),
        (Path.home(), "~"),
    ]
    out: dict = {}
    for root, pre in pairs:
        for variant in (os.path.abspath(root), os.path.realpath(root)):
            if variant != os.sep:
                out.setdefault(variant.rstrip(os.sep), pre)
    return sorted(out.items(), key=lambda kv: -len(kv[0]))


def portable_path(p, _roots=None) -> Any:
    """A path as it may appear in a committed report: no machine-specific
    absolute path.

    Inside the repository root: the relative POSIX path
    (``reference/model/assets/captures``); inside the artifact cache:
    ``$INT8CONF_CACHE/<rel>``; the temporary or home directory: ``$TMPDIR/<rel>``,
    ``~/<rel>``; any other absolute path: ``.../<last component>``. Relative
    paths, empty strings and None are returned unchanged.

    Args:
        p: ``str`` / ``os.PathLike`` / None.

    Returns:
        str (None for None).
    """
    if p is None:
        return None
    s = os.fspath(p)
    if not s or not os.path.isabs(s):
        return s
    cands = {os.path.normpath(os.path.abspath(s)), os.path.realpath(s)}
    for root, pre in _roots if _roots is not None else _path_roots():
        for c in cands:
            if c == root:
                return pre or "."
            if c.startswith(root + os.sep):
                rel = Path(os.path.relpath(c, root)).as_posix()
                return f"{pre}/{rel}" if pre else rel
    name = os.path.basename(os.path.normpath(s))
    return f"{EXTERNAL}/{name}" if name else s


def portable_text(text: str, _roots=None) -> str:
    """``text`` with every absolute path under a known root (see
    :func:`portable_path`) rewritten the same way, wherever it occurs (notes,
    error messages, command lines). Paths outside the known roots are left:
    free text cannot be parsed for paths safely."""
    for root, pre in _roots if _roots is not None else _path_roots():
        if root not in text:
            continue
        rx = re.compile(re.escape(root) + r"(/|(?![\w.\-]))")
        text = rx.sub(lambda m, pre=pre: (f"{pre}/" if pre else "") if m.group(1) else (pre or "."), text)
    return text


def portable_paths(obj: Any, _roots=None) -> Any:
    """A copy of a JSON-like document (dicts, lists, scalars) for a committed
    report: a string that is an absolute path by itself goes through
    :func:`portable_path`, any other string through :func:`portable_text`.
    Dict keys are kept."""
    roots = _roots if _roots is not None else _path_roots()
    if isinstance(obj, dict):
        return {k: portable_paths(v, roots) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [portable_paths(v, roots) for v in obj]
    if isinstance(obj, str):
        if os.path.isabs(obj) and not any(ch.isspace() for ch in obj):
            return portable_path(obj, roots)
        return portable_text(obj, roots)
    return obj
