"""Forking this process: :data:`FORK_GATE` (a fork waits while a background import runs), :func:`start_method` (fork
unless CUDA is initialized here) and :func:`map_forked` (calls computed in forked workers, results in order). A
leaf module: the worker pools (``runtime.pool``, ``suite.workers``) and the case build import it."""

from __future__ import annotations

import concurrent.futures as cf
import io
import multiprocessing as mp
import threading
from typing import Callable, Sequence

import torch

#: held by a thread that imports beside the forking threads (``suite.workers.import_in_background``); a fork waits
#: for it, since a child forked in the middle of an import inherits that module half-initialized and locked
FORK_GATE = threading.Lock()


def start_method() -> str:
    """``fork`` when available and CUDA is not initialized here, else ``spawn``."""
    if "fork" not in mp.get_all_start_methods():
        return "spawn"
    try:
        return "spawn" if torch.cuda.is_initialized() else "fork"
    except RuntimeError:  # a CUDA state query failing (torch's CUDA errors are RuntimeErrors)
        return "fork"


def _call_saved(fn: Callable[[], object]) -> bytes:
    """Worker of :func:`map_forked`: ``fn()`` as ``torch.save`` bytes (views, strides and dtypes kept; no shared
    memory handles per tensor)."""
    buf = io.BytesIO()
    torch.save(fn(), buf)
    return buf.getvalue()


def _one_thread() -> None:
    torch.set_num_threads(1)  # an OpenMP pool the parent used deadlocks after fork (as in ``runtime.pool._serve``)


def map_forked(fns: Sequence[Callable[[], object]], workers: int) -> list:
    """``[fn() for fn in fns]``, computed in up to ``workers`` forked processes (one torch thread each, idle ones
    take the next call) when this process can fork (:func:`start_method`) and ``workers`` > 1, else here. The
    results must be ``torch.save``-able; an exception of a call is raised here."""
    workers = min(workers, len(fns))
    if workers < 2 or start_method() != "fork":
        return [fn() for fn in fns]
    with FORK_GATE:  # the workers are forked by the first submissions
        ex = cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=_one_thread)
        futures = [ex.submit(_call_saved, fn) for fn in fns]
    with ex:
        return [torch.load(io.BytesIO(f.result()), weights_only=False) for f in futures]
