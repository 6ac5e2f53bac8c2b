"""Fused attention of one query row against the int8 KV cache: ``detllm.engine._attention`` for one (token, head).

score_s = max(round_shift(q8 . k8_s * qtm * m_g, qtk + k_g), MASK_SENTINEL + 1) for keys s < n, then
``ops.int_softmax`` and the exact ``ops.pv_matmul``. Three passes over the keys (max, sum, P.V)
recompute the scores, so the exact max and sum are known before any probability is rounded (no
online-softmax rescaling, which would round differently). One program per (token, query head).
"""

from __future__ import annotations

import torch
import triton.language as tl

from detllm.kernels.intlang import exp2_table, int_exp, launcher, next_pow2, rmax, round_shift, rsum

MASK_SENTINEL = -(2**30)


def _attention_kernel(
    qq_ptr, qtm_ptr, qtk_ptr, sm_ptr, sk_ptr, kc_ptr, vc_ptr, seq_ptr, nkeys_ptr, o_ptr, table_ptr, NH, NKV, CAP,
    GROUP, F: tl.constexpr, HD: tl.constexpr, BLOCK_L: tl.constexpr,
):  # fmt: skip
    r = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    g = h // GROUP
    d = tl.arange(0, HD)
    ls = tl.arange(0, BLOCK_L)
    b = tl.load(seq_ptr + r)
    n = tl.load(nkeys_ptr + r)
    q = tl.load(qq_ptr + (r * NH + h) * HD + d).to(tl.int32)
    smul = tl.load(qtm_ptr + r * NH + h) * tl.load(sm_ptr + g)
    ssh = tl.load(qtk_ptr + r * NH + h) + tl.load(sk_ptr + g)
    base = (b * NKV + g) * CAP * HD
    sent = ssh * 0 + (-(1 << 30))
    mx = sent
    for s0 in range(0, n, BLOCK_L):
        s = s0 + ls
        ok = s < n
        kt = tl.load(kc_ptr + base + s[None, :].to(tl.int64) * HD + d[:, None], mask=ok[None, :], other=0)
        acc = rsum(q[:, None] * kt.to(tl.int32)).to(tl.int64)
        sc = tl.maximum(round_shift(acc * smul, ssh), sent + 1)
        mx = tl.maximum(mx, rmax(tl.where(ok, sc, sent)))
    tot = mx * 0
    for s0 in range(0, n, BLOCK_L):
        s = s0 + ls
        ok = s < n
        kt = tl.load(kc_ptr + base + s[None, :].to(tl.int64) * HD + d[:, None], mask=ok[None, :], other=0)
        acc = rsum(q[:, None] * kt.to(tl.int32)).to(tl.int64)
        sc = tl.maximum(round_shift(acc * smul, ssh), sent + 1)
        e = int_exp(tl.where(ok, sc - mx, -(64 << F)), table_ptr, F)
        tot += rsum(tl.where(ok, e, 0))
    tot = tl.where(tot == 0, tot * 0 + 1, tot)
    o = d.to(tl.int64) * 0
    for s0 in range(0, n, BLOCK_L):
        s = s0 + ls
        ok = s < n
        kt = tl.load(kc_ptr + base + s[None, :].to(tl.int64) * HD + d[:, None], mask=ok[None, :], other=0)
        acc = rsum(q[:, None] * kt.to(tl.int32)).to(tl.int64)
        sc = tl.maximum(round_shift(acc * smul, ssh), sent + 1)
        e = int_exp(tl.where(ok, sc - mx, -(64 << F)), table_ptr, F)
        e = tl.where(ok, e, 0)
        p = tl.minimum((2 * (e << 15) + tot) // (2 * tot), 32767)
        v = tl.load(vc_ptr + base + s[:, None].to(tl.int64) * HD + d[None, :], mask=ok[:, None], other=0)
        o += rsum(p[:, None] * v.to(tl.int64))
    tl.store(o_ptr + (r * NH + h) * HD + d, o)


_KERNEL = launcher(_attention_kernel)


def attention(
    qq, qtm, qtk, score_m, score_k, k_cache, v_cache, seq, nkeys, score_exp: int, out=None, block_l: int | None = None
):
    """Fused attention for one layer -> int64 [R, nh * hd] = P.V in units s_v / 2^15.

    qq: int8 [R, nh, hd], qtm/qtk: int64 [R, nh]; score_m/k: int64 [nkv]; k/v_cache: int8 [B, nkv, cap, hd];
    seq: int64 [R] sequence of each row, nkeys: int64 [R] (keys 0..nkeys-1 visible); out: optional.
    """
    R, nh, hd = qq.shape
    nkv, cap = k_cache.shape[1], k_cache.shape[2]
    if out is None:
        out = torch.empty(R, nh * hd, dtype=torch.int64, device=qq.device)
    bl = block_l or (64 if qq.device.type == "cuda" else 16)
    _KERNEL[(R, nh)](
        qq, qtm, qtk, score_m, score_k, k_cache, v_cache, seq, nkeys, out, exp2_table(qq.device), nh, nkv, cap,
        nh // nkv, F=int(score_exp), HD=hd, BLOCK_L=next_pow2(bl), num_warps=4,
    )  # fmt: skip
    return out
