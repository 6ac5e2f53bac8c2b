"""The built fixed cases kept in the artifact cache, so a second run (or another process: xdist workers, the
pytest plugin beside ``int8conf check``) loads them instead of building them again (tie searches and planting
dominate a CPU run's set-up). File: ``<cache>/cases/<key>.pt`` (``torch.save`` of the GemmOperands list: views,
strides and meta kept), written atomically. Key: SHA-256 of every ``.py`` file of ``conformance/cases`` and
``reference`` (the code that builds cases), the torch version (its generators' streams) and the build's
arguments; the :data:`KEEP` newest entries stay. Processes asking for one entry at once wait on ``<key>.lock``
while the first builds it. ``INT8CONF_CASE_CACHE=0`` builds every time."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch

from reference.fileio import cache_location

ENV = "INT8CONF_CASE_CACHE"
#: entries kept (the newest): one per build label of the current code, a few of earlier code
KEEP = 4
_ROOT = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 hex over the sources that build cases (``conformance/cases``, ``reference``) and torch's version."""
    h = hashlib.sha256(torch.__version__.encode())
    for d in ("conformance/cases", "reference"):
        for p in sorted((_ROOT / d).rglob("*.py")):
            h.update(str(p.relative_to(_ROOT)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def cached_cases(label: str, build: Callable[[], list]) -> list:
    """``build()``'s cases, loaded from the cache when an entry for (code, ``label``) exists, else built and
    stored. A cache that cannot be read or written only costs the build."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return build()
    key = hashlib.sha256(f"{code_digest()}/{label}".encode()).hexdigest()[:32]
    path = cache_location() / "cases" / f"{key}.pt"
    with _building(path):  # processes wanting the same entry wait for the one that builds it
        return _load_or_build(path, build)


@contextlib.contextmanager
def _building(path: Path):
    """An exclusive ``flock`` on ``<entry>.lock`` (blocking); no lock when the folder is unwritable."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path.with_suffix(".lock"), "a")
    except OSError:
        yield
        return
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield  # closing the descriptor releases the lock


def _load_or_build(path: Path, build: Callable[[], list]) -> list:
    try:
        return torch.load(path, weights_only=False)
    except Exception:  # noqa: BLE001 -- missing, partial or from another torch: build
        pass
    cases = build()
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
            tmp = Path(f.name)
            torch.save(cases, f)
        tmp.replace(path)
        for old in sorted(path.parent.glob("*.pt"), key=lambda p: p.stat().st_mtime)[:-KEEP]:
            old.unlink(missing_ok=True)  # entries of earlier code: ~160 MB each
            old.with_suffix(".lock").unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 -- an unwritable cache only costs the next run its build
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return cases
