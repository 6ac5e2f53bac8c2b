"""Integer operators of the engine: exp, softmax, P.V, RMSNorm, SwiGLU, RoPE, residual stream, argmax.

Forward-time functions take and return torch integer tensors and use integer arithmetic only (frozen
rules: ``detllm/README.md``); the float ``build_*`` helpers run once, in ``prepare``. "Q(f)": integer v
stands for v / 2^f; "exponent e": v stands for v * 2^e. Methods: I-BERT (Kim et al. 2021,
arXiv:2101.01321), I-ViT Shiftmax (Li & Gu 2023, arXiv:2207.01405), I-LLM (Hu et al. 2024, arXiv:2405.17849).
"""

from __future__ import annotations

import functools
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Callable, Tuple

import torch

from detllm.intops import (
    IntLike,
    as_i64,
    div_floor,
    div_round,
    floor_shift,
    ilog2_or,
    isqrt,
    require_int,
    round_shift,
    saturate,
)
from reference.errors import OperandError

EXP_FRAC_BITS = 30  # int_exp output is Q30: exp(x) * 2^30, in [0, 2^30]
LOG2_FRAC_BITS = 24  # internal log2-domain fixed point, Q24
EXP_CLIP = 64  # inputs below -64 (real) are clipped (exp < 2^-92 -> 0 in Q30)
MAX_EXP_IN_FRAC_BITS = 30  # int_exp accepts Q(f) inputs with 0 <= f <= 30
_TABLE_BITS = 10  # 2^(-j/1024), j = 0..1024, linear interpolation between

# log2(e) as a dyadic m / 2^24 = round(2^24 / ln 2) / 2^24 (relative error < 2^-25).
LOG2E_K = 24
LOG2E_M = 24204406


@functools.cache
def exp2_values() -> tuple:
    """Q30 table of 2^(-j/1024), j = 0..1024, ties up, in 50-digit decimal arithmetic (platform-independent);
    built on first use (a quarter second: not at import)."""
    with localcontext() as ctx:
        ctx.prec = 50
        step = Decimal(2**_TABLE_BITS)
        return tuple(
            int((Decimal(2) ** (Decimal(-j) / step) * (2**EXP_FRAC_BITS)).quantize(Decimal(1), rounding=ROUND_HALF_UP))
            for j in range(2**_TABLE_BITS + 1)
        )


_table_cache: dict = {}


def _exp2_table(device) -> torch.Tensor:
    key = str(device)
    if key not in _table_cache:
        _table_cache[key] = torch.tensor(exp2_values(), dtype=torch.int64, device=device)
    return _table_cache[key]


def int_exp(x: torch.Tensor, frac_bits: int, log2e: str = "dyadic", frac: str = "table") -> torch.Tensor:
    """Q30 exp(x / 2^frac_bits) for integer x <= 0 (any shape) -> int64, same shape, in [0, 2^30]; int_exp(0) == 2^30.

    exp(x) = 2^-q * 2^-r: 2^-q is a rounding shift; 2^-r is a 1025-entry table with linear interpolation
    (frac="table") or I-ViT's 1 - r/2 ("linear"); x*log2(e) is the dyadic 24204406 / 2^24 (log2e="dyadic")
    or I-ViT's x + x>>1 - x>>4 ("shift"). Inputs below -64 (real) are clipped. Frozen error bounds:
    ``detllm/README.md``. Raises OperandError: non-integer x, x > 0, frac_bits outside [0, 30], bad mode.
    """
    x = require_int(x, "x").to(torch.int64)
    if not (0 <= int(frac_bits) <= MAX_EXP_IN_FRAC_BITS):
        raise OperandError(f"int_exp: frac_bits must be in [0, {MAX_EXP_IN_FRAC_BITS}], got {frac_bits}")
    if bool((x > 0).any()):
        raise OperandError("int_exp: input must be <= 0")
    if log2e not in ("dyadic", "shift"):
        raise OperandError(f"int_exp: log2e must be 'dyadic' or 'shift', got {log2e!r}")
    if frac not in ("table", "linear"):
        raise OperandError(f"int_exp: frac must be 'table' or 'linear', got {frac!r}")
    return _int_exp_checked(x, frac_bits, log2e, frac)


def _round_half_up_nonneg(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """round_shift for 0 <= x < 2^62, 0 <= k <= 62: (x + 2^(k-1)) >> k."""
    half = torch.bitwise_right_shift(torch.bitwise_left_shift(torch.ones_like(k), k), 1)
    return torch.bitwise_right_shift(x + half, k)


def _round_half_up_nonneg_int(x: torch.Tensor, k: int) -> torch.Tensor:
    """round_shift for 0 <= x < 2^62 and a Python int k (k <= 0: exact left shift)."""
    if k <= 0:
        return torch.bitwise_left_shift(x, -k)
    return torch.bitwise_right_shift(x + (1 << (k - 1)), k)


def _div_round_nonneg(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """div_round for a >= 0, b > 0, 2a + b < 2^63: floor((2a + b) / 2b)."""
    return torch.div(2 * a + b, 2 * b, rounding_mode="floor")


def _int_exp_checked(x: torch.Tensor, frac_bits: int, log2e: str, frac: str) -> torch.Tensor:
    x = x.clamp(min=-(EXP_CLIP << frac_bits))
    # n = -round_shift(x * log2e, .) >= 0 (Q24); for x <= 0, ties away from zero
    # is half-up on the magnitude, so the rounding is done on -x directly.
    if log2e == "dyadic":
        n = _round_half_up_nonneg_int(x * (-LOG2E_M), LOG2E_K + frac_bits - LOG2_FRAC_BITS)
    else:  # "shift"
        t = x + floor_shift(x, 1) - floor_shift(x, 4)
        n = _round_half_up_nonneg_int(-t, frac_bits - LOG2_FRAC_BITS)
    q = torch.bitwise_right_shift(n, LOG2_FRAC_BITS)  # integer part
    r = torch.bitwise_and(n, (1 << LOG2_FRAC_BITS) - 1)
    if frac == "table":
        table = _exp2_table(x.device)
        sub = LOG2_FRAC_BITS - _TABLE_BITS
        j = torch.bitwise_right_shift(r, sub)
        rr = torch.bitwise_and(r, (1 << sub) - 1)
        t0, t1 = table[j], table[j + 1]
        mant = t0 - round_shift((t0 - t1) * rr, sub)
    else:  # "linear"
        mant = (1 << EXP_FRAC_BITS) - torch.bitwise_left_shift(r, EXP_FRAC_BITS - LOG2_FRAC_BITS - 1)
    return _round_half_up_nonneg(mant, q.clamp(max=62))  # mant >= 0: same as round_shift


PROB_BITS = 15  # probabilities are Q0.15
PROB_MAX = 2**PROB_BITS - 1  # 32767: probability 1 saturates here (error 2^-15)
MASK_SENTINEL = -(2**30)  # scores <= this are masked: probability exactly 0
MAX_PV_LEN = 131071  # L limit so both byte GEMMs fit an int32 accumulator


def mask_scores(scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``MASK_SENTINEL`` where the bool ``keep`` (broadcastable) is False; scores int [..., L] -> int64."""
    s = require_int(scores, "scores").to(torch.int64)
    if not isinstance(keep, torch.Tensor) or keep.dtype != torch.bool:
        raise OperandError("mask_scores: keep must be a bool tensor")
    return torch.where(keep, s, torch.full_like(s, MASK_SENTINEL))


def int_softmax(scores: torch.Tensor, frac_bits: int, log2e: str = "dyadic", frac: str = "table") -> torch.Tensor:
    """Integer softmax over the last dim: int16 Q0.15, p = min(div_round(2^15 e, sum e), 32767), e = int_exp(s - max).

    scores: int [..., L], Q(frac_bits). Entries <= ``MASK_SENTINEL`` get exactly 0 and are excluded from
    the max; an all-masked row gives zeros. Rows sum to 2^15 +- (L/2 + 1). Raises OperandError on bad
    dtypes, frac_bits or modes (``int_exp``'s).
    """
    s = require_int(scores, "scores").to(torch.int64)
    if not (0 <= int(frac_bits) <= MAX_EXP_IN_FRAC_BITS):
        raise OperandError(f"int_softmax: frac_bits must be in [0, {MAX_EXP_IN_FRAC_BITS}], got {frac_bits}")
    if log2e not in ("dyadic", "shift") or frac not in ("table", "linear"):
        raise OperandError(f"int_softmax: unknown exp mode {log2e!r}/{frac!r}")
    masked = s <= MASK_SENTINEL
    mx = torch.where(masked, torch.full_like(s, MASK_SENTINEL), s).amax(dim=-1, keepdim=True)
    d = torch.where(masked, torch.full_like(s, -(EXP_CLIP << frac_bits)), s - mx)
    e = _int_exp_checked(d, frac_bits, log2e, frac)  # d <= 0 by construction
    e = torch.where(masked, torch.zeros_like(e), e)
    tot = e.sum(dim=-1, keepdim=True)
    tot = torch.where(tot == 0, torch.ones_like(tot), tot)  # all-masked row -> zeros
    # e, tot >= 0: the non-negative form of div_round (same rule, one division)
    p = _div_round_nonneg(torch.bitwise_left_shift(e, PROB_BITS), tot).clamp(max=PROB_MAX)
    return p.to(torch.int16)


def split_prob_bytes(p: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Q0.15 p in [0, 32767] -> (hi, lo) int8 with p == 256 hi + lo + 128 (hi in [0, 127], lo in [-128, 127]).

    Raises OperandError for non-integer p or values outside [0, 32767].
    """
    p = require_int(p, "p").to(torch.int64)
    if bool(((p < 0) | (p > PROB_MAX)).any()):
        raise OperandError("split_prob_bytes: p must be in [0, 32767]")
    hi = torch.bitwise_right_shift(p, 8).to(torch.int8)
    lo = (torch.bitwise_and(p, 255) - 128).to(torch.int8)
    return hi, lo


IntMM = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def pv_matmul(p: torch.Tensor, v_int8: torch.Tensor, int_mm: IntMM) -> torch.Tensor:
    """Exact P @ V as int8 GEMMs: 256 (hi @ V) + (lo @ V) + 128 colsum(V), hi/lo stacked into one int_mm per slice.

    p: int16 [..., M, L] in [0, 32767]; v_int8: int8 [..., L, D] (leading dims broadcast; for GQA fold the
    query heads of a KV head into M); int_mm: (int8 [M,K], int8 [N,K]) -> int32 [M,N]. Returns int64
    [..., M, D] == int64 p @ v (each accumulator < L * 2^14 < 2^31 for L <= 131071). Raises OperandError:
    bad dtypes / shapes, L > 131071, an int_mm result of the wrong shape or dtype.
    """
    require_int(p, "p")
    if not isinstance(v_int8, torch.Tensor) or v_int8.dtype != torch.int8:
        raise OperandError(
            f"pv_matmul: v must be an int8 tensor, got {getattr(v_int8, 'dtype', type(v_int8).__name__)}"
        )
    if p.dim() < 2 or v_int8.dim() < 2 or p.shape[-1] != v_int8.shape[-2]:
        raise OperandError(
            f"pv_matmul: shapes {tuple(p.shape)} and {tuple(v_int8.shape)} do not match as [..., M, L] @ [..., L, D]"
        )
    m, length = p.shape[-2], p.shape[-1]
    d = v_int8.shape[-1]
    if length > MAX_PV_LEN:
        raise OperandError(f"pv_matmul: L={length} exceeds {MAX_PV_LEN} (int32 accumulator bound)")
    hi, lo = split_prob_bytes(p)
    lead = torch.broadcast_shapes(p.shape[:-2], v_int8.shape[:-2])
    a = torch.cat([hi, lo], dim=-2).expand(*lead, 2 * m, length).reshape(-1, 2 * m, length)
    vb = v_int8.expand(*lead, length, d).reshape(-1, length, d)
    out = torch.empty((a.shape[0], m, d), dtype=torch.int64, device=p.device)
    for i in range(a.shape[0]):
        vt = vb[i].transpose(0, 1).contiguous()  # [D, L] = nn.Linear layout
        acc = int_mm(a[i].contiguous(), vt)
        if (
            not isinstance(acc, torch.Tensor)
            or tuple(acc.shape) != (2 * m, d)
            or acc.dtype not in (torch.int32, torch.int64)
        ):
            raise OperandError(
                f"pv_matmul: int_mm returned shape {tuple(getattr(acc, 'shape', ()))} dtype {getattr(acc, 'dtype', None)}, expected int32 {(2 * m, d)}"
            )
        acc = acc.to(torch.int64)
        colsum = vb[i].to(torch.int64).sum(dim=0)
        out[i] = 256 * acc[:m] + acc[m:] + 128 * colsum
    return out.reshape(*lead, m, d)


_NORM_BITS = 21  # inputs are rescaled per token to |x'| <= 2^21 before squaring
_RMS_FRAC = 9  # rms is computed as isqrt(ms << 18) = sqrt(ms) * 2^9
_MAX_NORM_DIM = 2**19


def int_rmsnorm(
    x: torch.Tensor, gamma=None, out_bits: int = 8, out_exp=None, x_exp=None, eps=None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Integer RMSNorm per token: (q int8/int16 [..., H], q_exp int64 [...]) with q * 2^q_exp ~ x / rms(x) * gamma.

    x: int [..., H], |x| <= 2^62, 1 <= H <= 2^19; each token is shifted to |x'| <= 2^21, then
    ms = div_round(sum x'^2, H) (+ eps in x' units when ``x_exp`` and ``eps`` = (m, k), eps = m / 2^k, are
    given), rms = isqrt(ms * 2^18), q = saturate(div_round(x' g 2^T, rms)). gamma: optional (g int [H],
    |g| < 2^15, k in [0, 30]) for multipliers g / 2^k. out_exp None: the smallest per-token power of two
    with max|q| <= 2^(out_bits-1) - 1; an int: that fixed exponent (values saturate). An all-zero token
    gives q = 0, q_exp = 0 (or out_exp). Raises OperandError on bad dtypes / shapes / arguments.
    """
    x = require_int(x, "x").to(torch.int64)
    if out_bits not in (8, 16):
        raise OperandError(f"int_rmsnorm: out_bits must be 8 or 16, got {out_bits}")
    h = x.shape[-1]
    if h == 0 or h > _MAX_NORM_DIM:
        raise OperandError(f"int_rmsnorm: last dim {h} must be in [1, {_MAX_NORM_DIM}]")
    if gamma is None:
        gm, gk = torch.ones(h, dtype=torch.int64, device=x.device), 0
    else:
        gm, gk = gamma
        gm = require_int(gm, "gamma").to(torch.int64).to(x.device)
        if tuple(gm.shape) != (h,):
            raise OperandError(f"int_rmsnorm: gamma shape {tuple(gm.shape)} != ({h},)")
        if not isinstance(gk, int) or not (0 <= gk <= 30):
            raise OperandError(f"int_rmsnorm: gamma shift must be an int in [0, 30], got {gk}")
    amax = x.abs().amax(dim=-1)
    zero = amax == 0
    s = ilog2_or(amax, 0) + 1 - _NORM_BITS  # per-token shift
    xs = round_shift(x, s.unsqueeze(-1))  # |x'| <= 2^21
    ms = div_round((xs * xs).sum(dim=-1), h)  # <= 2^42
    c = torch.zeros_like(ms)  # extra halving of rms when eps is large
    if eps is not None and x_exp is not None:
        em, ek = int(eps[0]), int(eps[1])
        if em < 0:
            raise OperandError("int_rmsnorm: eps must be >= 0")
        xe = as_i64(x_exp, like=x, name="x_exp")
        # eps in x' units is em / 2^sh; choose c so that it is <= 2^42 after >> 2c.
        sh = ek + 2 * (xe + s)
        c = div_floor(em.bit_length() - sh - 41, 2).clamp(min=0)
        ms = round_shift(ms, 2 * c) + round_shift(torch.full_like(ms, em), sh + 2 * c)
    ms = torch.where(zero | (ms == 0), torch.ones_like(ms), ms)
    rms = isqrt(torch.bitwise_left_shift(ms, 2 * _RMS_FRAC))  # sqrt(ms) * 2^9, ms < 2^44
    num = xs * gm  # |num| < 2^36
    if out_exp is None:
        # A = floor(max|num| * 2^20 / rms) = max|y*g| * 2^(k + c + 11); choose E so max|q| < 2^(b-1) - 1/2.
        amx = num.abs().amax(dim=-1)
        a = div_floor(torch.bitwise_left_shift(amx, 20), rms)
        ep = ilog2_or(a, 0) - (out_bits - 2)
        # A / 2^ep >= 2^(b-1) - 1/2  <=>  round_shift(A, ep) >= 2^(b-1): then one more bit
        ep = ep + (round_shift(a, ep) >= (1 << (out_bits - 1))).to(torch.int64)
        t = (_RMS_FRAC + 11) - ep  # E = ep - k - c - 11
    else:
        t = _RMS_FRAC - c - gk - int(out_exp)
    t = torch.where(zero, torch.zeros_like(t), t).clamp(-30, 24)
    q_exp = _RMS_FRAC - c - gk - t
    q_exp = torch.where(zero, torch.full_like(q_exp, 0 if out_exp is None else int(out_exp)), q_exp)
    tt = t.unsqueeze(-1)
    q = div_round(floor_shift(num, -tt.clamp(min=0)), floor_shift(rms.unsqueeze(-1), -(-tt).clamp(min=0)))
    return saturate(q, out_bits), q_exp


SIGMOID_FRAC_BITS = 30


def int_sigmoid(x: torch.Tensor, frac_bits: int) -> torch.Tensor:
    """Q30 sigmoid(x / 2^frac_bits) -> int64, same shape: E = int_exp(-|x|); 2^60 / (2^30 + E) for x >= 0, else
    E 2^30 / (2^30 + E) (one div_round each). |x| <= 2^62, frac_bits in [0, 30].
    """
    x = require_int(x, "x").to(torch.int64)
    if not (0 <= int(frac_bits) <= MAX_EXP_IN_FRAC_BITS):
        raise OperandError(f"int_sigmoid: frac_bits must be in [0, {MAX_EXP_IN_FRAC_BITS}], got {frac_bits}")
    e = _int_exp_checked(-x.abs(), frac_bits, "dyadic", "table")
    one = 1 << SIGMOID_FRAC_BITS
    den = one + e
    pos = _div_round_nonneg(torch.full_like(e, one * one), den)
    neg = _div_round_nonneg(torch.bitwise_left_shift(e, SIGMOID_FRAC_BITS), den)
    return torch.where(x >= 0, pos, neg)


def _check_31(t: torch.Tensor, name: str) -> None:
    if t.numel() and int(t.abs().max()) > 2**31 - 1:
        raise OperandError(f"{name}: |values| must be < 2^31")


def int_silu(x: torch.Tensor, frac_bits: int) -> torch.Tensor:
    """round_shift(x * int_sigmoid(x), 30): int64 in x's Q(frac_bits); |x| < 2^31 else OperandError."""
    x = require_int(x, "x").to(torch.int64)
    _check_31(x, "int_silu x")
    return round_shift(x * int_sigmoid(x, frac_bits), SIGMOID_FRAC_BITS)


def int_swiglu(
    gate: torch.Tensor, up: torch.Tensor, gate_frac_bits: int, up_frac_bits: int, out_frac_bits: int
) -> torch.Tensor:
    """silu(gate) * up, two roundings -> int64 [..., I] in Q(out_frac_bits).

    gate, up: integer tensors of one shape, |values| < 2^31, Q(gate_frac_bits) / Q(up_frac_bits).
    Raises OperandError on a shape mismatch or |values| >= 2^31.
    """
    gate = require_int(gate, "gate")
    up = require_int(up, "up").to(torch.int64)
    if gate.shape != up.shape:
        raise OperandError(f"int_swiglu: gate shape {tuple(gate.shape)} != up shape {tuple(up.shape)}")
    _check_31(up, "int_swiglu up")
    silu = int_silu(gate, gate_frac_bits)
    return round_shift(silu * up, gate_frac_bits + up_frac_bits - out_frac_bits)


ROPE_SHIFT = 14  # tables are Q14: cos * 2^14 in [-16384, 16384]


def build_rope_tables(head_dim: int, max_pos: int, theta: float, shift: int = ROPE_SHIFT):
    """Offline: (cos int16 [max_pos, D], sin int16 [max_pos, D], shift), Q(shift), rotate-half layout.

    cos[p, i] = round(cos(p theta^(-2(i mod D/2)/D)) 2^shift), ties away, float64 angles; the halves of the
    last dim repeat. Raises OperandError: odd or zero head_dim, max_pos < 1, theta <= 0, shift outside (0, 14].
    """
    if head_dim <= 0 or head_dim % 2 or max_pos < 1 or not theta > 0 or not (0 < shift <= 14):
        raise OperandError(
            f"build_rope_tables: need even head_dim > 0, max_pos >= 1, theta > 0, 0 < shift <= 14; got {head_dim}, {max_pos}, {theta}, {shift}"
        )
    inv = 1.0 / (float(theta) ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    scale = float(2**shift)

    def q(t):
        v = t * scale
        return (torch.sign(v) * torch.floor(v.abs() + 0.5)).to(torch.int16)

    return q(torch.cos(ang)), q(torch.sin(ang)), int(shift)


def apply_rope(x_int, cos, sin, positions, shift: int = ROPE_SHIFT, frac_bits_out: int = 0) -> torch.Tensor:
    """Integer RoPE: round_shift(x cos + rotate_half(x) sin, shift - frac_bits_out) -> int64 [..., D].

    x_int: integer [..., D], |x| < 2^31; cos/sin from ``build_rope_tables``; positions: int64,
    broadcastable to x.shape[:-1], in [0, max_pos). rotate_half(x) = cat(-x2, x1). Raises OperandError:
    dtypes, D mismatch, positions out of range.
    """
    x = require_int(x_int, "x").to(torch.int64)
    cos, sin = require_int(cos, "cos"), require_int(sin, "sin")
    positions = require_int(positions, "positions")
    d = x.shape[-1]
    if cos.dim() != 2 or cos.shape != sin.shape or cos.shape[-1] != d or d % 2:
        raise OperandError(f"apply_rope: tables {tuple(cos.shape)}/{tuple(sin.shape)} do not match head_dim {d}")
    if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= cos.shape[0]):
        raise OperandError(f"apply_rope: positions must be in [0, {cos.shape[0]})")
    c, s = (t.to(x.device)[positions.long()].to(torch.int64) for t in (cos, sin))
    half = d // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return round_shift(x * c + rot * s, shift - frac_bits_out)


RESIDUAL_BITS = 30  # residual values are kept at |r| <= 2^30 (one bit of int32 headroom)


def renormalize(x: torch.Tensor, x_exp: IntLike, bits: int = RESIDUAL_BITS) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per token, round_shift just enough that |r| <= 2^bits (bits in [1, 30]): (r int32 [..., H], exp int64 [...])."""
    x = require_int(x, "x").to(torch.int64)
    if not (1 <= bits <= 30):
        raise OperandError(f"renormalize: bits must be in [1, 30], got {bits}")
    xe = as_i64(x_exp, like=x, name="x_exp")
    s = (ilog2_or(x.abs().amax(dim=-1), 0) + 1 - bits).clamp(min=0)
    return round_shift(x, s.unsqueeze(-1)).to(torch.int32), xe + s


def residual_add(
    a: torch.Tensor, a_exp: IntLike, b: torch.Tensor, b_exp: IntLike, bits: int = RESIDUAL_BITS
) -> Tuple[torch.Tensor, torch.Tensor]:
    """a 2^a_exp + b 2^b_exp for per-token exponents -> ``renormalize``d (r int32 [..., H], exp int64 [...]).

    Aligned to e = max(min(ea, eb), max(ea, eb) - 31) by shifts: exact unless the exponents differ by more
    than 31. a, b: integer [..., H], |values| < 2^31. Raises OperandError on a shape mismatch or |values| >= 2^31.
    """
    a = require_int(a, "a").to(torch.int64)
    b = require_int(b, "b").to(torch.int64)
    if a.shape != b.shape:
        raise OperandError(f"residual_add: shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
    _check_31(a, "residual_add a")
    _check_31(b, "residual_add b")
    ae = as_i64(a_exp, like=a, name="a_exp").expand(a.shape[:-1])
    be = as_i64(b_exp, like=a, name="b_exp").expand(a.shape[:-1])
    e = torch.maximum(torch.minimum(ae, be), torch.maximum(ae, be) - 31)
    total = round_shift(a, (e - ae).unsqueeze(-1)) + round_shift(b, (e - be).unsqueeze(-1))
    return renormalize(total, e, bits)


def quantize_pow2_per_token(x: torch.Tensor, x_exp: IntLike = 0, bits: int = 8) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-token int8/int16 with a power-of-two scale: (q [..., H], x_exp + s int64 [...]).

    s is the smallest shift >= 0 with max|x| / 2^s < 2^(bits-1) - 1/2; q = round_shift(x, s), so
    |q| <= 2^(bits-1) - 1. Raises OperandError for bits not in {8, 16}.
    """
    x = require_int(x, "x").to(torch.int64)
    if bits not in (8, 16):
        raise OperandError(f"quantize_pow2_per_token: bits must be 8 or 16, got {bits}")
    xe = as_i64(x_exp, like=x, name="x_exp")
    amax = x.abs().amax(dim=-1)
    s = (ilog2_or(amax, 0) - (bits - 2)).clamp(min=0)
    # amax / 2^s >= 2^(bits-1) - 1/2  <=>  round_shift(amax, s) >= 2^(bits-1): one more bit
    s = s + (round_shift(amax, s) >= (1 << (bits - 1))).to(torch.int64)
    return saturate(round_shift(x, s.unsqueeze(-1)), bits), xe + s


def argmax_int(x: torch.Tensor) -> torch.Tensor:
    """Integer argmax over the last dim (V >= 1) -> int64 [...]; ties go to the smallest index."""
    x = require_int(x, "x")
    if x.shape[-1] == 0:
        raise OperandError("argmax_int: empty last dim")
    mx = x.amax(dim=-1, keepdim=True)
    idx = torch.arange(x.shape[-1], device=x.device, dtype=torch.int64).expand(x.shape)
    big = torch.full_like(idx, x.shape[-1])
    return torch.where(x == mx, idx, big).amin(dim=-1)
