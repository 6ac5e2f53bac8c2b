"""Scoped, per-thread memo of pure per-tensor results (digests, exact accumulators, bounds, comparisons).

Inside :func:`scope` a result is computed once per tensor identity and in-place
version (weak references: a reused id never hits); content is never read to
build a key, and a write torch does not see is not covered. Recorded facts
(:func:`note_copy`, :func:`note_part`, :func:`note_bound`) spare reads. Outside a
scope nothing is stored and every call computes.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Callable, Hashable, Iterator, Optional

import torch

_LOCAL = threading.local()  # .state: this thread's scope (a sweep may run batches in threads)


def _state() -> dict:
    try:
        return _LOCAL.state
    except AttributeError:
        _LOCAL.state = {"depth": 0, "store": {}, "hits": 0, "misses": 0}
        return _LOCAL.state


def active() -> bool:
    return _state()["depth"] > 0


@contextlib.contextmanager
def scope() -> Iterator[dict]:
    """Memoize inside the block (dropped when the outermost scope exits); yields the stats dict."""
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
    """(store key, live tensors): identities + versions (None kept) and the referents."""
    key, live = [kind], []
    for t in tensors:
        key.append(_ident(t))
        if t is not None:
            live.append(t)
    return tuple(key), live


def cached(kind: Hashable, tensors: tuple, compute: Callable[[], object]):
    """``compute()`` memoized on ``kind`` (hashable) and the identities + versions
    of ``tensors`` (None entries key as None); outside a scope just ``compute()``."""
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


def remember(kind: Hashable, tensors: tuple, value) -> None:
    """Store ``value`` as :func:`cached`'s result for (``kind``, ``tensors``) (a result known by construction)."""
    if _state()["depth"] <= 0:
        return
    key, live = _key(kind, tensors)
    _state()["store"][key] = (tuple(weakref.ref(t) for t in live), value)


def moved(t, device):
    """``t.to(device)`` memoized (one copy per tensor); ``t`` itself when already
    there or not a tensor. Callers must not write into the result."""
    if not isinstance(t, torch.Tensor):
        return t
    dev = torch.device(device)
    if t.device == dev or (dev.index is None and t.device.type == dev.type):
        return t
    return cached(("moved", str(dev)), (t,), lambda: t.to(dev))


def moved_if_kept(t, device):
    """The copy :func:`moved` keeps of ``t`` on ``device`` in the open scope, else ``t.to(device)`` (not kept: a
    caller moving many large tensors one at a time holds one copy at a time). Callers must not write into it."""
    if not isinstance(t, torch.Tensor):
        return t
    kept = peek(("moved", str(torch.device(device))), (t,))
    return t.to(device) if kept is None else kept


def note_copy(src, dst) -> None:
    """Record that ``dst`` is a fresh copy of ``src`` (same dtype, shape, bits): a
    known digest carries over and :func:`copy_source` finds ``src``."""
    if not active() or not isinstance(src, torch.Tensor) or not isinstance(dst, torch.Tensor):
        return
    if src.dtype != dst.dtype or tuple(src.shape) != tuple(dst.shape):
        return
    store = _state()["store"]
    # remembered in any case: other per-content results (reference.validate) carry over too
    store[("copyof", _ident(dst))] = ((weakref.ref(dst),), (weakref.ref(src), int(src._version)))
    hit = store.get(("digest", _ident(src)))
    if hit is not None and _alive(hit[0], (src,)):
        store[("digest", _ident(dst))] = ((weakref.ref(dst),), hit[1])


def copy_source(t) -> Optional[torch.Tensor]:
    """The tensor ``t`` was copied from (:func:`note_copy`), both alive and unwritten since; else None."""
    return _unchanged_origin("copyof", t)


def note_part(whole, part) -> None:
    """Record that ``part`` (fresh) holds a subset of ``whole``'s elements, so
    element-wise properties of ``whole`` hold for it (:func:`part_source`)."""
    if not active() or not isinstance(whole, torch.Tensor) or not isinstance(part, torch.Tensor):
        return
    _state()["store"][("partof", _ident(part))] = ((weakref.ref(part),), (weakref.ref(whole), int(whole._version)))


def part_source(t) -> Optional[torch.Tensor]:
    """The tensor ``t`` was cut from (:func:`note_part`), both alive and unwritten since; else None."""
    return _unchanged_origin("partof", t)


def _unchanged_origin(kind: str, t) -> Optional[torch.Tensor]:
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
    """The result :func:`cached` stored for (``kind``, ``tensors``), or None; computes nothing."""
    if not active():
        return None
    hit = _state()["store"].get((kind,) + tuple(_ident(t) for t in tensors))
    live = tuple(t for t in tensors if t is not None)
    if hit is None or not _alive(hit[0], live):
        return None
    return hit[1]


def note_bound(t, bound: int) -> None:
    """Record that every element of the integer tensor ``t`` has magnitude <= ``bound``
    (known by construction; a later in-place write voids it; :func:`known_bound`)."""
    if not active() or not isinstance(t, torch.Tensor):
        return
    _state()["store"][("bound_note", _ident(t))] = ((weakref.ref(t),), int(bound))


def known_bound(t) -> Optional[int]:
    """The bound :func:`note_bound` recorded for ``t`` (unwritten since), or None."""
    if not active() or not isinstance(t, torch.Tensor):
        return None
    hit = _state()["store"].get(("bound_note", _ident(t)))
    if hit is None or not _alive(hit[0], (t,)):
        return None
    return hit[1]
