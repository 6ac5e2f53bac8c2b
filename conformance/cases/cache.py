"""Artifacts kept in the artifact cache, so a second run (or another process: xdist workers, the pytest plugin
beside ``int8conf check``) loads them instead of computing them again: the built fixed cases (:func:`cached_cases`;
tie searches and planting dominate a CPU run's set-up) and C7's reference replays and legal-epilogue envelopes
(:func:`cached_model_reference`; CPU forwards of the model). File: ``<cache>/<folder>/<key>.pt`` (``torch.save``:
views, strides and meta kept), written atomically. Key: SHA-256 of the ``.py`` files of the code that computes the
artifact (cases: ``conformance/cases`` and ``reference``; model references: ``reference`` and
``conformance/checks``), the torch version and the caller's label; the :data:`KEEP` newest entries of a folder stay.
Processes asking for one entry at once wait on ``<key>.lock`` while the first computes it. ``INT8CONF_CASE_CACHE=0``
computes every time."""

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
#: the code whose results each folder keeps
CASE_CODE = ("conformance/cases", "reference")
MODEL_REFERENCE_CODE = ("reference", "conformance/checks")


@lru_cache(maxsize=4)
def code_digest(dirs: tuple = CASE_CODE) -> str:
    """SHA-256 hex over the ``.py`` sources under ``dirs`` (repository-relative) and torch's version."""
    h = hashlib.sha256(torch.__version__.encode())
    for d in dirs:
        for p in sorted((_ROOT / d).rglob("*.py")):
            h.update(str(p.relative_to(_ROOT)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def cached_artifact(folder: str, dirs: tuple, label: str, build: Callable[[], object]) -> object:
    """``build()``'s result, loaded from ``<cache>/<folder>`` when an entry for (code under ``dirs``, ``label``)
    exists, else computed and stored. A cache that cannot be read or written only costs the computation."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return build()
    key = hashlib.sha256(f"{code_digest(dirs)}/{label}".encode()).hexdigest()[:32]
    path = cache_location() / folder / f"{key}.pt"
    with _building(path):  # processes wanting the same entry wait for the one that builds it
        return _load_or_build(path, build)


def cached_cases(label: str, build: Callable[[], list]) -> list:
    """``build()``'s cases (:func:`cached_artifact` in ``cases``, keyed on the case-building code)."""
    return cached_artifact("cases", CASE_CODE, label, build)


def cached_model_reference(label: str, build: Callable[[], object]) -> object:
    """A C7 reference replay or envelope (:func:`cached_artifact` in ``model-references``, keyed on the reference
    and check code); ``label`` names the model (files and stamps), windows digest, scale mode and contract."""
    return cached_artifact("model-references", MODEL_REFERENCE_CODE, label, build)


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


def _load_or_build(path: Path, build: Callable[[], object]) -> object:
    try:
        return torch.load(path, weights_only=False)
    except Exception:  # noqa: BLE001 -- missing, partial or from another torch: build
        pass
    result = build()
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
            tmp = Path(f.name)
            torch.save(result, f)
        tmp.replace(path)
        for old in sorted(path.parent.glob("*.pt"), key=lambda p: p.stat().st_mtime)[:-KEEP]:
            old.unlink(missing_ok=True)  # entries of earlier code (cases: ~160 MB each)
            old.with_suffix(".lock").unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 -- an unwritable cache only costs the next run its build
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return result
