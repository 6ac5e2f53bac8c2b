"""Integer primitives of the engine with frozen rounding rules: shifts, divisions, isqrt, ilog2, dyadic scales.

Forward-time functions take and return torch integer tensors and use integer arithmetic only, so results
are bit-identical on every device and evaluation order; floats appear only in the offline ``fit_*``
helpers. The rules are tabled in ``detllm/README.md``. Dyadic scale (I-BERT, Kim et al. 2021, sec. 3.1):
a real multiplier r becomes m / 2^k, applied as an integer product and one rounding shift.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Tuple, Union

import torch

from reference.errors import OperandError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64)
_OUT_DTYPES = {8: torch.int8, 16: torch.int16, 32: torch.int32}

# shift amounts are clamped here: torch's >> by 63+ on int64 is sign fill (== floor)
_MAX_SHIFT = 62

IntLike = Union[int, torch.Tensor]


def require_int(x, name: str = "x") -> torch.Tensor:
    """``x`` if it is a signed-integer torch tensor, else OperandError naming ``name``."""
    if not isinstance(x, torch.Tensor):
        raise OperandError(f"{name}: expected an integer torch.Tensor, got {type(x).__name__}")
    if x.dtype not in INT_DTYPES:
        raise OperandError(f"{name}: expected dtype int8/int16/int32/int64, got {x.dtype}")
    return x


def as_i64(x: IntLike, like: torch.Tensor | None = None, name: str = "x") -> torch.Tensor:
    if isinstance(x, bool):
        raise OperandError(f"{name}: expected an integer, got bool")
    if isinstance(x, int):
        dev = like.device if like is not None else None
        return torch.tensor(x, dtype=torch.int64, device=dev)
    return require_int(x, name).to(torch.int64)


def _pow2(k: torch.Tensor) -> torch.Tensor:
    return torch.bitwise_left_shift(torch.ones_like(k), k)


def floor_shift(x: torch.Tensor, k: IntLike) -> torch.Tensor:
    """floor(x / 2^k) for k >= 0 (k >= 63: 0 or -1), exact x * 2^-k for k < 0 -> int64, broadcast shape.

    k: int or integer tensor broadcastable to x. Left shifts must not overflow (not checked).
    Raises OperandError for a non-integer x or k.
    """
    x = as_i64(x, name="x")
    k = as_i64(k, like=x, name="k")
    right = torch.bitwise_right_shift(x, k.clamp(0, 63))
    left = torch.bitwise_left_shift(x, (-k).clamp(0, 63))
    return torch.where(k >= 0, right, left)


def _round_shift_tensor_fast(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``round_shift`` for tensor 0 <= k <= 62: y = x >> (k-1), (y >> 1) + (y & 1); negative exact ties go down."""
    km1 = (k - 1).clamp(min=0)
    y = torch.bitwise_right_shift(x, km1)
    odd = torch.bitwise_and(y, 1)
    neg_tie = (x < 0) & (torch.bitwise_left_shift(y, km1) == x)
    out = torch.bitwise_right_shift(y, 1) + torch.where(neg_tie, torch.zeros_like(odd), odd)
    return torch.where(k == 0, x, out)


def round_shift(x: torch.Tensor, k: IntLike) -> torch.Tensor:
    """round(x / 2^k), ties away from zero; exact x * 2^-k for k < 0 -> int64, broadcast shape.

    q = floor(x / 2^k), r = x mod 2^k: q + 1 when r > 2^(k-1), or r == 2^(k-1) and x >= 0. Exact over
    all int64 and every k (k >= 63: -1, 0 or 1). k: int or integer tensor broadcastable to x.
    Left shifts must not overflow (not checked). Raises OperandError for a non-integer x or k.
    """
    x = as_i64(x, name="x")
    if isinstance(k, int) and not isinstance(k, bool):
        if k <= 0:
            return torch.bitwise_left_shift(x, min(-k, 63))
        if k <= _MAX_SHIFT:
            q = torch.bitwise_right_shift(x, k)
            r = torch.bitwise_and(x, (1 << k) - 1)
            half = 1 << (k - 1)
            return q + ((r > half) | ((r == half) & (x >= 0))).to(torch.int64)
    k = as_i64(k, like=x, name="k")
    if k.numel() and 0 <= int(k.min()) and int(k.max()) <= _MAX_SHIFT:
        return _round_shift_tensor_fast(x, k)
    kr = k.clamp(0, _MAX_SHIFT)
    q = torch.bitwise_right_shift(x, kr)
    r = torch.bitwise_and(x, _pow2(kr) - 1)
    half = torch.bitwise_right_shift(_pow2(kr), 1)  # 0 when k == 0
    up = (r > half) | ((r == half) & (x >= 0) & (kr > 0))
    right = q + up.to(torch.int64)
    # k >= 63: |x / 2^k| <= 1; +-1 iff |x| >= 2^(k-1) (ties away), else 0.
    r63 = (x >= 2**62).to(torch.int64) - (x <= -(2**62)).to(torch.int64)
    r64 = -(x == INT64_MIN).to(torch.int64)
    big = torch.where(k == 63, r63, torch.where(k == 64, r64, torch.zeros_like(r63)))
    right = torch.where(k > _MAX_SHIFT, big, right)
    left = torch.bitwise_left_shift(x, (-k).clamp(0, 63))
    return torch.where(k >= 0, right, left)


def _check_divisor(b: torch.Tensor) -> None:
    if bool((b == 0).any()):
        raise OperandError("divisor: contains 0")


def div_floor(a: IntLike, b: IntLike) -> torch.Tensor:
    """floor(a / b) -> int64, broadcast shape. Raises OperandError if any b == 0."""
    a = as_i64(a, name="a")
    b = as_i64(b, like=a, name="b")
    _check_divisor(b)
    return torch.div(a, b, rounding_mode="floor")


def div_round(a: IntLike, b: IntLike) -> torch.Tensor:
    """round(a / b), ties away from zero, any signs -> int64, broadcast shape; exact for |a|, |b| <= 2^63 - 1.

    On magnitudes: q = |a| // |b|, +1 when 2r >= |b|; sign last. Raises OperandError for a non-integer
    operand or any b == 0.
    """
    a = as_i64(a, name="a")
    b = as_i64(b, like=a, name="b")
    _check_divisor(b)
    aa, bb = a.abs(), b.abs()
    q = torch.div(aa, bb, rounding_mode="floor")
    r = aa - q * bb
    q = q + (r >= bb - r).to(torch.int64)
    neg = (a < 0) != (b < 0)
    return torch.where(neg, -q, q)


def isqrt(x: torch.Tensor) -> torch.Tensor:
    """Exact floor(sqrt(x)) for int64 0 <= x <= 2^63 - 1, 32 fixed digit-by-digit steps -> int64, same shape.

    Raises OperandError for a non-integer dtype or a negative element.
    """
    x = as_i64(x, name="x")
    if bool((x < 0).any()):
        raise OperandError("isqrt: negative input")
    rem = x.clone()
    res = torch.zeros_like(x)
    bit = 1 << 62
    while bit:
        t = res + bit
        ge = rem >= t
        rem = torch.where(ge, rem - t, rem)
        res = torch.where(ge, torch.bitwise_right_shift(res, 1) + bit, torch.bitwise_right_shift(res, 1))
        bit >>= 2
    return res


def ilog2(x: torch.Tensor) -> torch.Tensor:
    """Exact floor(log2(x)) for 1 <= x <= 2^63 - 1 (binary search) -> int64 in [0, 62]; OperandError for x <= 0."""
    x = as_i64(x, name="x")
    if bool((x <= 0).any()):
        raise OperandError("ilog2: input must be >= 1")
    r = torch.zeros_like(x)
    for s in (32, 16, 8, 4, 2, 1):
        ge = x >= (1 << s)
        x = torch.where(ge, torch.bitwise_right_shift(x, s), x)
        r = r + ge.to(torch.int64) * s
    return r


def ilog2_or(x: torch.Tensor, zero_value: int = -1) -> torch.Tensor:
    """floor(log2(x)) for x >= 1, ``zero_value`` where x == 0; OperandError for negative elements."""
    x = as_i64(x, name="x")
    if bool((x < 0).any()):
        raise OperandError("ilog2_or: negative input")
    return torch.where(x > 0, ilog2(x.clamp(min=1)), torch.full_like(x, zero_value))


@dataclass(frozen=True)
class Dyadic:
    """A dyadic scale m / 2^k (Python ints; k < 0 means m * 2^-k)."""

    m: int
    k: int

    def __post_init__(self):
        if not isinstance(self.m, int) or not isinstance(self.k, int) or isinstance(self.m, bool):
            raise OperandError(
                f"Dyadic: m and k must be Python ints, got {type(self.m).__name__}, {type(self.k).__name__}"
            )

    def value(self) -> Fraction:
        """The exact rational m / 2^k."""
        return Fraction(self.m) / Fraction(2) ** self.k


# per-channel dyadic scales (m int64 [N], k int64 [N] or int) broadcast along the last dim
DyadicLike = Union[Dyadic, Tuple[torch.Tensor, IntLike]]


def _round_half_away(fr: Fraction) -> int:
    n = abs(fr.numerator) * 2 + fr.denominator
    q = n // (2 * fr.denominator)
    return q if fr >= 0 else -q


def fit_dyadic(ratio: float, mantissa_bits: int = 16) -> Dyadic:
    """Offline: the dyadic closest to ``ratio`` with |m| <= 2^mantissa_bits - 1, relative error <= 2^-mantissa_bits.

    k is the largest (<= 62) with m = round(ratio 2^k) (exact rationals, ties away) in range; ratio 0
    gives Dyadic(0, 0). Raises OperandError: ratio not finite, mantissa_bits outside [2, 31].
    """
    if not (2 <= int(mantissa_bits) <= 31):
        raise OperandError(f"fit_dyadic: mantissa_bits must be in [2, 31], got {mantissa_bits}")
    ratio = float(ratio)
    if not math.isfinite(ratio):
        raise OperandError(f"fit_dyadic: ratio must be finite, got {ratio}")
    if ratio == 0.0:
        return Dyadic(0, 0)
    fr = Fraction(ratio)
    limit = 2**mantissa_bits - 1
    # frexp: |ratio| = f * 2^e with 0.5 <= f < 1 -> start near the answer.
    _, e = math.frexp(abs(ratio))
    k = min(mantissa_bits - e, _MAX_SHIFT)
    while True:
        m = _round_half_away(fr * Fraction(2) ** k)
        if abs(m) <= limit:
            break
        k -= 1
    return Dyadic(int(m), int(k))


def fit_dyadic_per_channel(ratios, mantissa_bits: int = 16, shared_shift: bool = False):
    """Offline: per-channel dyadics of float ``ratios[N]`` -> (m int64 [N], k int64 [N]), or with
    ``shared_shift`` (m int64 [N], k int): one k, the largest with every |m| in range.
    """
    vals = [float(v) for v in (ratios.tolist() if isinstance(ratios, torch.Tensor) else ratios)]
    ds = [fit_dyadic(v, mantissa_bits) for v in vals]
    if not shared_shift:
        return (torch.tensor([d.m for d in ds], dtype=torch.int64), torch.tensor([d.k for d in ds], dtype=torch.int64))
    k = min(d.k for d in ds if d.m != 0) if any(d.m != 0 for d in ds) else 0
    ms = [_round_half_away(Fraction(v) * Fraction(2) ** k) for v in vals]
    return torch.tensor(ms, dtype=torch.int64), int(k)


def fit_channel_multipliers(values, bits: int = 15):
    """Offline: per-channel multipliers (e.g. RMSNorm gamma) as (m int16 [N] (int32 if bits > 15), k int),
    one shared k <= 30 with every |round(v 2^k)| <= 2^bits - 1 (``ops.int_rmsnorm(gamma=...)``).
    """
    m, k = fit_dyadic_per_channel(values, mantissa_bits=bits, shared_shift=True)
    k = min(k, 30)
    vals = [float(v) for v in (values.tolist() if isinstance(values, torch.Tensor) else values)]
    m = torch.tensor([_round_half_away(Fraction(v) * Fraction(2) ** k) for v in vals], dtype=torch.int64)
    return m.to(torch.int16 if bits <= 15 else torch.int32), int(k)


def _dyadic_tensors(d: DyadicLike, like: torch.Tensor):
    if isinstance(d, Dyadic):
        return as_i64(d.m, like), as_i64(d.k, like)
    if isinstance(d, tuple) and len(d) == 2:
        return as_i64(d[0], like, "dyadic m").to(like.device), as_i64(d[1], like, "dyadic k").to(like.device)
    raise OperandError(f"dyadic: expected Dyadic or (m, k) tensors, got {type(d).__name__}")


def apply_dyadic(x: torch.Tensor, d: DyadicLike, shift: IntLike = 0) -> torch.Tensor:
    """round(x * m / 2^(k + shift)), ONE rounding, ties away -> int64 [..., N].

    d: ``Dyadic`` or per-channel (m int [N], k int [N] | int) along the last dim; shift: int or tensor
    broadcastable to x (e.g. a per-token exponent). Precondition (not checked): |x * m| < 2^63.
    """
    x = require_int(x, "x").to(torch.int64)
    m, k = _dyadic_tensors(d, x)
    return round_shift(x * m, k + as_i64(shift, x, "shift"))


def saturate(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Clamp to [-2^(bits-1), 2^(bits-1) - 1] and cast to int8/int16/int32; OperandError for bits not in {8, 16, 32}."""
    if bits not in _OUT_DTYPES:
        raise OperandError(f"saturate: bits must be 8, 16 or 32, got {bits}")
    x = require_int(x, "x")
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return x.to(torch.int64).clamp(lo, hi).to(_OUT_DTYPES[bits])


def requantize(x_int32: torch.Tensor, d: DyadicLike, out_bits: int = 8, shift: IntLike = 0) -> torch.Tensor:
    """int32 accumulator -> int8/int16 (``out_bits``): saturate(apply_dyadic(x, d, shift)).

    Raises OperandError for a bad dtype or out_bits.
    """
    if out_bits not in (8, 16):
        raise OperandError(f"requantize: out_bits must be 8 or 16, got {out_bits}")
    return saturate(apply_dyadic(x_int32, d, shift), out_bits)
