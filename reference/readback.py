"""Deferred read-backs: ask for device values now, read many of them in one transfer.

:func:`ask` queues integer / bool tensors and a ``convert`` of their values into
the answer, returning a :class:`Deferred`; the first ``get`` of any pending one
reads all pending ones, one ``tolist`` per device (:func:`flush`). Floats travel
as float64 bits (:func:`float_bits`). One queue per thread; a Deferred dropped
unread is dropped from the queue; asked tensors must not be written before read.
"""

from __future__ import annotations

import struct
import threading
import weakref
from typing import Callable, Optional, Sequence

import torch

_LOCAL = threading.local()  # .pending: weak references to unread Deferreds, in ask order
_STATS = {"flushes": 0, "transfers": 0}


class Deferred:
    """An answer computed on the device, read back later; ``done`` once read."""

    __slots__ = ("_parts", "_convert", "_value", "_error", "done", "__weakref__")

    def __init__(self, parts: Sequence[torch.Tensor], convert: Callable[[list], object]):
        self._parts = list(parts)
        self._convert = convert
        self._value = None
        self._error: Optional[BaseException] = None
        self.done = False

    @property
    def device(self) -> Optional[torch.device]:
        return self._parts[0].device if self._parts else None

    def _resolve(self, vals: list) -> None:
        try:
            self._value = self._convert(vals)
        except Exception as e:  # noqa: BLE001 -- raised by get(), not by another's flush
            self._error = e
        self._parts, self.done = [], True

    def get(self):
        """The answer (flushing the queue first if unread); raises what ``convert`` raised."""
        if not self.done:
            flush()
            if not self.done:  # not in this thread's queue, or its flush is in progress
                raise RuntimeError(
                    "readback: a Deferred read in another thread than the one "
                    "that asked it, or inside another's convert (derive with "
                    "then() instead)"
                )
        if self._error is not None:
            raise self._error
        return self._value

    def then(self, fn: Callable[[object], object]) -> "Derived":
        """``fn`` of this answer, computed once, with no read-back of its own."""
        return Derived(self, fn)


class Derived:
    """``fn`` of a :class:`Deferred`'s (or another Derived's) answer, read when that one is."""

    __slots__ = ("_inner", "_fn", "_value", "_have")

    def __init__(self, inner, fn: Callable[[object], object]):
        self._inner, self._fn, self._value, self._have = inner, fn, None, False

    @property
    def done(self) -> bool:
        return self._inner.done

    def get(self):
        if not self._have:
            self._value, self._have = self._fn(self._inner.get()), True
        return self._value

    def then(self, fn: Callable[[object], object]) -> "Derived":
        return Derived(self, fn)


def _pending() -> list:
    q = getattr(_LOCAL, "pending", None)
    if q is None:
        q = _LOCAL.pending = []
    return q


#: what :func:`ask` takes (floats would be truncated by the int64 transfer)
_ASKABLE = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})


def _gather(parts: list) -> tuple[torch.Tensor, list]:
    """One int64 vector of every element of ``parts`` (one device) and each part's
    ``(start, length)`` in it; 0-d parts are stacked per dtype, one ``cat`` joins all."""
    scalars: dict = {}
    pieces, slots = [], [None] * len(parts)
    dims = [p.dim() for p in parts]
    for i, p in enumerate(parts):
        if dims[i] == 0:
            scalars.setdefault(p.dtype, []).append(i)
    at = 0
    for dtype, idx in scalars.items():
        st = torch.stack([parts[i] for i in idx]) if len(idx) > 1 else parts[idx[0]].reshape(1)
        pieces.append(st if dtype == torch.int64 else st.to(torch.int64))
        for k, i in enumerate(idx):
            slots[i] = (at + k, 1)
        at += len(idx)
    for i, p in enumerate(parts):
        if dims[i] == 0:
            continue
        v = p if dims[i] == 1 else p.reshape(-1)
        n = v.numel()
        pieces.append(v if v.dtype == torch.int64 else v.to(torch.int64))
        slots[i] = (at, n)
        at += n
    return (pieces[0] if len(pieces) == 1 else torch.cat(pieces)), slots


def ask(parts: Sequence[torch.Tensor], convert: Optional[Callable[[list], object]] = None) -> Deferred:
    """Queue a question: integer / bool ``parts`` on one device, whose flattened
    elements ``convert`` (default: identity; must not read another Deferred)
    turns into the answer. TypeError for floats, ValueError for several devices."""
    ts = list(parts)
    dev = ts[0].device if ts else None
    for t in ts:
        if t.dtype not in _ASKABLE:
            raise TypeError(
                f"readback.ask takes integer or bool tensors, got {t.dtype} (pass floats through readback.float_bits)"
            )
        if t.device != dev:
            devs = sorted({str(x.device) for x in ts})
            raise ValueError(f"readback.ask: parts on several devices {devs}")
    d = Deferred(ts, convert or _identity)
    if ts:
        _pending().append(weakref.ref(d))
    else:
        d._resolve([])
    return d


def _identity(v: list) -> list:
    return v


def read(parts: Sequence[torch.Tensor], convert: Optional[Callable[[list], object]] = None):
    """``ask(parts, convert).get()``: the answer now, read with everything pending."""
    return ask(parts, convert).get()


def pending() -> int:
    """Number of questions asked and not read yet."""
    return sum(1 for r in _pending() if (d := r()) is not None and not d.done)


def flush() -> int:
    """Read every pending Deferred, one ``tolist`` per device; returns the number of transfers."""
    queue = _pending()
    live = [d for d in (r() for r in queue) if d is not None and not d.done]
    queue.clear()
    if not live:
        return 0
    by_dev: dict = {}
    for d in live:
        by_dev.setdefault(d.device, []).append(d)
    for ds in by_dev.values():
        parts = [p for d in ds for p in d._parts]
        try:
            flat, slots = _gather(parts)
            vals = flat.tolist()  # the one read-back of this device
        except BaseException:  # noqa: BLE001 -- cleanup then re-raise: unread questions stay pending
            # nothing read: every unread question stays pending (a later get retries)
            queue.extend(weakref.ref(d) for d in live if not d.done)
            raise
        k = 0
        for d in ds:
            got = []
            for _ in d._parts:
                start, n = slots[k]
                got.extend(vals[start : start + n])
                k += 1
            d._resolve(got)
    _STATS["flushes"] += 1
    _STATS["transfers"] += len(by_dev)
    return len(by_dev)


def float_bits(x: torch.Tensor) -> torch.Tensor:
    """int64 tensor of ``x``'s float64 bit patterns (exact for every float dtype)."""
    return x.to(torch.float64).view(torch.int64)


def unpack_float(v: int) -> float:
    """Inverse of :func:`float_bits` for one value read back as a Python int."""
    return struct.unpack("<d", struct.pack("<q", int(v)))[0]


def stats() -> dict:
    """``{"flushes", "transfers"}`` since the process started."""
    return dict(_STATS)
