"""detllm integer attention operators: shift-based exp, masked softmax with
Q0.15 probabilities, exact P.V through two int8 GEMMs, int16 RoPE.
Golden tests against float64 math with FROZEN error bounds."""

from __future__ import annotations

import math

import pytest
import torch

from detllm import ops
from reference.errors import OperandError

FB = 16  # fixed-point fraction bits of the test logits


def int64_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Stand-in accumulator-only kernel: int8[M,K] x int8[N,K] -> int32[M,N]."""
    assert a.dtype == torch.int8 and b.dtype == torch.int8 and a.is_contiguous() and b.is_contiguous()
    acc = a.to(torch.int64) @ b.to(torch.int64).T
    assert int(acc.abs().max()) < 2**31
    return acc.to(torch.int32)


# ------------------------------------------------------------------ exp


def test_int_exp_exact_values():
    assert int(ops.int_exp(torch.tensor([0]), FB)) == 2**30
    assert int(ops.int_exp(torch.tensor([-(10**9)]), 0)) == 0  # clipped: exactly 0
    # I-ViT modes by hand, x = -1.0: t = x + x>>1 - x>>4 = -1.4375 -> q = 1, r = 0.4375,
    # 2^-r ~ 1 - r/2 = 0.78125, >> 1 -> 0.390625 = 419430400 / 2^30.
    assert int(ops.int_exp(torch.tensor([-(1 << FB)]), FB, log2e="shift", frac="linear")) == 419430400
    # dyadic log2e, x = -ln2 * 2^16 rounded (= -45426): 2^(-0.69314..../0.693147) ~ 0.5 (+-2^-23)
    v = int(ops.int_exp(torch.tensor([-45426]), FB))
    assert abs(v - 2**29) <= 2**30 * 2**-23 + 2**30 * abs(math.exp(-45426 / 2**16) - 0.5)


_EXP_CASES = [("dyadic", "table", fb, 2**-23) for fb in (0, 8, 16, 30)] + [
    # I-ViT's floor shifts add up to ~2^-fb in the log2 domain, so those modes carry a 2^-fb term
    (log2e, frac, fb, base + 2.0**-fb)
    for log2e, frac, base in (("shift", "table", 2**-9), ("dyadic", "linear", 2**-4), ("shift", "linear", 2**-4))
    for fb in (8, 16, 30)
]


def test_exp_constants_are_the_frozen_values():
    assert ops.LOG2E_M == round(2**24 / math.log(2)) == 24204406
    table = ops.exp2_values()
    assert len(table) == 1025 and table[0] == 2**30 and table[1024] == 2**29 and table[512] == 759250125
    # every entry is 2^(30 - j/1024) rounded (float64 is far finer than the 0.5 rounding margin here)
    assert all(abs(v - 2 ** (30 - j / 1024)) <= 0.5 + 1e-6 for j, v in enumerate(table))


@pytest.mark.parametrize("log2e,frac,fb,bound", _EXP_CASES)
def test_int_exp_error_bound(log2e, frac, fb, bound):
    step = max(1, (40 << fb) // 20000)
    x = -torch.arange(0, 40 << fb, step, dtype=torch.int64)
    got = ops.int_exp(x, fb, log2e=log2e, frac=frac).double() / 2**30
    ref = torch.exp(x.double() / 2**fb)
    # frozen bound on the absolute error of exp(x) in [0, 1]
    assert (got - ref).abs().max().item() <= bound


def test_int_exp_rejects_bad_input():
    with pytest.raises(OperandError, match="<= 0"):
        ops.int_exp(torch.tensor([1]), FB)
    with pytest.raises(OperandError, match="frac_bits"):
        ops.int_exp(torch.tensor([-1]), 31)
    with pytest.raises(OperandError, match="dtype"):
        ops.int_exp(torch.tensor([-1.0]), FB)


# ------------------------------------------------------------------ softmax


def test_softmax_exact_values_and_sentinel_mask():
    s = torch.tensor([[0, 0, 0, 0], [7, 7, 7, 7]], dtype=torch.int32)
    assert ops.int_softmax(s, FB).tolist() == [[8192] * 4, [8192] * 4]
    assert ops.int_softmax(torch.tensor([[5, 5, 5]]), FB).tolist() == [[10923] * 3]  # 32768/3 rounded
    # dominant entry saturates at 32767, the rest underflow to exactly 0
    assert ops.int_softmax(torch.tensor([[100 << FB, 0, -(3 << FB)]]), FB).tolist() == [[32767, 0, 0]]
    m = ops.MASK_SENTINEL
    p = ops.int_softmax(torch.tensor([[m, 3 << FB, 3 << FB, m], [m, m, m, m]]), FB)
    assert p.dtype == torch.int16
    assert p.tolist() == [[0, 16384, 16384, 0], [0, 0, 0, 0]]
    keep = torch.tensor([[True, False, True]])
    assert ops.mask_scores(torch.tensor([[1, 2, 3]]), keep).tolist() == [[1, m, 3]]


@pytest.mark.parametrize("fb", [8, 16])
def test_softmax_error_bound_and_row_sums(fb):
    g = torch.Generator().manual_seed(1)
    worst = 0.0
    for length in (1, 2, 7, 64, 300):
        for spread in (0.5, 4.0, 16.0):
            s = torch.round(torch.randn(40, length, generator=g, dtype=torch.float64) * spread * 2**fb).long()
            keep = torch.rand(40, length, generator=g) > 0.3
            keep[:, 0] = True
            p = ops.int_softmax(ops.mask_scores(s, keep), fb)
            ref = torch.softmax((s.double() / 2**fb).masked_fill(~keep, -math.inf), dim=-1)
            worst = max(worst, (p.double() / 2**15 - ref).abs().max().item())
            assert bool((p[~keep] == 0).all())  # masked -> exactly 0
            sums = p.long().sum(-1)
            assert bool(((sums - 2**15).abs() <= (length + 1) // 2 + 1).all())
    assert worst <= 2**-14  # frozen bound (measured 2^-15)


@pytest.mark.parametrize(
    "log2e,frac,bound", [("shift", "table", 2**-7), ("dyadic", "linear", 2**-5), ("shift", "linear", 2**-5)]
)
def test_softmax_ivit_modes_error_bound(log2e, frac, bound):
    g = torch.Generator().manual_seed(2)
    s = torch.round(torch.randn(60, 64, generator=g, dtype=torch.float64) * 4 * 2**FB).long()
    p = ops.int_softmax(s, FB, log2e=log2e, frac=frac).double() / 2**15
    ref = torch.softmax(s.double() / 2**FB, dim=-1)
    assert (p - ref).abs().max().item() <= bound


def test_softmax_is_shift_invariant_bit_for_bit():
    g = torch.Generator().manual_seed(3)
    s = torch.randint(-(20 << FB), 20 << FB, (8, 50), generator=g)
    assert torch.equal(ops.int_softmax(s, FB), ops.int_softmax(s + 12345, FB))


# ------------------------------------------------------------------ P.V


def test_split_prob_bytes_recombines_exactly():
    p = torch.arange(0, 32768, dtype=torch.int16)
    hi, lo = ops.split_prob_bytes(p)
    assert hi.dtype == torch.int8 and lo.dtype == torch.int8
    assert int(hi.min()) == 0 and int(hi.max()) == 127 and int(lo.min()) == -128 and int(lo.max()) == 127
    assert torch.equal(256 * hi.long() + lo.long() + 128, p.long())
    with pytest.raises(OperandError, match="32767"):
        ops.split_prob_bytes(torch.tensor([32768]))


def test_pv_matmul_equals_exact_int64_product():
    g = torch.Generator().manual_seed(4)
    b, h, m, length, d = 2, 3, 5, 37, 8
    p = torch.randint(0, 32768, (b, h, m, length), generator=g).to(torch.int16)
    p[0, 0, 0] = 32767  # extremes
    p[0, 0, 1] = 0
    v = torch.randint(-128, 128, (b, h, length, d), generator=g).to(torch.int8)
    v[1, 2] = -128
    calls = []

    def counting_mm(a, bt):
        calls.append((tuple(a.shape), tuple(bt.shape)))
        return int64_mm(a, bt)

    out = ops.pv_matmul(p, v, counting_mm)
    assert out.dtype == torch.int64
    assert torch.equal(out, p.long() @ v.long())
    assert calls == [((2 * m, length), (d, length))] * (b * h)  # one stacked hi|lo GEMM per head


def test_pv_matmul_at_the_int32_accumulator_limit():
    # L = 131071 with every byte extreme: hi@v and lo@v reach -2,130,194,304 > -2^31, still exact
    length = ops.MAX_PV_LEN
    p = torch.full((1, length), 32767, dtype=torch.int16)
    v = torch.full((length, 1), -128, dtype=torch.int8)
    assert ops.pv_matmul(p, v, int64_mm).tolist() == [[32767 * -128 * length]]


def test_pv_matmul_broadcasts_leading_dims_and_real_softmax():
    g = torch.Generator().manual_seed(5)
    s = torch.randint(-(8 << FB), 8 << FB, (2, 4, 6, 20), generator=g)
    s[..., 15:] = ops.MASK_SENTINEL
    p = ops.int_softmax(s, FB)
    v = torch.randint(-128, 128, (1, 4, 20, 16), generator=g).to(torch.int8)  # batch broadcast
    out = ops.pv_matmul(p, v, int64_mm)
    assert out.shape == (2, 4, 6, 16)
    assert torch.equal(out, p.long() @ v.long().expand(2, 4, 20, 16))
    # masked keys never contribute, whatever their V bytes
    v2 = v.clone()
    v2[..., 15:, :] = 127
    assert torch.equal(ops.pv_matmul(p, v2, int64_mm), out)


def test_pv_matmul_rejects_bad_operands():
    p = torch.zeros(2, 3, dtype=torch.int16)
    with pytest.raises(OperandError, match="int8"):
        ops.pv_matmul(p, torch.zeros(3, 4, dtype=torch.int16), int64_mm)
    with pytest.raises(OperandError, match="do not match"):
        ops.pv_matmul(p, torch.zeros(4, 4, dtype=torch.int8), int64_mm)
    with pytest.raises(OperandError, match="int_mm returned shape"):
        ops.pv_matmul(p, torch.zeros(3, 4, dtype=torch.int8), lambda a, b: torch.zeros(1, 1, dtype=torch.int32))
    with pytest.raises(OperandError, match="dtype torch.float32"):
        ops.pv_matmul(p, torch.zeros(3, 4, dtype=torch.int8), lambda a, b: torch.zeros(4, 4))
    with pytest.raises(OperandError, match="131071"):
        ops.pv_matmul(torch.zeros(1, 131072, dtype=torch.int16), torch.zeros(131072, 1, dtype=torch.int8), int64_mm)


# ------------------------------------------------------------------ RoPE


def test_rope_tables_match_transformers_qwen3_layout():
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

    d, n, theta = 64, 256, 1000000.0
    cos, sin, shift = ops.build_rope_tables(d, n, theta)
    assert cos.dtype == torch.int16 and cos.shape == (n, d) and shift == ops.ROPE_SHIFT == 14
    assert cos[0].tolist() == [16384] * d and sin[0].tolist() == [0] * d
    cfg = Qwen3Config(hidden_size=256, num_attention_heads=4, head_dim=d, rope_theta=theta, max_position_embeddings=n)
    emb = Qwen3RotaryEmbedding(cfg)
    hc, hs = emb(torch.zeros(1, dtype=torch.float32), torch.arange(n)[None])
    # transformers computes angles in float32; tables use float64 -> within one Q14 step
    assert (cos.double() - hc[0].double() * 2**14).abs().max().item() <= 1.0
    assert (sin.double() - hs[0].double() * 2**14).abs().max().item() <= 1.0


def test_apply_rope_identity_at_zero_and_error_bound():
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    d, n = 64, 512
    cos, sin, shift = ops.build_rope_tables(d, n, 10000.0)
    g = torch.Generator().manual_seed(6)
    x = torch.randint(-128, 128, (2, 4, 9, d), generator=g).to(torch.int8)  # [B, H, S, D]
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [503, 504, 505, 506, 507, 508, 509, 510, 511]])
    out = ops.apply_rope(x, cos, sin, pos[:, None, :])
    assert out.dtype == torch.int64
    assert torch.equal(out[0, :, 0], x[0, :, 0].long())  # position 0: identity
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = pos.double()[..., None] * inv
    ang = torch.cat([ang, ang], -1)
    ref, _ = apply_rotary_pos_emb(x.double(), x.double(), ang.cos(), ang.sin(), unsqueeze_dim=1)
    # frozen bound: table rounding (<= 2^-15 per factor, two factors of |x| <= 128) + output rounding 0.5
    assert (out.double() - ref).abs().max().item() <= 0.5 + 2 * 128 * 2**-15
    out6 = ops.apply_rope(x, cos, sin, pos[:, None, :], frac_bits_out=6)
    assert (out6.double() / 64 - ref).abs().max().item() <= 0.5 / 64 + 2 * 128 * 2**-15


def test_apply_rope_rejects_bad_positions():
    cos, sin, _ = ops.build_rope_tables(8, 4, 10000.0)
    with pytest.raises(OperandError, match="positions"):
        ops.apply_rope(torch.zeros(1, 8, dtype=torch.int8), cos, sin, torch.tensor([4]))
    with pytest.raises(OperandError, match="head_dim"):
        ops.apply_rope(torch.zeros(1, 6, dtype=torch.int8), cos, sin, torch.tensor([0]))
