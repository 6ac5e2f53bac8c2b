"""Exact int8 x int8 accumulation (DESIGN.md 1 and 4): :func:`exact_int_mm` (fast, float32 BLAS on K-chunks) and
:func:`int_mm_int64_naive` (slow, independent, for tests), plus accumulator bounds."""

from __future__ import annotations

import contextlib

import torch

from reference import memo, readback
from reference.errors import OperandError

INT32_MAX: int = 2**31 - 1
INT32_MIN: int = -(2**31)
#: Integers with ``|v| <= 2**24`` are exact in float32 (DESIGN.md F7 / check C4 bound).
FP32_EXACT_INT: int = 2**24

#: K-chunk length of the float32 path: a sum of <= 2**10 products |a*b| <= 2**14 stays <= 2**24 (exact in float32).
CHUNK_K: int = 1024


def _check_pair(a, b, names=("a", "b")) -> None:
    for x, nm in zip((a, b), names):
        if not isinstance(x, torch.Tensor):
            raise OperandError(f"{nm} must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype != torch.int8:
            raise OperandError(f"{nm} has dtype {x.dtype}; expected torch.int8")
        if x.dim() != 2:
            raise OperandError(f"{nm} must be 2-D, got shape {tuple(x.shape)}")
    if a.shape[1] != b.shape[1]:
        raise OperandError(f"K mismatch: a is {tuple(a.shape)} [M,K] but b is {tuple(b.shape)} [N,K]")


@contextlib.contextmanager
def _ieee_fp32_matmul():
    # "highest" so the exactness proof needs no assumption about BLAS internals
    prev = torch.get_float32_matmul_precision()
    if prev != "highest":
        torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        if prev != "highest":
            torch.set_float32_matmul_precision(prev)


#: A b of more elements is converted to float32 in row blocks of about this size (a 256 MiB copy at most).
_B_BLOCK_ELEMS: int = 2**26
#: Up to this many float32 per-chunk results ([chunks, M, N]), the K chunks go in one batched GEMM.
_BATCHED_ELEMS: int = 2**26


def _chunked_f32_mm(af: torch.Tensor, bf: torch.Tensor) -> torch.Tensor:
    """``af @ bf.T`` -> int64 for float32 matrices of integers with |v| <= 128 (exact: see :func:`exact_int_mm`)."""
    (m, k), n = af.shape, bf.shape[0]
    if k <= CHUNK_K:
        return (af @ bf.T).to(torch.int64)
    chunks = -(-k // CHUNK_K)
    if chunks * m * n <= _BATCHED_ELEMS:
        # all chunks in one batched GEMM (K zero-padded): the same exact chunk sums as the loop below, in 3 launches
        pad = chunks * CHUNK_K - k
        ac = torch.nn.functional.pad(af, (0, pad)).reshape(m, chunks, CHUNK_K).transpose(0, 1)
        bc = torch.nn.functional.pad(bf, (0, pad)).reshape(n, chunks, CHUNK_K).permute(1, 2, 0)
        return torch.bmm(ac, bc).to(torch.float64).sum(dim=0).to(torch.int64)
    acc = torch.zeros((m, n), dtype=torch.float64, device=af.device)
    for c in range(0, k, CHUNK_K):
        acc += af[:, c : c + CHUNK_K] @ bf[:, c : c + CHUNK_K].T
    return acc.to(torch.int64)


def _exact_mm(a: torch.Tensor, b: torch.Tensor, absolute: bool) -> torch.Tensor:
    conv = (lambda t: t.to(torch.float32).abs()) if absolute else (lambda t: t.to(torch.float32))
    (m, k), n = a.shape, b.shape[0]
    with _ieee_fp32_matmul():
        af = conv(a)
        if n * k <= _B_BLOCK_ELEMS:
            return _chunked_f32_mm(af, conv(b))
        out = torch.empty((m, n), dtype=torch.int64, device=a.device)
        rows = max(1, _B_BLOCK_ELEMS // max(1, k))
        for r in range(0, n, rows):
            out[:, r : r + rows] = _chunked_f32_mm(af, conv(b[r : r + rows]))
        return out


def exact_int_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact accumulator ``A @ B^T`` of int8 a [M, K] and b [N, K] (any strides) -> int64 [M, N] on a's device, with no
    int32 wrap (the F6 int32_overflow case has a known exact value). OperandError: non-tensor, non-int8, non-2-D, K
    mismatch.

    Exactness: int8 products are integers |p| <= 2**14; K is cut into chunks of ``CHUNK_K`` = 2**10, so every partial
    sum any BLAS forms inside a chunk is an integer <= 2**24, exact in float32; chunk sums are added in float64, exact
    while K <= 2**39. Matmul precision is forced to "highest" (no TF32), on any device (CPU BLAS or cuBLAS, split-K or
    not). A b of more than 2**26 elements is converted in row blocks to bound the float32 copy."""
    _check_pair(a, b)
    return memo.cached("exact", (a, b), lambda: _bounded(_exact_mm(a, b, absolute=False), a))


def int_mm_int64_naive(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``sum_k int64(a) * int64(b)`` -> int64 [M, N], no BLAS, no float, in row blocks; for tests (small shapes).
    OperandError as :func:`exact_int_mm`."""
    _check_pair(a, b)
    a64, b64 = a.to(torch.int64), b.to(torch.int64)
    (m, k), n = a64.shape, b64.shape[0]
    out = torch.empty((m, n), dtype=torch.int64, device=a.device)
    rows = max(1, (1 << 22) // max(1, n * k))
    for r in range(0, m, rows):
        out[r : r + rows] = (a64[r : r + rows, None, :] * b64[None, :, :]).sum(dim=-1)
    return out


def accumulator_bound(a: torch.Tensor, b: torch.Tensor) -> int:
    """``K * max|a| * max|b|`` (Python int) >= every |acc[m, n]|; 0 when K = 0 or an operand is all 0."""
    return ask_accumulator_bound(a, b).get()


def ask_accumulator_bound(a: torch.Tensor, b: torch.Tensor):
    """:func:`accumulator_bound` as a ``reference.readback.Deferred`` (one read-back); OperandError at once."""
    _check_pair(a, b)
    k = int(a.shape[1])
    if k == 0 or a.numel() == 0 or b.numel() == 0:
        return readback.ask([], lambda v: 0)
    parts = [a.to(torch.int16).abs().max(), b.to(torch.int16).abs().max()]
    return readback.ask(parts, lambda v: k * int(v[0]) * int(v[1]))


def accumulator_row_col_bound(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Tight bound ``|A| @ |B|^T`` (int64 [M, N], exact, >= 0) for checks C3/C4; equality when signs agree term by term.
    OperandError as :func:`exact_int_mm`."""
    _check_pair(a, b)
    return memo.cached("bound", (a, b), lambda: _bounded(_exact_mm(a, b, absolute=True), a))


def _bounded(acc: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``acc`` with the bound ``K * 2**14`` noted in the memo scope (the epilogue then needs no read-back)."""
    memo.note_bound(acc, int(a.shape[1]) * 16384)
    return acc
