"""One way for a test to run this project's Python in a fresh process: ``python -m pytest``, ``python -m
conformance.cli`` and the like, with the repository and ``tests/helpers`` (the buggy kernels) importable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HELPERS = REPO / "tests" / "helpers"


def python_env(**extra: str) -> dict:
    """This process's environment with ``PYTHONPATH`` = the repository, ``tests/helpers``, then the inherited one,
    and ``extra`` set."""
    path = os.pathsep.join(p for p in (str(REPO), str(HELPERS), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def run_python(args: list, cwd, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python *args`` in ``cwd`` (text output captured) with :func:`python_env` unless ``env`` is given."""
    return subprocess.run(
        [sys.executable, *map(str, args)],
        cwd=cwd,
        env=python_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
