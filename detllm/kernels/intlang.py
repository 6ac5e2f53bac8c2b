"""Shared Triton device functions of the fused kernels, and their launcher.

Each device function is the element-wise rule of a frozen torch op, written to give the same int64 bits
compiled and interpreted: int64 arithmetic only on values the torch op also forms; shift amounts clamped
into [0, 63] (an LLVM shift by >= the bit width is poison); integer division only on non-negative
operands (truncation = floor); no ``@triton.jit`` standard-library helpers (the interpreter cannot call
them from a kernel built by ``launcher``). ``launcher(fn)[grid](*args)`` compiles ``fn`` for CUDA
tensors and interprets it, helpers replaced by their Python functions, for CPU tensors.
"""

from __future__ import annotations

import types

import torch
import triton
import triton.language as tl

from detllm.ops import exp2_values

INT64_MIN = -(2**63)


@triton.jit
def round_shift(x, k):
    """``intops.round_shift`` per element (int64 x, k broadcastable), including k < 0, k = 63, 64 and > 64."""
    one = k * 0 + 1
    kc = tl.minimum(tl.maximum(k, 0), 62)
    p = one << kc
    q = x >> kc
    r = x & (p - 1)
    half = p >> 1
    up = (r > half) | ((r == half) & (x >= 0) & (kc > 0))
    right = q + up.to(tl.int64)
    big63 = (x >= (one << 62)).to(tl.int64) - (x <= -(one << 62)).to(tl.int64)
    big64 = -(x == (one << 63)).to(tl.int64)
    big = tl.where(k == 63, big63, tl.where(k == 64, big64, big63 * 0))
    right = tl.where(k > 62, big, right)
    left = x << tl.minimum(tl.maximum(-k, 0), 63)
    return tl.where(k >= 0, right, left)


@triton.jit
def floor_shift(x, k):
    """``intops.floor_shift`` per element, shifts clamped at 63."""
    right = x >> tl.minimum(tl.maximum(k, 0), 63)
    left = x << tl.minimum(tl.maximum(-k, 0), 63)
    return tl.where(k >= 0, right, left)


@triton.jit
def bitlen(a):
    """``engine._bitlen`` (0 for a <= 0), by binary search over the bits."""
    v = tl.maximum(a, 0)
    r = v * 0
    ge = v >= (1 << 32)
    v = tl.where(ge, v >> 32, v)
    r = r + ge.to(tl.int64) * 32
    ge = v >= (1 << 16)
    v = tl.where(ge, v >> 16, v)
    r = r + ge.to(tl.int64) * 16
    ge = v >= (1 << 8)
    v = tl.where(ge, v >> 8, v)
    r = r + ge.to(tl.int64) * 8
    ge = v >= (1 << 4)
    v = tl.where(ge, v >> 4, v)
    r = r + ge.to(tl.int64) * 4
    ge = v >= (1 << 2)
    v = tl.where(ge, v >> 2, v)
    r = r + ge.to(tl.int64) * 2
    ge = v >= (1 << 1)
    r = r + ge.to(tl.int64)
    return tl.where(a >= 1, r + 1, r * 0)


@triton.jit
def div_round_pos(a, b):
    """``engine.div_round_pos``: (2|a| + b) // 2b with the sign of a, b > 0."""
    aa = tl.abs(a)
    q = (2 * aa + b) // (2 * b)
    return tl.where(a < 0, -q, q)


@triton.jit
def isqrt_newton(n):
    """``engine.isqrt_newton``: the same six Newton steps and final compare."""
    b = bitlen(n)
    x = (n * 0 + 1) << ((b + 1) >> 1)
    y = (x + n // x) >> 1
    x = tl.maximum(tl.minimum(x, y), 1)
    y = (x + n // x) >> 1
    x = tl.maximum(tl.minimum(x, y), 1)
    y = (x + n // x) >> 1
    x = tl.maximum(tl.minimum(x, y), 1)
    y = (x + n // x) >> 1
    x = tl.maximum(tl.minimum(x, y), 1)
    y = (x + n // x) >> 1
    x = tl.maximum(tl.minimum(x, y), 1)
    y = (x + n // x) >> 1
    x = tl.maximum(tl.minimum(x, y), 1)
    return x - (x * x > n).to(tl.int64)


@triton.jit
def int_exp(x, table_ptr, F: tl.constexpr):
    """``ops.int_exp`` (dyadic log2e, table) for int64 x <= 0, 0 <= F <= 30; ``table_ptr``: ``ops.exp2_values()``."""
    xc = tl.maximum(x, -(64 << F))
    v = xc * (-24204406)
    if F > 0:
        n = (v + (1 << (F - 1))) >> F
    else:
        n = v
    q = n >> 24
    r = n & ((1 << 24) - 1)
    j = r >> 14
    rr = r & ((1 << 14) - 1)
    t0 = tl.load(table_ptr + j)
    t1 = tl.load(table_ptr + j + 1)
    mant = t0 - round_shift((t0 - t1) * rr, rr * 0 + 14)
    qq = tl.minimum(q, 62)
    half = ((qq * 0 + 1) << qq) >> 1
    return (mant + half) >> qq


@triton.jit
def int_sigmoid(x, table_ptr, F: tl.constexpr):
    """``ops.int_sigmoid``: Q30 sigma(x / 2^F), d = 2^30 + E, E = int_exp(-|x|)."""
    # clamp to +-64 (real) before negating, as int_exp would: unclamped, the compiled kernel returned
    # int_exp(-|x|) = 0 (reports/detllm-ir-audit/NOTE.md)
    one = x * 0 + 1
    xc = tl.minimum(tl.maximum(x, -(64 << F)), 64 << F)
    e = int_exp(tl.where(xc >= 0, -xc, xc), table_ptr, F)
    den = e + (one << 30)
    pos = ((one << 61) + den) // (2 * den)
    neg = (2 * (e << 30) + den) // (2 * den)
    return tl.where(x >= 0, pos, neg)


@triton.jit
def rmax(x):
    """max over axis 0 (``tl.max``; interpreted: numpy max, see ``launcher``)."""
    return tl.max(x, axis=0)


@triton.jit
def rsum(x):
    """sum over axis 0 (``tl.sum``; interpreted: numpy sum, see ``launcher``)."""
    return tl.sum(x, axis=0)


def _interp_rmax(x):
    return tl.reduce(x, 0, tl.standard._elementwise_max)


def _interp_rsum(x):
    return tl.reduce(x, 0, tl.standard._sum_combine)


# the standard library's reductions are JITFunctions the interpreter cannot
# call from a kernel it did not build; these call its numpy reductions instead
_INTERP_OVERRIDES = {"rmax": _interp_rmax, "rsum": _interp_rsum}


def _plain_globals(g: dict, cache: dict) -> dict:
    """A module's globals with every JITFunction replaced by its plain function (recursively), for the interpreter."""
    key = id(g)
    if key in cache:
        return cache[key]
    out: dict = {}
    cache[key] = out
    for name, v in g.items():
        if name in _INTERP_OVERRIDES and isinstance(v, triton.runtime.jit.JITFunction):
            v = _INTERP_OVERRIDES[name]
        elif isinstance(v, triton.runtime.jit.JITFunction):
            f = v.fn
            v = types.FunctionType(
                f.__code__, _plain_globals(f.__globals__, cache), f.__name__, f.__defaults__, f.__closure__
            )
        out[name] = v
    return out


class launcher:
    """``launcher(fn)[grid](*args, **meta)``: compiled for CUDA tensors, interpreted for CPU ones (first tensor arg)."""

    def __init__(self, fn):
        self.fn = fn
        self._native = None
        self._interp = None

    def kernel(self, device_type: str):
        """The compiled (``"cuda"``) or interpreted (other) kernel object."""
        if device_type == "cuda":
            if self._native is None:
                self._native = triton.jit(self.fn)
            return self._native
        if self._interp is None:
            from triton.runtime.interpreter import InterpretedFunction

            f = self.fn
            g = _plain_globals(f.__globals__, {})
            self._interp = InterpretedFunction(
                types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
            )
        return self._interp

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            dev = next((a.device.type for a in args if isinstance(a, torch.Tensor)), "cpu")
            return self.kernel(dev)[grid](*args, **kwargs)

        return run


_TABLES: dict = {}


def exp2_table(device) -> torch.Tensor:
    """The int64 table of ``ops.int_exp`` (1025 entries + 1 pad) on ``device``."""
    key = str(device)
    t = _TABLES.get(key)
    if t is None:
        t = _TABLES[key] = torch.tensor(list(exp2_values()) + [0], dtype=torch.int64, device=device)
    return t


def next_pow2(n: int) -> int:
    """Smallest power of two >= max(n, 1)."""
    return 1 << max(0, int(n) - 1).bit_length()
