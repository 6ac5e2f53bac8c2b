"""Coverage masks: which output elements a fault touches, a function of (case, fault,
coverage, seed) only. Element ``i`` of a stream scores ``splitmix64(key + i)``, ``key`` =
first 8 bytes (little-endian) of ``sha256("int8conf-fault-mask/1|<case key>|<fault id>|
<coverage>|<seed>|<stream>")``; the selection is the lowest scores (ties by index).
Counts: :func:`selected_count` (``one`` 1, ``1%`` ``max(1, floor(M*N/100 + 1/2))``,
``all`` M*N); F6 / F7 row x column blocks: :func:`block_counts`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from typing import Iterable, Optional

import numpy as np
import torch

from faults.spec import COVERAGES, FaultError
from reference.operands import tensor_digest

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser of ``x + 0x9E3779B97F4A7C15`` for a uint64 array (mod 2**64)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + _GAMMA
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def stream_key(case: str, fault: str, coverage: str, seed: int, stream: str = "elements") -> int:
    """64-bit key of one random stream (module docstring)."""
    text = f"int8conf-fault-mask/1|{case}|{fault}|{coverage}|{int(seed)}|{stream}"
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")


def scores(n: int, key: int) -> np.ndarray:
    """uint64 [n]: ``splitmix64(key + i)`` for ``i = 0 .. n-1``, computed in place."""
    with np.errstate(over="ignore"):
        z = np.arange(n, dtype=np.uint64)
        z += np.uint64((key + 0x9E3779B97F4A7C15) % 2**64)
        t = np.empty_like(z)
        for shift, mult in ((30, _M1), (27, _M2)):
            np.right_shift(z, np.uint64(shift), out=t)
            z ^= t
            z *= mult
        np.right_shift(z, np.uint64(31), out=t)
        z ^= t
        return z


def lowest(n: int, count: int, key: int) -> np.ndarray:
    """Ascending int64 indices of the ``count`` lowest scores among ``n`` (ties by index)."""
    if count >= n:
        return np.arange(n, dtype=np.int64)
    return lowest_of(scores(n, key), count)


def lowest_of(s: np.ndarray, count: int) -> np.ndarray:
    """Ascending indices of the ``count`` lowest values of ``s``, ties by index: a stable
    argsort's prefix, in O(n) (``np.partition``)."""
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    if count == 1:
        return np.array([int(np.argmin(s))], dtype=np.int64)  # first minimum
    kth = np.partition(s, count - 1)[count - 1]
    less = np.flatnonzero(s < kth)
    eq = np.flatnonzero(s == kth)[: count - len(less)]
    return np.sort(np.concatenate([less, eq])).astype(np.int64)


def selected_count(m: int, n: int, coverage: str) -> int:
    """Elements selected in an ``m x n`` output (module docstring); FaultError for an
    unknown coverage or an empty output."""
    if coverage not in COVERAGES:
        raise FaultError(f"unknown coverage {coverage!r}; expected one of {', '.join(COVERAGES)}")
    if m < 1 or n < 1:
        raise FaultError(f"cannot select elements of an empty {m}x{n} output")
    total = m * n
    if coverage == "one":
        return 1
    if coverage == "all":
        return total
    return max(1, (total + 50) // 100)


def element_mask(m: int, n: int, case: str, fault: str, coverage: str, seed: int) -> torch.Tensor:
    """bool [m, n]: exactly ``selected_count(m, n, coverage)`` selected elements (row-major
    stream), ``case`` the :func:`case_key`. A fresh copy of a memoized mask (one that
    :func:`prefetch_element_masks` is computing is waited for)."""
    key = _mask_args(m, n, case, fault, coverage, seed)
    pending = _PENDING.get(key)
    if pending is not None:
        pending.wait()
    return _element_mask(*key).clone()


def _mask_args(m, n, case, fault, coverage, seed) -> tuple:
    return int(m), int(n), str(case), str(fault), str(coverage), int(seed)


#: masks a prefetch thread is computing: args -> Event set once it is in the memo (or failed)
_PENDING: dict = {}
os.register_at_fork(after_in_child=_PENDING.clear)  # a forked child has no prefetch thread to wait for


def prefetch_element_masks(masks: Iterable[tuple]) -> threading.Thread:
    """Compute the :func:`element_mask` of each ``(m, n, case, fault, coverage, seed)`` in
    ``masks`` (at most the memo's size, in order) in a daemon thread, so that the host work of
    drawing them (numpy, which releases the GIL) overlaps the caller's; the masks are the same
    bits whoever computes them. Returns the started thread."""
    todo = []
    for args in masks:
        key = _mask_args(*args)
        if key not in _PENDING and key not in todo:
            todo.append(key)
    todo = todo[:_MEMO_SIZE]
    events = {key: threading.Event() for key in todo}
    _PENDING.update(events)

    def work():
        for key in todo:
            try:
                _element_mask(*key)
            except Exception:  # noqa: BLE001 -- the caller's own call raises it
                pass
            finally:
                _PENDING.pop(key, None)
                events[key].set()

    t = threading.Thread(target=work, name="int8conf-masks", daemon=True)
    t.start()
    return t


_MEMO_SIZE = 64


@functools.lru_cache(maxsize=_MEMO_SIZE)
def _element_mask(m: int, n: int, case: str, fault: str, coverage: str, seed: int) -> torch.Tensor:
    count = selected_count(m, n, coverage)
    flat = torch.zeros(m * n, dtype=torch.bool)
    if coverage == "all":
        flat[:] = True
    else:
        idx = lowest(m * n, count, stream_key(case, fault, coverage, seed))
        flat[torch.from_numpy(idx)] = True
    return flat.reshape(m, n)


def block_counts(m: int, n: int, coverage: str) -> tuple[int, int]:
    """(rows, columns) of a row x column block selection (module docstring)."""
    t = selected_count(m, n, coverage)
    if coverage == "one":
        return 1, 1
    if coverage == "all":
        return m, n
    r = min(m, max(1, (m * 10 + 50) // 100))  # floor(M/10 + 1/2) in integers
    c = min(n, max(1, (2 * t + r) // (2 * r)))  # floor(T/r + 1/2)
    return r, c


def block_selection(
    m: int, n: int, case: str, fault: str, coverage: str, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Selected rows and columns (ascending int64 tensors) for F6 / F7, from streams
    ``rows`` and ``cols``; the selected elements are their product."""
    rows, cols = block_indices(m, n, case, fault, coverage, seed)
    return torch.from_numpy(rows), torch.from_numpy(cols)


def block_indices(m: int, n: int, case: str, fault: str, coverage: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`block_selection` as the host (numpy int64) arrays it is drawn as."""
    r, c = block_counts(m, n, coverage)
    rows = lowest(m, r, stream_key(case, fault, coverage, seed, "rows"))
    cols = lowest(n, c, stream_key(case, fault, coverage, seed, "cols"))
    return rows, cols


def case_key(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    block_size: Optional[tuple] = None,
    azp_adj: Optional[torch.Tensor] = None,
    azp: Optional[torch.Tensor] = None,
) -> str:
    """sha256 hex over the operands' ``tensor_digest`` values (dtype, shape, bits) joined by ``|``; a block case
    appends ``|block=<bn>x<bk>``, an asymmetric one ``|azp_adj=<digest>|azp=<digest>`` (per-token x per-channel
    cases keep their keys)."""
    parts = "|".join(tensor_digest(t) for t in (a, b, scale_a, scale_b, bias))
    if block_size is not None:
        parts += f"|block={int(block_size[0])}x{int(block_size[1])}"
    if azp_adj is not None or azp is not None:
        parts += f"|azp_adj={tensor_digest(azp_adj)}|azp={tensor_digest(azp)}"
    return hashlib.sha256(parts.encode("ascii")).hexdigest()


def acc_case_key(a: torch.Tensor, b: torch.Tensor) -> str:
    """Content key of an ``int_mm`` case (``a``, ``b`` only)."""
    parts = "|".join(tensor_digest(t) for t in (a, b)) + "|int_mm"
    return hashlib.sha256(parts.encode("ascii")).hexdigest()
