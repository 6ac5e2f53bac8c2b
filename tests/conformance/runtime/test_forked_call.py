"""``runtime.forking.Forked``: a call in a child of its own - the result comes back, an exception as one line, a
segfault or a hang as ``CallDied`` naming it - also from a daemonic worker (triage's search child)."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import time

import pytest
import torch

from conformance.runtime.forking import CallDied, Forked


def _segv():
    ctypes.string_at(0)


def _hang():
    time.sleep(60)


def _raise():
    raise ValueError("first line\nsecond line")


def _double(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).t()


def test_the_result_comes_back_with_its_strides():
    out = Forked(_double, 30)(torch.arange(6).reshape(2, 3))
    assert out.tolist() == [[0, 6], [2, 8], [4, 10]] and out.stride() == (1, 3)
    assert Forked(_double, 30).__name__ == "_double"


@pytest.mark.parametrize(
    "fn, timeout, kind, line",
    [
        (_segv, 30, CallDied, "killed by SIGSEGV"),
        (_hang, 1, CallDied, "hung (killed after 1 s)"),
        (_raise, 30, RuntimeError, "ValueError: first line"),
    ],
)
def test_a_crash_a_hang_and_a_raise_are_raised_here(fn, timeout, kind, line):
    with pytest.raises(kind) as e:
        Forked(fn, timeout)()
    assert str(e.value) == line and (kind is CallDied) == isinstance(e.value, CallDied)


def _in_daemon(q):
    try:
        Forked(_segv, 30)()
    except CallDied as e:
        q.put(str(e))


def test_a_daemonic_worker_may_call_it():
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_in_daemon, args=(q,), daemon=True)
    p.start()
    p.join(60)
    assert q.get(timeout=5) == "killed by SIGSEGV"
