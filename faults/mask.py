"""Coverage masks: which output elements a fault touches, deterministic
given (case, fault, coverage, seed) and nothing else.

The random stream is specified here, not borrowed from a library RNG whose
algorithm could change between versions: element ``i`` of a stream gets the
score ``splitmix64(key + i)`` (S. Vigna's SplitMix64 finaliser, as in
``java.util.SplittableRandom``; golden-gamma increment 0x9E3779B97F4A7C15),
with ``key`` the first 8 bytes (little-endian) of
``sha256("int8conf-fault-mask/1|<case key>|<fault id>|<coverage>|<seed>|<stream>")``.
The selected elements are the ``count`` lowest scores (ties -- practically
impossible -- broken by index). No global RNG state is read or changed.

``case key``: the content of the case, ``sha256`` over
``reference.operands.tensor_digest`` of ``a, b, scale_a, scale_b, bias``
joined by ``|`` (:func:`case_key`); an ``int_mm`` entry sees only ``a, b``
and keys on those (:func:`acc_case_key`). A layer capture therefore gets the
same mask in every process and on every machine, whatever it is called.

Counts (``M x N`` output elements, :func:`selected_count`):
  * ``one``: 1;
  * ``1%``: ``max(1, floor(M*N / 100 + 1/2))`` -- 1 % rounded half up, at
    least one (e.g. 64 x 384 = 24576 -> 246; 10 x 10 -> 1; 15 x 10 -> 2);
  * ``all``: ``M * N`` (no random stream is drawn).

Row x column blocks (:func:`block_selection`, used by the precondition
faults F6 / F7, which extend K with one saturated block and can therefore
only hit a set of rows times a set of columns): ``one`` -> 1 row x 1
column; ``all`` -> every row x every column; ``1%`` -> ``r = max(1,
floor(M/10 + 1/2))`` rows and ``c = min(N, max(1, floor(T/r + 1/2)))``
columns, ``T`` the ``1%`` count above (so ``r*c`` is within one row of
``T``; 64 x 384 -> 6 x 41 = 246).
"""

from __future__ import annotations

import functools
import hashlib
from typing import Optional

import numpy as np
import torch

from faults.spec import COVERAGES, FaultError

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser of ``x + gamma`` for a uint64 array (wrapping arithmetic).

    ``z = x + 0x9E3779B97F4A7C15; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31)`` (mod 2**64).
    """
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + _GAMMA
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def stream_key(case: str, fault: str, coverage: str, seed: int, stream: str = "elements") -> int:
    """64-bit key of one random stream (see module docstring)."""
    text = f"int8conf-fault-mask/1|{case}|{fault}|{coverage}|{int(seed)}|{stream}"
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")


def scores(n: int, key: int) -> np.ndarray:
    """uint64 [n]: ``splitmix64(key + i)`` for ``i = 0 .. n-1`` (mod 2**64).

    The same arithmetic as :func:`splitmix64`, done in place (one scratch
    array) because masks of large outputs (millions of elements) are drawn
    once per kernel call.
    """
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
    """Indices (int64, ascending) of the ``count`` lowest scores among ``n``
    (ties broken by index)."""
    if count >= n:
        return np.arange(n, dtype=np.int64)
    return lowest_of(scores(n, key), count)


def lowest_of(s: np.ndarray, count: int) -> np.ndarray:
    """Ascending indices of the ``count`` lowest values of ``s``, ties broken by
    index -- the first ``count`` of a stable argsort, in O(n) (``np.partition``)
    instead of O(n log n): a 1% mask of a 512 x 6144 output takes milliseconds."""
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    if count == 1:
        return np.array([int(np.argmin(s))], dtype=np.int64)  # first minimum
    kth = np.partition(s, count - 1)[count - 1]
    less = np.flatnonzero(s < kth)
    eq = np.flatnonzero(s == kth)[: count - len(less)]
    return np.sort(np.concatenate([less, eq])).astype(np.int64)


def selected_count(m: int, n: int, coverage: str) -> int:
    """Elements selected in an ``m x n`` output (rule in the module docstring).

    Raises:
        FaultError: unknown coverage or a non-positive dimension.
    """
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
    """bool [m, n]: the selected output elements (row-major flat index stream),
    exactly :func:`selected_count` ``(m, n, coverage)`` of them.

    Args:
        m, n: output shape; case: case key (:func:`case_key`); fault: id
        (``F1`` ..); coverage: ``one`` | ``1%`` | ``all``; seed: int >= 0.
    Raises:
        FaultError: as :func:`selected_count`.
    """
    return _element_mask(int(m), int(n), str(case), str(fault), str(coverage), int(seed)).clone()


@functools.lru_cache(maxsize=64)
def _element_mask(m: int, n: int, case: str, fault: str, coverage: str, seed: int) -> torch.Tensor:
    """:func:`element_mask`, memoized: a pure function of its arguments, asked
    for by every run of an injected kernel and by the ground truth of the
    same cell (callers get a clone, never the stored tensor)."""
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
    """Selected rows and columns (int64 index tensors, ascending) for F6 / F7.

    Rows come from stream ``rows``, columns from stream ``cols`` of the same
    (case, fault, coverage, seed); the selected elements are their product.
    """
    rows, cols = block_indices(m, n, case, fault, coverage, seed)
    return torch.from_numpy(rows), torch.from_numpy(cols)


def block_indices(m: int, n: int, case: str, fault: str, coverage: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`block_selection` as the host (numpy int64) arrays it is drawn as
    (for callers that need the indices as Python values: no tensor to read)."""
    r, c = block_counts(m, n, coverage)
    rows = lowest(m, r, stream_key(case, fault, coverage, seed, "rows"))
    cols = lowest(n, c, stream_key(case, fault, coverage, seed, "cols"))
    return rows, cols


def case_key(
    a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, bias: Optional[torch.Tensor] = None
) -> str:
    """Content key of a ``scaled_mm`` case: sha256 hex over the operands'
    ``tensor_digest`` values joined by ``|`` (dtype, shape and bits; not strides
    or device)."""
    from reference.operands import tensor_digest

    parts = "|".join(tensor_digest(t) for t in (a, b, scale_a, scale_b, bias))
    return hashlib.sha256(parts.encode("ascii")).hexdigest()


def acc_case_key(a: torch.Tensor, b: torch.Tensor) -> str:
    """Content key of an ``int_mm`` case (``a``, ``b`` only)."""
    from reference.operands import tensor_digest

    parts = "|".join(tensor_digest(t) for t in (a, b)) + "|int_mm"
    return hashlib.sha256(parts.encode("ascii")).hexdigest()
