"""SIGTERM as Ctrl-C, so a stopped run still writes its (partial) reports: the first SIGTERM
raises KeyboardInterrupt in the main thread and is remembered (:func:`raise_if_requested` raises
it again where Python discarded it); a second one is ignored so the report is written."""

from __future__ import annotations

import signal
import threading

_requested: list = []  # the signal numbers received while the handler was installed


def _raise_interrupt(signum, frame):
    _requested.append(signum)
    if len(_requested) == 1:  # a repeated SIGTERM must not break the partial report's writing
        raise KeyboardInterrupt(f"stopped by signal {signum}")


def raise_if_requested() -> None:
    """Raise KeyboardInterrupt again if SIGTERM arrived since the handler was
    installed. Long loops call it between steps: an exception raised inside
    a garbage-collector callback (hypothesis installs one) is printed and
    discarded by Python, so the handler's own raise can be lost.

    Raises:
        KeyboardInterrupt: a stop was requested.
    """
    if _requested:
        raise KeyboardInterrupt(f"stopped by signal {_requested[-1]}")


def sigterm_as_interrupt() -> bool:
    """Install the handler when SIGTERM still has its default action (a
    handler someone else installed is kept), from the main thread only.
    Returns whether it was installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, _raise_interrupt)
    return True


def sigterm_as_interrupt_in_pytest(config) -> bool:
    """:func:`sigterm_as_interrupt` for a pytest plugin's ``pytest_configure``
    (the suite's ``conformance.pytest_plugin`` and the gate's
    ``conformance.gate.pytest_gate``): installed in the process that writes
    the reports -- a serial run, or the pytest-xdist controller -- and not
    in an xdist worker: a worker writes no report (its items ship their
    results to the controller as they finish), so it keeps SIGTERM's
    default and whoever stops it ends it at once. The handler is removed
    by :func:`restore_sigterm` in ``pytest_unconfigure``.

    Args:
        config: the ``pytest.Config`` (an xdist worker's has ``workerinput``).

    Returns:
        Whether the handler was installed (False in a worker, outside the
        main thread, or when SIGTERM already had a handler).
    """
    if hasattr(config, "workerinput"):
        return False
    return sigterm_as_interrupt()


def restore_sigterm() -> None:
    """Put SIGTERM's default action back if :func:`sigterm_as_interrupt`
    installed the handler (a pytest run in-process must not leave it behind)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is _raise_interrupt:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _requested.clear()


def exit_with_parent() -> bool:
    """Have the kernel end this (child) process with SIGKILL when its parent
    dies, as ``prctl(PR_SET_PDEATHSIG)`` does on Linux (prctl(2)).

    A sweep's pool workers and the gate's kernel child wait for their parent's
    next request; a parent killed with SIGKILL (an OOM kill, ``kill -9``, a CI
    runner's hard limit) leaves them running, and a child inside a hung kernel
    never reads its closed pipe. They hold nothing to save: the parent is the
    single writer. Call it first thing in the child. No-op (False) off Linux
    or where libc has no ``prctl``. The signal follows the *thread* that
    started the child: arm it only in children started by a thread that
    outlives them (the main thread; a process pool's submitting thread, which
    waits for its results).

    Returns:
        True when armed; the process exits at once if its parent already died.
    """
    import ctypes
    import multiprocessing
    import os
    import sys

    if not sys.platform.startswith("linux"):
        return False
    # the parent that started us, not getppid(): a parent killed before this call has
    # already handed us to init or a subreaper
    started_by = multiprocessing.parent_process()
    parent = started_by.pid if started_by is not None else os.getppid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    pr_set_pdeathsig = 1
    if prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # the parent died before the request was made
        os._exit(1)
    return True
