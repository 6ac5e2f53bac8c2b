"""detllm integer layer operators: RMSNorm (integer sqrt), SwiGLU (integer
sigmoid), power-of-two residual stream, argmax; plus a float guard proving
the forward-time ops never create a floating-point tensor. Golden tests
against float64 math with FROZEN error bounds."""

from __future__ import annotations

import pytest
import torch
from bit_diff import assert_same_bits
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from detllm import ops
from detllm.intops import Dyadic, apply_dyadic, div_round, fit_channel_multipliers, fit_dyadic, ilog2, isqrt, requantize
from reference.errors import OperandError


def rms_ref(x: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def dequant(q: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    return q.double() * torch.pow(2.0, e.double()).unsqueeze(-1)


# ------------------------------------------------------------------ RMSNorm


def test_rmsnorm_exact_values():
    # x = [3, 4, 0, 0]: rms = 2.5, y = [1.2, 1.6, 0, 0]; exponent -6 (1.6 * 64 = 102.4 < 127.5)
    q, e = ops.int_rmsnorm(torch.tensor([[3, 4, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.int32))
    assert q.dtype == torch.int8
    assert q.tolist() == [[77, 102, 0, 0], [64, 64, 64, 64], [0, 0, 0, 0]]
    assert e.tolist() == [-6, -6, 0]
    # fixed output exponent -4 saturates above 127/16
    q, e = ops.int_rmsnorm(torch.tensor([[100, 0, 0, 0]]), out_exp=-4)
    assert q.tolist() == [[32, 0, 0, 0]] and e.tolist() == [-4]  # y = [2, 0, 0, 0]
    q, e = ops.int_rmsnorm(torch.tensor([[1] + [0] * 255]), out_exp=-4)
    assert q.tolist()[0][0] == 127  # y = 16 -> saturated
    # full int64 range: y = +-sqrt(2) -> 90.5 -> 91 (ties away) at exponent -6
    q, e = ops.int_rmsnorm(torch.tensor([[2**62, -(2**62), 5, 0]]))
    assert q.tolist() == [[91, -91, 0, 0]] and e.tolist() == [-6]
    # int16 output: y = 2 -> 2 * 2^13 = 16384 (2 * 2^14 would exceed 32767.5)
    q, e = ops.int_rmsnorm(torch.tensor([[1, 0, 0, 0]]), out_bits=16)
    assert q.dtype == torch.int16 and q.tolist() == [[16384, 0, 0, 0]] and e.tolist() == [-13]


@pytest.mark.parametrize("bits", [8, 16])
def test_rmsnorm_error_bound_per_token_scale(bits):
    g = torch.Generator().manual_seed(7)
    for h in (8, 128, 1024):
        for mag in (3.0, 1000.0, 2.0**28):
            x = torch.round(torch.randn(30, h, generator=g, dtype=torch.float64) * mag).long()
            x[0, 1] = int(mag * 40)  # outlier channel
            q, e = ops.int_rmsnorm(x, out_bits=bits)
            ref = rms_ref(x)
            amax = q.abs().amax(-1).long()
            assert bool((amax <= 2 ** (bits - 1) - 1).all()) and bool((amax >= 2 ** (bits - 2)).all())
            err = (dequant(q, e) - ref).abs().amax(-1) / ref.abs().amax(-1)
            # frozen bound: half an output step, max|q| >= 2^(b-2) -> 2^-(b-1) of the token max (+5 %)
            assert err.max().item() <= 1.05 * 2.0 ** -(bits - 1)


def test_rmsnorm_is_scale_invariant_bit_for_bit():
    g = torch.Generator().manual_seed(8)
    x = torch.randint(-(2**20), 2**20, (4, 64), generator=g)
    q0, e0 = ops.int_rmsnorm(x)
    for k in (1, 5, 9):
        q, e = ops.int_rmsnorm(x << k)
        assert torch.equal(q, q0) and torch.equal(e, e0)


def test_rmsnorm_runtime_gamma_for_qk_norm():
    g = torch.Generator().manual_seed(9)
    gamma = torch.rand(128, generator=g, dtype=torch.float64) * 3 + 0.05
    gm, gk = fit_channel_multipliers(gamma)
    x = torch.randint(-(2**24), 2**24, (16, 128), generator=g)
    for bits in (8, 16):
        q, e = ops.int_rmsnorm(x, gamma=(gm, gk), out_bits=bits)
        ref = rms_ref(x) * gamma
        err = (dequant(q, e) - ref).abs().amax(-1) / ref.abs().amax(-1)
        # frozen bound: output step as above + gamma quantization (int16 mantissa, <= 2^-14 relative)
        assert err.max().item() <= 1.05 * 2.0 ** -(bits - 1) + 2**-14


def test_rmsnorm_eps_with_token_exponent():
    # real x = [1, 0, 0, 0] * 2^-20, eps = 1e-6: y0 = 2^-20 / sqrt(2^-40 / 4 + 1e-6) = 9.5367e-4
    eps = fit_dyadic(1e-6)
    q, e = ops.int_rmsnorm(torch.tensor([[1, 0, 0, 0], [5, 0, 0, 0]]), x_exp=torch.tensor([-20, 0]), eps=(eps.m, eps.k))
    y = dequant(q, e)
    x_real = torch.tensor([[2.0**-20, 0, 0, 0], [5.0, 0, 0, 0]], dtype=torch.float64)
    ref = rms_ref(x_real, eps=1e-6)
    assert abs(y[0, 0].item() - ref[0, 0].item()) <= 2**-7 * ref[0, 0].item()
    assert abs(y[1, 0].item() - 2.0) <= 2**-6  # eps negligible: y = sqrt(4) = 2


def test_rmsnorm_rejects_bad_arguments():
    with pytest.raises(OperandError, match="gamma shape"):
        ops.int_rmsnorm(torch.zeros(2, 8, dtype=torch.int32), gamma=(torch.ones(4, dtype=torch.int16), 0))
    with pytest.raises(OperandError, match="out_bits"):
        ops.int_rmsnorm(torch.zeros(2, 8, dtype=torch.int32), out_bits=4)
    with pytest.raises(OperandError, match="dtype"):
        ops.int_rmsnorm(torch.zeros(2, 8))


# ------------------------------------------------------------------ SwiGLU


@pytest.mark.parametrize("fb", [8, 16, 24])
def test_sigmoid_and_silu_error_bounds(fb):
    x = torch.arange(-(20 << fb), (20 << fb) + 1, max(1, (40 << fb) // 100000), dtype=torch.int64)
    sig = ops.int_sigmoid(x, fb).double() / 2**30
    assert (sig - torch.sigmoid(x.double() / 2**fb)).abs().max().item() <= 2**-24  # frozen (measured 2^-25.5)
    silu = ops.int_silu(x, fb).double()
    ref = torch.nn.functional.silu(x.double() / 2**fb) * 2**fb
    # frozen: output rounding 0.5 unit + sigma error 2^-24 times |x| (in units)
    assert bool(((silu - ref).abs() <= 0.5 + x.abs().double() * 2**-24 + 1e-9).all())


def test_sigmoid_exact_values():
    assert ops.int_sigmoid(torch.tensor([0, 1 << 40, -(1 << 40)]), 16).tolist() == [2**29, 2**30, 0]
    assert ops.int_silu(torch.tensor([0, 100 << 16]), 16).tolist() == [0, 100 << 16]


def test_swiglu_error_bound():
    g = torch.Generator().manual_seed(10)
    fg, fu, fo = 16, 12, 10
    gate = torch.randint(-(12 << fg), 12 << fg, (4000,), generator=g)
    up = torch.randint(-(8 << fu), 8 << fu, (4000,), generator=g)
    out = ops.int_swiglu(gate, up, fg, fu, fo)
    ref = torch.nn.functional.silu(gate.double() / 2**fg) * up.double() / 2**fu
    silu_err = 0.5 * 2.0**-fg + (gate.abs().double() / 2**fg) * 2**-24  # real units
    bound = 0.5 + (up.abs().double() / 2**fu) * silu_err * 2**fo  # output units
    assert bool(((out.double() - ref * 2**fo).abs() <= bound + 1e-9).all())
    with pytest.raises(OperandError, match="2\\^31"):
        ops.int_swiglu(torch.tensor([2**31]), torch.tensor([1]), 16, 16, 16)
    with pytest.raises(OperandError, match="shape"):
        ops.int_swiglu(torch.zeros(2, dtype=torch.int32), torch.zeros(3, dtype=torch.int32), 16, 16, 16)


# ------------------------------------------------------------------ residual stream


def test_residual_add_exact_alignment():
    a = torch.tensor([[3, -7], [1, 1]], dtype=torch.int32)
    b = torch.tensor([[5, 5], [-3, 2]], dtype=torch.int32)
    r, e = ops.residual_add(a, torch.tensor([2, -1]), b, torch.tensor([0, 3]))
    assert r.dtype == torch.int32 and e.tolist() == [0, -1]
    assert r.tolist() == [[3 * 4 + 5, -7 * 4 + 5], [1 - 3 * 16, 1 + 2 * 16]]


def test_residual_add_exact_whenever_it_fits():
    g = torch.Generator().manual_seed(11)
    a = torch.randint(-(2**30), 2**30, (64, 16), generator=g).to(torch.int32)
    b = torch.randint(-(2**20), 2**20, (64, 16), generator=g).to(torch.int32)
    ea = torch.randint(-5, 6, (64,), generator=g)
    eb = ea - torch.randint(0, 12, (64,), generator=g)
    r, e = ops.residual_add(a, ea, b, eb)
    exact = a.long() * (1 << (ea - eb)).unsqueeze(-1) + b.long()  # at exponent eb
    fits = exact.abs().amax(-1) <= 2**30
    s = e - eb
    assert bool((s[fits] == 0).all())
    assert torch.equal(r[fits].long(), exact[fits])
    # renormalized tokens: one rounding, error <= half a step of the new exponent
    err = (r.long() * (1 << s).unsqueeze(-1) - exact).abs()
    assert bool((err <= (1 << s).unsqueeze(-1) // 2).all())
    assert int(r.long().abs().max()) <= 2**30


def test_quantize_pow2_per_token_known_values_and_bound():
    x = torch.tensor([[127, 0], [128, -1], [254, 3], [255, -255], [0, 0], [-64, 1]], dtype=torch.int32)
    q, e = ops.quantize_pow2_per_token(x, x_exp=torch.tensor([0, 0, 0, 0, 0, -3]))
    assert q.dtype == torch.int8
    assert q.tolist() == [[127, 0], [64, -1], [127, 2], [64, -64], [0, 0], [-64, 1]]
    assert e.tolist() == [0, 1, 1, 2, 0, -3]
    big = torch.tensor([[2**63 - 1, -(2**63 - 1)], [2**62, 1]])
    q, e = ops.quantize_pow2_per_token(big)
    assert q.tolist() == [[64, -64], [64, 0]] and e.tolist() == [57, 56]
    g = torch.Generator().manual_seed(12)
    x = torch.randint(-(2**31), 2**31, (50, 64), generator=g) >> torch.randint(0, 31, (50, 1), generator=g)
    q, e = ops.quantize_pow2_per_token(x)
    assert int(q.abs().max()) <= 127 and bool((q.abs().amax(-1)[e > 0] >= 64).all())
    err = (q.long() * (1 << e).unsqueeze(-1) - x).abs()
    assert bool((err <= (1 << e).unsqueeze(-1) // 2).all())  # one rounding, no clipping


# ------------------------------------------------------------------ argmax


def test_argmax_ties_go_to_smallest_index():
    x = torch.tensor(
        [[1, 5, 5, 2], [7, 7, 7, 7], [-3, -1, -1, -2], [2**31 - 1, 0, 2**31 - 1, -(2**31)]], dtype=torch.int32
    )
    assert ops.argmax_int(x).tolist() == [1, 0, 1, 0]
    assert ops.argmax_int(torch.tensor([[[4, 9, 9]]])).tolist() == [[1]]


# ------------------------------------------------------------------ float guard


class NoFloat(TorchDispatchMode):
    """Fails on any floating-point tensor entering or leaving an aten op."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                raise AssertionError(f"float input to {func}")
        out = func(*args, **kwargs)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                raise AssertionError(f"float output of {func}")
        return out


def test_forward_ops_run_under_a_float_guard():
    cos, sin, _ = ops.build_rope_tables(16, 8, 10000.0)  # offline, outside the guard
    gm, gk = fit_channel_multipliers([1.0] * 16)
    x = torch.randint(-1000, 1000, (2, 3, 16), dtype=torch.int32)
    v = torch.randint(-128, 128, (2, 5, 16), dtype=torch.int8)
    mm = lambda a, b: (a.long() @ b.long().T).to(torch.int32)  # noqa: E731
    with NoFloat():
        guard_hit = False
        try:
            torch.ones(2) * 0.5
        except AssertionError:
            guard_hit = True
        assert guard_hit  # the guard itself works
        q, e = ops.int_rmsnorm(x, gamma=(gm, gk))
        ops.apply_rope(q, cos, sin, torch.arange(3)[None])
        s = ops.mask_scores(torch.randint(-(1 << 20), 1 << 20, (2, 3, 5)), torch.ones(2, 3, 5, dtype=torch.bool))
        p = ops.int_softmax(s, 16)
        ops.pv_matmul(p, v, mm)
        ops.int_swiglu(x, x, 12, 12, 8)
        r, re = ops.residual_add(x, 0, x, -2)
        ops.quantize_pow2_per_token(r, re)
        ops.argmax_int(x)
        requantize(x, (torch.ones(16, dtype=torch.int64), 3))
        apply_dyadic(x, Dyadic(3, 1))
        isqrt(torch.tensor([10]))
        ilog2(torch.tensor([10]))
        div_round(torch.tensor([7]), torch.tensor([2]))


# ------------------------------------------------------------------ batch invariance / devices


def _all_ops(x: torch.Tensor, v: torch.Tensor, cos, sin, gamma, mm):
    """Every forward op on one input set; returns a dict of integer results."""
    q, e = ops.int_rmsnorm(x, gamma=gamma)
    s = ops.mask_scores(x.long() * 64, x > -900)
    p = ops.int_softmax(s, 16)
    r, re = ops.residual_add(x, 0, x // 3, -2)
    q8, e8 = ops.quantize_pow2_per_token(r, re)
    return {
        "rms": q,
        "rms_e": e,
        "rope": ops.apply_rope(q, cos, sin, torch.arange(x.shape[-2], device=x.device)),
        "p": p,
        "pv": ops.pv_matmul(p[..., :, :5], v, mm),
        "swiglu": ops.int_swiglu(x, x // 2, 10, 10, 8),
        "res": r,
        "res_e": re,
        "q8": q8,
        "e8": e8,
        "argmax": ops.argmax_int(x),
    }


def test_rowwise_ops_are_batch_invariant():
    g = torch.Generator().manual_seed(13)
    cos, sin, _ = ops.build_rope_tables(16, 8, 10000.0)
    gm, gk = fit_channel_multipliers(torch.rand(16, generator=g, dtype=torch.float64) + 0.5)
    x = torch.randint(-1000, 1000, (4, 3, 16), generator=g, dtype=torch.int32)
    v = torch.randint(-128, 128, (4, 5, 16), generator=g, dtype=torch.int8)
    mm = lambda a, b: (a.long() @ b.long().T).to(torch.int32)  # noqa: E731
    full = _all_ops(x, v, cos, sin, (gm, gk), mm)
    for i in range(4):
        alone = _all_ops(x[i : i + 1], v[i : i + 1], cos, sin, (gm, gk), mm)
        for k, val in alone.items():
            assert torch.equal(val, full[k][i : i + 1]), k


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_gives_the_same_bits_as_cpu():
    g = torch.Generator().manual_seed(14)
    cos, sin, _ = ops.build_rope_tables(16, 8, 10000.0)
    gm, gk = fit_channel_multipliers(torch.rand(16, generator=g, dtype=torch.float64) + 0.5)
    x = torch.randint(-1000, 1000, (4, 3, 16), generator=g, dtype=torch.int32)
    v = torch.randint(-128, 128, (4, 5, 16), generator=g, dtype=torch.int8)
    mm = lambda a, b: (a.long() @ b.long().T).to(torch.int32)  # noqa: E731
    # CUDA has no int64 matmul: the stand-in accumulator runs on the CPU, everything else on the GPU
    mm = lambda a, b: (a.cpu().long() @ b.cpu().long().T).to(torch.int32).to(a.device)  # noqa: E731
    cpu = _all_ops(x, v, cos, sin, (gm, gk), mm)
    dev = _all_ops(x.cuda(), v.cuda(), cos.cuda(), sin.cuda(), (gm.cuda(), gk), mm)
    for k, val in cpu.items():
        assert_same_bits(dev[k], val, f"{k} cuda vs cpu", {"x": x} if val.shape == x.shape else None)
