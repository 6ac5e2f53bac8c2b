"""Scoped memo of pure per-tensor results (digests, exact accumulators, bounds).

A sweep evaluates 54 cells per layer (9 faults x 3 coverages x 2 scale
modes), and every cell asks the same questions of the same operand tensors:
their SHA-256 digests (check C2, the fault masks' case key, the runner's
record of what a kernel received), the exact accumulator ``a @ b.T`` and
the tight bound ``|a| @ |b|.T`` (checks C3 / C4 / C5 / C6 / C8, the
precondition faults). Each answer is a pure function of the tensors'
contents, so inside :func:`scope` it is computed once per tensor and
reused.

Keys are tensor *identities* plus their in-place version counters
(``Tensor._version``, bumped by every in-place op torch sees), checked
against a weak reference so a freed tensor whose ``id`` is reused can never
hit: ``(id(t), t._version)`` with ``ref() is t``. Content is never read to
build a key (that would cost what the memo saves). Not covered: a write
torch does not see (a raw pointer write by a custom kernel into a tensor it
was not given as output). In the sweep only kernels write, and the
conformance runner hands them clones of the operands and compares the
clones with the originals bit for bit afterwards, so the memoized tensors
are never written.

Copies: :func:`note_copy` (called by ``reference.operands.copy_keep_layout``)
records that a fresh copy has the same contents as its source, so the
digest of the clone a kernel is handed (``trace.record_operands``) costs
nothing either; a later in-place write bumps the clone's version and its
digest is computed again.

Facts that spare a read-back (issue 7g): :func:`note_part` records that a
tensor is a cut of another (a part of a tensor without NaN / inf has none),
:func:`note_bound` that an integer tensor's magnitude is bounded by
construction (an int8 GEMM's accumulator: ``K * 2**14``), so code that would
read the tensor to find out skips the read; :func:`peek` looks a result up
without computing it.

Outside a scope nothing is stored and every call computes (the default:
tests, ``int8conf check``, the pytest plugin behave exactly as before).
Scopes and their stores are per thread (``threading.local``): the sweep's
threaded executor evaluates one batch per thread, each in its own scope.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Callable, Iterator, Optional

import torch

_LOCAL = threading.local()  # .state: this thread's scope (a sweep may run batches in threads)


def _state() -> dict:
    """This thread's memo state: ``depth`` (open scopes), ``store``, ``hits``, ``misses``."""
    try:
        return _LOCAL.state
    except AttributeError:
        _LOCAL.state = {"depth": 0, "store": {}, "hits": 0, "misses": 0}
        return _LOCAL.state


def active() -> bool:
    """True inside :func:`scope`."""
    return _state()["depth"] > 0


@contextlib.contextmanager
def scope() -> Iterator[dict]:
    """Memoize inside the block; everything is dropped when the outermost
    scope exits. Yields the statistics dict (``hits``, ``misses``)."""
    st = _state()
    st["depth"] += 1
    try:
        yield st
    finally:
        st["depth"] -= 1
        if st["depth"] == 0:
            st["store"] = {}


def clear() -> None:
    """Drop every stored result (the scope stays open)."""
    _state()["store"] = {}


def _ident(t) -> Optional[tuple]:
    if not isinstance(t, torch.Tensor):
        return None
    return (id(t), int(t._version))


def _alive(refs, tensors) -> bool:
    for r, t in zip(refs, tensors):
        if r() is not t:
            return False
    return True


def _key(kind: str, tensors: tuple) -> tuple[tuple, list]:
    """(store key, live tensors) of a result: one pass over the tensors builds
    the key (identities + versions, None kept) and the list of referents."""
    key, live = [kind], []
    for t in tensors:
        key.append(_ident(t))
        if t is not None:
            live.append(t)
    return tuple(key), live


def cached(kind: str, tensors: tuple, compute: Callable[[], object]):
    """``compute()`` memoized on (``kind``, identities + versions of ``tensors``).

    Args:
        kind: name of the result (``"digest"``, ``"exact"``, ``"bound"``).
        tensors: the input tensors the result depends on (None entries allowed:
            they key as None).
        compute: zero-argument function returning the result.

    Returns:
        The (possibly stored) result. Outside a scope: ``compute()``.
    """
    st = _state()
    if st["depth"] <= 0:
        return compute()
    key, live = _key(kind, tensors)
    store = st["store"]
    hit = store.get(key)
    if hit is not None and _alive(hit[0], live):
        st["hits"] += 1
        return hit[1]
    st["misses"] += 1
    val = compute()
    store[key] = (tuple([weakref.ref(t) for t in live]), val)
    return val


def remember(kind: str, tensors: tuple, value) -> None:
    """Store ``value`` as :func:`cached`'s result for (``kind``, ``tensors``):
    a result known by construction (e.g. the digest of a tensor built by a
    recorded recipe, ``reference.operands.derived_digest``). No-op outside a
    scope."""
    if _state()["depth"] <= 0:
        return
    key, live = _key(kind, tensors)
    _state()["store"][key] = (tuple(weakref.ref(t) for t in live), value)


def moved(t, device):
    """``t.to(device)``, memoized on ``t``'s identity and version inside a
    scope (a kernel's output is compared on the references' device by several
    checks and by the ground truth: one host-to-device copy, not one per
    comparison). ``t`` itself when it is already there or not a tensor;
    callers must not write into the result."""
    if not isinstance(t, torch.Tensor):
        return t
    dev = torch.device(device)
    if t.device == dev or (dev.index is None and t.device.type == dev.type):
        return t
    return cached(("moved", str(dev)), (t,), lambda: t.to(dev))


def note_copy(src, dst) -> None:
    """Record that ``dst`` (a fresh copy) has ``src``'s dtype, shape and
    bits: its known digest becomes ``dst``'s too, and ``dst`` remembers its
    source (:func:`copy_source`), so when ``src``'s digest is not known yet
    whichever of the two is digested first, the other costs nothing (the
    runner hands a kernel copies of a case's operands, and the kernel's
    record of what it received is often digested before the case itself).
    No-op outside a scope."""
    if not active() or not isinstance(src, torch.Tensor) or not isinstance(dst, torch.Tensor):
        return
    if src.dtype != dst.dtype or tuple(src.shape) != tuple(dst.shape):
        return
    store = _state()["store"]
    # the source is remembered in any case: other per-content results (the
    # operand value checks of reference.validate) carry over through it too
    store[("copyof", _ident(dst))] = ((weakref.ref(dst),), (weakref.ref(src), int(src._version)))
    hit = store.get(("digest", _ident(src)))
    if hit is not None and _alive(hit[0], (src,)):
        store[("digest", _ident(dst))] = ((weakref.ref(dst),), hit[1])


def copy_source(t) -> Optional[torch.Tensor]:
    """The tensor ``t`` was copied from (:func:`note_copy`), when both are
    alive and neither was written since the copy (in-place version counters
    unchanged); else None. Always None outside a scope."""
    return _unchanged_origin("copyof", t)


def note_part(whole, part) -> None:
    """Record that ``part`` (a fresh tensor) holds a subset of ``whole``'s
    elements (a slice, copied): a property every element of ``whole`` has,
    e.g. no NaN / inf (``reference.validate``), ``part``'s elements have
    too (:func:`part_source`). No-op outside a scope."""
    if not active() or not isinstance(whole, torch.Tensor) or not isinstance(part, torch.Tensor):
        return
    _state()["store"][("partof", _ident(part))] = ((weakref.ref(part),), (weakref.ref(whole), int(whole._version)))


def part_source(t) -> Optional[torch.Tensor]:
    """The tensor ``t`` was cut from (:func:`note_part`), when both are alive
    and neither was written since; else None (always outside a scope)."""
    return _unchanged_origin("partof", t)


def _unchanged_origin(kind: str, t) -> Optional[torch.Tensor]:
    """The tensor recorded as ``t``'s origin under ``kind`` (``"copyof"`` /
    ``"partof"``), when both are alive and neither was written since; else None."""
    if not active() or not isinstance(t, torch.Tensor):
        return None
    hit = _state()["store"].get((kind, _ident(t)))
    if hit is None or not _alive(hit[0], (t,)):
        return None
    ref, version = hit[1]
    origin = ref()
    if origin is None or int(origin._version) != version:
        return None
    return origin


def peek(kind, tensors: tuple):
    """The result :func:`cached` stored for (``kind``, ``tensors``), or None
    when there is none (nothing is computed; always None outside a scope)."""
    if not active():
        return None
    hit = _state()["store"].get((kind,) + tuple(_ident(t) for t in tensors))
    live = tuple(t for t in tensors if t is not None)
    if hit is None or not _alive(hit[0], live):
        return None
    return hit[1]


def note_bound(t, bound: int) -> None:
    """Record that every element of the integer tensor ``t`` has magnitude at
    most ``bound`` (known from how ``t`` was made, e.g. an int8 GEMM's
    accumulator: ``K * 2**14``), so that a caller that must know whether
    ``t`` leaves some range can skip reading it (:func:`known_bound`). A
    later in-place write to ``t`` voids the note. No-op outside a scope."""
    if not active() or not isinstance(t, torch.Tensor):
        return
    _state()["store"][("bound_note", _ident(t))] = ((weakref.ref(t),), int(bound))


def known_bound(t) -> Optional[int]:
    """The bound :func:`note_bound` recorded for ``t`` (unwritten since), or
    None (always outside a scope)."""
    if not active() or not isinstance(t, torch.Tensor):
        return None
    hit = _state()["store"].get(("bound_note", _ident(t)))
    if hit is None or not _alive(hit[0], (t,)):
        return None
    return hit[1]
