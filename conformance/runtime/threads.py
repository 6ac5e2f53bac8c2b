"""torch's CPU threads for the commands that run kernels in their own process (``int8conf check``, the
pytest plugin): ``--threads N`` as given, else the process's share of the cores it may run on (torch's own
default counts the machine's cores, and every xdist worker would take them all)."""

from __future__ import annotations

import os
from typing import Mapping, Optional

from reference.errors import Int8confError


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def torch_threads(
    requested: Optional[int], cores: int, workers: int, environ: Mapping[str, str], option: str = "--threads"
) -> Optional[int]:
    """torch intra-op threads for one of ``workers`` processes sharing ``cores``, in order: ``requested`` (the
    option ``option``, at most ``cores``); ``INT8CONF_WORKER_THREADS`` in ``environ``; None (torch's choice) when
    ``OMP_NUM_THREADS`` is set; else ``max(1, cores // workers)``. Raises Int8confError (one line) for
    ``requested`` > ``cores`` or an ``INT8CONF_WORKER_THREADS`` that is not an integer >= 1."""
    if requested is not None:
        if requested > cores:
            raise Int8confError(f"{option} {requested}: this process may use {cores} cores; give at most {cores}")
        return requested
    text = environ.get("INT8CONF_WORKER_THREADS")
    if text is not None:
        try:
            n = int(text)
        except ValueError:
            n = 0
        if n < 1:
            raise Int8confError(f"INT8CONF_WORKER_THREADS must be an integer >= 1, got {text!r}")
        return n
    if environ.get("OMP_NUM_THREADS"):
        return None
    return max(1, cores // max(1, workers))


def set_torch_threads(requested: Optional[int], workers: int = 1, option: str = "--threads") -> Optional[int]:
    """Apply :func:`torch_threads` to this process; returns the count set (None: left to torch)."""
    n = torch_threads(requested, available_cores(), workers, os.environ, option)
    if n is not None:
        import torch

        torch.set_num_threads(n)
    return n
