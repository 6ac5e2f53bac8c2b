"""Fused QK-norm + RoPE + KV-cache write + query quantization, one program per (token, head): the part of
``detllm.engine._forward`` between the qkv linear and attention (``engine.norm_fixed``,
``ops.apply_rope``, k8 = clamp(round_shift(k m_h, k_h), +-127), v8 = clamp(v, +-127), queries as
``engine.quant_rows`` per head). Rows with ``valid == 0`` write nothing to the cache.
"""

from __future__ import annotations

import torch
import triton.language as tl

from detllm.kernels.intlang import bitlen, div_round_pos, isqrt_newton, launcher, rmax, round_shift, rsum
from detllm.kernels.norm_quant import rms_p


def _qk_rope_kernel(
    y_ptr, g_ptr, cos_ptr, sin_ptr, pos_ptr, seq_ptr, valid_ptr, kcm_ptr, kck_ptr, kc_ptr, vc_ptr, qq_ptr, qtm_ptr,
    qtk_ptr, NH, NKV, CAP, NQKV, EPS_Q, EPS_K, P_Q, P_K, E_Q, E_K, HD: tl.constexpr, ROPE: tl.constexpr,
):  # fmt: skip
    r = tl.program_id(0).to(tl.int64)
    hs = tl.program_id(1).to(tl.int64)
    d = tl.arange(0, HD)
    dp = (d + HD // 2) & (HD - 1)
    is_q = hs < NH
    col0 = hs * HD
    eps = tl.where(is_q, hs * 0 + EPS_Q, hs * 0 + EPS_K)
    pp = tl.where(is_q, hs * 0 + P_Q, hs * 0 + P_K)
    ee = tl.where(is_q, hs * 0 + E_Q, hs * 0 + E_K)
    x = tl.load(y_ptr + r * NQKV + col0 + d)
    xp = tl.load(y_ptr + r * NQKV + col0 + dp)
    g = tl.load(g_ptr + hs * HD + d).to(tl.int64)
    gp = tl.load(g_ptr + hs * HD + dp).to(tl.int64)
    # engine._rms_core over the head
    sh = tl.maximum(bitlen(rmax(tl.abs(x))) - 15, 0)
    xs = round_shift(x, sh)
    xsp = round_shift(xp, sh)
    S = rsum(xs * xs) + round_shift(eps, 2 * sh)
    rr = tl.maximum(isqrt_newton((S << (2 * pp)) // HD), 1)
    # engine.norm_fixed: div_round(z << e, r) (e >= 0) or div_round(z, r << -e)
    el = tl.minimum(tl.maximum(ee, 0), 63)
    er = tl.minimum(tl.maximum(-ee, 0), 63)
    den = rr << er
    xn = div_round_pos((xs * g) << el, den)
    xnp = div_round_pos((xsp * gp) << el, den)
    rot = tl.where(d < HD // 2, -xnp, xnp)
    pos = tl.load(pos_ptr + r)
    c = tl.load(cos_ptr + pos * HD + d).to(tl.int64)
    s = tl.load(sin_ptr + pos * HD + d).to(tl.int64)
    out = round_shift(xn * c + rot * s, d.to(tl.int64) * 0 + ROPE)
    if hs < NH:
        qm = rmax(tl.abs(out))
        qq = div_round_pos(127 * out, tl.maximum(qm, 1))
        tl.store(qq_ptr + (r * NH + hs) * HD + d, qq.to(tl.int8))
        s2 = tl.maximum(bitlen(qm) - 17, 0)
        tl.store(qtm_ptr + r * NH + hs, round_shift(qm, s2))
        tl.store(qtk_ptr + r * NH + hs, -s2)
    else:
        kh = hs - NH
        km = tl.load(kcm_ptr + kh)
        kk = tl.load(kck_ptr + kh)
        k8 = tl.minimum(tl.maximum(round_shift(out * km, kk), -127), 127).to(tl.int8)
        v = tl.load(y_ptr + r * NQKV + (NH + NKV + kh) * HD + d)
        v8 = tl.minimum(tl.maximum(v, -127), 127).to(tl.int8)
        b = tl.load(seq_ptr + r)
        ok = (d * 0 + tl.load(valid_ptr + r)) != 0
        dst = ((b * NKV + kh) * CAP + pos) * HD + d
        tl.store(kc_ptr + dst, k8, mask=ok)
        tl.store(vc_ptr + dst, v8, mask=ok)


_KERNEL = launcher(_qk_rope_kernel)


def qk_rope_cache(
    y, g, cos, sin, pos, seq, valid, kc_m, kc_k, k_cache, v_cache, nh: int, nkv: int, q_eps: int, q_shift: int,
    k_eps: int, k_shift: int, qk_exp: int, rope_exp: int, out=None,
):  # fmt: skip
    """Fused QK-norm + RoPE + cache write + query int8 for one layer -> (qq int8 [R, nh, hd], qtm, qtk int64 [R, nh]).

    y: int64 [R, (nh + 2 nkv) hd]; g: int64 [nh + nkv, hd] (q_norm.g then k_norm.g); pos, seq: int64 [R];
    valid: int32 [R] (0: padding); kc_m/kc_k: int64 [nkv]; k/v_cache: int8 [B, nkv, cap, hd], written in place.
    """
    R = y.shape[0]
    hd = g.shape[-1]
    if hd & (hd - 1):
        raise ValueError(f"qk_rope_cache: head_dim {hd} must be a power of two")
    if out is None:
        out = (
            torch.empty(R, nh, hd, dtype=torch.int8, device=y.device),
            torch.empty(R, nh, dtype=torch.int64, device=y.device),
            torch.empty(R, nh, dtype=torch.int64, device=y.device),
        )
    qq, qtm, tk = out
    pq, pk = rms_p(hd, q_eps), rms_p(hd, k_eps)
    _KERNEL[(R, nh + nkv)](
        y, g, cos, sin, pos, seq, valid, kc_m, kc_k, k_cache, v_cache, qq, qtm, tk, nh, nkv, k_cache.shape[2],
        y.shape[1], int(q_eps), int(k_eps), pq, pk, qk_exp - q_shift + pq, qk_exp - k_shift + pk, HD=hd,
        ROPE=int(rope_exp), num_warps=1 if hd <= 64 else 2,
    )  # fmt: skip
    return qq, qtm, tk
