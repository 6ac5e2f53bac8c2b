"""Bit-level tools for bf16 / fp16 / fp32: ordered encoding, spacing (ulp)
distance, ulp histogram and bit-exact rounding from float32.

Outputs are compared on bit patterns, never with a float tolerance. The
distance between two values of one dtype is the number of representable
values you step over to get from one to the other: the difference of their
*ordered integer encodings*. The binary interchange formats (IEEE 754-2019
section 3.4; bf16 is the top half of binary32 and follows the same rules)
store sign and magnitude, and within one sign the magnitude bits
(exponent above fraction) increase with the value, so consecutive
representable values have consecutive bit patterns (the "ulps via integer
representation" technique, B. Dawson, "Comparing Floating Point Numbers,
2012 Edition"). Folding the sign gives one monotone integer line:

    ordered(x) =  bits(x)              if the sign bit is clear
    ordered(x) = -(bits(x) & ~sign)    if the sign bit is set

so ``+0`` and ``-0`` both encode to 0 (distance 0), the smallest subnormal
is 1, the step across a power of two counts as one spacing on each side (the
spacing just below ``2**k`` is half the spacing just above it, and both are
one ulp), the largest finite value is one step below ``inf``.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from reference.errors import OperandError

#: Distance reported between a NaN and a non-NaN value (any NaN payload).
NAN_DISTANCE: int = 2**62

#: Bin labels of :func:`ulp_histogram`, in order.
ULP_BINS: tuple[str, ...] = ("0", "1", "2", "3-4", "5-8", "9-16", "17-256", ">256", "nan")

# dtype -> (same-width signed int dtype, total bits)
_INT_VIEW = {torch.bfloat16: (torch.int16, 16), torch.float16: (torch.int16, 16), torch.float32: (torch.int32, 32)}


def _check_float(x, what: str = "x") -> None:
    if not isinstance(x, torch.Tensor):
        raise OperandError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _INT_VIEW:
        raise OperandError(f"{what} has dtype {x.dtype}; expected bfloat16, float16 or float32")


def bits_of(x: torch.Tensor) -> torch.Tensor:
    """Raw IEEE bit pattern of each element as a non-negative integer.

    Args:
        x: Tensor of any shape, dtype bfloat16 / float16 (result 0..65535) or
           float32 (result 0..2**32-1).

    Returns:
        int64 tensor, same shape, on x's device. E.g. bf16 1.0 -> 0x3F80,
        bf16 -0.0 -> 0x8000.

    Raises:
        OperandError: x is not a tensor or has another dtype.
    """
    _check_float(x)
    from reference import memo

    # memoized on x inside a reference.memo scope (the sweep compares one
    # output and one layer reference several times); callers never write
    # into the result
    return memo.cached("bits_of", (x,), lambda: _bits_of(x))


def _bits_of(x: torch.Tensor) -> torch.Tensor:
    """:func:`bits_of` computed (no memo)."""
    idt, nbits = _INT_VIEW[x.dtype]
    raw = x.contiguous().view(idt).to(torch.int64)
    return raw & ((1 << nbits) - 1)


def ordered_int(x: torch.Tensor) -> torch.Tensor:
    """Monotone integer encoding of float values (see module docstring).

    Args:
        x: Tensor of any shape, dtype bfloat16, float16 or float32.

    Returns:
        int64 tensor, same shape: ``ordered(a) < ordered(b)`` iff ``a < b``
        for non-NaN a, b; ``+0`` and ``-0`` both give 0; adjacent
        representable values differ by exactly 1 (including across a power
        of two, between the largest subnormal and the smallest normal, and
        between the largest finite value and ``inf``). NaNs encode beyond
        ``±inf`` (by payload); use :func:`spacing_distance`, which handles
        NaN explicitly, rather than comparing their encodings.

    Raises:
        OperandError: x is not a tensor or has another dtype.
    """
    from reference import memo

    return memo.cached("ordered_int", (x,), lambda: _ordered_int(x))


def _ordered_int(x: torch.Tensor) -> torch.Tensor:
    """:func:`ordered_int` computed (no memo; memoized like :func:`bits_of`)."""
    b = bits_of(x)
    nbits = _INT_VIEW[x.dtype][1]
    sign = 1 << (nbits - 1)
    mag = b & (sign - 1)
    return torch.where(b >= sign, -mag, mag)


def spacing_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Element-wise distance in units of spacing (ulp) of the common dtype.

    ``|ordered(x) - ordered(y)|`` (see :func:`ordered_int`). Handling:
    ``+0`` vs ``-0`` -> 0; subnormals are counted like any other step (the
    smallest subnormal is 1 from zero); ``inf`` is one step beyond the
    largest finite value (bf16 max 0x7F7F vs inf 0x7F80 -> 1) and ``-inf`` vs
    ``+inf`` is the full span; NaN vs NaN (any payloads) -> 0; NaN vs
    non-NaN -> :data:`NAN_DISTANCE` (2**62, larger than any finite-or-inf
    distance, so a max/histogram still flags it).

    Args:
        x, y: tensors of one shape and one dtype (bfloat16, float16, float32).

    Returns:
        int64 tensor of x's shape, values >= 0.

    Raises:
        OperandError: non-tensor, unsupported dtype, dtype or shape mismatch.
    """
    _check_float(x, "x")
    _check_float(y, "y")
    if x.dtype != y.dtype:
        raise OperandError(f"spacing_distance: dtype mismatch {x.dtype} vs {y.dtype}")
    if tuple(x.shape) != tuple(y.shape):
        raise OperandError(f"spacing_distance: shape mismatch {tuple(x.shape)} vs {tuple(y.shape)}")
    y = y.to(x.device)
    d = (ordered_int(x) - ordered_int(y)).abs()
    nx, ny = torch.isnan(x), torch.isnan(y)
    d = torch.where(nx & ny, torch.zeros_like(d), d)
    d = torch.where(nx ^ ny, torch.full_like(d, NAN_DISTANCE), d)
    return d


def ulp_histogram(dist: torch.Tensor) -> dict[str, int]:
    """Histogram of spacing distances into fixed bins.

    Args:
        dist: int64 tensor (any shape) from :func:`spacing_distance`.

    Returns:
        ``{"0", "1", "2", "3-4", "5-8", "9-16", "17-256", ">256", "nan"}`` ->
        count (Python ints, every key present, counts sum to ``dist.numel()``).
        ``"nan"`` counts entries equal to :data:`NAN_DISTANCE` (NaN vs
        non-NaN); ``">256"`` counts every other distance above 256.

    Raises:
        OperandError: dist is not an integer tensor.
    """
    return histogram_dict(ulp_histogram_counts(dist).tolist())


#: lower edges of the bins "0" .. ">256": ``bucketize(d, edges, right=True)``
#: puts d in 1 .. 8 (0 for a negative d, counted nowhere, as before)
_HIST_EDGES = (0, 1, 2, 3, 5, 9, 17, 257)
_EDGE_TENSORS: dict = {}


def _stream_key(t: torch.Tensor) -> int:
    """The current CUDA stream of ``t``'s device (0 off CUDA)."""
    if not t.is_cuda:
        return 0
    try:  # a C call; torch.cuda.current_stream builds a Python object
        return torch._C._cuda_getCurrentRawStream(t.device.index)
    except AttributeError:  # pragma: no cover -- a torch without it
        return torch.cuda.current_stream(t.device).cuda_stream


def ulp_histogram_counts(dist: torch.Tensor) -> torch.Tensor:
    """:func:`ulp_histogram` as an int64 [9] tensor of counts in
    :data:`ULP_BINS` order, on ``dist``'s device, without reading anything
    back (one ``bucketize`` + one ``bincount`` instead of a masked sum per
    bin: a caller that reads several counts reads them in one transfer).

    Raises:
        OperandError: dist is not an integer tensor.
    """
    if not isinstance(dist, torch.Tensor) or dist.dtype.is_floating_point or dist.dtype == torch.bool:
        raise OperandError("ulp_histogram: dist must be an integer tensor from spacing_distance")
    d = dist.reshape(-1).to(torch.int64)
    # one per device and CUDA stream: a copy made on one stream is not ordered
    # before another stream's use of it (the sweep's threads each have a stream)
    key = (d.device, _stream_key(d))
    edges = _EDGE_TENSORS.get(key)
    if edges is None:
        edges = _EDGE_TENSORS[key] = torch.tensor(_HIST_EDGES, dtype=torch.int64, device=d.device)
    idx = torch.bucketize(d, edges, right=True)
    idx = torch.where(d == NAN_DISTANCE, torch.full_like(idx, 9), idx)  # "nan" (not ">256")
    return torch.bincount(idx, minlength=10)[1:]


def histogram_dict(counts) -> dict[str, int]:
    """``{bin label: count}`` (Python ints) from the 9 counts of
    :func:`ulp_histogram_counts` (a list or a tensor), in :data:`ULP_BINS` order."""
    return {label: int(c) for label, c in zip(ULP_BINS, counts)}


@contextlib.contextmanager
def ieee_subnormals(*tensors):
    """Context in which CPU float ops keep subnormals (IEEE 754 default).

    If the process enabled ``torch.set_flush_denormal(True)`` (x86 FTZ/DAZ),
    subnormal inputs would read as zero and subnormal results be flushed; GPU
    float32 epilogues and IEEE keep them. Detected with one tiny probe op
    (:func:`_flushes_subnormals`), switched off for the block and restored
    afterwards.

    Args:
        tensors: the block's inputs, optional. When given and every one is a
            tensor off the CPU, the block runs no CPU float op, the setting
            cannot matter and the probe is skipped.
    """
    if tensors and all(isinstance(t, torch.Tensor) and t.device.type != "cpu" for t in tensors):
        yield
        return
    flushed = _flushes_subnormals()
    if flushed:
        torch.set_flush_denormal(False)
    try:
        yield
    finally:
        if flushed:
            torch.set_flush_denormal(True)


def _flushes_subnormals() -> bool:
    """Whether float ops of the calling thread flush subnormals now (FTZ /
    DAZ, what ``torch.set_flush_denormal(True)`` switches on; torch has no
    getter for it).

    The setting is a register of the calling thread (x86 MXCSR, AArch64
    FPCR) that every float instruction the thread executes obeys, numpy's
    scalar arithmetic as much as a torch CPU op, so it is probed with one
    numpy float32 multiply: ``2**-130 * 0.5`` (a subnormal times a normal)
    is 0 exactly when subnormals are flushed. A host probe, not a torch op:
    no dispatch and no tensor read-back on the sweep's per-cell path, where
    the reference and fault epilogues enter :func:`ieee_subnormals` several
    times per cell on the CPU.
    """
    return bool(np.float32(2.0**-130) * np.float32(0.5) == 0)


def _bf16_rne(x32: torch.Tensor) -> torch.Tensor:
    """float32 -> bf16 RNE on the raw bits (independent of torch's cast).

    Adds 0x7FFF plus the lowest kept bit, then drops the low 16 bits: a tie
    (low half exactly 0x8000) rounds up only when the kept part is odd; a
    carry into the exponent gives the next binade or inf, as IEEE requires.
    Done in int32: addition is modulo 2**32 like unsigned bit arithmetic, and
    the arithmetic shift keeps the right low 16 bits (for every non-NaN
    pattern the shifted value already fits int16). NaN maps to a quiet NaN
    with the same sign (top payload bits kept, quiet bit forced), so
    truncation can never turn a NaN into inf.
    """
    b = x32.contiguous().view(torch.int32)
    lsb = (b >> 16) & 1
    r = ((b + lsb + 0x7FFF) >> 16).to(torch.int16)
    quiet = ((b >> 16) | 0x40).to(torch.int16)
    return torch.where(torch.isnan(x32), quiet, r).view(torch.bfloat16)


def _from_bits(bits64: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    idt, nbits = _INT_VIEW[dtype]
    v = bits64 & ((1 << nbits) - 1)
    v = torch.where(v >= (1 << (nbits - 1)), v - (1 << nbits), v)
    return v.to(idt).view(dtype)


def round_fp32(x: torch.Tensor, dtype: torch.dtype, mode: str = "rne") -> torch.Tensor:
    """Round float32 values to ``dtype`` bit-exactly.

    Args:
        x: float32 tensor, any shape.
        dtype: torch.bfloat16, torch.float16 or torch.float32 (identity copy).
        mode: ``"rne"`` round to nearest, ties to even (IEEE 754 default,
            roundTiesToEven); ``"rtz"`` round toward zero (truncation, the
            F4 output_truncation fault). Overflow: RNE gives ±inf past the
            midpoint above the largest finite value; RTZ saturates at the
            largest finite value (IEEE 754 section 7.4). Subnormal results
            are produced (no flush to zero, even if FTZ was enabled, see
            :func:`ieee_subnormals`); NaN stays a quiet NaN with its sign (the
            payload may differ from torch's own cast: compare NaN-ness, as
            :func:`spacing_distance` does); ±inf and ±0 keep their sign.

    Returns:
        Tensor of ``dtype``, same shape and device.

    Raises:
        OperandError: x not float32, unsupported dtype or mode.

    bf16 RNE is computed on the integer bits (bias-and-shift); fp16 RNE uses
    torch's float32->float16 cast (IEEE RNE, checked against numpy in
    tests/reference/test_bits.py); RTZ is derived from RNE by stepping one spacing
    toward zero whenever RNE rounded away from zero.
    """
    _check_float(x)
    if x.dtype != torch.float32:
        raise OperandError(f"round_fp32 expects float32 input, got {x.dtype}")
    if dtype not in _INT_VIEW:
        raise OperandError(f"round_fp32: unsupported target dtype {dtype}")
    if mode not in ("rne", "rtz"):
        raise OperandError(f"round_fp32: mode must be 'rne' or 'rtz', got {mode!r}")
    if dtype == torch.float32:
        return x.clone()
    with ieee_subnormals(x):
        return _round16(x, dtype, mode)


def _round16(x: torch.Tensor, dtype: torch.dtype, mode: str) -> torch.Tensor:
    rne = _bf16_rne(x) if dtype == torch.bfloat16 else x.to(torch.float16)
    if mode == "rne":
        return rne
    back = rne.to(torch.float32)  # exact widening
    away = (back.abs() > x.abs()) & torch.isfinite(x)
    # one step toward zero in sign-magnitude = magnitude bits - 1
    stepped = _from_bits(bits_of(rne) - 1, dtype)
    return torch.where(away, stepped, rne)
