"""Fused Triton kernels (detllm/kernels) vs the unfused torch ops, bit for bit.

On a machine without a GPU every kernel runs under Triton's interpreter
(``detllm.kernels.intlang.launcher``); the ``cuda``-marked test repeats the
comparison compiled, at Qwen3-0.6B shapes. Extremes: int64 / int32 limits,
exact ties of the ties-away rounding, all-zero rows, shifts outside [0, 62].
"""

import math
from fractions import Fraction

import pytest
import torch
import triton.language as tl
from bit_diff import assert_same_bits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detllm import engine as E
from detllm import intops, ops
from detllm.kernels import attention as KA
from detllm.kernels import intlang as IL
from detllm.kernels import linear as KL
from detllm.kernels import norm_quant as KN
from detllm.kernels import qk_rope as KQ
from detllm.kernels import quant_rows as KR
from detllm.kernels.intlang import bitlen, div_round_pos, floor_shift, int_exp, int_sigmoid, isqrt_newton, round_shift

SETTINGS = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
I64 = st.integers(-(2**63), 2**63 - 1)


# ------------------------------------------------------------ element-wise helpers
def _elementwise_kernel(x_ptr, k_ptr, o_ptr, n, table_ptr, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    k = tl.load(k_ptr + offs, mask=m, other=1)
    if OP == 0:
        y = round_shift(x, k)
    elif OP == 1:
        y = floor_shift(x, k)
    elif OP == 2:
        y = bitlen(x)
    elif OP == 3:
        y = div_round_pos(x, k)
    elif OP == 4:
        y = isqrt_newton(x)
    elif OP == 5:
        y = int_exp(x, table_ptr, 16)
    else:
        y = int_sigmoid(x, table_ptr, 17)
    tl.store(o_ptr + offs, y, mask=m)


# the helpers are called by plain name: the interpreter launcher replaces
# module-global JITFunctions by their Python bodies (not attributes of modules)
_ELEM = IL.launcher(_elementwise_kernel)


def _elem(op, x, k=None, device="cpu"):
    x = torch.as_tensor(x, dtype=torch.int64).to(device)
    k = torch.ones_like(x) if k is None else torch.as_tensor(k, dtype=torch.int64).to(device)
    o = torch.empty_like(x)
    _ELEM[(1,)](x, k, o, x.numel(), IL.exp2_table(x.device), OP=op, BLOCK=IL.next_pow2(x.numel()))
    return o.cpu()


def _ties(k):
    """x values around the exact ties of round_shift(., k)."""
    h = 1 << (k - 1)
    base = [h, -h, 3 * h, -3 * h, h - 1, -h + 1, h + 1, -h - 1, 5 * h, -5 * h]
    return [v for v in base if -(2**63) <= v < 2**63]


def test_round_shift_helper_matches_intops_on_ties_and_extremes():
    xs, ks = [], []
    for k in (1, 2, 7, 14, 30, 31, 32, 61, 62):
        for v in _ties(k):
            xs.append(v)
            ks.append(k)
    for v in (2**63 - 1, -(2**63), 2**62, -(2**62), 2**62 - 1, -(2**62) + 1, 0, 1, -1):
        for k in (-3, 0, 1, 62, 63, 64, 65, 100):
            xs.append(v if k >= 0 else v >> 8)
            ks.append(k)
    x, k = torch.tensor(xs), torch.tensor(ks)
    assert torch.equal(_elem(0, x, k), intops.round_shift(x, k))
    assert torch.equal(_elem(1, x, k.clamp(max=63)), intops.floor_shift(x, k.clamp(max=63)))
    # the exact tie -1.5 -> -2 and 1.5 -> 2 (ties away from zero), pinned
    assert _elem(0, [-6, 6, -5, 5], [2, 2, 1, 1]).tolist() == [-2, 2, -3, 3]


@SETTINGS
@given(st.lists(I64, min_size=1, max_size=24), st.lists(st.integers(-4, 66), min_size=24, max_size=24))
def test_round_shift_helper_matches_intops_random(xs, ks):
    x, k = torch.tensor(xs), torch.tensor(ks[: len(xs)])
    k = torch.where(k < 0, k.clamp(min=-2), k)
    x = torch.where(k < 0, x >> 4, x)  # left shifts that fit (the rule's precondition)
    assert torch.equal(_elem(0, x, k), intops.round_shift(x, k))


def test_bitlen_isqrt_divround_helpers_match_torch():
    vals = [0, 1, 2, 3, 4, 15, 16, 17, 2**31 - 1, 2**31, 2**32, 2**62 - 1, 2**61 + 12345, 10**18]
    x = torch.tensor(vals)
    assert torch.equal(_elem(2, x), E._bitlen(x))
    assert torch.equal(_elem(4, x), intops.isqrt(x))
    a = torch.tensor([5, -5, 7, -7, 0, 1, -1, 2**40 + 1, -(2**40) - 1, 3, -3])
    b = torch.tensor([2, 2, 2, 2, 3, 2, 2, 2, 2, 6, 6])
    assert torch.equal(_elem(3, a, b), E.div_round_pos(a, b))
    assert _elem(3, [5, -5, 3, -3], [2, 2, 6, 6]).tolist() == [3, -3, 1, -1]  # ties away


def test_int_exp_and_sigmoid_helpers_match_ops():
    x = torch.tensor(
        [0, -1, -(1 << 15), -(1 << 16), -(1 << 16) - 1, -12345678, -(64 << 16), -(64 << 16) - 1, -(2**40), -(2**31)]
    )
    assert torch.equal(_elem(5, x), ops.int_exp(x, 16))
    s = torch.tensor([0, 1, -1, 2**31 - 1, -(2**31) + 1, 123456789, -123456789, 1 << 17, -(1 << 17)])
    assert torch.equal(_elem(6, s), ops.int_sigmoid(s, 17))


# ------------------------------------------------------------ row ops
@st.composite
def rows(draw, max_r=3, max_h=40, lim=2**31):
    r = draw(st.integers(1, max_r))
    h = draw(st.integers(1, max_h))
    kind = draw(st.sampled_from(["random", "small", "extreme", "ties"]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    if kind == "random":
        x = torch.randint(-lim, lim, (r, h), generator=g)
    elif kind == "small":
        x = torch.randint(-3, 4, (r, h), generator=g)
    elif kind == "extreme":
        x = torch.tensor([-lim, lim - 1, 0])[torch.randint(0, 3, (r, h), generator=g)]
    else:  # 127 v / M lands on .5: M = 2, v = +-1
        x = torch.tensor([-1, 1, 2, -2, 0])[torch.randint(0, 5, (r, h), generator=g)]
    x[0] = x[0] if draw(st.booleans()) else 0  # an all-zero row
    return x


@SETTINGS
@given(rows(), st.sampled_from([0, 1, 4295, 1099512, 2**40]))
def test_norm_quant_fused_equals_engine(x, eps):
    g = torch.randint(1, 2**15, (x.shape[1],), generator=torch.Generator().manual_seed(x.shape[1]))
    for a, b in zip(KN.norm_quant(x, g, eps), E.norm_quant(x, g, eps)):
        assert torch.equal(a, b)


@SETTINGS
@given(rows(lim=2**40))
def test_quant_rows_fused_equals_engine(x):
    for a, b in zip(KR.quant_rows(x), E.quant_rows(x)):
        assert torch.equal(a, b)


def test_quant_rows_ties_round_away():
    q, tm, tk = KR.quant_rows(torch.tensor([[1, -1, 2, 0], [2**40, -(2**40), 1, 0]]))
    assert q[0].tolist() == [64, -64, 127, 0]  # 63.5 -> 64, -63.5 -> -64
    assert (tm.tolist(), tk.tolist()) == ([2, 2**16], [0, -24])


def _linear_case(R, K, N, seed, extreme=False):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-127, 128, (R, K), generator=g).to(torch.int8)
    w = torch.randint(-127, 128, (N, K), generator=g).to(torch.int8)
    if extreme:
        a[:] = -127
        w[: N // 2] = 127
    tm = torch.randint(2**15, 2**17, (R,), generator=g)
    tk = torch.randint(-4, 24, (R,), generator=g)
    m = torch.randint(2**15, 2**16, (N,), generator=g)
    k = torch.randint(8, 44, (N,), generator=g)
    y = intops.round_shift((a.long() @ w.long().T) * tm[:, None] * m[None, :], tk[:, None] + k[None, :])
    return a, w, tm, tk, m, k, y


@SETTINGS
@given(
    st.integers(1, 20), st.integers(1, 70), st.integers(1, 40).map(lambda n: 2 * n), st.integers(0, 99), st.booleans()
)
def test_linear_fused_epilogues_equal_torch(R, K, N, seed, extreme):
    a, w, tm, tk, m, k, y = _linear_case(R, K, N, seed, extreme)
    assert torch.equal(KL.linear(a, w, tm, tk, m, k), y)
    x = torch.randint(-(2**31), 2**31, (R, N), generator=torch.Generator().manual_seed(seed))
    x0 = x.clone()
    KL.linear(a, w, tm, tk, m, k, KL.MODE_RESIDUAL, out=x)
    assert torch.equal(x, E.sat32(x0 + y))
    assert torch.equal(KL.linear(a, w, tm, tk, m, k, KL.MODE_LOGITS), E.sat32(y).to(torch.int32))
    fg, fu = 17, 20
    gu = y.clamp(-(2**31 - 1), 2**31 - 1)
    h = KL.linear(a, w, tm, tk, m, k, KL.MODE_SWIGLU, gate_exp=fg, up_exp=fu)
    assert torch.equal(h, ops.int_swiglu(gu[:, : N // 2], gu[:, N // 2 :], fg, fu, fg + fu))


# ------------------------------------------------------------ attention block
def _qk_case(seed, R=3, nh=4, nkv=2, hd=16, B=2, cap=8, maxpos=16):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(-(2**24), 2**24, (R, (nh + 2 * nkv) * hd), generator=g)
    y[0, :hd] = 0  # an all-zero head
    y[1, (nh + nkv) * hd :] = torch.randint(-300, 300, (nkv * hd,), generator=g)  # v saturates
    gq = torch.randint(1, 2**15, (nh, hd), generator=g)
    gk = torch.randint(1, 2**15, (nkv, hd), generator=g)
    cos, sin, _ = ops.build_rope_tables(hd, maxpos, 10000.0)
    pos = torch.randint(0, cap, (R,), generator=g)
    seq = torch.randint(0, B, (R,), generator=g)
    valid = torch.tensor([1, 0, 1][:R], dtype=torch.int32)
    kcm = torch.randint(2**15, 2**16, (nkv,), generator=g)
    kck = torch.randint(20, 30, (nkv,), generator=g)
    return y, gq, gk, cos, sin, pos, seq, valid, kcm, kck, (nh, nkv, hd, B, cap)


@pytest.mark.parametrize("seed", [0])
def test_qk_rope_cache_fused_equals_engine_ops(seed):
    y, gq, gk, cos, sin, pos, seq, valid, kcm, kck, (nh, nkv, hd, B, cap) = _qk_case(seed)
    R = y.shape[0]
    qe, qs, ke, ks, qk_exp, rope = 4295, 11, 17180, 15, 14, 14
    kc = torch.zeros(B, nkv, cap, hd, dtype=torch.int8)
    vc = torch.zeros_like(kc)
    qq, qtm, qtk = KQ.qk_rope_cache(
        y, torch.cat([gq, gk]), cos, sin, pos, seq, valid, kcm, kck, kc, vc, nh, nkv, qe, qs, ke, ks, qk_exp, rope
    )
    # the torch ops of engine._forward
    rpos = pos.reshape(-1, 1)
    q = ops.apply_rope(E.norm_fixed(y[:, : nh * hd].reshape(R, nh, hd), gq, qs, qe, qk_exp), cos, sin, rpos, shift=rope)
    k = ops.apply_rope(
        E.norm_fixed(y[:, nh * hd : (nh + nkv) * hd].reshape(R, nkv, hd), gk, ks, ke, qk_exp),
        cos,
        sin,
        rpos,
        shift=rope,
    )
    k8 = intops.round_shift(k * kcm[None, :, None], kck[None, :, None]).clamp(-127, 127).to(torch.int8)
    v8 = y[:, (nh + nkv) * hd :].clamp(-127, 127).to(torch.int8).reshape(R, nkv, hd)
    qm = q.abs().amax(-1)
    assert torch.equal(qq, E.div_round_pos(127 * q, qm.clamp(min=1)[..., None]).to(torch.int8))
    tm, tk = E.normalize17(qm)
    assert torch.equal(qtm, tm) and torch.equal(qtk, tk)
    kc2 = torch.zeros_like(kc)
    vc2 = torch.zeros_like(vc)
    for r in range(R):
        if valid[r]:
            kc2[seq[r], :, pos[r]] = k8[r]
            vc2[seq[r], :, pos[r]] = v8[r]
    assert torch.equal(kc, kc2) and torch.equal(vc, vc2)


@pytest.mark.parametrize("seed,big", [(0, False), (1, True)])
def test_attention_fused_equals_int_softmax_and_pv(seed, big):
    qq, qtm, qtk, sm, sk, kc, vc, seq, nkeys = _attention_case(seed, big)
    _check_attention(
        KA.attention(qq, qtm, qtk, sm, sk, kc, vc, seq, nkeys, 16).cpu(), qq, qtm, qtk, sm, sk, kc, vc, seq, nkeys
    )


def _attention_case(seed, big, R=3, nh=4, nkv=2, hd=16, B=2, cap=21):
    g = torch.Generator().manual_seed(seed)
    qq = torch.randint(-127, 128, (R, nh, hd), generator=g).to(torch.int8)
    qtm = torch.randint(2**15, 2**17, (R, nh), generator=g)
    qtk = torch.randint(-2 if big else 0, 6, (R, nh), generator=g)
    sm = torch.randint(2**15, 2**16, (nkv,), generator=g)
    sk = torch.randint(20 if big else 27, 31, (nkv,), generator=g)
    kc = torch.randint(-127, 128, (B, nkv, cap, hd), generator=g).to(torch.int8)
    vc = torch.randint(-127, 128, (B, nkv, cap, hd), generator=g).to(torch.int8)
    seq = torch.tensor([0, 1, 1][:R])
    nkeys = torch.tensor([1, cap, cap // 2 + 1][:R])
    return qq, qtm, qtk, sm, sk, kc, vc, seq, nkeys


def _check_attention(o, qq, qtm, qtk, sm, sk, kc, vc, seq, nkeys, what="attention"):
    """o [R, nh*hd] vs ops.int_softmax + ops.pv_matmul over each row's keys."""
    R, nh, hd = qq.shape
    nkv = kc.shape[1]
    for r in range(R):
        for h in range(nh):
            gg = h // (nh // nkv)
            n = int(nkeys[r])
            kk, vv = kc[seq[r], gg, :n].long(), vc[seq[r], gg, :n]
            acc = kk @ qq[r, h].long()
            sc = intops.round_shift(acc * qtm[r, h] * sm[gg], qtk[r, h] + sk[gg]).clamp(min=ops.MASK_SENTINEL + 1)
            p = ops.int_softmax(sc[None], 16)
            ref = ops.pv_matmul(p, vv, lambda a_, b_: (a_.long() @ b_.long().T).to(torch.int32))[0]
            assert_same_bits(o[r, h * hd : (h + 1) * hd], ref, f"{what} row {r} head {h} (keys {n})")


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


# The inputs of the cuda-marked tests, shared with their interpreter twins
# below: a CUDA failure is then a compiled-vs-interpreted difference on inputs
# the CPU run pins, and its message names the first differing element.
def _row_inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-(2**31), 2**31, (9, 1024), generator=g)
    x[3] = 0
    gm = torch.randint(1, 2**15, (1024,), generator=g)
    v = torch.randint(-(2**40), 2**40, (9, 3072), generator=g)
    return x, gm, 1099512, v


def _check_row_kernels(device):
    x, gm, eps, v = _row_inputs()
    for name, a, b in zip(("q", "tm", "tk"), KN.norm_quant(x.to(device), gm.to(device), eps), E.norm_quant(x, gm, eps)):
        assert_same_bits(a, b, f"norm_quant {name} on {device}")
    for name, a, b in zip(("q", "tm", "tk"), KR.quant_rows(v.to(device)), E.quant_rows(v)):
        assert_same_bits(a, b, f"quant_rows {name} on {device}")


def _elementwise_inputs():
    x = torch.tensor([-7, 7, -(2**63), 2**63 - 1, 6, -6] * 4)
    k = torch.tensor([1, 1, 63, 64, 2, 2, 0, -1, 65, 62, 31, 30] * 2)
    t = torch.tensor([0, -1, -(64 << 16) - 1, -123456789, -(1 << 16)])
    s = torch.tensor([0, 1, -1, 2**31 - 1, -(2**31) + 1, 123456789, -123456789, 1 << 17, -(1 << 17)])
    return x, k, t, s


def _check_elementwise(device):
    x, k, t, s = _elementwise_inputs()
    assert_same_bits(_elem(0, x, k, device), intops.round_shift(x, k), f"round_shift on {device}", {"x": x, "k": k})
    assert_same_bits(_elem(5, t, device=device), ops.int_exp(t, 16), f"int_exp(., 16) on {device}", {"x": t})
    assert_same_bits(_elem(6, s, device=device), ops.int_sigmoid(s, 17), f"int_sigmoid(., 17) on {device}", {"x": s})


def _check_linear(R, device):
    a, w, tm, tk, m, k, y = _linear_case(R, 1024, 512, R)
    cu = [t.to(device) for t in (a, w, tm, tk, m, k)]
    assert_same_bits(KL.linear(*cu), y, f"linear plain R={R} on {device}")
    h = KL.linear(*cu, KL.MODE_SWIGLU, gate_exp=17, up_exp=20)
    gu = y.clamp(-(2**31 - 1), 2**31 - 1)
    assert_same_bits(
        h,
        ops.int_swiglu(gu[:, :256], gu[:, 256:], 17, 20, 37),
        f"linear swiglu R={R} on {device}",
        {"gate": gu[:, :256], "up": gu[:, 256:]},
    )


def test_cuda_test_inputs_pinned_under_the_interpreter():
    """The element-wise and row-kernel inputs of the cuda tests give the torch
    ops' bits under the interpreter (so a CUDA mismatch is compiled-only)."""
    _check_elementwise("cpu")
    _check_row_kernels("cpu")
    # the values the compiled kernels must reproduce: round_shift from exact
    # rationals (ties away: -3.5 -> -4), exp / sigmoid pinned from the frozen
    # ops and within their frozen bounds of the float64 functions
    x, k, t, s = _elementwise_inputs()
    half_away = lambda fr: (1 if fr >= 0 else -1) * math.floor(abs(fr) + Fraction(1, 2))  # noqa: E731
    want = [half_away(Fraction(a, 2**b)) if b >= 0 else a << -b for a, b in zip(x.tolist(), k.tolist())]
    assert want[:12] == [-4, 4, -1, 0, 2, -2, -7, 14, 0, 2, 0, 0]
    assert _elem(0, x, k).tolist() == want
    e = _elem(5, t).tolist()
    assert e == [2**30, 1073725460, 0, 0, 395007567]
    assert all(abs(v / 2**30 - math.exp(max(a / 2**16, -64))) <= 2**-23 for v, a in zip(e, t.tolist()))
    sg = _elem(6, s).tolist()
    assert sg == [2**29, 536872963, 536868861, 2**30, 0, 2**30, 0, 784968158, 288773666]
    assert all(abs(v / 2**30 - 0.5 * (1 + math.tanh(a / 2**18))) <= 2**-24 for v, a in zip(sg, s.tolist()))


def test_bit_diff_message_names_first_index_values_and_inputs():
    from bit_diff import first_difference

    a = torch.tensor([[1, 2, 3], [4, 5, 6]])
    b = a.clone()
    b[1, 1], b[1, 2] = -5, 0
    assert first_difference(a, a.clone(), "op") == ""
    assert (
        first_difference(a, b, "op", {"x": torch.arange(6) * 10})
        == "op: first diff at index (1, 1) [flat 4]: got 5 want -5 (diff 10; 2 of 6 differ) x=40"
    )
    assert first_difference(a, b.int(), "op") == "op: dtype torch.int64 != expected torch.int32"
    with pytest.raises(AssertionError, match="first diff at index"):
        assert_same_bits(a, b)


def test_cuda_linear_inputs_pinned_under_the_interpreter():
    """R = 1 of the cuda linear test (plain and SwiGLU) under the interpreter."""
    _check_linear(1, "cpu")


@pytest.mark.cuda
@needs_cuda
def test_cuda_row_kernels_equal_torch_ops_at_qwen3_06b_shapes():
    _check_row_kernels("cuda")


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("R", [1, 8, 32, 300])
def test_cuda_linear_epilogues_equal_torch(R):
    _check_linear(R, "cuda")


@pytest.mark.cuda
@needs_cuda
def test_cuda_elementwise_helpers_equal_torch():
    _check_elementwise("cuda")


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("cap", [40, 300])
def test_cuda_attention_equals_int_softmax_and_pv(cap):
    """cap 40: one key block per row (what the H200 run verified end to end);
    cap 300: several blocks (the per-row loops over the cache)."""
    for seed, big in ((0, False), (1, True)):
        case = _attention_case(seed, big, R=3, nh=16, nkv=8, hd=128, B=2, cap=cap)
        o = KA.attention(*[t_.cuda() for t_ in case], 16).cpu()
        _check_attention(o, *case, what=f"cuda cap={cap} seed={seed}")
