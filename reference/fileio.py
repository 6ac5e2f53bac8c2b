"""Atomic writers (temp file + ``os.replace``: a crash never leaves half a file), JSON readers that fail with one line
naming the file, and portable paths for committed reports."""

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
    """Write ``data`` to ``path`` atomically (mode 0644, parents created); OSError leaves ``path`` as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:  # noqa: BLE001 -- cleanup then re-raise: no temporary file left behind
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """UTF-8 text version of :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any, indent: int = 2, **dumps_kwargs) -> None:
    """Write ``obj`` as key-sorted UTF-8 JSON (trailing newline), atomically; extra arguments go to ``json.dumps``."""
    kw = {"sort_keys": True, "ensure_ascii": False} | dumps_kwargs
    atomic_write_text(path, json.dumps(obj, indent=indent, **kw) + "\n")


def file_sha256(path: Path) -> str:
    """SHA-256 hex digest of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_json_object(path: Path, error: type = Int8confError, missing_hint: str = "") -> dict:
    """The JSON object in ``path``; raises ``error`` (one line naming the file, plus ``missing_hint``) when it is
    missing, not UTF-8 JSON, or not an object."""
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


#: the directory holding the ``reference`` package (a checkout's root, or site-packages)
REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE_ENV = "INT8CONF_CACHE"


def cache_location(cache=None) -> Path:
    """The artifact cache: ``cache``, ``$INT8CONF_CACHE`` or ``~/.cache/int8conf`` (not created)."""
    return Path(cache) if cache is not None else Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "int8conf")


#: what an absolute path outside every known root becomes: ``.../<name>``
EXTERNAL = "..."


def env_prefix(var: str, default: str) -> str:
    """How a report names the folder of environment variable ``var``: ``$VAR`` while it is set, else
    ``${VAR:-default}`` (``default``: where the folder is without it), so a shell expands either the same."""
    return f"${var}" if os.environ.get(var) else f"${{{var}:-{default}}}"


def _path_roots() -> list:
    """``(absolute root, portable prefix)`` pairs, longest root first, each as written and symlink-resolved: repository
    -> relative, cache -> ``$INT8CONF_CACHE``, temporary directory -> ``$TMPDIR``, home -> ``~`` (each variable as
    :func:`env_prefix` writes it: a pasted command finds the folder where the variable is unset too)."""
    pairs = [
        (REPO_ROOT, ""),
        (cache_location(), env_prefix(CACHE_ENV, "~/.cache/int8conf")),
        (Path(tempfile.gettempdir()), env_prefix("TMPDIR", tempfile.gettempdir())),
        (Path.home(), "~"),
    ]
    out: dict = {}
    for root, pre in pairs:
        for variant in (os.path.abspath(root), os.path.realpath(root)):
            if variant != os.sep:
                out.setdefault(variant.rstrip(os.sep), pre)
    return sorted(out.items(), key=lambda kv: -len(kv[0]))


def portable_path(p, _roots=None) -> Any:
    """``p`` as a committed report may show it: relative inside the repository, ``$INT8CONF_CACHE/<rel>``,
    ``$TMPDIR/<rel>`` (``${TMPDIR:-/tmp}/<rel>`` while TMPDIR is unset: :func:`env_prefix`), ``~/<rel>``, else
    ``.../<last component>``; relative paths, "" and None unchanged. A path through a symlink is shown as written
    where a root holds it so (``examples/policies/x.yaml``, not its target), else resolved."""
    if p is None:
        return None
    s = os.fspath(p)
    if not s or not os.path.isabs(s):
        return s
    # the path as written first, then symlink-resolved: a fixed order (a set's order varies with the hash seed,
    # so a path through a symlink showed either name from one process to the next)
    cands = dict.fromkeys((os.path.normpath(os.path.abspath(s)), os.path.realpath(s)))
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
    """``text`` with every absolute path under a known root rewritten as :func:`portable_path` does; paths outside the
    known roots stay (free text cannot be parsed for paths safely), and so does a root that is already a variable's
    default (``${TMPDIR:-/tmp}``: text made portable once is unchanged)."""
    for root, pre in _roots if _roots is not None else _path_roots():
        if root not in text:
            continue
        rx = re.compile(r"(?<!:-)" + re.escape(root) + r"(/|(?![\w.\-]))")
        text = rx.sub(lambda m, pre=pre: (f"{pre}/" if pre else "") if m.group(1) else (pre or "."), text)
    return text


def portable_paths(obj: Any, _roots=None) -> Any:
    """A copy of a JSON-like document with every string made portable (a whole path by :func:`portable_path`, other text
    by :func:`portable_text`); keys are kept."""
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
