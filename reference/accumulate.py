"""Exact int8 x int8 accumulation (the GEMM's accumulator, DESIGN.md 1 and 4).

``exact_int_mm`` is the reference accumulator: the mathematically exact
``A @ B^T`` of int8 operands as int64, computed fast through float32 BLAS
on K-chunks whose every partial sum is provably an exactly representable
integer. ``int_mm_int64_naive`` is an independent slow path used to test it.
"""

from __future__ import annotations

import contextlib

import torch

from reference import readback
from reference.errors import OperandError

INT32_MAX: int = 2**31 - 1
INT32_MIN: int = -(2**31)
#: Integers with magnitude <= 2**24 are exactly representable in float32
#: (24-bit significand, IEEE 754 binary32); the int -> float32 conversion of
#: an accumulator is exact iff ``|acc| <= 2**24`` or acc has enough trailing
#: zero bits. DESIGN.md F7 / check C4 use ``|acc| < 2**24`` as the bound.
FP32_EXACT_INT: int = 2**24

#: K-chunk length of the float32 path: |a*b| <= 128*128 = 2**14, so any sum of
#: at most 2**10 such products has magnitude <= 2**24 (exact in float32).
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
    # int8 values (|v| <= 128 = 2**7) are exact even in bf16/tf32 inputs, so a
    # reduced-precision setting would still be exact as long as products are
    # summed in fp32; we force "highest" anyway so the proof needs no such
    # assumption about oneDNN internals.
    prev = torch.get_float32_matmul_precision()
    if prev != "highest":
        torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        if prev != "highest":
            torch.set_float32_matmul_precision(prev)


#: Above this many elements of b, b is converted to float32 in row blocks of
#: about this size (bounds the temporary copy to 256 MiB, e.g. for lm_head).
_B_BLOCK_ELEMS: int = 2**26


#: Up to this many float32 elements of per-chunk results ([chunks, M, N], 256 MiB),
#: the K chunks are multiplied in one batched GEMM.
_BATCHED_ELEMS: int = 2**26


def _chunked_f32_mm(af: torch.Tensor, bf: torch.Tensor) -> torch.Tensor:
    """``af @ bf.T`` for float32 matrices holding integers with |v| <= 128,
    exact by the argument in :func:`exact_int_mm`. Returns int64 [M, N]."""
    m, k = af.shape
    n = bf.shape[0]
    if k <= CHUNK_K:
        return (af @ bf.T).to(torch.int64)
    chunks = -(-k // CHUNK_K)
    if chunks * m * n <= _BATCHED_ELEMS:
        # every chunk in one batched GEMM: [C, M, 1024] @ [C, 1024, N], K padded
        # with zeros (which add nothing); each chunk's float32 result is its
        # exact integer sum (step 3 of exact_int_mm: any order inside a chunk),
        # the chunk sums are then added in float64 (step 4): the same exact
        # integers as the loop below, in 3 launches instead of ~4 per chunk
        # (an F6 case has K > 131,072: 129 chunks)
        pad = chunks * CHUNK_K - k
        ac = torch.nn.functional.pad(af, (0, pad)).reshape(m, chunks, CHUNK_K).transpose(0, 1)
        bc = torch.nn.functional.pad(bf, (0, pad)).reshape(n, chunks, CHUNK_K).permute(1, 2, 0)
        return torch.bmm(ac, bc).to(torch.float64).sum(dim=0).to(torch.int64)
    acc = torch.zeros((m, n), dtype=torch.float64, device=af.device)
    for c in range(0, k, CHUNK_K):
        acc += af[:, c : c + CHUNK_K] @ bf[:, c : c + CHUNK_K].T
    return acc.to(torch.int64)


def _exact_mm(a: torch.Tensor, b: torch.Tensor, absolute: bool) -> torch.Tensor:
    """Exact ``a @ b.T`` (or ``|a| @ |b|.T``) of int8 operands as int64 [M, N]."""
    conv = (lambda t: t.to(torch.float32).abs()) if absolute else (lambda t: t.to(torch.float32))
    m, k = a.shape
    n = b.shape[0]
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
    """Exact accumulator ``A @ B^T`` of int8 operands.

    Args:
        a: int8 [M, K] (any strides).
        b: int8 [N, K] (nn.Linear layout; any strides).

    Returns:
        int64 [M, N] on a's device, equal to the exact integer sum
        ``sum_k a[m,k] * b[n,k]`` (no int32 wrap-around: values outside the
        int32 range are returned as they are, so the F6 int32_overflow case
        has a known exact value).

    Raises:
        OperandError: non-tensor, non-int8, non-2-D operands or K mismatch.

    Exactness argument (float32 BLAS on K-chunks; on the 2-core dev machine,
    unloaded, ~80-97 GMAC/s vs ~20-44 for one float64 GEMM at M=512,
    K,N in {2048, 6144}: see ``python -m conformance.bench.accumulate``):
      1. Every int8 value is an integer with |v| <= 2**7, exactly
         representable in float32 (and in bf16 / tf32).
      2. Each product has |a*b| <= 128*128 = 2**14 (the maximum is the
         -128 x -128 case), an integer, exact in float32; a fused
         multiply-add of such values is exact as well.
      3. K is cut into chunks of at most ``CHUNK_K`` = 1024 = 2**10. Whatever
         order, blocking or reduction tree the BLAS uses inside a chunk,
         every intermediate is a sum of a subset of that chunk's products,
         so an integer of magnitude <= 2**10 * 2**14 = 2**24. All integers
         with |x| <= 2**24 are representable in float32 (IEEE 754 binary32,
         24-bit significand), so every addition is exact (RNE never has to
         round) and the chunk's float32 result is its exact integer sum.
      4. Chunk results are added in float64: every partial sum is an integer
         of magnitude <= K * 2**14, exact in float64 while K * 2**14 <= 2**53,
         i.e. K <= 2**39 -- far beyond any GEMM here. The final float64 ->
         int64 conversion of an exact integer is exact.
    The float32 matmul precision is forced to "highest" for the call (IEEE
    fp32, no bf16/tf32 down-conversion), although step 1 makes even that
    unnecessary as long as products are summed in float32. The argument holds
    on any device (CPU BLAS, cuBLAS with or without split-K): the result is
    computed on a's device, and "highest" also turns cuBLAS TF32 off (TF32
    would be exact here anyway: int8 values need 8 significand bits, TF32
    has 11, and its products are accumulated in float32). The sweep relies
    on this to compute its reference accumulators on the kernel's GPU;
    ``tests/reference/test_memo_device.py`` runs this very code path on the
    CPU and (marked ``cuda``) on a GPU against :func:`int_mm_int64_naive`. A large b
    (more than 2**26 elements, e.g. an lm_head) is converted in row blocks to
    bound the temporary float32 copy; rows are independent, so this changes
    nothing.
    """
    _check_pair(a, b)
    from reference import memo

    return memo.cached("exact", (a, b), lambda: _bounded(_exact_mm(a, b, absolute=False), a))


def int_mm_int64_naive(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Slow, obviously-exact int64 reference: ``sum_k int64(a) * int64(b)``.

    Element-wise int64 products and an int64 sum over K (no BLAS, no float),
    processed in row blocks to bound memory. Meant for tests (small shapes).

    Args:
        a: int8 [M, K]; b: int8 [N, K].

    Returns:
        int64 [M, N].

    Raises:
        OperandError: as :func:`exact_int_mm`.
    """
    _check_pair(a, b)
    a64 = a.to(torch.int64)
    b64 = b.to(torch.int64)
    m, k = a64.shape
    n = b64.shape[0]
    out = torch.empty((m, n), dtype=torch.int64, device=a.device)
    rows = max(1, (1 << 22) // max(1, n * k))
    for r in range(0, m, rows):
        out[r : r + rows] = (a64[r : r + rows, None, :] * b64[None, :, :]).sum(dim=-1)
    return out


def accumulator_bound(a: torch.Tensor, b: torch.Tensor) -> int:
    """Cheap bound on every accumulator: ``K * max|a| * max|b|``.

    Args:
        a: int8 [M, K]; b: int8 [N, K].

    Returns:
        Python int >= max |acc[m, n]| (0 when K = 0 or an operand is all 0).
        The worst case over int8 is ``K * 16384`` (all -128).

    Raises:
        OperandError: as :func:`exact_int_mm`.
    """
    return ask_accumulator_bound(a, b).get()


def ask_accumulator_bound(a: torch.Tensor, b: torch.Tensor):
    """:func:`accumulator_bound` as a ``reference.readback.Deferred``: both
    maxima asked together (one read-back, shared with whatever else is
    pending), read by its ``get()``.

    Raises:
        OperandError: as :func:`exact_int_mm` (at once, not at ``get``).
    """
    _check_pair(a, b)
    k = int(a.shape[1])
    if k == 0 or a.numel() == 0 or b.numel() == 0:
        return readback.ask([], lambda v: 0)
    parts = [a.to(torch.int16).abs().max(), b.to(torch.int16).abs().max()]
    return readback.ask(parts, lambda v: k * int(v[0]) * int(v[1]))


def accumulator_row_col_bound(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Tight per-element bound ``|A| @ |B|^T`` (exact, int64 [M, N]).

    ``|acc[m,n]| <= sum_k |a[m,k]| * |b[n,k]|`` with equality when the signs
    agree term by term; used by check C3 (int32_headroom) and C4. Computed
    with the exact float32-chunk path of :func:`exact_int_mm` (|a| <= 128 so
    the same 2**14 per-product bound holds).

    Args:
        a: int8 [M, K]; b: int8 [N, K].

    Returns:
        int64 [M, N], every entry >= 0.

    Raises:
        OperandError: as :func:`exact_int_mm`.
    """
    _check_pair(a, b)
    from reference import memo

    return memo.cached("bound", (a, b), lambda: _bounded(_exact_mm(a, b, absolute=True), a))


def _bounded(acc: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``acc`` (an int8 GEMM's int64 [M, N] result over ``a``'s K), with the
    bound ``K * 2**14`` on its magnitude noted in the ``reference.memo``
    scope (``memo.note_bound``: each product is at most (-128)**2 = 2**14):
    the epilogue's int64 -> float32 conversion then knows without a
    read-back that no element is beyond 2**53."""
    from reference import memo

    memo.note_bound(acc, int(a.shape[1]) * 16384)
    return acc
