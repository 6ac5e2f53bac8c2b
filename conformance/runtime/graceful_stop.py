"""SIGTERM as Ctrl-C, so a stopped run still writes its (partial) reports: the first SIGTERM
raises KeyboardInterrupt in the main thread and is remembered (:func:`raise_if_requested` raises
it again where Python discarded it); a second one is ignored so the report is written. SIGINT (Ctrl-C) keeps
Python's behaviour (KeyboardInterrupt) and is remembered too (:func:`record_interrupts`), so that
:func:`stop_requested` tells a stop from a KeyboardInterrupt a kernel raised itself; there the second SIGINT is
ignored (the report is written) and a third raises again."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading

_requested: list = []  # the signal numbers received while the handler was installed
_interrupts: list = []  # the SIGINTs received while :func:`_record_interrupt` was installed


def _record_interrupt(signum, frame):
    _interrupts.append(signum)
    if len(_interrupts) != 2:  # the second SIGINT (`timeout -s INT` signals the process, then its group) is
        raise KeyboardInterrupt  # ignored so the partial report is written; a third one stops at once


def record_interrupts() -> bool:
    """Remember every SIGINT from now on (it still raises KeyboardInterrupt) where SIGINT has Python's default
    handler, from the main thread only (a forked child inherits it). Returns whether it was installed."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        return False
    signal.signal(signal.SIGINT, _record_interrupt)
    return True


def stop_requested() -> bool:
    """Whether a KeyboardInterrupt raised now is a stop: a SIGTERM or SIGINT arrived since the handlers were
    installed, or this process has a SIGINT handler of someone else's, so it cannot tell. False means no signal
    came: the KeyboardInterrupt was raised by code (a kernel) itself (also where SIGINT is ignored, as in a
    process started in the background by a shell: no SIGINT can raise it there)."""
    handler = signal.getsignal(signal.SIGINT)
    return bool(_requested or _interrupts) or handler not in (_record_interrupt, signal.SIG_IGN)


def _raise_interrupt(signum, frame):
    _requested.append(signum)
    if len(_requested) == 1:  # a repeated SIGTERM must not break the partial report's writing
        raise KeyboardInterrupt(f"stopped by signal {signum}")


def raise_if_requested() -> None:
    """Raise KeyboardInterrupt again if SIGTERM arrived since the handler was installed. Long loops call it
    between steps: Python prints and discards an exception raised inside a garbage-collector callback
    (hypothesis installs one), so the handler's own raise can be lost."""
    if _requested:
        raise KeyboardInterrupt(f"stopped by signal {_requested[-1]}")


def restore_interrupts() -> None:
    """Put Python's default SIGINT handler back where :func:`record_interrupts` installed its own, and forget the
    SIGINTs it saw (a pytest run in-process must not leave it behind)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is _record_interrupt:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _interrupts.clear()


def sigterm_as_interrupt() -> bool:
    """Install the handler when SIGTERM still has its default action (a
    handler someone else installed is kept), from the main thread only.
    Returns whether it was installed."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        return False
    signal.signal(signal.SIGTERM, _raise_interrupt)
    return True


def sigterm_as_interrupt_in_pytest(config) -> bool:
    """:func:`sigterm_as_interrupt` for a pytest plugin's ``pytest_configure``, in the process that writes the
    reports (a serial run or the xdist controller), not in an xdist worker (``workerinput``): a worker writes no
    report, so it keeps SIGTERM's default. :func:`restore_sigterm` removes it in ``pytest_unconfigure``.
    Returns whether it was installed."""
    return False if hasattr(config, "workerinput") else sigterm_as_interrupt()


def restore_sigterm() -> None:
    """Put SIGTERM's default action back if :func:`sigterm_as_interrupt`
    installed the handler (a pytest run in-process must not leave it behind)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is _raise_interrupt:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _requested.clear()


def exit_with_parent(forkserver: bool = False) -> bool:
    """Have the kernel end this (child) process with SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``,
    Linux): a child inside a hung kernel never reads its closed pipe, and a parent killed with SIGKILL leaves it
    running. Call it first thing in the child. The signal follows the *thread* that started the child: arm it
    only in children of a thread that outlives them. True when armed (the process exits at once if its parent
    already died); False off Linux or where libc has no ``prctl``. ``forkserver``: a forkserver's child, whose
    parent is the forkserver (it ends when the process that asked for the child ends), not that process."""
    if not sys.platform.startswith("linux"):
        return False
    # the parent that started us, not getppid(): a parent killed before this call has
    # already handed us to init or a subreaper
    started_by = None if forkserver else multiprocessing.parent_process()
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
