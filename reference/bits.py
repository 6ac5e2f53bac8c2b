"""Bit-level tools for bf16 / fp16 / fp32: ordered encoding, spacing (ulp) distance, ulp histogram, bit-exact rounding
from float32. Outputs are compared on bit patterns, never with a float tolerance.

The distance between two values of one dtype is the difference of their ordered integer encodings (IEEE 754-2019
3.4; B. Dawson, "Comparing Floating Point Numbers, 2012 Edition"): ``ordered(x) = bits(x)`` if the sign bit is
clear, ``-(bits(x) & ~sign)`` if set. So ``+0`` and ``-0`` both encode to 0, the smallest subnormal is 1, each side of a
power of two counts one step, and the largest finite value is one step below ``inf``."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from reference import memo
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
    """Raw IEEE bit pattern of each element as a non-negative int64 (bf16 1.0 -> 0x3F80), same shape and device;
    memoized inside a ``reference.memo`` scope (do not write into it). OperandError unless bf16/fp16/fp32."""
    _check_float(x)
    idt, nbits = _INT_VIEW[x.dtype]
    return memo.cached("bits_of", (x,), lambda: x.contiguous().view(idt).to(torch.int64) & ((1 << nbits) - 1))


def isnan_of(x: torch.Tensor) -> torch.Tensor:
    """``torch.isnan(x)`` (bool, same shape and device), memoized inside a ``reference.memo`` scope (do not write
    into it): a batch's reference is tested once, not once per comparison."""
    return memo.cached("isnan", (x,), lambda: torch.isnan(x))


def ordered_int(x: torch.Tensor) -> torch.Tensor:
    """Monotone int64 encoding (module docstring): ``ordered(a) < ordered(b)`` iff ``a < b`` for non-NaN values,
    adjacent representable values differ by 1, ``±0`` -> 0; NaNs encode beyond ``±inf`` (use :func:`spacing_distance`).
    OperandError unless bf16/fp16/fp32."""
    return memo.cached("ordered_int", (x,), lambda: _ordered_int(x))


def _ordered_int(x: torch.Tensor) -> torch.Tensor:
    b = bits_of(x)
    nbits = _INT_VIEW[x.dtype][1]
    sign = 1 << (nbits - 1)
    mag = b & (sign - 1)
    return torch.where(b >= sign, -mag, mag)


def spacing_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Element-wise ``|ordered(x) - ordered(y)|`` (int64 >= 0) for two tensors of one shape and dtype.

    ``+0`` vs ``-0`` -> 0; ``inf`` is one step beyond the largest finite value; NaN vs NaN (any payloads) -> 0; NaN vs
    non-NaN -> :data:`NAN_DISTANCE`. OperandError on a non-tensor, unsupported dtype, or dtype/shape mismatch."""
    _check_float(x, "x")
    _check_float(y, "y")
    if x.dtype != y.dtype:
        raise OperandError(f"spacing_distance: dtype mismatch {x.dtype} vs {y.dtype}")
    if tuple(x.shape) != tuple(y.shape):
        raise OperandError(f"spacing_distance: shape mismatch {tuple(x.shape)} vs {tuple(y.shape)}")
    y = y.to(x.device)
    d = (ordered_int(x) - ordered_int(y)).abs()
    nx, ny = isnan_of(x), isnan_of(y)
    d = torch.where(nx & ny, 0, d)
    d = torch.where(nx ^ ny, NAN_DISTANCE, d)
    return d


def ulp_histogram(dist: torch.Tensor) -> dict[str, int]:
    """``{bin: count}`` over :data:`ULP_BINS` (every key, Python ints, summing to ``dist.numel()``) of an int64
    :func:`spacing_distance` tensor; ``"nan"`` counts :data:`NAN_DISTANCE`. OperandError unless an integer tensor."""
    return histogram_dict(ulp_histogram_counts(dist).tolist())


#: lower edges of the bins "0" .. ">256": ``bucketize(d, edges, right=True)``
#: puts d in 1 .. 8 (0 for a negative d, counted nowhere, as before)
_HIST_EDGES = (0, 1, 2, 3, 5, 9, 17, 257)
#: (device, stream) -> (edges, bin numbers 1 .. 9 as a column)
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
    """:func:`ulp_histogram` as an int64 [9] tensor in :data:`ULP_BINS` order on ``dist``'s device, with no read-back.
    OperandError unless an integer tensor."""
    if not isinstance(dist, torch.Tensor) or dist.dtype.is_floating_point or dist.dtype == torch.bool:
        raise OperandError("ulp_histogram: dist must be an integer tensor from spacing_distance")
    d = dist.reshape(-1).to(torch.int64)
    # one per device and CUDA stream: a copy made on one stream is not ordered before another stream's use of it
    key = (d.device, _stream_key(d))
    consts = _EDGE_TENSORS.get(key)
    if consts is None:
        edges = torch.tensor(_HIST_EDGES, dtype=torch.int64, device=d.device)
        consts = _EDGE_TENSORS[key] = (edges, torch.arange(1, 10, dtype=torch.int64, device=d.device).unsqueeze(1))
    edges, bins = consts
    idx = torch.bucketize(d, edges, right=True)
    idx = torch.where(d == NAN_DISTANCE, 9, idx)  # "nan" (not ">256")
    if idx.is_cuda:  # torch.bincount reads its input's min and max back on CUDA (two syncs): counted per bin
        return (idx.unsqueeze(0) == bins).sum(1)
    return torch.bincount(idx, minlength=10)[1:]


def histogram_dict(counts) -> dict[str, int]:
    """``{bin label: count}`` from the 9 counts of :func:`ulp_histogram_counts` (a list or a tensor)."""
    return {label: int(c) for label, c in zip(ULP_BINS, counts)}


@contextlib.contextmanager
def ieee_subnormals(*tensors):
    """Context in which CPU float ops keep subnormals (IEEE default) even if the process enabled
    ``torch.set_flush_denormal(True)``; the setting is restored afterwards. With ``tensors`` given, all off the CPU,
    nothing is probed or switched."""
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
    """Whether float ops of the calling thread flush subnormals now (torch has no getter): the FTZ/DAZ register governs
    numpy scalar math too, so one host multiply ``2**-130 * 0.5 == 0`` tells, with no torch dispatch."""
    return bool(np.float32(2.0**-130) * np.float32(0.5) == 0)


def _bf16_rne(x32: torch.Tensor) -> torch.Tensor:
    """float32 -> bf16 RNE on the raw bits, independent of torch's cast: add 0x7FFF plus the lowest kept bit, drop the
    low 16 bits (int32 wraps like unsigned arithmetic). NaN -> a quiet NaN with the same sign and top payload bits."""
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
    """Round float32 ``x`` to ``dtype`` (bf16, fp16; float32: a copy) bit-exactly -> same shape and device.

    ``mode``: ``"rne"`` (roundTiesToEven) or ``"rtz"`` (toward zero, the F4 output_truncation fault). RNE overflows to
    ±inf; RTZ saturates at the largest finite value (IEEE 754 7.4). Subnormals are kept even under FTZ; NaN stays a
    quiet NaN with its sign (payload may differ from torch's cast); ±inf and ±0 keep their sign. bf16 RNE is done on the
    bits, fp16 RNE by torch's cast, RTZ by stepping RNE one spacing toward zero where it rounded away. OperandError: x
    not float32, unsupported dtype or mode."""
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
        rne = _bf16_rne(x) if dtype == torch.bfloat16 else x.to(torch.float16)
        if mode == "rne":
            return rne
        away = (rne.to(torch.float32).abs() > x.abs()) & torch.isfinite(x)  # exact widening
        # one step toward zero in sign-magnitude = magnitude bits - 1
        return torch.where(away, _from_bits(bits_of(rne) - 1, dtype), rne)


def fma_fp32(x: torch.Tensor, c: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IEEE ``fmaf(x, c, b)`` on float32 tensors: ``x*c`` is exact in float64, the float64 sum is rounded to odd (TwoSum
    error), then one RNE to float32 equals one RNE of the exact sum (Boldo & Melquiond, IEEE TC 2008)."""
    x64, c64, b64 = (t.to(torch.float64) for t in torch.broadcast_tensors(x, c, b))
    p = x64 * c64
    s = p + b64
    bb = s - p
    err = (p - (s - bb)) + (b64 - bb)
    bits = s.view(torch.int64)
    fix = (err != 0) & ((bits & 1) == 0) & torch.isfinite(s)
    toward = torch.where(err > 0, torch.full_like(s, float("inf")), torch.full_like(s, float("-inf")))
    return torch.where(fix, torch.nextafter(s, toward), s).to(torch.float32)
