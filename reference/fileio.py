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
