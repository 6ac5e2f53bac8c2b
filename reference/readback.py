"""Deferred read-backs: ask for device values now, read many of them at once.

On a GPU every ``int(t)`` / ``bool(t)`` / ``t.item()`` / ``t.tolist()`` of a
device tensor is a host-device synchronisation: the host waits until every
queued kernel has run, then copies the value. A sweep cell asks dozens of
small questions (in-place verdicts of the kernel run, NaN counts, the
accumulator's maxima, the counts of every output comparison, the ground
truth's counts), each answered by a reduction on the device. Asked and read
one by one they cost one sync each; asked first and read together they cost
one.

:func:`ask` takes the tensors that answer a question (integer or bool,
any shape, not read yet) and a ``convert`` function from their values
(one flat list of Python ints) to the answer, and returns a
:class:`Deferred`. :meth:`Deferred.get` returns the answer; the first
``get`` of any pending Deferred reads *every* pending one in one transfer per
device (:func:`flush`: the tensors are flattened, cast to int64,
concatenated and read with one ``tolist``). So the number of read-backs is
the number of times code needs an answer before it can ask the next
question, not the number of questions: code that asks everything it will
need first and reads afterwards pays one. Values are the same either way;
only when they are copied changes.

Floats travel as their float64 bit patterns (:func:`float_bits` on the
device, :func:`unpack_float` on the host), so one int64 transfer carries
both. A Deferred whose object is dropped unread is dropped from the queue
too (weak references): nothing is read for it. Callers must not write into
asked tensors before they are read (every caller asks freshly computed
reductions). One queue per thread: a flush reads the questions its own
thread asked, so a Deferred is read in the thread that asked it (the sweep
runs one cell at a time per process).
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
    """An answer computed on the device, read back later (module docstring).

    Attributes:
        done: True once the values were read (or nothing had to be read).
    """

    __slots__ = ("_parts", "_convert", "_value", "_error", "done", "__weakref__")

    def __init__(self, parts: Sequence[torch.Tensor], convert: Callable[[list], object]):
        self._parts = list(parts)
        self._convert = convert
        self._value = None
        self._error: Optional[BaseException] = None
        self.done = False

    @property
    def device(self) -> Optional[torch.device]:
        """Device of the asked tensors (None when nothing is asked)."""
        return self._parts[0].device if self._parts else None

    def _resolve(self, vals: list) -> None:
        try:
            self._value = self._convert(vals)
        except Exception as e:  # noqa: BLE001 -- raised by get(), not by another's flush
            self._error = e
        self._parts, self.done = [], True

    def get(self):
        """The answer (reading every pending Deferred first, if this one is
        not read yet).

        Raises:
            Whatever ``convert`` raised on the values.
        """
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
        """A value derived from this answer: its ``get()`` is
        ``fn(self.get())``, computed once, with no read-back of its own."""
        return Derived(self, fn)


class Derived:
    """``fn`` of a :class:`Deferred`'s (or another Derived's) answer
    (:meth:`Deferred.then`): read when that one is.

    Attributes:
        done: True once the underlying answer was read.
    """

    __slots__ = ("_inner", "_fn", "_value", "_have")

    def __init__(self, inner, fn: Callable[[object], object]):
        self._inner, self._fn, self._value, self._have = inner, fn, None, False

    @property
    def done(self) -> bool:
        return self._inner.done

    def get(self):
        """``fn(inner.get())`` (computed on the first call)."""
        if not self._have:
            self._value, self._have = self._fn(self._inner.get()), True
        return self._value

    def then(self, fn: Callable[[object], object]) -> "Derived":
        """As :meth:`Deferred.then`."""
        return Derived(self, fn)


def _pending() -> list:
    """This thread's queue of unread questions."""
    q = getattr(_LOCAL, "pending", None)
    if q is None:
        q = _LOCAL.pending = []
    return q


#: what :func:`ask` takes (floats would be truncated by the int64 transfer)
_ASKABLE = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})


def _gather(parts: list) -> tuple[torch.Tensor, list]:
    """One int64 vector holding every element of ``parts`` (integer / bool
    tensors on one device), and where each part's elements sit in it
    (``(start, length)`` per part). 0-d parts -- most answers are single
    reductions -- are stacked per dtype (one op for all of them, no reshape
    per part); the others are flattened; one ``cat`` joins everything."""
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
    """Queue a question; nothing is read yet.

    Args:
        parts: integer / bool tensors (any shapes), all on one device; their
            elements, flattened in order and concatenated, are the values
            ``convert`` gets.
        convert: function of the list of Python ints to the answer (default:
            the list itself), run when the values arrive; it must not read
            another Deferred (a value built from several answers is a
            :meth:`Deferred.then`).

    Returns:
        A :class:`Deferred`; its ``get`` reads it (and every other pending one).

    Raises:
        TypeError: a float or complex tensor (use :func:`float_bits`).
        ValueError: tensors on more than one device.
    """
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
    """``ask(parts, convert).get()``: the answer now (one read-back, shared
    with every question still pending)."""
    return ask(parts, convert).get()


def pending() -> int:
    """Number of questions asked and not read yet."""
    return sum(1 for r in _pending() if (d := r()) is not None and not d.done)


def flush() -> int:
    """Read every pending Deferred: one ``tolist`` per device they live on.

    Returns:
        The number of transfers made (0 when nothing was pending).
    """
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
        except BaseException:
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
    """Float values -> int64 tensor of the same shape holding their float64
    bit patterns (exact for every float dtype; :func:`unpack_float` undoes it)."""
    return x.to(torch.float64).view(torch.int64)


def unpack_float(v: int) -> float:
    """Inverse of :func:`float_bits` for one value read back as a Python int."""
    return struct.unpack("<d", struct.pack("<q", int(v)))[0]


def stats() -> dict:
    """``{"flushes", "transfers"}`` since the process started (diagnostics)."""
    return dict(_STATS)
