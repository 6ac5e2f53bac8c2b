"""The ``large_shapes`` family (conformance.cases.large_shapes): it reaches
the size-dependent paths (M >= 128 with scale-order ties, N > 256 with a
partial last tile and bias, K >= 8192 at M <= 16 with partial sums >= 2**25
around an odd small accumulator), is deterministic, and a hand-made case of
each variant has its output bits pinned (derived by hand / with numpy in the
comments, not by the code under test)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from conformance.cases.families import family_cases
from conformance.cases.large_shapes import SPLITK_K, large_shapes_family
from conformance.kernels.registry import get_kernel
from reference.contract import CUTLASS_STYLE
from reference.epilogue import reference_scaled_mm

I8, BF, FP16, FP32 = torch.int8, torch.bfloat16, torch.float16, torch.float32


@functools.lru_cache(maxsize=None)
def _fam() -> tuple:
    return tuple(family_cases(["large_shapes"]))


def _variant(prefix: str) -> list:
    return [c for c in _fam() if c.meta["variant"].startswith(prefix)]


def bits(t: torch.Tensor) -> list[int]:
    it, mask = (torch.int32, 0xFFFFFFFF) if t.dtype == FP32 else (torch.int16, 0xFFFF)
    return [int(v) & mask for v in t.reshape(-1).view(it)]


def test_large_shapes_is_deterministic_and_covers_the_grid():
    fam = _fam()
    assert len(fam) == 17 and len({c.name for c in fam}) == 17
    assert [c.digests() for c in large_shapes_family()] == [c.digests() for c in fam]
    assert large_shapes_family(seed=1)[0].digests() != fam[0].digests()
    for v in ("wide_N", "splitk_"):
        grid = {(c.scale_mode, c.out_dtype) for c in _variant(v)}
        assert grid == {(m, d) for m in ("synthetic", "pow2") for d in (BF, FP16, FP32)}, v


def test_prefill_cases_discriminate_scale_orders_at_large_m():
    from conformance.cases import tie_discrimination

    pre = _variant("prefill_M")
    assert sorted((c.m, str(c.out_dtype)) for c in pre) == sorted(
        [(128, str(BF)), (129, str(BF)), (257, str(BF)), (129, str(FP16)), (257, str(FP16))]
    )
    for c in pre:
        d = tie_discrimination(c)
        # at least half of the elements tell a_then_w from w_then_a
        assert d["a_then_w!=w_then_a"] >= d["elements"] // 2, c.name
        assert c.m * c.k * c.n > 2**21  # above C9's work limit (its selection unchanged)


def test_wide_n_cases_have_a_partial_last_tile_and_bias():
    wide = _variant("wide_N")
    assert all(c.n > 256 and c.n % 64 != 0 and c.k == 40 for c in wide)
    assert sum(c.bias is not None for c in wide) == 4
    assert max(c.n for c in wide) > 512  # bias % 256 wraps twice
    assert {c.n % 64 for c in wide} >= {1, 63}
    assert all(bool((c.a != 0).all()) and bool((c.b != 0).all()) for c in wide)


def _f32_split_sum(a: torch.Tensor, b: torch.Tensor, h: int) -> np.ndarray:
    """Two exact partial sums (split at h) rounded to float32 and added in float32."""
    p = a.long()[:, None, :] * b.long()[None, :, :]
    p1 = p[..., :h].sum(-1).numpy().astype(np.float32)
    p2 = p[..., h:].sum(-1).numpy().astype(np.float32)
    return (p1 + p2).astype(np.float64)


def test_splitk_cases_have_an_odd_small_acc_behind_large_partial_sums():
    sk = _variant("splitk_")
    assert len(sk) == 6 and all(c.k == SPLITK_K == 8195 and c.m <= 16 for c in sk)
    for c in sk:
        p = c.a.long()[:, None, :] * c.b.long()[None, :, :]
        pre = torch.cumsum(p, -1)
        acc = pre[..., -1]
        assert bool((acc % 2 == 1).all()) and int(acc.abs().max()) <= 75, c.name
        # splits anywhere near K/2 (every multiple of 32 in [3968, 4224] and K // 2):
        # both partial sums >= 2**25, and a float32 reduction of them misses the exact sum
        for h in list(range(3968, 4225, 32)) + [c.k // 2]:
            p1 = pre[..., h - 1]
            assert int(p1.abs().min()) >= 2**25 and int((acc - p1).abs().min()) >= 2**25
            assert bool((torch.from_numpy(_f32_split_sum(c.a, c.b, h)) != acc).all()), (c.name, h)


# ------------------------------------------------------------ pinned bits


def test_splitk_case_by_hand():
    # a = [127]*4096 + [-127]*4096 + [1, 1, 1], b = [127]*8192 + [1, 1, 1]: acc = 3,
    # 3 * 1.0 * 0.25 = 0.75 = 1.5 * 2**-1: bf16 0 01111110 1000000 = 0x3F40,
    # fp16 0 01110 1000000000 = 0x3A00, fp32 0x3F400000.
    # Split-K at 4096 with a float32 reduction: p1 = 4096 * 16129 = 66064384 (a multiple
    # of 4, exact in float32: spacing 4 in [2**25, 2**26)); p2 = -66064381 rounds to the
    # nearest multiple of 4, -66064380; p1 + p2 = 4 -> 4 * 0.25 = 1.0: bf16 0x3F80,
    # fp32 0x3F800000.
    from buggy_kernels import splitk_float32_reduce

    a = torch.tensor([[127] * 4096 + [-127] * 4096 + [1, 1, 1]], dtype=I8)
    b = torch.tensor([[127] * 8192 + [1, 1, 1]], dtype=I8)
    sa, sb = torch.tensor([1.0]), torch.tensor([0.25])
    assert bits(reference_scaled_mm(a, b, sa, sb, CUTLASS_STYLE, out_dtype=FP16)) == [0x3A00]
    for name in ("cpu", "int_mm", "triton"):
        k = get_kernel(name)
        assert bits(k.scaled_mm(a, b, sa, sb, out_dtype=BF)) == [0x3F40], name
        assert bits(k.scaled_mm(a, b, sa, sb, out_dtype=FP32)) == [0x3F400000], name
    assert bits(splitk_float32_reduce(a, b, sa, sb, out_dtype=BF)) == [0x3F80]
    assert bits(splitk_float32_reduce(a, b, sa, sb, out_dtype=FP32)) == [0x3F800000]


def test_wide_n_case_by_hand():
    # M = K = 1, N = 257, a = b = 1, scales 1: acc 1 everywhere; bias 2.0 at column 0,
    # 0.5 at column 256, 0 elsewhere: out = 3.0 (0x4040), 1.0 (0x3F80) x 255, 1.5 (0x3FC0).
    # Bias read at n % 256: column 256 gets bias[0] -> 3.0 (0x4040). Last partial
    # 128-column tile dropped: column 256 stays 0 (0x0000).
    from buggy_kernels import bias_cache_wraps, wide_n_tail_tile_dropped

    a, b = torch.ones((1, 1), dtype=I8), torch.ones((257, 1), dtype=I8)
    sa, sb = torch.ones(1), torch.ones(257)
    bias = torch.zeros(257, dtype=BF)
    bias[0], bias[256] = 2.0, 0.5
    want = [0x4040] + [0x3F80] * 255 + [0x3FC0]
    assert bits(reference_scaled_mm(a, b, sa, sb, CUTLASS_STYLE, bias=bias)) == want
    for name in ("cpu", "int_mm", "triton"):
        assert bits(get_kernel(name).scaled_mm(a, b, sa, sb, bias=bias)) == want, name
    assert bits(bias_cache_wraps(a, b, sa, sb, bias=bias))[256] == 0x4040
    assert bits(wide_n_tail_tile_dropped(a, b, sa, sb, bias=bias))[256] == 0x0000


def _bf16_rne(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, round to nearest even, by integer arithmetic."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.int64)


def test_prefill_case_by_hand():
    # Every row: acc = 127*4 + 37 = 545, s_a = 0x3D6C7C76, s_w = 0x39B48310 (found by a
    # numpy search, tests/helpers/buggy_kernels.py). numpy float32 here: w_then_a
    # (declared) -> bf16 0x3C32, a_then_w -> 0x3C31. The prefill path (M > 128) of
    # prefill_scale_order takes a_then_w: M = 129 gives 0x3C31 on every row, M = 128 not.
    # The triton built-in declares a_then_w (TRITON_STYLE): 0x3C31 at every M.
    from buggy_kernels import ORDER_SA_BITS, ORDER_SB_BITS, prefill_scale_order

    sa1 = np.array([ORDER_SA_BITS], dtype=np.uint32).view(np.float32)
    sb1 = np.array([ORDER_SB_BITS], dtype=np.uint32).view(np.float32)
    acc = np.float32(545)
    assert _bf16_rne((acc * sb1) * sa1).tolist() == [0x3C32]
    assert _bf16_rne((acc * sa1) * sb1).tolist() == [0x3C31]
    for m, buggy in ((128, 0x3C32), (129, 0x3C31)):
        a = torch.tensor([[127, 127, 127, 127, 37]] * m, dtype=I8)
        b = torch.ones((1, 5), dtype=I8)
        sa = torch.from_numpy(np.repeat(sa1, m).copy())
        sb = torch.from_numpy(sb1.copy())
        assert bits(reference_scaled_mm(a, b, sa, sb, CUTLASS_STYLE)) == [0x3C32] * m
        assert bits(get_kernel("cpu").scaled_mm(a, b, sa, sb)) == [0x3C32] * m
        assert bits(get_kernel("triton").scaled_mm(a, b, sa, sb)) == [0x3C31] * m
        assert bits(prefill_scale_order(a, b, sa, sb)) == [buggy] * m


@pytest.mark.parametrize("name", ["cpu", "int_mm", "triton"])
def test_builtins_pass_every_large_shapes_case(name):
    """The three built-ins (triton under the interpreter here) pass all 17 cases."""
    import warnings

    from conformance.suite.evaluate import evaluate_case

    if name == "triton":
        pytest.importorskip("triton")
    spec = get_kernel(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bad = [c.name for c in _fam() if evaluate_case(spec, c, device="cpu").verdict != "pass"]
    assert bad == []
