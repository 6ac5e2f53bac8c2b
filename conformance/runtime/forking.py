"""Forking this process: :data:`FORK_GATE` (a fork waits while a background import runs), :func:`start_method` (fork
unless CUDA is initialized here), :func:`map_forked` (calls computed in forked workers, results in order) and
:class:`Forked` (a function whose every call runs in a child of its own: a segfault or hang of it raises here). A
leaf module: the worker pools (``runtime.pool``, ``suite.workers``), the case build and triage import it."""

from __future__ import annotations

import concurrent.futures as cf
import functools
import io
import multiprocessing as mp
import os
import pickle
import select
import signal
import threading
import time
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


class CallDied(RuntimeError):
    """A :class:`Forked` call's process died (a signal, an exit status) or outlived its timeout; the message is
    one line."""


def _forked_answer(fn: Callable, args: tuple, kwargs: dict) -> bytes:
    """The pickled ``("ok", torch.save bytes)`` of ``fn(*args, **kwargs)``, or ``("raised", one line)``."""
    _one_thread()
    try:
        out = ("ok", _call_saved(lambda: fn(*args, **kwargs)))
    except BaseException as e:  # noqa: BLE001 -- the call's exception travels to the parent as one line
        first = str(e).splitlines()[0] if str(e) else ""
        out = ("raised", f"{type(e).__name__}: {first}")
    return pickle.dumps(out)


class Forked:
    """``fn`` with each call run in a child forked for it (``os.fork``: call it where :func:`start_method` says
    ``fork``; a daemonic worker may, as multiprocessing's children may not), its result (``torch.save``-able)
    returned here; the call's exception is raised here as a RuntimeError of its first line, a child that dies or
    outlives ``timeout_s`` as :class:`CallDied`. ``functools.wraps`` keeps ``fn``'s name and signature. Not under
    :data:`FORK_GATE`: a worker child calls it, and it inherited the gate held by the fork that made it."""

    def __init__(self, fn: Callable, timeout_s: float):
        self.fn, self.timeout_s = fn, timeout_s
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: answer, then leave without running the parent's exit handlers
            os.close(r)
            try:
                with os.fdopen(w, "wb") as f:
                    f.write(_forked_answer(self.fn, args, kwargs))
            finally:
                os._exit(0)
        os.close(w)
        chunks, deadline, hung = [], time.monotonic() + self.timeout_s, False
        with os.fdopen(r, "rb", buffering=0) as f:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([f], [], [], left)[0]:
                    hung = True
                    os.kill(pid, signal.SIGKILL)
                    break
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
        if hung:
            raise CallDied(f"hung (killed after {self.timeout_s:g} s)")
        if not chunks:
            if os.WIFSIGNALED(status):
                raise CallDied(f"killed by {signal.Signals(os.WTERMSIG(status)).name}")
            raise CallDied(f"exit status {os.waitstatus_to_exitcode(status)}")
        kind, value = pickle.loads(b"".join(chunks))
        if kind == "raised":
            raise RuntimeError(value)
        return torch.load(io.BytesIO(value), weights_only=False)
